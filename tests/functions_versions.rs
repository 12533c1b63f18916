//! Library versions (docs/PROTOCOL.md, "Versions"): the library reads what every
//! older version stored, refuses what a newer one stored (naming both versions,
//! changing nothing), and a FUNCTION LOAD REPLACE either way under held locks and
//! queued waiters loses nothing. The previous library is the one of version 1, as
//! it was last released (tests/fixtures/redislock-v1.lua).

mod library;

use redis::{Connection, Value};
use redis_lock_testkit::*;

use library::{library_server, library_v1, load_source, Backend};

const LIB: Backend = Backend::Functions;

fn digest(con: &mut Connection) -> String {
    query(con, &["DEBUG", "DIGEST"]).unwrap()
}

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

/// `lock_wait key owner ttl mode… LEASE 30000`: the token, 0 when queued.
fn wait(con: &mut Connection, key: &str, owner: &str, mode: &[&str]) -> i64 {
    let mut args = vec![owner, "60000"];
    args.extend_from_slice(mode);
    args.extend(["LEASE", "30000"]);
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let (token, _, _): (i64, i64, Vec<u8>) =
        LIB.cmd("lock_wait", Some(key), &args).query(con).unwrap();
    token
}

/// What a lock is, as compared across a replace: mode, holders (owner, token,
/// limit), its key's absolute expiry, and the queue's owners in order.
type Seen = (String, Vec<(Vec<u8>, i64, Option<i64>)>, i64, Vec<Vec<u8>>);

fn seen(con: &mut Connection, key: &str) -> Seen {
    let info = LIB.info(con, key).unwrap_or_else(|| panic!("{key}: free"));
    let at: i64 = query(con, &["PEXPIRETIME", key]).unwrap();
    (
        info.mode,
        info.holders
            .into_iter()
            .map(|h| (h.owner, h.token, h.limit))
            .collect(),
        at,
        info.queue.into_iter().map(|w| w.owner).collect(),
    )
}

/// Locks of each kind with waiters: `x` exclusive (held by a; b, then c shared,
/// queued), `s` shared (r1, r2 with LIMIT 3; w exclusive queued).
fn locks_and_waiters(con: &mut Connection) {
    assert!(LIB.acquire(con, "x", "a", 60_000, &[]).unwrap().is_some());
    assert_eq!(wait(con, "x", "b", &[]), 0);
    assert_eq!(wait(con, "x", "c", &["SHARED"]), 0);
    assert!(LIB
        .acquire(con, "s", "r1", 60_000, &["SHARED"])
        .unwrap()
        .is_some());
    assert!(LIB
        .acquire(con, "s", "r2", 60_000, &["LIMIT", "3"])
        .unwrap()
        .is_some());
    assert_eq!(wait(con, "s", "w", &[]), 0);
}

/// Releases each lock's holders and checks its waiters get it in their order, each
/// with a token above every one before.
fn hand_offs_in_order(con: &mut Connection) {
    let top = |con: &mut Connection, key: &str| {
        LIB.info(con, key)
            .map_or(0, |i| i.holders.iter().map(|h| h.token).max().unwrap_or(0))
    };
    let before = top(con, "x");
    assert_eq!(LIB.release(con, "x", "a"), 1);
    let b = wait(con, "x", "b", &[]);
    assert!(b > before, "b: {b} after {before}");
    assert_eq!(wait(con, "x", "c", &["SHARED"]), 0, "c waits behind b");
    assert_eq!(LIB.release(con, "x", "b"), 1);
    let c = wait(con, "x", "c", &["SHARED"]);
    assert!(c > b, "c: {c} after {b}");
    let before = top(con, "s");
    assert_eq!(LIB.release(con, "s", "r1"), 1);
    assert_eq!(wait(con, "s", "w", &[]), 0, "r2 still holds");
    assert_eq!(LIB.release(con, "s", "r2"), 1);
    let w = wait(con, "s", "w", &[]);
    assert!(w > before, "w: {w} after {before}");
}

