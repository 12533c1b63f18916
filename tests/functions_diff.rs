//! The differential test: seeded random sequences of acquires (each mode, with and
//! without waiting), releases, extends, infos, DELs and expiries, run against the
//! module and against the library on two servers at once. Both must give the same
//! replies (tokens compared by their order per key), hold the same holders, and
//! grant their waiters in the same order. The library's calls alternate between
//! FCALL and EVALSHA (whose fast paths are reached in stages, apart).
//!
//! `DIFF_SEED=n` runs one sequence; `DIFF_STEPS=n` sets its length.
//!
//! At scale (1,000 and 10,000 holders of one lock, and as many waiters queued for
//! one), the same calls get the same replies and the same holders in the same
//! order; `DIFF_SCALE=n` runs one size.

mod library;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::TcpStream;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};
use redis_lock_testkit::*;

use library::{library_server, wait_acquire, waiter_connection, Backend, TokenOrder, WaitRequest};

const KEYS: [&str; 2] = ["d:1", "{d}:2"];
const OWNERS: [&str; 6] = ["o0", "o1", "o2", "o3", "o4", "o5"];
const TTL: i64 = 60_000;
/// How far apart the two sides' remaining TTLs of one holding may be: the library
/// grants after a `DEL` at the waiter's next renewal, up to a place's lease (2 s)
/// after the module did, plus the BLPOP's own lateness and scheduling.
const GRANT_SKEW_MS: i64 = 2500;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Module,
    Library,
}

/// A waiter's outcome: its token, or the error text.
type Outcome = Result<Option<i64>, String>;

struct Diff {
    module: Server,
    library: Server,
    m: Connection,
    l: Connection,
    /// The library loaded by SCRIPT LOAD too: every other call goes through it.
    scripts: Backend,
    order: TokenOrder,
    /// Waiters not yet answered on both sides: (key, owner).
    pending: BTreeSet<(String, String)>,
    answers: BTreeMap<(String, String), BTreeMap<Side, Outcome>>,
    done_tx: mpsc::Sender<(Side, String, String, Outcome)>,
    done_rx: mpsc::Receiver<(Side, String, String, Outcome)>,
    /// Per key and side: the waiters' owners and tokens, as granted.
    grants: BTreeMap<(String, Side), Vec<(i64, String)>>,
    threads: Vec<thread::JoinHandle<()>>,
    log: Vec<String>,
}

fn error_text(error: &redis::RedisError) -> String {
    format!(
        "{} {}",
        error.code().unwrap_or(""),
        error.detail().unwrap_or("")
    )
}

/// An INFO as compared: mode, holders oldest first (owner, ttl, token, limit),
/// waiters, the first waiters (owner, mode, limit).
type View = (
    String,
    Vec<(Vec<u8>, i64, i64, Option<i64>)>,
    i64,
    Vec<(Vec<u8>, String, Option<i64>)>,
);

fn view(info: Option<LockInfo>) -> Option<View> {
    info.map(|i| {
        let holders = i
            .holders
            .into_iter()
            .map(|h| (h.owner, h.ttl, h.token, h.limit))
            .collect();
        let queue = i
            .queue
            .into_iter()
            .map(|w| (w.owner, w.mode, w.limit))
            .collect();
        (i.mode, holders, i.waiters, queue)
    })
}

impl Diff {
    fn new() -> Diff {
        let module = Server::start();
        let (library, mut l) = library_server(Config::default());
        let scripts = Backend::scripts(&mut l);
        let m = module.connection();
        let (done_tx, done_rx) = mpsc::channel();
        Diff {
            module,
            library,
            m,
            l,
            scripts,
            order: TokenOrder::default(),
            pending: BTreeSet::new(),
            answers: BTreeMap::new(),
            done_tx,
            done_rx,
            grants: BTreeMap::new(),
            threads: Vec::new(),
            log: Vec::new(),
        }
    }

    fn busy(&self, owner: &str) -> bool {
        self.pending.iter().any(|(_, o)| o == owner)
    }

