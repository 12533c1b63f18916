//! Library versions (docs/PROTOCOL.md, "Versions"): the library reads what every
//! older version stored and upgrades it in place, refuses what a newer one stored
//! (naming both versions, changing nothing), and a FUNCTION LOAD REPLACE either way
//! under held locks and queued waiters loses nothing. The earlier libraries are
//! versions 1 and 2 as last committed (tests/fixtures/redislock-v<n>.lua).

mod library;

use redis::{Connection, Value};
use redis_lock_core::protocol::LIBRARY_VERSION;
use redis_lock_testkit::*;

use library::{library_server, library_version, load_source, Backend};

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

/// What a library of `found` answers under this one's data, or this one under data
/// of format `found`.
fn refused(what: &str, found: i64, runs: i64) -> String {
    format!(
        "ERR {what} written by redislock library version {found}; this server runs \
         version {runs}: load version {found} or newer (redis-lock functions load)"
    )
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
/// limit), and the queue's owners in order.
type Seen = (String, Vec<(Vec<u8>, i64, Option<i64>)>, Vec<Vec<u8>>);

fn seen(con: &mut Connection, key: &str) -> Seen {
    let info = LIB.info(con, key).unwrap_or_else(|| panic!("{key}: free"));
    (
        info.mode,
        info.holders
            .into_iter()
            .map(|h| (h.owner, h.token, h.limit))
            .collect(),
        info.queue.into_iter().map(|w| w.owner).collect(),
    )
}

fn expiry(con: &mut Connection, key: &str) -> i64 {
    query(con, &["PEXPIRETIME", key]).unwrap()
}

fn owners(seen: &Seen) -> Vec<String> {
    seen.2
        .iter()
        .map(|o| String::from_utf8_lossy(o).into_owned())
        .collect()
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
fn this_library_keeps_and_upgrades_every_holding_and_place_of_older_data() {
    for version in [1, 2] {
        let (_server, mut con) = library_server(Config::default());
        load_source(&mut con, &library_version(version));
        locks_and_waiters(&mut con);
        // The older form of a place: six parts, before its arrival time was kept.
        let seq: i64 = query(&mut con, &["HINCRBY", "x{x}:lockq", "seq", "1"]).unwrap();
        let place = format!("{seq} {} 30000 60000 x 0", i64::MAX / 4);
        let _: i64 = query(&mut con, &["HSET", "x{x}:lockq", "w:d", &place]).unwrap();
        // And of a holding: "<token> <expires-at>" for r1; r2's has its limit.
        let r1: String = query(&mut con, &["HGET", "s", "h:r1"]).unwrap();
        let r2: String = query(&mut con, &["HGET", "s", "h:r2"]).unwrap();
        assert_eq!((r1.split(' ').count(), r2.split(' ').count()), (2, 3));
        let before = [seen(&mut con, "x"), seen(&mut con, "s")];
        let expiries = [expiry(&mut con, "x"), expiry(&mut con, "s")];
        assert_eq!(owners(&before[0]), ["b", "c", "d"], "version {version}");
        assert_eq!(owners(&before[1]), ["w"], "version {version}");

        load_source(&mut con, &library_source());
        // Read as they are, then upgraded by the first call that writes.
        assert_eq!([seen(&mut con, "x"), seen(&mut con, "s")], before);
        let token = LIB.acquire(&mut con, "x", "a", 60_000, &[]).unwrap();
        assert_eq!(token, Some(before[0].1[0].1), "version {version}");
        assert_eq!(LIB.extend(&mut con, "s", "r1", 50_000), 1);
        assert_eq!([seen(&mut con, "x"), seen(&mut con, "s")], before);
        assert_eq!(expiry(&mut con, "s"), expiries[1], "r2 still ends last");
        for key in ["x", "s", "x{x}:lockq", "s{s}:lockq"] {
            let format: Option<String> = query(&mut con, &["HGET", key, "redislock"]).unwrap();
            assert_eq!(format.as_deref(), Some("3"), "{key}, version {version}");
        }
        let members: i64 = query(&mut con, &["ZCARD", "s{s}:lockh"]).unwrap();
        assert_eq!(members, 2);
        let queued: i64 = query(&mut con, &["ZCARD", "x{x}:lockw"]).unwrap();
        assert_eq!(queued, 3);
        hand_offs_in_order(&mut con);
        // d, the six-part place, comes after c.
        assert_eq!(LIB.release(&mut con, "x", "c"), 1);
        assert!(wait(&mut con, "x", "d", &[]) > 0);
    }
}

#[test]
fn an_earlier_library_loaded_over_this_ones_locks_refuses_them_and_changes_nothing() {
    for version in [1, 2] {
        let (_server, mut con) = library_server(Config::default());
        locks_and_waiters(&mut con);
        // A free lock with a waiter (its holder deleted by hand).
        assert!(LIB
            .acquire(&mut con, "q", "a", 60_000, &[])
            .unwrap()
            .is_some());
        assert_eq!(wait(&mut con, "q", "b", &[]), 0);
        let _: i64 = query(&mut con, &["DEL", "q"]).unwrap();
        let before = [seen(&mut con, "x"), seen(&mut con, "s")];
        load_source(&mut con, &library_version(version));
        let mut calls: Vec<(&str, &str, Vec<&str>, &str)> = vec![
            ("lock_acquire", "x", vec!["other", "1000"], "lock"),
            ("lock_extend", "x", vec!["a", "1000"], "lock"),
            ("lock_release", "x", vec!["a"], "lock"),
            ("lock_acquire", "s", vec!["r3", "1000", "SHARED"], "lock"),
            ("lock_release", "s", vec!["r1"], "lock"),
            ("lock_wait", "x", vec!["b", "60000"], "lock"),
            ("lock_cancel", "x", vec!["b"], "lock"),
            ("lock_info", "s", vec![], "lock"),
        ];
        if version == 2 {
            // Version 1 predates the marker: it would take a free lock for one
            // nobody waits for (docs/PROTOCOL.md, "Versions").
            calls.push(("lock_acquire", "q", vec!["c", "1000"], "lock queue"));
            calls.push(("lock_info", "q", vec![], "lock queue"));
        }
        for (function, key, args, what) in calls {
            let unchanged = digest(&mut con);
            let reply = LIB.call(&mut con, function, key, &args);
            let text = error_text(&reply).unwrap_or_default();
            if version == 1 {
                assert!(text.starts_with("WRONGTYPE"), "{function} {key}: {reply:?}");
            } else {
                assert_eq!(text, refused(what, LIBRARY_VERSION, 2), "{function} {key}");
            }
            assert_eq!(digest(&mut con), unchanged, "{function} {key}");
        }
        load_source(&mut con, &library_source());
        assert_eq!([seen(&mut con, "x"), seen(&mut con, "s")], before);
        hand_offs_in_order(&mut con);
        assert!(wait(&mut con, "q", "b", &[]) > 0, "b's place kept");
    }
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
    // A newer library wrote x's lock hash and q's (its format in the field and at
    // the head of the exclusive holding), q's queue hash, and the queue of free, a
    // lock nobody holds.
    let newer = LIBRARY_VERSION + 1;
    let marker = newer.to_string();
    let mut holdings = Vec::new();
    for key in ["x", "q"] {
        let x: String = query(&mut con, &["HGET", key, "x"]).unwrap();
        let (format, rest) = x.split_once(' ').unwrap();
        assert_eq!(format, LIBRARY_VERSION.to_string());
        let x_newer = format!("{newer} {rest}");
        let _: i64 = query(
            &mut con,
            &["HSET", key, "redislock", &marker, "x", &x_newer],
        )
        .unwrap();
        holdings.push(x);
    }
    for queue in ["q{q}:lockq", "free{free}:lockq"] {
        let _: i64 = query(&mut con, &["HSET", queue, "redislock", &marker]).unwrap();
    }
    let calls: Vec<(&str, &str, Vec<&str>, &str)> = vec![
        ("lock_acquire", "x", vec!["other", "1000"], "lock"),
        ("lock_acquire", "x", vec!["a", "1000"], "lock"),
        ("lock_acquire", "x", vec!["o", "1000", "SHARED"], "lock"),
        ("lock_release", "x", vec!["a"], "lock"),
        ("lock_extend", "x", vec!["a", "1000"], "lock"),
        ("lock_info", "x", vec![], "lock"),
        ("lock_wait", "x", vec!["c", "60000", "SHARED"], "lock"),
        ("lock_cancel", "x", vec!["b"], "lock"),
        ("lock_release", "q", vec!["b"], "lock"),
        ("lock_info", "q", vec![], "lock"),
        ("lock_wait", "q", vec!["b", "60000"], "lock"),
        ("lock_cancel", "q", vec!["b"], "lock"),
        ("lock_acquire", "free", vec!["a", "1000"], "lock queue"),
        ("lock_wait", "free", vec!["a", "1000"], "lock queue"),
    ];
    for backend in [LIB, scripts] {
        for (function, key, args, what) in &calls {
            let unchanged = digest(&mut con);
            let reply = backend.call(&mut con, function, key, args);
            assert_eq!(
                error_text(&reply),
                Some(refused(what, newer, LIBRARY_VERSION)),
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
    let current = LIBRARY_VERSION.to_string();
    for (key, x) in ["x", "q"].into_iter().zip(&holdings) {
        let _: i64 = query(&mut con, &["HSET", key, "redislock", &current, "x", x]).unwrap();
    }
    let _: i64 = query(&mut con, &["DEL", "q{q}:lockq", "free{free}:lockq"]).unwrap();
    hand_offs_in_order(&mut con);
    assert!(wait(&mut con, "q", "b", &[]) > 0);
}

/// The same upgrade on a master with a replica: the replica follows the library's
/// replace and the upgrade's writes (effects), and holds what the master holds
/// before, during and after.
#[test]
fn an_upgrade_reaches_a_replica_as_effects() {
    let (master, mut con) = library_server(Config::default());
    let replica = Server::with(Config::default().without_module());
    replica.replicate_from(&master);
    let mut on_replica = replica.connection();
    let synced = |con: &mut Connection, replica: &mut Connection| {
        let acked: i64 = query(con, &["WAIT", "1", "5000"]).unwrap();
        assert_eq!(acked, 1);
        assert_eq!(digest(replica), digest(con));
    };
    load_source(&mut con, &library_version(2));
    locks_and_waiters(&mut con);
    synced(&mut con, &mut on_replica);
    let before = [seen(&mut con, "x"), seen(&mut con, "s")];
    load_source(&mut con, &library_source());
    synced(&mut con, &mut on_replica);
    let version: i64 = query(&mut on_replica, &["FCALL_RO", "lock_version", "0"]).unwrap();
    assert_eq!(version, LIBRARY_VERSION, "the replace replicated");
    assert_eq!(
        LIB.acquire(&mut con, "x", "a", 60_000, &[]).unwrap(),
        Some(before[0].1[0].1)
    );
    assert_eq!(LIB.extend(&mut con, "s", "r1", 50_000), 1);
    synced(&mut con, &mut on_replica);
    assert_eq!(
        [seen(&mut on_replica, "x"), seen(&mut on_replica, "s")],
        before
    );
    let format: Option<String> = query(&mut on_replica, &["HGET", "x", "redislock"]).unwrap();
    assert_eq!(format.as_deref(), Some("3"));
    hand_offs_in_order(&mut con);
    synced(&mut con, &mut on_replica);
    assert_eq!(seen(&mut on_replica, "x"), seen(&mut con, "x"));
}
