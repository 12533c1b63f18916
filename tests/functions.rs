//! The `redislock` function library against the module: the same calls get the same
//! replies and the same errors, and its tokens only grow.

mod library;

use redis::{Connection, Value};
use redis_lock_testkit::*;

use library::{library_server, Backend, TokenOrder};

/// The error text of a reply (`code detail`), or `None` for a success.
fn error_text(reply: &redis::RedisResult<Value>) -> Option<String> {
    reply.as_ref().err().map(|error| {
        format!(
            "{} {}",
            error.code().unwrap_or(""),
            error.detail().unwrap_or("")
        )
    })
}

fn digest(con: &mut Connection) -> String {
    query(con, &["DEBUG", "DIGEST"]).unwrap()
}

/// A module server and a library server, each with "held" held by owner-1 and a
/// string at "text".
fn both() -> ((Server, Connection), (Server, Connection)) {
    let module = Server::start();
    let mut module_con = module.connection();
    let (lib, mut lib_con) = library_server(Config::default());
    for (backend, con) in [
        (Backend::Module, &mut module_con),
        (Backend::Functions, &mut lib_con),
    ] {
        assert!(backend
            .acquire(con, "held", "owner-1", 60_000, &[])
            .unwrap()
            .is_some());
        let _: () = query(con, &["SET", "text", "v"]).unwrap();
    }
    ((module, module_con), (lib, lib_con))
}