    /// The same call on both sides, replies compared.
    fn call(&mut self, function: &str, key: &str, args: &[&str]) {
        let what = format!("{function} {key} {args:?}");
        self.log.push(what.clone());
        let a = Backend::Module.call(&mut self.m, function, key, args);
        let library = if self.log.len().is_multiple_of(2) {
            &Backend::Functions
        } else {
            &self.scripts
        };
        let b = library.call(&mut self.l, function, key, args);
        match (a, b) {
            (Ok(Value::Int(x)), Ok(Value::Int(y))) if function == "lock_acquire" => {
                self.order.check(key, x, y, &what)
            }
            // Compared by `converge`, field by field (a RESP2 reply of the library
            // lists the same fields in another order).
            (Ok(_), Ok(_)) if function == "lock_info" => {}
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}"),
            (Err(a), Err(b)) => assert_eq!(error_text(&a), error_text(&b), "{what}"),
            (a, b) => panic!("{what}: module {a:?}, library {b:?}\n{:#?}", self.log),
        }
    }

    /// Collects the waiters' answers that came in.
    fn collect(&mut self) {
        while let Ok((side, key, owner, outcome)) = self.done_rx.try_recv() {
            if let Ok(Some(token)) = outcome {
                self.grants
                    .entry((key.clone(), side))
                    .or_default()
                    .push((token, owner.clone()));
            }
            let id = (key, owner);
            let answers = self.answers.entry(id.clone()).or_default();
            answers.insert(side, outcome);
            if answers.len() == 2 {
                let m = answers[&Side::Module].clone();
                let l = answers[&Side::Library].clone();
                let what = format!("waiter {id:?}");
                match (m, l) {
                    (Ok(Some(x)), Ok(Some(y))) => self.order.check(&id.0, x, y, &what),
                    (m, l) => assert_eq!(m, l, "{what}"),
                }
                self.answers.remove(&id);
                self.pending.remove(&id);
            }
        }
    }

    fn waiters(&mut self, side: Side, key: &str) -> i64 {
        let (backend, con) = match side {
            Side::Module => (Backend::Module, &mut self.m),
            Side::Library => (Backend::Functions, &mut self.l),
        };
        backend.info(con, key).map_or(0, |i| i.waiters)
    }

    /// A waiter without a time limit on each side, each in a thread of its own;
    /// returns once each is queued or answered.
    fn wait(&mut self, key: &str, owner: &str, mode: &[&str]) {
        self.log.push(format!("wait {key} {owner} {mode:?}"));
        let before = [
            self.waiters(Side::Module, key),
            self.waiters(Side::Library, key),
        ];
        self.pending.insert((key.into(), owner.into()));
        let mut handles = Vec::new();
        for side in [Side::Module, Side::Library] {
            let url = match side {
                Side::Module => self.module.url(),
                Side::Library => self.library.url(),
            };
            let done = self.done_tx.clone();
            let (key, owner) = (key.to_string(), owner.to_string());
            let mode: Vec<String> = mode.iter().map(|m| m.to_string()).collect();
            handles.push(thread::spawn(move || {
                let mut con = waiter_connection(&url);
                let outcome = match side {
                    Side::Module => {
                        let mut cmd = redis::cmd("LOCK.ACQUIRE");
                        cmd.arg(&key)
                            .arg(&owner)
                            .arg(TTL)
                            .arg(&mode)
                            .arg("WAIT")
                            .arg(0);
                        cmd.query::<Option<i64>>(&mut con)
                    }
                    Side::Library => {
                        let mut request = WaitRequest::new(&key, &owner, TTL);
                        request.mode = mode;
                        wait_acquire(&mut con, &Backend::Functions, &request)
                    }
                };
                let outcome = outcome.map_err(|e| error_text(&e));
                let _ = done.send((side, key, owner, outcome));
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (i, side) in [Side::Module, Side::Library].into_iter().enumerate() {
            while self.waiters(side, key) <= before[i] && !handles[i].is_finished() {
                assert!(Instant::now() < deadline, "waiter {owner} never queued");
                thread::sleep(Duration::from_millis(5));
            }
        }
        self.threads.extend(handles);
    }

    /// A waiter with a short limit, on one side then the other (it changes
    /// nothing if it times out, so the order does not matter).
    fn wait_briefly(&mut self, key: &str, owner: &str, mode: &[&str]) {
        self.log.push(format!("wait 200 ms {key} {owner} {mode:?}"));
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(key)
            .arg(owner)
            .arg(TTL)
            .arg(mode)
            .arg("WAIT")
            .arg(200);
        let a = cmd
            .query::<Option<i64>>(&mut self.m)
            .map_err(|e| error_text(&e));
        let mut request = WaitRequest::new(key, owner, TTL);
        request.mode = mode.iter().map(|m| m.to_string()).collect();
        request.timeout = Some(Duration::from_millis(200));
        let mut con = waiter_connection(&self.library.url());
        let b = wait_acquire(&mut con, &Backend::Functions, &request).map_err(|e| error_text(&e));
        match (a, b) {
            (Ok(Some(x)), Ok(Some(y))) => self.order.check(key, x, y, "brief wait"),
            (a, b) => assert_eq!(a, b, "brief wait {key} {owner}\n{:#?}", self.log),
        }
    }

    /// Waits until both sides hold the same for every key (the library acts on a
    /// lapse or a DEL at its waiters' next call, the module at once), then checks.
    fn converge(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.collect();
            let views: Vec<_> = KEYS
                .iter()
                .map(|key| {
                    (
                        *key,
                        view(Backend::Module.info(&mut self.m, key)),
                        view(Backend::Functions.info(&mut self.l, key)),
                    )
                })
                .collect();
            let same = views.iter().all(|(key, m, l)| match (m, l) {
                (None, None) => true,
                (Some((mm, mh, mw, mq)), Some((lm, lh, lw, lq))) => {
                    mm == lm
                        && mw == lw
                        && mq == lq
                        && mh.len() == lh.len()
                        && mh.iter().zip(lh).all(|(a, b)| {
                            a.0 == b.0
                                && a.3 == b.3
                                && (a.1 - b.1).abs() <= GRANT_SKEW_MS
                                && self.order.consistent(key, a.2, b.2)
                        })
                }
                _ => false,
            });
            if same {
                for (key, m, l) in views {
                    if let (Some(m), Some(l)) = (m, l) {
                        for (a, b) in m.1.iter().zip(&l.1) {
                            self.order.check(key, a.2, b.2, "holders");
                        }
                    }
                }
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the sides differ: {views:#?}\nafter {:#?}",
                self.log
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn holders(&mut self, key: &str) -> Vec<String> {
        Backend::Module
            .info(&mut self.m, key)
            .map(|i| {
                i.holders
                    .into_iter()
                    .map(|h| String::from_utf8(h.owner).unwrap())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn step(&mut self, rng: &mut StdRng) {
        let key = KEYS[rng.gen_range(0..KEYS.len())];
        let owner = OWNERS[rng.gen_range(0..OWNERS.len())];
        let limit = rng.gen_range(1..4).to_string();
        let mode: Vec<&str> = match rng.gen_range(0..3) {
            0 => vec![],
            1 => vec!["SHARED"],
            _ => vec!["LIMIT", &limit],
        };
        let free = !self.busy(owner);
        match rng.gen_range(0..100) {
            0..=24 if free => {
                let mut args = vec![owner, "60000"];
                args.extend(&mode);
                self.call("lock_acquire", key, &args);
            }
            25..=39 if free => self.wait(key, owner, &mode),
            40..=44 if free => self.wait_briefly(key, owner, &mode),
            45..=64 => {
                // Mostly a holder, sometimes anyone.
                let holders = self.holders(key);
                let owner = if !holders.is_empty() && rng.gen_bool(0.8) {
                    holders[rng.gen_range(0..holders.len())].clone()
                } else {
                    owner.to_string()
                };
                self.call("lock_release", key, &[&owner]);
            }
            65..=69 if free => self.call("lock_extend", key, &[owner, "60000"]),
            // A guarded write: with a holder's token, a stale one or one never given.
            70..=74 => self.guard(key, owner, rng.gen_range(0..4)),
            75..=79 => {
                self.log.push(format!("DEL {key}"));
                let _: i64 = query(&mut self.m, &["DEL", key]).unwrap();
                let _: i64 = query(&mut self.l, &["DEL", key]).unwrap();
            }
            80..=89 => {
                // A holding lapses: shortened on both sides, then left to expire.
                let holders = self.holders(key);
                if let Some(holder) = holders.first() {
                    let holder = holder.clone();
                    self.call("lock_extend", key, &[&holder, "50"]);
                    // Sometimes the key's expiry is then lengthened by hand, which
                    // lengthens no holding (contract.md "Holdings"). Chosen without the
                    // rng, so a seed replays the same calls as before.
                    let by_hand: &[&str] = match self.log.len() % 3 {
                        0 => &[],
                        1 => &["PERSIST", key],
                        _ => &["PEXPIRE", key, "60000"],
                    };
                    if !by_hand.is_empty() {
                        self.log.push(by_hand.join(" "));
                        let _: i64 = query(&mut self.m, by_hand).unwrap();
                        let _: i64 = query(&mut self.l, by_hand).unwrap();
                    }
                    thread::sleep(Duration::from_millis(150));
                }
            }
            _ => self.call("lock_info", key, &[]),
        }
        self.converge();
    }

    /// The same guarded SET on both sides, with each side's own token of `owner`
    /// (`how` 0-1), the last token either side granted on this key, now stale or
    /// not (2), or 17 (3): the same reply (FENCED texts with their numbers aside),
    /// and the same value written, or none.
    fn guard(&mut self, key: &str, owner: &str, how: u32) {
        let token_of = |backend: &Backend, con: &mut Connection| {
            backend.info(con, key).and_then(|info| {
                info.holders
                    .into_iter()
                    .find(|h| h.owner == owner.as_bytes())
                    .map(|h| h.token)
            })
        };
        let tokens = match how {
            0 | 1 => (
                token_of(&Backend::Module, &mut self.m),
                token_of(&Backend::Functions, &mut self.l),
            ),
            2 => (self.order.last(key, true), self.order.last(key, false)),
            _ => (Some(17), Some(17)),
        };
        let (Some(m_token), Some(l_token)) = tokens else {
            return;
        };
        let value = format!("v{}", self.log.len());
        let out = format!("{key}:out");
        let what = format!("guard {key} {owner} ({m_token}, {l_token}) SET {out} {value}");
        self.log.push(what.clone());
        let command = ["SET", out.as_str(), value.as_str()];
        let a = Backend::Module.guard(&mut self.m, key, &[], &m_token.to_string(), &command);
        let library = if self.log.len().is_multiple_of(2) {
            &Backend::Functions
        } else {
            &self.scripts
        };
        let b = library.guard(&mut self.l, key, &[&out], &l_token.to_string(), &command);
        let numbers_aside = |e: &redis::RedisError| {
            error_text(e)
                .split(|c: char| c.is_ascii_digit())
                .filter(|part| !part.is_empty())
                .collect::<Vec<_>>()
                .join("#")
        };
        match (a, b) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}"),
            (Err(a), Err(b)) => assert_eq!(numbers_aside(&a), numbers_aside(&b), "{what}"),
            (a, b) => panic!("{what}: module {a:?}, library {b:?}\n{:#?}", self.log),
        }
        let written_m: Option<String> = query(&mut self.m, &["GET", &out]).unwrap();
        let written_l: Option<String> = query(&mut self.l, &["GET", &out]).unwrap();
        assert_eq!(written_m, written_l, "{what}");
    }

    /// Releases everything until every waiter was answered and nothing is held.
    fn drain(&mut self) {
        for _ in 0..200 {
            self.converge();
            let mut released = false;
            for key in KEYS {
                for holder in self.holders(key) {
                    self.call("lock_release", key, &[&holder]);
                    released = true;
                }
            }
            if !released && self.pending.is_empty() {
                break;
            }
            if !released {
                thread::sleep(Duration::from_millis(20));
            }
        }
        assert!(self.pending.is_empty(), "unanswered: {:?}", self.pending);
        for handle in self.threads.drain(..) {
            handle.join().unwrap();
        }
        // The same waiters, granted in the same order, on every key.
        for key in KEYS {
            let order = |side| {
                let mut grants = self
                    .grants
                    .get(&(key.to_string(), side))
                    .cloned()
                    .unwrap_or_default();
                grants.sort();
                grants
                    .into_iter()
                    .map(|(_, owner)| owner)
                    .collect::<Vec<_>>()
            };
            assert_eq!(order(Side::Module), order(Side::Library), "{key}");
        }
    }
}

fn run(seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut diff = Diff::new();
    for _ in 0..steps {
        diff.step(&mut rng);
    }
    diff.drain();
    let granted: usize = diff.grants.values().map(Vec::len).sum();
    eprintln!("seed {seed}: {steps} steps, {granted} waiter grants");
}

#[test]
fn the_library_and_the_module_agree_on_random_sequences() {
    let steps = std::env::var("DIFF_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(80);
    let seeds: Vec<u64> = match std::env::var("DIFF_SEED") {
        Ok(seed) => vec![seed.parse().expect("DIFF_SEED is a number")],
        Err(_) => vec![1, 2, 3],
    };
    for seed in seeds {
        run(seed, steps);
    }
}

/// One side of the scale test: a server and a connection to it.
struct Scaled {
    side: Side,
    con: Connection,
}

impl Scaled {
    fn backend(&self) -> Backend {
        match self.side {
            Side::Module => Backend::Module,
            Side::Library => Backend::Functions,
        }
    }

    /// The same calls, pipelined; their replies.
    fn calls(&mut self, function: &str, key: &str, each: &[Vec<String>]) -> Vec<Value> {
        let backend = self.backend();
        let mut pipe = redis::pipe();
        for args in each {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            pipe.add_command(backend.cmd(function, Some(key), &args));
        }
        pipe.query(&mut self.con).unwrap()
    }

    fn call(&mut self, function: &str, key: &str, args: &[&str]) -> Value {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        self.calls(function, key, &[args]).remove(0)
    }

    fn view(&mut self, key: &str) -> Option<View> {
        let backend = self.backend();
        view(backend.info(&mut self.con, key))
    }
}

/// Both sides' replies to the same calls: equal, tokens by their order per key.
fn same_replies(order: &mut TokenOrder, key: &str, what: &str, m: Vec<Value>, l: Vec<Value>) {
    assert_eq!(m.len(), l.len(), "{what}");
    for (i, (a, b)) in m.into_iter().zip(l).enumerate() {
        match (a, b) {
            (Value::Int(x), Value::Int(y)) if what.starts_with("lock_acquire") => {
                order.check(key, x, y, what)
            }
            (a, b) => assert_eq!(a, b, "{what} #{i}"),
        }
    }
}

/// Both sides hold the same at `key`: mode, holders in order (owners, limits,
/// tokens by their order, TTLs within a second, but for grants to waiters, which
/// the library makes for a place's lease until collected), waiters and the first
/// of them.
fn same_views(order: &mut TokenOrder, key: &str, m: Option<View>, l: Option<View>, what: &str) {
    let granted = what.contains("granted");
    let (Some(m), Some(l)) = (m, l) else {
        panic!("{what}: one side is free");
    };
    assert_eq!((&m.0, m.2, &m.3), (&l.0, l.2, &l.3), "{what}");
    assert_eq!(m.1.len(), l.1.len(), "{what}");
    for (a, b) in m.1.iter().zip(&l.1) {
        assert_eq!((&a.0, a.3), (&b.0, b.3), "{what}");
        assert!(
            granted || (a.1 - b.1).abs() <= 1000,
            "{what}: ttl {a:?} / {b:?}"
        );
        order.check(key, a.2, b.2, what);
    }
}

/// `n` clients of the module queued for `key`, in this order, each on a socket of
/// its own that is never read (their grants are seen in LOCK.INFO).
fn module_waiters(
    url: &str,
    con: &mut Connection,
    key: &str,
    owners: &[String],
    mode: &[&str],
) -> Vec<TcpStream> {
    let address = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut sockets = Vec::new();
    let before = Backend::Module.info(con, key).map_or(0, |i| i.waiters);
    for (i, owner) in owners.iter().enumerate() {
        let mut words = vec!["LOCK.ACQUIRE", key, owner.as_str(), "600000"];
        words.extend_from_slice(mode);
        words.extend(["WAIT", "0"]);
        let mut command = format!("*{}\r\n", words.len());
        for word in words {
            command.push_str(&format!("${}\r\n{word}\r\n", word.len()));
        }
        let mut socket = TcpStream::connect(address).unwrap();
        socket.write_all(command.as_bytes()).unwrap();
        sockets.push(socket);
        // Queued before the next one arrives: FIFO needs the order known.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Backend::Module.info(con, key).map_or(0, |i| i.waiters) < before + i as i64 + 1 {
            assert!(Instant::now() < deadline, "{owner} never queued");
        }
    }
    sockets
}

/// `n` places in the library's queue for `key`, in this order (their leases long
/// enough for the test: no client renews them).
fn library_waiters(con: &mut Connection, key: &str, owners: &[String], mode: &[&str]) {
    let mut pipe = redis::pipe();
    for owner in owners {
        let mut args: Vec<&[u8]> = vec![owner.as_bytes(), b"600000"];
        args.extend(mode.iter().map(|m| m.as_bytes()));
        args.extend([&b"LEASE"[..], b"60000"]);
        pipe.add_command(Backend::Functions.cmd("lock_wait", Some(key), &args));
    }
    let replies: Vec<(i64, i64, Vec<u8>)> = pipe.query(con).unwrap();
    assert!(replies.iter().all(|r| r.0 == 0), "every one queued");
}

fn scale(n: usize) {
    let module = Server::with(Config::default().set("maxclients", "12000"));
    let (library, l) = library_server(Config::default());
    let mut m = Scaled {
        side: Side::Module,
        con: module.connection(),
    };
    let mut l = Scaled {
        side: Side::Library,
        con: l,
    };
    let mut order = TokenOrder::default();
    let owners = |prefix: &str| -> Vec<String> { (0..n).map(|i| format!("{prefix}{i}")).collect() };
    let both = |m: &mut Scaled,
                l: &mut Scaled,
                order: &mut TokenOrder,
                f: &str,
                key: &str,
                args: &[&str]| {
        let what = format!("{f} {key} {args:?} (n = {n})");
        let a = m.call(f, key, args);
        let b = l.call(f, key, args);
        same_replies(order, key, &what, vec![a], vec![b]);
    };
    let compare =
        |m: &mut Scaled, l: &mut Scaled, order: &mut TokenOrder, key: &str, what: &str| {
            let (a, b) = (m.view(key), l.view(key));
            same_views(order, key, a, b, &format!("{what} (n = {n})"));
        };

    // n readers of one lock.
    let readers = owners("r");
    let each: Vec<Vec<String>> = readers
        .iter()
        .map(|o| vec![o.clone(), "600000".into(), "SHARED".into()])
        .collect();
    let (a, b) = (
        m.calls("lock_acquire", "s", &each),
        l.calls("lock_acquire", "s", &each),
    );
    same_replies(&mut order, "s", "lock_acquire readers", a, b);
    compare(&mut m, &mut l, &mut order, "s", "n readers");
    let limit = n.to_string();
    let more = (n + 1).to_string();
    let middle = readers[n / 2].clone();
    let s = |m: &mut Scaled, l: &mut Scaled, order: &mut TokenOrder, f: &str, args: &[&str]| {
        both(m, l, order, f, "s", args)
    };
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_acquire",
        &["over", "600000", "LIMIT", &limit],
    );
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_acquire",
        &["over", "600000", "LIMIT", &more],
    );
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_acquire",
        &["writer", "600000"],
    );
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_extend",
        &[&middle, "900000"],
    );
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_extend",
        &["nobody", "900000"],
    );
    s(&mut m, &mut l, &mut order, "lock_release", &[&readers[0]]);
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_release",
        &[&readers[n - 1]],
    );
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_acquire",
        &[&readers[1], "600000", "SHARED"],
    );
    // Ten of them lapse.
    let shortened: Vec<Vec<String>> = readers[2..12]
        .iter()
        .map(|o| vec![o.clone(), "50".into()])
        .collect();
    let (a, b) = (
        m.calls("lock_extend", "s", &shortened),
        l.calls("lock_extend", "s", &shortened),
    );
    same_replies(&mut order, "s", "lock_extend shortened", a, b);
    thread::sleep(Duration::from_millis(200));
    compare(&mut m, &mut l, &mut order, "s", "lapsed");
    s(
        &mut m,
        &mut l,
        &mut order,
        "lock_acquire",
        &["late", "600000", "SHARED"],
    );
    compare(&mut m, &mut l, &mut order, "s", "after the lapses");
    let all: Vec<String> = m
        .view("s")
        .unwrap()
        .1
        .iter()
        .map(|h| String::from_utf8(h.0.clone()).unwrap())
        .collect();
    let each: Vec<Vec<String>> = all.iter().map(|o| vec![o.clone()]).collect();
    let (a, b) = (
        m.calls("lock_release", "s", &each),
        l.calls("lock_release", "s", &each),
    );
    same_replies(&mut order, "s", "lock_release all", a, b);
    assert_eq!((m.view("s"), l.view("s")), (None, None));

    // n readers queued behind a writer, granted together by its release.
    for side in [&mut m, &mut l] {
        assert!(matches!(
            side.call("lock_acquire", "q", &["writer", "600000"]),
            Value::Int(_)
        ));
    }
    let waiting = owners("w");
    let sockets = module_waiters(&module.url(), &mut m.con, "q", &waiting, &["SHARED"]);
    library_waiters(&mut l.con, "q", &waiting, &["SHARED"]);
    compare(&mut m, &mut l, &mut order, "q", "n waiters");
    both(
        &mut m,
        &mut l,
        &mut order,
        "lock_acquire",
        "q",
        &["late", "600000", "SHARED"],
    );
    both(&mut m, &mut l, &mut order, "lock_release", "q", &["writer"]);
    compare(&mut m, &mut l, &mut order, "q", "n waiters granted");
    drop(sockets);

    // Writers queued behind a writer, granted one by one in their order (at most
    // 1,000: each is a release and a look on both sides).
    let n = n.min(1_000);
    let owners = |prefix: &str| -> Vec<String> { (0..n).map(|i| format!("{prefix}{i}")).collect() };
    for side in [&mut m, &mut l] {
        assert!(matches!(
            side.call("lock_acquire", "x", &["first", "600000"]),
            Value::Int(_)
        ));
    }
    let writers = owners("x");
    let _more = module_waiters(&module.url(), &mut m.con, "x", &writers, &[]);
    library_waiters(&mut l.con, "x", &writers, &[]);
    compare(&mut m, &mut l, &mut order, "x", "n writers");
    let mut holder = "first".to_string();
    for next in &writers {
        both(&mut m, &mut l, &mut order, "lock_release", "x", &[&holder]);
        let (a, b) = (m.view("x").unwrap(), l.view("x").unwrap());
        assert_eq!(a.1[0].0, next.as_bytes(), "the module's order (n = {n})");
        assert_eq!(b.1[0].0, next.as_bytes(), "the library's order (n = {n})");
        order.check("x", a.1[0].2, b.1[0].2, "writers");
        holder = next.clone();
    }
    drop(library);
}

#[test]
fn the_library_and_the_module_agree_at_scale() {
    let sizes: Vec<usize> = match std::env::var("DIFF_SCALE") {
        Ok(n) => vec![n.parse().expect("DIFF_SCALE is a number")],
        Err(_) => vec![1_000, 10_000],
    };
    for n in sizes {
        let started = Instant::now();
        scale(n);
        eprintln!("scale {n}: {:?}", started.elapsed());
    }
}
