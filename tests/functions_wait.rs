//! The library's waiting protocol (docs/PROTOCOL.md) against a real server: FIFO
//! grants across modes, a waiter that wakes itself for a lapse, a vanished waiter
//! or an uncollected grant holding the queue up for at most the place's lease, and
//! a timed-out waiter that never holds the lock.

mod library;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_testkit::*;

use library::{library_server, wait_acquire, waiter_connection, Backend, WaitRequest};

const LIB: Backend = Backend::Functions;

fn waiters(con: &mut Connection, key: &str) -> i64 {
    LIB.info(con, key).map_or(0, |info| info.waiters)
}

/// Starts a waiter thread; returns once the server counts it in the queue (or it
/// was granted at once). The thread sends (owner, token, when granted).
fn spawn_waiter(
    server: &Server,
    con: &mut Connection,
    request: WaitRequest,
    done: &mpsc::Sender<(String, Option<i64>, Instant)>,
) -> thread::JoinHandle<()> {
    let before = waiters(con, &request.key);
    let url = server.url();
    let done = done.clone();
    let key = request.key.clone();
    let handle = thread::spawn(move || {
        let mut con = waiter_connection(&url);
        let token = wait_acquire(&mut con, &Backend::Functions, &request).expect("wait");
        let _ = done.send((request.owner.clone(), token, Instant::now()));
    });
    wait_until(Duration::from_secs(10), || {
        waiters(con, &key) > before || handle.is_finished()
    });
    handle
}

#[test]
fn twenty_waiters_are_granted_in_arrival_order() {
    let (server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "q", "first", 60_000, &[])
        .unwrap()
        .is_some());
    let (done, granted) = mpsc::channel();
    let owners: Vec<String> = (0..20).map(|i| format!("waiter-{i:02}")).collect();
    let handles: Vec<_> = owners
        .iter()
        .map(|owner| {
            spawn_waiter(
                &server,
                &mut con,
                WaitRequest::new("q", owner, 60_000),
                &done,
            )
        })
        .collect();
    assert_eq!(waiters(&mut con, "q"), 20);
    // Each holder releases as soon as it holds; the release grants the next.
    let mut order = Vec::new();
    let mut holder = "first".to_string();
    let mut last_token = 0;
    for _ in 0..20 {
        assert_eq!(LIB.release(&mut con, "q", &holder), 1, "{holder}");
        let (owner, token, _) = granted
            .recv_timeout(Duration::from_secs(10))
            .expect("a grant");
        let token = token.expect("granted");
        assert!(token > last_token);
        last_token = token;
        let info = LIB.info(&mut con, "q").expect("held");
        assert_eq!(info.holders.len(), 1);
        assert_eq!(String::from_utf8(info.owner).unwrap(), owner);
        order.push(owner.clone());
        holder = owner;
    }
    assert_eq!(order, owners);
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(waiters(&mut con, "q"), 0);
}