#[test]
fn bad_calls_get_the_module_errors_and_change_nothing() {
    let ((_m, mut module), (_l, mut lib)) = both();
    let long = "x".repeat(257);
    let nasty = "\x00\r\n-ERR\u{7f}";
    // A repeated option gets its own error whatever the count of arguments.
    let mut many_shared = vec!["o", "100"];
    many_shared.extend(["SHARED"; 14]);
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        ("lock_acquire", "k", vec!["", "100"]),
        ("lock_extend", "k", vec!["", "100"]),
        ("lock_release", "held", vec![""]),
        ("lock_acquire", "k", vec![&long, "100"]),
        ("lock_acquire", "held", vec![&long, "100"]),
        ("lock_acquire", "held", vec![&long, "100", "WAIT", "50"]),
        ("lock_acquire", "k", vec!["o", "0"]),
        ("lock_acquire", "k", vec!["o", "-1"]),
        ("lock_acquire", "k", vec!["o", "abc"]),
        ("lock_acquire", "k", vec!["o", "1.5"]),
        ("lock_acquire", "k", vec!["o", ""]),
        ("lock_acquire", "k", vec!["o", "+5"]),
        ("lock_acquire", "k", vec!["o", " 5"]),
        ("lock_acquire", "k", vec!["o", "05"]),
        ("lock_acquire", "k", vec!["o", "99999999999999999999"]),
        ("lock_acquire", "k", vec!["o", "9223372036854775807"]),
        ("lock_acquire", "k", vec!["o", "9223372036854775808"]),
        ("lock_acquire", "k", vec!["o", "4611686018427387904"]),
        ("lock_acquire", "k", vec!["o", nasty]),
        ("lock_extend", "held", vec!["owner-1", "0"]),
        ("lock_extend", "held", vec!["owner-2", "-5"]),
        (
            "lock_extend",
            "held",
            vec!["owner-1", "99999999999999999999"],
        ),
        ("lock_acquire", "held", vec!["owner-1", "x"]),
        ("lock_acquire", "k", vec!["o", "100", "WAIT", "-1"]),
        ("lock_acquire", "k", vec!["o", "100", "WAIT", "x"]),
        (
            "lock_acquire",
            "held",
            vec!["owner-2", "100", "WAIT", "1.5"],
        ),
        (
            "lock_acquire",
            "k",
            vec!["o", "100", "WAIT", "99999999999999999999"],
        ),
        (
            "lock_acquire",
            "k",
            vec!["o", "100", "WAIT", "9223372036854775807"],
        ),
        ("lock_acquire", "k", vec!["o", "100", "WAIT"]),
        ("lock_acquire", "k", vec!["o", "100", "NX"]),
        ("lock_acquire", "k", vec!["o", "100", "FOO", "1"]),
        ("lock_acquire", "k", vec!["o", "100", nasty, "1"]),
        (
            "lock_acquire",
            "k",
            vec!["o", "100", "WAIT", "1", "WAIT", "2"],
        ),
        (
            "lock_acquire",
            "k",
            vec!["o", "100", "WAIT", "1", "FOO", "2"],
        ),
        ("lock_acquire", "k", vec!["o", "100", "SHARED", "shared"]),
        ("lock_acquire", "k", many_shared),
        (
            "lock_acquire",
            "k",
            vec!["o", "100", "LIMIT", "2", "limit", "3"],
        ),
        ("lock_acquire", "k", vec!["o", "100", "LIMIT"]),
        ("lock_acquire", "k", vec!["o", "100", "LIMIT", "0"]),
        ("lock_acquire", "k", vec!["o", "100", "LIMIT", "2147483649"]),
        ("lock_acquire", "k", vec!["o", "100", "LIMIT", "-1"]),
        ("lock_acquire", "k", vec!["o", "100", "LEASE", "100"]),
        ("lock_acquire", "held", vec!["owner-1", "100", "SHARED"]),
        ("lock_acquire", "text", vec!["o", "100"]),
        ("lock_release", "text", vec!["o"]),
        ("lock_extend", "text", vec!["o", "100"]),
        ("lock_info", "text", vec![]),
    ];
    // Through FCALL and through EVALSHA (whose fast paths run apart, before the
    // full path is defined).
    let scripts = Backend::scripts(&mut lib);
    for (function, key, args) in &cases {
        let shown = format!("{function} {key} {args:?}");
        let expected = error_text(&Backend::Module.call(&mut module, function, key, args));
        assert!(expected.is_some(), "{shown}: the module accepted it");
        for backend in [&Backend::Functions, &scripts] {
            let before = digest(&mut lib);
            let got = error_text(&backend.call(&mut lib, function, key, args));
            assert_eq!(got, expected, "{backend:?} {shown}");
            assert_eq!(digest(&mut lib), before, "{shown} changed the dataset");
        }
    }
    // Wrong arity: the same words, the function's name.
    for (function, keys, args) in [
        ("lock_acquire", 0, vec![]),
        ("lock_acquire", 1, vec!["k"]),
        ("lock_acquire", 1, vec!["k", "o"]),
        ("lock_acquire", 2, vec!["k", "k2", "o", "100"]),
        ("lock_release", 1, vec!["held"]),
        ("lock_release", 1, vec!["held", "owner-1", "extra"]),
        ("lock_extend", 1, vec!["held", "owner-1"]),
        ("lock_extend", 1, vec!["held", "owner-1", "100", "extra"]),
        ("lock_info", 0, vec![]),
        ("lock_info", 1, vec!["held", "extra"]),
        ("lock_version", 1, vec!["held"]),
        ("lock_wait", 1, vec!["k", "o"]),
        ("lock_cancel", 1, vec!["k"]),
    ] {
        let before = digest(&mut lib);
        let fcall = redis::cmd("FCALL")
            .arg(function)
            .arg(keys)
            .arg(&args)
            .query(&mut lib);
        let Backend::Scripts(sha) = &scripts else {
            unreachable!()
        };
        let evalsha = redis::cmd("EVALSHA")
            .arg(sha)
            .arg(keys)
            .arg(&args[..keys])
            .arg(function)
            .arg(&args[keys..])
            .query(&mut lib);
        for reply in [fcall, evalsha] {
            let reply: redis::RedisResult<Value> = reply;
            let text = error_text(&reply).unwrap_or_default();
            assert!(
                text.starts_with("ERR wrong number of arguments")
                    && text.contains(&format!("'{function}'")),
                "{function} {args:?}: {text:?}"
            );
        }
        assert_eq!(digest(&mut lib), before);
    }
    let bad_lease: Vec<(&str, Vec<&str>)> = vec![
        ("0", vec![]),
        ("60001", vec![]),
        ("x", vec![]),
        ("1", vec!["LEASE", "2"]),
    ];
    for (lease, extra) in bad_lease {
        let mut args = vec!["o", "100", "LEASE", lease];
        args.extend(extra);
        let text = error_text(&Backend::Functions.call(&mut lib, "lock_wait", "held", &args));
        let text = text.unwrap_or_default();
        assert!(
            text.contains("lease") || text.contains("LEASE"),
            "{args:?}: {text}"
        );
    }
    let text: String = query(&mut lib, &["GET", "text"]).unwrap();
    assert_eq!(text, "v");
}