#[test]
fn this_library_keeps_every_holding_and_place_of_version_1_data() {
    let (_server, mut con) = library_server(Config::default());
    load_source(&mut con, &library_v1());
    locks_and_waiters(&mut con);
    // The older form of a place: six parts, before its arrival time was kept.
    let seq: i64 = query(&mut con, &["HINCRBY", "x{x}:lockq", "seq", "1"]).unwrap();
    let place = format!("{seq} {} 30000 60000 x 0", i64::MAX / 4);
    let _: i64 = query(&mut con, &["HSET", "x{x}:lockq", "w:d", &place]).unwrap();
    // And of a holding: "<token> <expires-at>" is what version 1 writes for r1; r2's
    // has its limit after it.
    let r1: String = query(&mut con, &["HGET", "s", "h:r1"]).unwrap();
    let r2: String = query(&mut con, &["HGET", "s", "h:r2"]).unwrap();
    assert_eq!(
        (r1.split(' ').count(), r2.split(' ').count()),
        (2, 3),
        "{r1:?} {r2:?}"
    );
    let before = [seen(&mut con, "x"), seen(&mut con, "s")];
    let queued = |seen: &Seen| {
        seen.3
            .iter()
            .map(|o| String::from_utf8_lossy(o).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(queued(&before[0]), ["b", "c", "d"]);
    assert_eq!(queued(&before[1]), ["w"]);

    load_source(&mut con, &library_source());
    assert_eq!([seen(&mut con, "x"), seen(&mut con, "s")], before);
    // Refreshed and extended by this library: the same tokens, now marked.
    let token = LIB.acquire(&mut con, "x", "a", 60_000, &[]).unwrap();
    assert_eq!(token, Some(before[0].1[0].1));
    assert_eq!(LIB.extend(&mut con, "s", "r2", 60_000), 1);
    let marked: Option<String> = query(&mut con, &["HGET", "s", "redislock"]).unwrap();
    assert_eq!(marked.as_deref(), Some("2"));
    hand_offs_in_order(&mut con);
    // d, the six-part place, comes after c.
    assert_eq!(LIB.release(&mut con, "x", "c"), 1);
    assert!(wait(&mut con, "x", "d", &[]) > 0);
}

#[test]
fn the_previous_library_loaded_over_this_ones_locks_refuses_them_and_changes_nothing() {
    let (_server, mut con) = library_server(Config::default());
    locks_and_waiters(&mut con);
    let before = [seen(&mut con, "x"), seen(&mut con, "s")];
    load_source(&mut con, &library_v1());
    let calls: [(&str, &str, &[&str]); 7] = [
        ("lock_extend", "x", &["a", "1000"]),
        ("lock_release", "x", &["a"]),
        ("lock_acquire", "s", &["r3", "1000", "SHARED"]),
        ("lock_release", "s", &["r1"]),
        ("lock_wait", "x", &["b", "60000"]),
        ("lock_cancel", "x", &["b"]),
        ("lock_info", "s", &[]),
    ];
    for (function, key, args) in calls {
        let unchanged = digest(&mut con);
        let reply = LIB.call(&mut con, function, key, args);
        let text = error_text(&reply).unwrap_or_default();
        assert!(text.starts_with("WRONGTYPE"), "{function} {key}: {reply:?}");
        assert_eq!(digest(&mut con), unchanged, "{function} {key}");
    }
    load_source(&mut con, &library_source());
    assert_eq!([seen(&mut con, "x"), seen(&mut con, "s")], before);
    hand_offs_in_order(&mut con);
}

#[test]
fn a_library_refuses_data_of_a_newer_format_naming_both_versions_and_changes_nothing() {
    let (_server, mut con) = library_server(Config::default());
    let scripts = Backend::scripts(&mut con);
    locks_and_waiters(&mut con);
    assert!(LIB
        .acquire(&mut con, "q", "a", 60_000, &[])
        .unwrap()
        .is_some());
    assert_eq!(wait(&mut con, "q", "b", &[]), 0);
    assert_eq!(LIB.release(&mut con, "q", "a"), 1); // b granted, not collected
    assert!(LIB.info(&mut con, "q").is_some());
    // A newer library wrote x's lock hash, and q's queue hash.
    let _: i64 = query(&mut con, &["HSET", "x", "redislock", "3"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "q{q}:lockq", "redislock", "3"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "free{free}:lockq", "redislock", "3"]).unwrap();
    let refused = |what: &str| {
        format!(
            "ERR {what} written by redislock library version 3; this server runs \
             version 2: load version 3 or newer (redis-lock functions load)"
        )
    };
    let calls: Vec<(&str, &str, Vec<&str>, &str)> = vec![
        ("lock_acquire", "x", vec!["other", "1000"], "lock"),
        ("lock_acquire", "x", vec!["a", "1000"], "lock"),
        ("lock_acquire", "x", vec!["o", "1000", "SHARED"], "lock"),
        ("lock_release", "x", vec!["a"], "lock"),
        ("lock_extend", "x", vec!["a", "1000"], "lock"),
        ("lock_info", "x", vec![], "lock"),
        ("lock_wait", "x", vec!["c", "60000", "SHARED"], "lock"),
        ("lock_cancel", "x", vec!["b"], "lock"),
        ("lock_release", "q", vec!["b"], "lock queue"),
        ("lock_info", "q", vec![], "lock queue"),
        ("lock_wait", "q", vec!["b", "60000"], "lock queue"),
        ("lock_cancel", "q", vec!["b"], "lock queue"),
        ("lock_acquire", "free", vec!["a", "1000"], "lock queue"),
        ("lock_wait", "free", vec!["a", "1000"], "lock queue"),
    ];
    for backend in [LIB, scripts] {
        for (function, key, args, what) in &calls {
            let unchanged = digest(&mut con);
            let reply = backend.call(&mut con, function, key, args);
            assert_eq!(
                error_text(&reply),
                Some(refused(what)),
                "{backend:?} {function} {key} {args:?}"
            );
            assert_eq!(digest(&mut con), unchanged, "{function} {key} {args:?}");
        }
    }
    // A marker that is no version at all: not ours.
    let _: i64 = query(&mut con, &["HSET", "x", "redislock", "x"]).unwrap();
    let text = error_text(&LIB.call(&mut con, "lock_info", "x", &[])).unwrap_or_default();
    assert!(text.starts_with("WRONGTYPE"), "{text}");
    // Back to this format, everything is where it was.
    let _: i64 = query(&mut con, &["HSET", "x", "redislock", "2"]).unwrap();
    let _: i64 = query(&mut con, &["HSET", "q{q}:lockq", "redislock", "2"]).unwrap();
    hand_offs_in_order(&mut con);
    assert!(wait(&mut con, "q", "b", &[]) > 0);
}