#[test]
fn a_release_grants_as_many_as_fit_in_order_across_modes() {
    let (server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "rw", "writer-0", 60_000, &[])
        .unwrap()
        .is_some());
    let (done, granted) = mpsc::channel();
    let mut handles = Vec::new();
    for (owner, mode) in [
        ("reader-1", vec!["SHARED"]),
        ("reader-2", vec!["LIMIT", "5"]),
        ("writer-1", vec![]),
        ("reader-3", vec!["SHARED"]),
    ] {
        let mut request = WaitRequest::new("rw", owner, 60_000);
        request.mode = mode.into_iter().map(String::from).collect();
        handles.push(spawn_waiter(&server, &mut con, request, &done));
    }
    assert_eq!(LIB.release(&mut con, "rw", "writer-0"), 1);
    let mut readers: Vec<String> = (0..2)
        .map(|_| granted.recv_timeout(Duration::from_secs(10)).unwrap().0)
        .collect();
    readers.sort();
    assert_eq!(readers, ["reader-1", "reader-2"]);
    let info = LIB.info(&mut con, "rw").unwrap();
    assert_eq!(
        (info.mode.as_str(), info.holders.len(), info.waiters),
        ("shared", 2, 2)
    );
    // The writer stops reader-3 from joining the readers, and a newcomer that
    // would fit does not go ahead of the queue either.
    assert!(granted.recv_timeout(Duration::from_millis(300)).is_err());
    let late = LIB.acquire(&mut con, "rw", "late", 60_000, &["SHARED"]);
    assert_eq!(late.unwrap(), None);
    assert_eq!(LIB.release(&mut con, "rw", "reader-1"), 1);
    assert_eq!(LIB.release(&mut con, "rw", "reader-2"), 1);
    assert_eq!(
        granted.recv_timeout(Duration::from_secs(10)).unwrap().0,
        "writer-1"
    );
    assert_eq!(LIB.release(&mut con, "rw", "writer-1"), 1);
    assert_eq!(
        granted.recv_timeout(Duration::from_secs(10)).unwrap().0,
        "reader-3"
    );
    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn a_waiter_wakes_itself_to_claim_a_lapsed_lock() {
    let (server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "lapse", "gone", 300, &[])
        .unwrap()
        .is_some());
    let (done, granted) = mpsc::channel();
    // A place lease of a minute: its renewals (every 30 s) cannot be what wakes it.
    let mut request = WaitRequest::new("lapse", "next", 60_000);
    request.lease_ms = Some(60_000);
    let handle = spawn_waiter(&server, &mut con, request, &done);
    let (owner, token, _) = granted
        .recv_timeout(Duration::from_secs(10))
        .expect("woke itself");
    assert_eq!((owner.as_str(), token.is_some()), ("next", true));
    handle.join().unwrap();
}