fn same_info(
    order: &mut TokenOrder,
    key: &str,
    module: Option<LockInfo>,
    library: Option<LockInfo>,
    what: &str,
) {
    let (Some(m), Some(l)) = (&module, &library) else {
        assert_eq!(
            module.is_none(),
            library.is_none(),
            "{what}: {module:?} / {library:?}"
        );
        return;
    };
    assert_eq!(m.mode, l.mode, "{what}");
    assert_eq!(m.waiters, l.waiters, "{what}");
    assert_eq!(m.holders.len(), l.holders.len(), "{what}: {m:?} / {l:?}");
    for (hm, hl) in m.holders.iter().zip(&l.holders) {
        assert_eq!(hm.owner, hl.owner, "{what}");
        assert!(
            (hm.ttl - hl.ttl).abs() <= 1000,
            "{what}: ttl {hm:?} / {hl:?}"
        );
        order.check(key, hm.token, hl.token, what);
    }
}

#[test]
fn every_command_replies_as_the_module_does() {
    let module = Server::start();
    let (_lib, mut lib) = library_server(Config::default());
    let mut m = module.connection();
    let mut order = TokenOrder::default();
    let mut step = |m: &mut Connection, l: &mut Connection, f: &str, key: &str, args: &[&str]| {
        let a = Backend::Module.call(m, f, key, args);
        let b = Backend::Functions.call(l, f, key, args);
        let what = format!("{f} {key} {args:?}");
        match (a, b) {
            (Ok(Value::Int(x)), Ok(Value::Int(y))) if f == "lock_acquire" => {
                order.check(key, x, y, &what)
            }
            (Ok(a), Ok(b)) if f == "lock_info" => same_info(
                &mut order,
                key,
                LockInfo::from_value(a),
                LockInfo::from_value(b),
                &what,
            ),
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}"),
            (a, b) => assert_eq!(error_text(&a), error_text(&b), "{what}"),
        }
    };
    let s = &mut step;
    let (m, l) = (&mut m, &mut lib);
    s(m, l, "lock_info", "k", &[]);
    s(m, l, "lock_acquire", "k", &["a", "60000"]);
    s(m, l, "lock_acquire", "k", &["a", "30000"]); // refresh: same token
    s(m, l, "lock_acquire", "k", &["b", "60000"]); // busy: null
    s(m, l, "lock_acquire", "k", &["b", "60000", "WAIT", "100"]); // no blocking in a script
    s(m, l, "lock_acquire", "k", &["a", "60000", "SHARED"]); // mode conflict
    s(m, l, "lock_info", "k", &[]);
    s(m, l, "lock_extend", "k", &["b", "1000"]);
    s(m, l, "lock_extend", "k", &["a", "45000"]);
    s(m, l, "lock_release", "k", &["b"]);
    s(m, l, "lock_release", "k", &["a"]);
    s(m, l, "lock_release", "k", &["a"]);
    s(m, l, "lock_info", "k", &[]);
    // Readers share, a semaphore counts, a writer waits for all.
    s(m, l, "lock_acquire", "r", &["r1", "60000", "SHARED"]);
    s(m, l, "lock_acquire", "r", &["r2", "60000", "limit", "2"]);
    s(m, l, "lock_acquire", "r", &["r3", "60000", "LIMIT", "2"]);
    s(
        m,
        l,
        "lock_acquire",
        "r",
        &["r3", "60000", "SHARED", "LIMIT", "3"],
    );
    s(m, l, "lock_acquire", "r", &["r2", "50000", "SHARED"]); // refresh
    s(m, l, "lock_acquire", "r", &["w", "60000"]);
    s(m, l, "lock_acquire", "r", &["r1", "60000"]); // mode conflict
    s(m, l, "lock_info", "r", &[]);
    s(m, l, "lock_extend", "r", &["r3", "200"]);
    s(m, l, "lock_release", "r", &["r1"]);
    s(m, l, "lock_info", "r", &[]);
    // A lapsed holding is gone, and EXTEND never re-creates it.
    std::thread::sleep(std::time::Duration::from_millis(400));
    s(m, l, "lock_info", "r", &[]);
    s(m, l, "lock_extend", "r", &["r3", "60000"]);
    s(m, l, "lock_acquire", "r", &["r3", "60000", "SHARED"]);
    s(m, l, "lock_release", "r", &["r2"]);
    s(m, l, "lock_release", "r", &["r3"]);
    s(m, l, "lock_info", "r", &[]);
    s(m, l, "lock_acquire", "e", &["a", "150"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    s(m, l, "lock_extend", "e", &["a", "60000"]);
    s(m, l, "lock_acquire", "e", &["b", "60000"]);
    s(m, l, "lock_info", "e", &[]);
    // RESP3: a map, with the same fields.
    let mut m3 = module.resp3_connection();
    let mut l3 = redis::Client::open(format!("{}?protocol=resp3", _lib.url()))
        .unwrap()
        .get_connection()
        .unwrap();
    for key in ["e", "k"] {
        let a: Value = Backend::Module
            .cmd("lock_info", Some(key), &[])
            .query(&mut m3)
            .unwrap();
        let b: Value = Backend::Functions
            .cmd("lock_info", Some(key), &[])
            .query(&mut l3)
            .unwrap();
        assert_eq!(
            matches!(a, Value::Map(_)),
            matches!(b, Value::Map(_)),
            "{a:?} / {b:?}"
        );
        same_info(
            &mut order,
            key,
            LockInfo::from_value(a),
            LockInfo::from_value(b),
            key,
        );
    }
    let version: i64 = query(&mut lib, &["FCALL", "lock_version", "0"]).unwrap();
    assert_eq!(version, redis_lock_core::protocol::LIBRARY_VERSION);
}

#[test]
fn tokens_grow_across_release_expiry_del_and_a_lost_queue_key() {
    let (_lib, mut con) = library_server(Config::default());
    let lib = Backend::Functions;
    let last = std::cell::Cell::new(0);
    let next = |con: &mut Connection, owner: &str, ttl: i64| {
        let token = lib
            .acquire(con, "jobs:1", owner, ttl, &[])
            .unwrap()
            .unwrap();
        assert!(token > last.get(), "{token} after {}", last.get());
        last.set(token);
    };
    next(&mut con, "a", 60_000);
    assert_eq!(lib.release(&mut con, "jobs:1", "a"), 1);
    next(&mut con, "b", 100);
    std::thread::sleep(std::time::Duration::from_millis(200));
    next(&mut con, "c", 60_000);
    let _: i64 = query(&mut con, &["DEL", "jobs:1"]).unwrap(); // force-release
    next(&mut con, "d", 60_000);
    // The mark key wins over the clock: raise it far ahead.
    let mark = "jobs:1{jobs:1}:lockm";
    let ahead = last.get() + 1_000_000_000;
    let _: () = query(&mut con, &["SET", mark, &ahead.to_string(), "KEEPTTL"]).unwrap();
    assert_eq!(lib.release(&mut con, "jobs:1", "d"), 1);
    next(&mut con, "e", 60_000);
    assert!(last.get() > ahead);
    // Both keys gone (the mark expired, an hour after it was set, or an
    // administrator deleted it): the clock floor still puts the next token above
    // every token handed out before the mark ran ahead of the clock, once the
    // clock has moved on by a millisecond (a grant in the same millisecond as the
    // last one, with the mark gone in between, would repeat its token).
    std::thread::sleep(std::time::Duration::from_millis(5));
    let _: i64 = query(&mut con, &["DEL", "jobs:1", mark]).unwrap();
    let token = lib
        .acquire(&mut con, "jobs:1", "f", 1000, &[])
        .unwrap()
        .unwrap();
    assert!(token > ahead - 1_000_000_000, "{token} {ahead}");
    // Something else at the mark's name is replaced by the next grant, its token
    // from the clock floor.
    assert_eq!(lib.release(&mut con, "jobs:1", "f"), 1);
    let _: () = query(&mut con, &["SET", mark, "not a number"]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    let next = lib
        .acquire(&mut con, "jobs:1", "g", 1000, &[])
        .unwrap()
        .unwrap();
    assert!(next > token, "{next} after {token}");
}

/// A mark that fell behind the tokens already handed out (a failover that lost the
/// old master's last writes, a restore of an older RDB) does not hand them out
/// again: every grant takes the clock floor too.
#[test]
fn a_mark_that_fell_behind_does_not_repeat_a_token() {
    let (_lib, mut con) = library_server(Config::default());
    let lib = Backend::Functions;
    let mark = "jobs:1{jobs:1}:lockm";
    let mut last = lib
        .acquire(&mut con, "jobs:1", "first", 60_000, &[])
        .unwrap()
        .unwrap();
    assert_eq!(lib.release(&mut con, "jobs:1", "first"), 1);
    for (i, owner) in ["a", "b", "c", "d", "e"].into_iter().enumerate() {
        let before: String = query(&mut con, &["GET", mark]).unwrap();
        let token = lib
            .acquire(&mut con, "jobs:1", owner, 60_000, &[])
            .unwrap()
            .unwrap();
        assert!(token > last, "grant {i}: {token} after {last}");
        last = token;
        assert_eq!(lib.release(&mut con, "jobs:1", owner), 1);
        // The writes of this grant lost: the mark as it was before it.
        let _: () = query(&mut con, &["SET", mark, &before, "KEEPTTL"]).unwrap();
        // A failover takes seconds; a millisecond is enough for the clock floor.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn side_keys_carry_the_lock_keys_slot_and_prefix_and_expire() {
    let (_lib, mut con) = library_server(Config::default());
    let lib = Backend::Functions;
    for key in ["jobs:1", "{jobs}:2", "a{b}c"] {
        let side = |suffix: &str| {
            if key.contains('{') {
                format!("{key}{suffix}")
            } else {
                format!("{key}{{{key}}}{suffix}")
            }
        };
        let keys = |con: &mut Connection| {
            let mut keys: Vec<String> = query(con, &["KEYS", &format!("{key}*")]).unwrap();
            keys.sort();
            keys
        };
        let sorted = |mut names: Vec<String>| {
            names.sort();
            names
        };
        assert!(lib
            .acquire(&mut con, key, "a", 60_000, &[])
            .unwrap()
            .is_some());
        // The mark lives an hour from when the clock set it.
        assert_eq!(keys(&mut con), sorted(vec![key.into(), side(":lockm")]));
        let left = pttl(&mut con, &side(":lockm"));
        assert!(left > 3_500_000 && left <= 3_600_000, "{key}: {left}");
        // A waiter: the queue hash and the places by arrival and by lapse, kept ten
        // minutes past the place's lease.
        let (token, _, _): (i64, i64, String) = lib
            .cmd("lock_wait", Some(key), &[b"b", b"60000"])
            .query(&mut con)
            .unwrap();
        assert_eq!(token, 0);
        let queue = [side(":lockq"), side(":lockw"), side(":lockl")];
        let mut expected = vec![key.to_string(), side(":lockm")];
        expected.extend(queue.iter().cloned());
        assert_eq!(keys(&mut con), sorted(expected));
        for name in &queue {
            let left = pttl(&mut con, name);
            assert!(left > 600_000 && left <= 602_500, "{name}: {left}");
        }
        // The release hands the lock to b: its grant list lasts as the grant.
        assert_eq!(lib.release(&mut con, key, "a"), 1);
        let list = side(":lockg:b");
        assert_eq!(
            keys(&mut con),
            sorted(vec![key.into(), side(":lockm"), list.clone()])
        );
        let left = pttl(&mut con, &list);
        assert!(left > 0 && left <= 2_000, "{list}: {left}");
        assert_eq!(lib.release(&mut con, key, "b"), 1);
        // A shared lock: the holdings by expiry, with K.
        assert!(lib
            .acquire(&mut con, key, "r", 60_000, &["SHARED"])
            .unwrap()
            .is_some());
        assert_eq!(
            keys(&mut con),
            sorted(vec![key.into(), side(":lockm"), side(":lockh")])
        );
        let expiry =
            |con: &mut Connection, key: &str| -> i64 { query(con, &["PEXPIRETIME", key]).unwrap() };
        assert_eq!(expiry(&mut con, &side(":lockh")), expiry(&mut con, key));
        assert_eq!(lib.release(&mut con, key, "r"), 1);
        assert_eq!(keys(&mut con), [side(":lockm")]);
        for name in ["q", "w", "l", "m", "h", "g:b"] {
            assert_eq!(slot(key), slot(&side(&format!(":lock{name}"))), "{key}");
        }
    }
    let type_: String = query(&mut con, &["TYPE", "{jobs}:2:lockm"]).unwrap();
    assert_eq!(type_, "string");
}

/// The Cluster hash slot of a key (CRC16/XMODEM of its hash tag, or of all of it).
fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    let crc = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
    crc.checksum(tagged.unwrap_or(bytes)) % 16384
}

#[test]
fn the_longest_ttl_is_taken_and_ends_where_doubles_stay_exact() {
    let (_lib, mut con) = library_server(Config::default());
    let lib = Backend::Functions;
    let longest = "4611686018427387903"; // 2^62 - 1: the module's largest TTL
    for (key, mode) in [("long", vec![]), ("long-shared", vec!["SHARED"])] {
        let mut args = vec!["a", longest];
        args.extend(&mode);
        let token = lib.call(&mut con, "lock_acquire", key, &args).unwrap();
        assert!(matches!(token, Value::Int(t) if t > 0), "{token:?}");
        let info = lib.info(&mut con, key).unwrap();
        // Unix ms 2^53 (the year 287,000): far ahead, and exact in Lua's doubles.
        let at: i64 = query(&mut con, &["PEXPIRETIME", key]).unwrap();
        assert_eq!(at, 1 << 53);
        assert!(info.ttl > (1 << 53) - 2_000_000_000_000, "{info:?}");
        assert_eq!(lib.extend(&mut con, key, "a", 4_611_686_018_427_387_903), 1);
        assert_eq!(lib.release(&mut con, key, "a"), 1);
    }
}

/// The reply of `FCALL lock_wait 1 key owner ttl mode…`.
fn lock_wait(con: &mut Connection, key: &str, owner: &str, mode: &[&str]) -> Value {
    let mut args = vec![owner, "10000"];
    args.extend_from_slice(mode);
    Backend::Functions
        .call(con, "lock_wait", key, &args)
        .unwrap()
}

#[test]
fn a_mode_conflict_with_a_queue_place_about_to_be_granted_changes_nothing() {
    let (_server, mut con) = library_server(Config::default());
    let functions = Backend::Functions;
    for (function, mode) in [("lock_acquire", ["SHARED"]), ("lock_wait", ["SHARED"])] {
        let _: () = query(&mut con, &["FLUSHALL"]).unwrap();
        assert!(functions
            .acquire(&mut con, "k", "A", 300, &[])
            .unwrap()
            .is_some());
        let queued = lock_wait(&mut con, "k", "W", &[]);
        assert!(
            matches!(&queued, Value::Array(reply) if reply.first() == Some(&Value::Int(0))),
            "{queued:?}"
        );
        // A lapses; W's place (exclusive) is now the next to be granted.
        std::thread::sleep(std::time::Duration::from_millis(400));
        // Redis's own lazy expiry of A's key is not the call's doing: Valkey 8 runs it
        // inside the script, Redis 7 not. Let it happen first.
        let _: i64 = query(&mut con, &["EXISTS", "k"]).unwrap();
        let before = digest(&mut con);
        let mut args = vec!["W", "10000"];
        args.extend_from_slice(&mode);
        let reply = functions.call(&mut con, function, "k", &args);
        let text = error_text(&reply).unwrap_or_default();
        assert!(
            text.starts_with("ERR mode conflict"),
            "{function}: {reply:?}"
        );
        assert_eq!(digest(&mut con), before, "{function} changed the dataset");
        assert!(functions.info(&mut con, "k").is_none(), "{function}");
        // In its own mode, W's place is granted.
        let granted = lock_wait(&mut con, "k", "W", &[]);
        assert!(
            matches!(&granted, Value::Array(reply) if matches!(reply.first(), Some(Value::Int(t)) if *t > 0)),
            "{granted:?}"
        );
    }
}

#[test]
fn a_key_ttl_set_by_hand_acts_on_holdings_as_in_the_module() {
    // docs/commands.md "by hand": an exclusive lock lives as long as its key (PERSIST leaves
    // it held without TTL, a longer PEXPIRE lengthens it); shared holdings keep each
    // their own lease, which a PERSIST or a longer PEXPIRE lengthens none of.
    let module = Server::start();
    let mut module_con = module.connection();
    let (_lib, mut lib_con) = library_server(Config::default());
    for (backend, con) in [
        (Backend::Module, &mut module_con),
        (Backend::Functions, &mut lib_con),
    ] {
        for (by_hand, shared) in [
            (vec!["PERSIST", "k"], false),
            (vec!["PEXPIRE", "k", "60000"], false),
            (vec!["PERSIST", "k"], true),
            (vec!["PEXPIRE", "k", "60000"], true),
        ] {
            let shown = format!("{backend:?} {by_hand:?} shared={shared}");
            let _: () = query(con, &["FLUSHALL"]).unwrap();
            let mode: &[&str] = if shared { &["SHARED"] } else { &[] };
            let first = backend.acquire(con, "k", "o1", 300, mode).unwrap().unwrap();
            let _: i64 = query(con, &by_hand).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(500));
            let info = backend.info(con, "k");
            // The first call after the lapse is this acquire: nothing settled before.
            let second = backend.acquire(con, "k", "o2", 300, &[]).unwrap();
            if shared {
                assert!(info.is_none(), "{shown}: {info:?}");
                assert!(second.is_some_and(|t| t > first), "{shown}");
                assert_eq!(backend.extend(con, "k", "o1", 1000), 0, "{shown}");
            } else {
                let info = info.unwrap_or_else(|| panic!("{shown}: free"));
                assert_eq!((info.owner.as_slice(), info.token), (&b"o1"[..], first));
                if by_hand[0] == "PERSIST" {
                    assert_eq!(info.ttl, -1, "{shown}");
                } else {
                    assert!(info.ttl > 50_000, "{shown}: {}", info.ttl);
                }
                assert_eq!(second, None, "{shown}");
                assert_eq!(backend.release(con, "k", "o1"), 1, "{shown}");
            }
        }
    }
}

/// The fast paths find the holder at the end of `x` ("<format> <token> <owner>"): an
/// owner that ends the holder's own (after a space) still holds nothing, as in the
/// module, and the holder itself is found.
#[test]
fn an_owner_that_ends_the_holders_owner_holds_nothing() {
    let check = |backend: &Backend, con: &mut Connection| {
        for (holder, other) in [("a b", "b"), ("x 12 y", "12 y"), ("b", "a b"), ("7 q", "q")] {
            let shown = format!("{backend:?} {holder:?} / {other:?}");
            let _: () = query(con, &["FLUSHALL"]).unwrap();
            let token = backend.acquire(con, "k", holder, 60_000, &[]).unwrap();
            let token = token.unwrap_or_else(|| panic!("{shown}: not granted"));
            let other_gets = backend.acquire(con, "k", other, 60_000, &[]).unwrap();
            assert_eq!(other_gets, None, "{shown}");
            assert_eq!(backend.extend(con, "k", other, 60_000), 0, "{shown}");
            assert_eq!(backend.release(con, "k", other), 0, "{shown}");
            let info = backend.info(con, "k").unwrap();
            assert_eq!(
                (info.owner.as_slice(), info.token),
                (holder.as_bytes(), token)
            );
            let again = backend.acquire(con, "k", holder, 60_000, &[]).unwrap();
            assert_eq!(again, Some(token), "{shown}");
            assert_eq!(backend.extend(con, "k", holder, 60_000), 1, "{shown}");
            assert_eq!(backend.release(con, "k", holder), 1, "{shown}");
        }
    };
    let module = Server::start();
    check(&Backend::Module, &mut module.connection());
    let (_lib, mut con) = library_server(Config::default());
    check(&Backend::Functions, &mut con);
    let scripts = Backend::scripts(&mut con);
    check(&scripts, &mut con);
}

/// A mark at the last exact token (only a mark written by hand gets there; the
/// clock floor reaches it in the year 2255): the grant is refused, and the mark and
/// the lock are as they were.
#[test]
fn a_mark_at_the_last_token_refuses_the_grant_and_is_kept() {
    let (_lib, mut con) = library_server(Config::default());
    let mark = "jobs:1{jobs:1}:lockm";
    let last = "9007199254740991"; // 2^53 - 1
    for lib in [Backend::Functions, Backend::scripts(&mut con)] {
        let _: () = query(&mut con, &["SET", mark, last]).unwrap();
        let reply = lib.call(&mut con, "lock_acquire", "jobs:1", &["a", "1000"]);
        assert_eq!(
            error_text(&reply).as_deref(),
            Some("ERR fencing tokens are exhausted on this server"),
            "{lib:?}"
        );
        let kept: String = query(&mut con, &["GET", mark]).unwrap();
        assert_eq!(kept, last, "{lib:?}");
        let lock: i64 = query(&mut con, &["EXISTS", "jobs:1"]).unwrap();
        assert_eq!(lock, 0, "{lib:?}");
    }
}

/// A user whose ACL lacks one command a call runs (a deployment's mistake: the
/// docs list what the library needs) gets the same error through FCALL and through
/// EVALSHA, whose fast paths run apart, and what FCALL leaves unchanged EVALSHA
/// does too: the scripts path replies the fast path's error itself, where going on
/// to the full path (which reads the lock without HGET) would answer, and release
/// the lock.
#[test]
fn a_command_the_acl_refuses_is_refused_alike_through_fcall_and_evalsha() {
    let (server, mut admin) = library_server(Config::default());
    let scripts = Backend::scripts(&mut admin);
    // (Not LPUSHX: only the scripts path runs it, as docs/PROTOCOL.md says.)
    for missing in ["hget", "exists", "pexpire", "del", "time"] {
        let _: () = query(&mut admin, &["FLUSHALL"]).unwrap();
        assert!(Backend::Functions
            .acquire(&mut admin, "held", "owner-1", 60_000, &[])
            .unwrap()
            .is_some());
        let _: () = query(
            &mut admin,
            &[
                "ACL",
                "SETUSER",
                "w",
                "reset",
                "on",
                "nopass",
                "~*",
                "+@all",
                &format!("-{missing}"),
            ],
        )
        .unwrap();
        let mut con = server.connection();
        let _: () = query(&mut con, &["AUTH", "w", "x"]).unwrap();
        let calls: [(&str, &str, &[&str]); 5] = [
            ("lock_acquire", "free", &["owner-2", "60000"]),
            ("lock_acquire", "held", &["owner-2", "60000"]),
            ("lock_acquire", "held", &["owner-1", "60000"]),
            ("lock_extend", "held", &["owner-1", "60000"]),
            ("lock_release", "held", &["owner-1"]),
        ];
        for (function, key, args) in calls {
            let shown = format!("-{missing}: {function} {key} {args:?}");
            let before = digest(&mut admin);
            let fcall = Backend::Functions.call(&mut con, function, key, args);
            let changed = digest(&mut admin) != before;
            // Undo what FCALL did, if anything: both calls start from the same data.
            let _: () = query(&mut admin, &["FLUSHALL"]).unwrap();
            assert!(Backend::Functions
                .acquire(&mut admin, "held", "owner-1", 60_000, &[])
                .unwrap()
                .is_some());
            let before = digest(&mut admin);
            let evalsha = scripts.call(&mut con, function, key, args);
            assert_eq!(error_text(&evalsha), error_text(&fcall), "{shown}");
            // (A call refused after its first write, as a free key's acquire
            // without PEXPIRE, leaves that write on both paths alike.)
            if fcall.is_err() && !changed {
                assert_eq!(digest(&mut admin), before, "{shown}: EVALSHA changed it");
            }
        }
    }
}