#[test]
fn a_holding_shortened_by_extend_wakes_the_head_of_the_queue() {
    let (server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "short", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    let (done, granted) = mpsc::channel();
    let mut request = WaitRequest::new("short", "next", 60_000);
    request.lease_ms = Some(60_000);
    let handle = spawn_waiter(&server, &mut con, request, &done);
    assert_eq!(LIB.extend(&mut con, "short", "holder", 200), 1);
    let (owner, _, _) = granted
        .recv_timeout(Duration::from_secs(10))
        .expect("woken");
    assert_eq!(owner, "next");
    handle.join().unwrap();
}

/// Joins the queue as `owner` with a place lease of `lease_ms`, once, and never
/// calls again: a waiter killed or cut off.
fn vanish(con: &mut Connection, key: &str, owner: &str, lease_ms: i64) {
    assert_eq!(wait_once(con, key, owner, lease_ms, &[]).0, 0);
}

#[test]
fn a_vanished_waiter_delays_the_next_by_at_most_its_lease() {
    let (server, mut con) = library_server(Config::default());
    const LEASE: i64 = 1000;
    // Released while the vanished waiter's place still runs: the grant is pushed to
    // it, nobody collects it, and it frees within the lease.
    assert!(LIB
        .acquire(&mut con, "k", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    vanish(&mut con, "k", "killed", LEASE);
    let (done, granted) = mpsc::channel();
    // The next waiter renews with the same lease: it wakes within a lease of the
    // release, when the grant nobody collects has ended.
    let mut request = WaitRequest::new("k", "next", 60_000);
    request.lease_ms = Some(LEASE);
    let handle = spawn_waiter(&server, &mut con, request, &done);
    let released = Instant::now();
    assert_eq!(LIB.release(&mut con, "k", "holder"), 1);
    let info = LIB.info(&mut con, "k").unwrap();
    assert_eq!(info.owner, b"killed", "granted to the head, which is gone");
    assert!(
        info.ttl <= LEASE,
        "an uncollected grant lasts the lease: {info:?}"
    );
    let (owner, token, at) = granted
        .recv_timeout(Duration::from_secs(10))
        .expect("granted");
    assert_eq!((owner.as_str(), token.is_some()), ("next", true));
    let delay = at.duration_since(released);
    eprintln!("a vanished waiter with a {LEASE} ms lease delayed the next by {delay:?}");
    // The bound is the lease; the margin is for the server's timing out of the
    // BLPOP (up to 1000/hz ms late) and a loaded machine's scheduling.
    assert!(
        delay <= Duration::from_millis(LEASE as u64 + 700),
        "{delay:?}"
    );
    handle.join().unwrap();

    // Vanished while the lock stays held: the place lapses, and the release
    // grants the next waiter at once.
    assert!(LIB
        .acquire(&mut con, "k2", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    vanish(&mut con, "k2", "killed", LEASE);
    let handle = spawn_waiter(
        &server,
        &mut con,
        WaitRequest::new("k2", "next", 60_000),
        &done,
    );
    wait_until(Duration::from_secs(10), || waiters(&mut con, "k2") == 1);
    assert_eq!(LIB.release(&mut con, "k2", "holder"), 1);
    assert_eq!(LIB.info(&mut con, "k2").unwrap().owner, b"next");
    assert_eq!(
        granted.recv_timeout(Duration::from_secs(10)).unwrap().0,
        "next"
    );
    handle.join().unwrap();
}

#[test]
fn a_timed_out_waiter_leaves_and_never_holds() {
    let (server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "t", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    let mut waiter = waiter_connection(&server.url());
    let mut request = WaitRequest::new("t", "impatient", 60_000);
    request.timeout = Some(Duration::from_millis(300));
    assert_eq!(wait_acquire(&mut waiter, &LIB, &request).unwrap(), None);
    assert_eq!(waiters(&mut con, "t"), 0);
    assert_eq!(LIB.release(&mut con, "t", "holder"), 1);
    assert!(LIB.info(&mut con, "t").is_none());

    // A grant pushed but not collected when the waiter gives up is handed on.
    assert!(LIB
        .acquire(&mut con, "t", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    vanish(&mut con, "t", "late", 2000);
    vanish(&mut con, "t", "after", 2000);
    assert_eq!(LIB.release(&mut con, "t", "holder"), 1);
    assert_eq!(LIB.info(&mut con, "t").unwrap().owner, b"late");
    let cancelled: i64 = LIB
        .cmd("lock_cancel", Some("t"), &[b"late"])
        .query(&mut con)
        .unwrap();
    assert_eq!(cancelled, 1);
    assert_eq!(LIB.info(&mut con, "t").unwrap().owner, b"after");
    let cancelled: i64 = LIB
        .cmd("lock_cancel", Some("t"), &[b"nobody"])
        .query(&mut con)
        .unwrap();
    assert_eq!(cancelled, 0);
}

#[test]
fn a_waiter_sends_at_most_one_command_a_second_while_the_lock_stays_held() {
    // contract.md "Without the module": no client polls while a lock stays held beyond
    // renewing its place, at most one command a second. Three waiters with the
    // default lease behind a holder that keeps renewing (as a client does, its
    // holding always ends more than a lease ahead) for 8 s.
    const WAITERS: usize = 3;
    const SECONDS: u64 = 8;
    let (server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "busy", "holder", 4000, &[])
        .unwrap()
        .is_some());
    let (done, granted) = mpsc::channel();
    let handles: Vec<_> = (0..WAITERS)
        .map(|i| {
            let request = WaitRequest::new("busy", &format!("waiter-{i}"), 60_000);
            spawn_waiter(&server, &mut con, request, &done)
        })
        .collect();
    let extend = |con: &mut Connection| assert_eq!(LIB.extend(con, "busy", "holder", 4000), 1);
    // Past the first renewals, which the waiters' arrival times leave out of step.
    for _ in 0..3 {
        thread::sleep(Duration::from_secs(1));
        extend(&mut con);
    }
    let (fcall, blpop) = (
        command_calls(&mut con, "fcall"),
        command_calls(&mut con, "blpop"),
    );
    let start = Instant::now();
    let mut extends = 0;
    while start.elapsed() < Duration::from_secs(SECONDS) {
        thread::sleep(Duration::from_secs(1));
        extend(&mut con);
        extends += 1;
    }
    let sent = command_calls(&mut con, "fcall") - fcall - extends
        + command_calls(&mut con, "blpop")
        - blpop;
    let elapsed = start.elapsed().as_secs_f64();
    eprintln!(
        "{WAITERS} waiters sent {sent} commands in {elapsed:.1} s while the lock stayed held"
    );
    assert!(
        granted.try_recv().is_err(),
        "no waiter is granted meanwhile"
    );
    // One command a second each, and a renewal (two commands) more for a window
    // whose ends cut cycles: BLPOP times out at the server's cron ticks, so a
    // cycle can last 2 s and a few microseconds, and five renewals fit in 8.0 s.
    assert!(
        sent <= WAITERS as u64 * (elapsed.floor() as u64 + 2),
        "{sent} commands from {WAITERS} waiters in {elapsed:.1} s"
    );
    assert_eq!(waiters(&mut con, "busy"), WAITERS as i64);
    let mut holder = "holder".to_string();
    for _ in 0..WAITERS {
        assert_eq!(LIB.release(&mut con, "busy", &holder), 1);
        holder = granted.recv_timeout(Duration::from_secs(10)).unwrap().0;
    }
    for handle in handles {
        handle.join().unwrap();
    }
}

/// One `lock_wait` as `owner` with a place lease of `lease_ms` and `mode`: the
/// token (0 when queued) and the wake-up time.
fn wait_once(
    con: &mut Connection,
    key: &str,
    owner: &str,
    lease_ms: i64,
    mode: &[&str],
) -> (i64, i64) {
    let lease = lease_ms.to_string();
    let mut args: Vec<&[u8]> = vec![owner.as_bytes(), b"60000"];
    args.extend(mode.iter().map(|m| m.as_bytes()));
    args.extend([&b"LEASE"[..], lease.as_bytes()]);
    let (token, wake_ms, _): (i64, i64, String) =
        LIB.cmd("lock_wait", Some(key), &args).query(con).unwrap();
    (token, wake_ms)
}

#[test]
fn a_renewal_that_comes_a_little_late_keeps_its_place() {
    let (_server, mut con) = library_server(Config::default());
    const LEASE: i64 = 1000;
    assert!(LIB
        .acquire(&mut con, "late", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    let (token, wake_ms) = wait_once(&mut con, "late", "first", LEASE, &[]);
    assert_eq!((token, wake_ms), (0, LEASE), "renew one lease from now");
    wait_once(&mut con, "late", "second", LEASE, &[]);
    // `first` renews 150 ms after it was told to (a BLPOP timed out late, a slow
    // client); `second` renewed meanwhile, which drops lapsed places.
    thread::sleep(Duration::from_millis(LEASE as u64 + 150));
    wait_once(&mut con, "late", "second", LEASE, &[]);
    assert_eq!(waiters(&mut con, "late"), 2);
    assert_eq!(wait_once(&mut con, "late", "first", LEASE, &[]).0, 0);
    assert_eq!(LIB.release(&mut con, "late", "holder"), 1);
    assert_eq!(LIB.info(&mut con, "late").unwrap().owner, b"first");
}

#[test]
fn a_vanished_waiter_that_does_not_fit_holds_up_one_that_would_until_its_place_lapses() {
    // Readers hold the lock; a writer queued (it does not fit) vanishes; a reader
    // behind it would fit but queues behind it (FIFO across modes). It is granted
    // when the writer's place lapses: a lease and its grace (a quarter of the
    // lease) after the writer's last renewal.
    let (server, mut con) = library_server(Config::default());
    const LEASE: i64 = 1000;
    assert!(LIB
        .acquire(&mut con, "rw", "reader-0", 60_000, &["SHARED"])
        .unwrap()
        .is_some());
    let vanished = Instant::now();
    assert_eq!(wait_once(&mut con, "rw", "writer", LEASE, &[]).0, 0);
    let (done, granted) = mpsc::channel();
    let mut request = WaitRequest::new("rw", "reader-1", 60_000);
    request.mode = vec!["SHARED".into()];
    request.lease_ms = Some(LEASE);
    let handle = spawn_waiter(&server, &mut con, request, &done);
    let (owner, token, at) = granted
        .recv_timeout(Duration::from_secs(10))
        .expect("granted");
    assert_eq!((owner.as_str(), token.is_some()), ("reader-1", true));
    let delay = at.duration_since(vanished);
    eprintln!("a vanished writer with a {LEASE} ms lease held up a reader for {delay:?}");
    assert!(delay >= Duration::from_millis(LEASE as u64), "{delay:?}");
    assert!(
        delay <= Duration::from_millis(LEASE as u64 * 5 / 4 + 700),
        "{delay:?}"
    );
    handle.join().unwrap();
}

#[test]
fn a_foreign_key_at_the_heads_grant_list_does_not_fail_a_shortening_extend() {
    // The head's wake-up after a shortening extend or refresh is a push to its
    // grant list; a key of another type there must not turn the extend, already
    // written, into an error (contract.md "Errors": an error changes nothing).
    let (_server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "f", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    assert_eq!(wait_once(&mut con, "f", "next", 2000, &[]).0, 0);
    let list = "f{f}:lockg:next";
    let _: () = redis::cmd("SET")
        .arg(list)
        .arg("theirs")
        .query(&mut con)
        .unwrap();
    assert_eq!(LIB.extend(&mut con, "f", "holder", 5000), 1);
    assert!(LIB.info(&mut con, "f").unwrap().ttl <= 5000);
    let refreshed = LIB.acquire(&mut con, "f", "holder", 4000, &[]).unwrap();
    assert!(refreshed.is_some());
    let (kind, value, ttl): (String, String, i64) = redis::pipe()
        .cmd("TYPE")
        .arg(list)
        .cmd("GET")
        .arg(list)
        .cmd("PTTL")
        .arg(list)
        .query(&mut con)
        .unwrap();
    assert_eq!(
        (kind.as_str(), value.as_str(), ttl),
        ("string", "theirs", -1)
    );
}

#[test]
fn a_del_or_a_pexpire_by_hand_is_seen_within_a_lease() {
    // PROTOCOL.md "Bounds": no server timer sees a DEL or a TTL set by hand; the
    // waiter's next renewal does, at most a lease (2 s by default) later.
    let (server, mut con) = library_server(Config::default());
    let (done, granted) = mpsc::channel();
    for (key, by_hand) in [
        ("del", ["DEL", "del", ""]),
        ("pexpire", ["PEXPIRE", "pexpire", "100"]),
    ] {
        assert!(LIB
            .acquire(&mut con, key, "holder", 60_000, &[])
            .unwrap()
            .is_some());
        let handle = spawn_waiter(
            &server,
            &mut con,
            WaitRequest::new(key, "next", 60_000),
            &done,
        );
        let args: Vec<&str> = by_hand.into_iter().filter(|a| !a.is_empty()).collect();
        let _: i64 = redis::cmd(args[0]).arg(&args[1..]).query(&mut con).unwrap();
        let changed = Instant::now();
        let (owner, token, at) = granted
            .recv_timeout(Duration::from_secs(10))
            .expect("granted");
        assert_eq!((owner.as_str(), token.is_some()), ("next", true));
        let delay = at.duration_since(changed);
        eprintln!("{} by hand seen after {delay:?}", args[0]);
        assert!(
            delay <= Duration::from_millis(2000 + 700),
            "{key}: {delay:?}"
        );
        handle.join().unwrap();
    }
}

#[test]
fn info_lists_the_first_ten_waiters_oldest_first_with_mode_limit_and_wait() {
    let (server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "q", "holder", 60_000, &[])
        .unwrap()
        .is_some());
    let (done, _granted) = mpsc::channel();
    let modes = |i: usize| -> Vec<String> {
        match i % 3 {
            0 => vec![],
            1 => vec!["SHARED".into()],
            _ => vec!["LIMIT".into(), "3".into()],
        }
    };
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let mut request = WaitRequest::new("q", &format!("waiter-{i:02}"), 60_000);
            request.mode = modes(i);
            request.timeout = Some(Duration::from_millis(2500));
            spawn_waiter(&server, &mut con, request, &done)
        })
        .collect();
    let info = LIB.info(&mut con, "q").unwrap();
    assert_eq!(info.waiters, 12);
    let listed: Vec<_> = info
        .queue
        .iter()
        .map(|w| {
            (
                String::from_utf8(w.owner.clone()).unwrap(),
                w.mode.as_str(),
                w.limit,
            )
        })
        .collect();
    let expected: Vec<_> = (0..10)
        .map(|i| {
            let mode = if i % 3 == 0 { "exclusive" } else { "shared" };
            (format!("waiter-{i:02}"), mode, (i % 3 == 2).then_some(3))
        })
        .collect();
    assert_eq!(listed, expected);
    let waited: Vec<i64> = info.queue.iter().map(|w| w.waited).collect();
    assert!(waited.windows(2).all(|w| w[0] >= w[1]), "{waited:?}");
    assert!(waited[0] > waited[9], "{waited:?}");
    for handle in handles {
        handle.join().unwrap();
    }
}

/// docs/PROTOCOL.md, "Bounds": any of the queue's keys deleted by hand drops the
/// queue, and each waiter queues again at its next renewal (one lease): all of
/// them are granted once the holder releases, each once.
#[test]
fn a_queue_key_deleted_by_hand_drops_the_queue_and_its_waiters_queue_again() {
    let (server, mut con) = library_server(Config::default());
    for suffix in [":lockq", ":lockw", ":lockl"] {
        let key = format!("d{suffix}");
        assert!(LIB
            .acquire(&mut con, &key, "holder", 60_000, &[])
            .unwrap()
            .is_some());
        let (done, granted) = mpsc::channel();
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let mut request = WaitRequest::new(&key, &format!("w{i}"), 60_000);
                request.lease_ms = Some(1000);
                spawn_waiter(&server, &mut con, request, &done)
            })
            .collect();
        assert_eq!(waiters(&mut con, &key), 3, "{suffix}");
        let side = format!("{key}{{{key}}}{suffix}");
        let _: i64 = query(&mut con, &["DEL", &side]).unwrap();
        assert_eq!(LIB.release(&mut con, &key, "holder"), 1);
        let mut tokens = Vec::new();
        for _ in 0..3 {
            // Within a renewal (1 s) and what the first ones hold (none), with room
            // for a loaded machine; a queue kept broken grants none.
            let (owner, token, _) = granted
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("{suffix}: a waiter was never granted"));
            let token = token.expect("granted");
            tokens.push(token);
            assert_eq!(LIB.release(&mut con, &key, &owner), 1, "{suffix}: {owner}");
        }
        let mut sorted = tokens.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 3, "{suffix}: {tokens:?}");
        for handle in handles {
            handle.join().unwrap();
        }
    }
}

/// The commands one call ran inside the server (INFO's `total_commands_processed`
/// before and after: the first INFO and the call itself are not counted).
fn inner_commands(
    con: &mut Connection,
    call: impl FnOnce(&mut Connection) -> Value,
) -> (u64, Value) {
    let total = |con: &mut Connection| -> u64 {
        info_field(con, "stats", "total_commands_processed")
            .and_then(|n| n.parse().ok())
            .expect("total_commands_processed")
    };
    let before = total(con);
    let reply = call(con);
    (total(con) - before - 2, reply)
}

#[test]
fn the_waiting_protocols_common_calls_take_their_fast_paths() {
    // lua/redislock.lua's fast paths of lock_wait and lock_release (a contended
    // lock's whole cycle: a place made or joined, renewed, handed off, collected),
    // by the commands each runs (the full path runs 20 for the hand-off), through
    // FCALL and through EVALSHA, whose lock_wait runs one more (its LPUSHX).
    let (_server, mut con) = library_server(Config::default());
    let scripts = Backend::scripts(&mut con);
    for (lib, key) in [(&LIB, "f"), (&scripts, "{s}")] {
        fast_cycle(&mut con, lib, key);
    }
}

/// The grant list of `owner` on `key` (lua/redislock.lua's `side`).
fn grant_list(key: &str, owner: &str) -> String {
    if key.contains(['{', '}']) {
        format!("{key}:lockg:{owner}")
    } else {
        format!("{key}{{{key}}}:lockg:{owner}")
    }
}

fn fast_cycle(con: &mut Connection, lib: &Backend, key: &str) {
    assert!(lib.acquire(con, key, "h", 60_000, &[]).unwrap().is_some());
    let lpushx = u64::from(matches!(lib, Backend::Scripts(_)));
    let step = |con: &mut Connection, function: &str, args: &[&str]| {
        let (commands, reply) =
            inner_commands(con, |con| lib.call(con, function, key, args).unwrap());
        let extra = if function == "lock_wait" { lpushx } else { 0 };
        (commands - extra, reply)
    };
    let wait = ["60000", "LEASE", "60000"];
    let (commands, reply) = step(con, "lock_wait", &[&["a"], &wait[..]].concat());
    assert_eq!(commands, 12, "the first place of a new queue: {reply:?}");
    let (commands, reply) = step(con, "lock_wait", &[&["b"], &wait[..]].concat());
    assert_eq!(commands, 10, "a place behind another: {reply:?}");
    let (commands, reply) = step(con, "lock_wait", &[&["c"], &wait[..], &["SHARED"]].concat());
    assert_eq!(commands, 10, "a shared place: {reply:?}");
    let (commands, reply) = step(con, "lock_wait", &[&["b"], &wait[..]].concat());
    assert_eq!(commands, 9, "a renewal with a place ahead: {reply:?}");
    assert_eq!(waiters(con, key), 3);
    let (commands, reply) = step(con, "lock_release", &["h"]);
    // 14, and a second SET of the token mark when this grant comes in the same
    // millisecond as the one before (the clock floor did not move past the mark).
    assert!(
        (14..=15).contains(&commands) && reply == Value::Int(1),
        "a hand-off: {commands} commands, {reply:?}"
    );
    let granted: Vec<i64> = redis::cmd("LRANGE")
        .arg(grant_list(key, "a"))
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap();
    let (commands, reply) = step(con, "lock_wait", &[&["a"], &wait[..]].concat());
    assert_eq!(commands, 5, "a grant collected: {reply:?}");
    assert_eq!(
        reply,
        Value::Array(vec![
            Value::Int(granted[0]),
            Value::Int(0),
            Value::BulkString(grant_list(key, "a").into_bytes())
        ])
    );
    let (commands, reply) = step(con, "lock_release", &["a"]);
    assert!(
        (14..=15).contains(&commands) && reply == Value::Int(1),
        "a hand-off to b: {commands} commands, {reply:?}"
    );
    let (commands, _) = step(con, "lock_wait", &[&["b"], &wait[..]].concat());
    assert_eq!(commands, 5, "b collects");
    assert_eq!(waiters(con, key), 1);
    // The head shared: the full path grants the shared places in a row.
    let (commands, reply) = step(con, "lock_release", &["b"]);
    assert!(commands > 14, "{commands} commands: {reply:?}");
    let info = lib.info(con, key).unwrap();
    assert_eq!((info.mode.as_str(), info.waiters), ("shared", 0));
}

#[test]
fn a_foreign_key_at_the_heads_grant_list_is_replaced_by_the_hand_off() {
    let (_server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "g", "h", 60_000, &[])
        .unwrap()
        .is_some());
    for owner in ["a", "b"] {
        LIB.call(&mut con, "lock_wait", "g", &[owner, "60000"])
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("g{g}:lockg:a")
        .arg("not a list")
        .query(&mut con)
        .unwrap();
    assert_eq!(LIB.release(&mut con, "g", "h"), 1);
    let token: Vec<i64> = redis::cmd("LRANGE")
        .arg("g{g}:lockg:a")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let info = LIB.info(&mut con, "g").unwrap();
    assert_eq!(
        (info.owner.as_slice(), Some(info.token), info.waiters),
        (&b"a"[..], token.first().copied(), 1)
    );
}

#[test]
fn a_place_whose_field_was_deleted_by_hand_is_taken_again_behind_the_one_ahead() {
    // The caller is still last in the places by arrival, its place's field gone:
    // the place ahead of the new one is the one before it, whose lapse (a lease
    // of 60 s) does not shorten the wake-up, not the caller's own old place (1 s).
    let (_server, mut con) = library_server(Config::default());
    assert!(LIB
        .acquire(&mut con, "r", "h", 30_000, &[])
        .unwrap()
        .is_some());
    LIB.call(
        &mut con,
        "lock_wait",
        "r",
        &["w1", "10000", "LEASE", "60000"],
    )
    .unwrap();
    LIB.call(
        &mut con,
        "lock_wait",
        "r",
        &["w2", "10000", "LEASE", "1000"],
    )
    .unwrap();
    let _: i64 = query(&mut con, &["HDEL", "r{r}:lockq", "w:w2"]).unwrap();
    let (token, wake_ms) = wait_once(&mut con, "r", "w2", 60_000, &[]);
    assert_eq!(token, 0);
    assert!(
        wake_ms > 20_000,
        "wakes in {wake_ms} ms: at the holder's expiry"
    );
}
