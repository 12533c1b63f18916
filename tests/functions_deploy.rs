//! The library where it is deployed: a replica and an AOF restart hold what the
//! master held, a 3-master Cluster with tagged and untagged keys, ACL key
//! patterns, and the scripts path (EVALSHA) for servers without FUNCTION.

mod library;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};
use redis_lock_testkit::*;

use library::{library_server, wait_acquire, waiter_connection, Backend, WaitRequest};

const LIB: Backend = Backend::Functions;

/// A key's type, contents (hash fields as `field=value`, sorted; a sorted set's
/// members and scores in order) and absolute expiry.
type Stored = (String, Vec<Vec<u8>>, i64);

/// Every key with its type, contents and absolute expiry (PEXPIRETIME).
fn dataset(con: &mut Connection) -> BTreeMap<Vec<u8>, Stored> {
    let keys: Vec<Vec<u8>> = query(con, &["KEYS", "*"]).unwrap();
    keys.into_iter()
        .map(|key| {
            let type_: String = redis::cmd("TYPE").arg(&key).query(con).unwrap();
            let mut items: Vec<Vec<u8>> = match type_.as_str() {
                "hash" => redis::cmd("HGETALL").arg(&key).query(con).unwrap(),
                "list" => redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(con)
                    .unwrap(),
                "zset" => redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(con)
                    .unwrap(),
                "string" => vec![redis::cmd("GET").arg(&key).query(con).unwrap()],
                other => panic!("a {other} key"),
            };
            if type_ == "hash" {
                let pairs: Vec<Vec<u8>> = items
                    .chunks(2)
                    .map(|pair| [pair[0].as_slice(), b"=", pair[1].as_slice()].concat())
                    .collect();
                items = pairs;
                items.sort();
            }
            // PEXPIRETIME is Redis 7; on 6.2 only whether the key expires.
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&key)
                .query(con)
                .or_else(|_| {
                    redis::cmd("PTTL")
                        .arg(&key)
                        .query(con)
                        .map(|ms: i64| ms.signum())
                })
                .unwrap();
            (key, (type_, items, at))
        })
        .collect()
}

/// Locks of every kind, a lapsed shared holding removed, a queue and a hand-off.
fn busy_history(con: &mut Connection) -> Vec<i64> {
    let mut tokens = Vec::new();
    let mut take = |token: Option<i64>| tokens.push(token.expect("granted"));
    take(LIB.acquire(con, "x", "a", 60_000, &[]).unwrap());
    take(
        LIB.acquire(con, "{jobs}:s", "r1", 60_000, &["SHARED"])
            .unwrap(),
    );
    take(
        LIB.acquire(con, "{jobs}:s", "r2", 150, &["LIMIT", "3"])
            .unwrap(),
    );
    take(
        LIB.acquire(con, "{jobs}:s", "r3", 90_000, &["SHARED"])
            .unwrap(),
    );
    assert_eq!(LIB.extend(con, "{jobs}:s", "r1", 70_000), 1);
    thread::sleep(Duration::from_millis(250));
    take(
        LIB.acquire(con, "{jobs}:s", "r4", 60_000, &["SHARED"])
            .unwrap(),
    ); // r2 lapsed
    let (token, _, _): (i64, i64, String) = LIB
        .cmd(
            "lock_wait",
            Some("x"),
            &[b"b", b"60000", b"LEASE", b"30000"],
        )
        .query(con)
        .unwrap();
    assert_eq!(token, 0);
    let (token, _, _): (i64, i64, String) = LIB
        .cmd(
            "lock_wait",
            Some("x"),
            &[b"c", b"60000", b"LEASE", b"30000"],
        )
        .query(con)
        .unwrap();
    assert_eq!(token, 0);
    assert_eq!(LIB.release(con, "x", "a"), 1); // grants b, pushes to its list
    take(LIB.acquire(con, "gone", "a", 60_000, &[]).unwrap());
    assert_eq!(LIB.release(con, "gone", "a"), 1);
    tokens
}

#[test]
fn a_replica_holds_what_the_master_holds() {
    let (master, mut con) = library_server(Config::default());
    let replica = Server::with(Config::default().without_module());
    replica.replicate_from(&master);
    busy_history(&mut con);
    let _: i64 = query(&mut con, &["WAIT", "1", "5000"]).unwrap();
    let mut replica_con = replica.connection();
    let on_master = dataset(&mut con);
    assert!(on_master.len() >= 5, "{on_master:?}");
    assert_eq!(dataset(&mut replica_con), on_master);
    for key in ["x", "{jobs}:s", "gone"] {
        let here = LIB.info(&mut con, key);
        let there = LIB.info(&mut replica_con, key); // FCALL_RO on the replica
        let strip = |info: Option<LockInfo>| {
            info.map(|i| {
                let holders: Vec<_> = i
                    .holders
                    .iter()
                    .map(|h| (h.owner.clone(), h.token))
                    .collect();
                (i.mode, holders, i.waiters)
            })
        };
        assert_eq!(strip(here), strip(there), "{key}");
    }
    let refused = LIB
        .acquire(&mut replica_con, "y", "a", 1000, &[])
        .unwrap_err();
    assert_eq!(refused.code(), Some("READONLY"), "{refused:?}");
}

#[test]
fn an_aof_restart_holds_what_the_server_held_and_tokens_go_on_growing() {
    let (mut server, mut con) = library_server(Config::default().aof());
    let tokens = busy_history(&mut con);
    let before = dataset(&mut con);
    server.restart();
    let mut con = server.connection();
    assert_eq!(dataset(&mut con), before);
    let token = LIB
        .acquire(&mut con, "gone", "z", 1000, &[])
        .unwrap()
        .unwrap();
    assert!(tokens.iter().all(|t| token > *t));
    let version: i64 = query(&mut con, &["FCALL", "lock_version", "0"]).unwrap();
    assert_eq!(version, redis_lock_core::protocol::LIBRARY_VERSION);
}

#[test]
fn a_cluster_serves_tagged_and_untagged_keys() {
    let cluster = Cluster::start_with(3, Config::default().without_module());
    for node in &cluster.nodes {
        load_library(&mut node.connection());
    }
    let keys = [
        "{jobs}:1",
        "{jobs}:2",
        "jobs:3",
        "x",
        "lock:report",
        "a{b}c",
    ];
    for key in keys {
        let owner = cluster.owner_of(key);
        let node = &cluster.nodes[owner];
        let mut con = node.connection();
        let token = LIB.acquire(&mut con, key, "a", 60_000, &[]).unwrap();
        assert!(token.is_some(), "{key}");
        // A waiter on the same node: its grant list is in the key's slot too.
        let (done, granted) = mpsc::channel();
        let url = node.url();
        let waiter = thread::spawn(move || {
            let mut con = waiter_connection(&url);
            let token = wait_acquire(&mut con, &LIB, &WaitRequest::new(key, "b", 60_000));
            done.send(token.unwrap()).unwrap();
        });
        wait_until(Duration::from_secs(10), || {
            LIB.info(&mut con, key).is_some_and(|i| i.waiters == 1)
        });
        assert_eq!(LIB.release(&mut con, key, "a"), 1);
        let token_b = granted.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(token_b > token);
        waiter.join().unwrap();
        // Every key the library made lives in the lock key's slot, on its node.
        let made: Vec<String> = query(&mut con, &["KEYS", &format!("{key}*")]).unwrap();
        assert!(made.len() >= 2, "{key}: {made:?}");
        for side in &made {
            assert_eq!(cluster.slot(side), cluster.slot(key), "{side}");
        }
        // Another node answers MOVED, and nothing changes there.
        let other = &cluster.nodes[(owner + 1) % 3];
        let moved = LIB
            .acquire(&mut other.connection(), key, "c", 1000, &[])
            .unwrap_err();
        assert_eq!(moved.code(), Some("MOVED"), "{key}: {moved:?}");
    }
    // A key with braces but no hash tag: its side keys fall in another slot, so
    // the call is refused and nothing is written anywhere.
    let sizes = |cluster: &Cluster| -> Vec<i64> {
        cluster
            .nodes
            .iter()
            .map(|n| dbsize(&mut n.connection()))
            .collect()
    };
    let before = sizes(&cluster);
    for key in ["a}b", "{}x"] {
        let node = &cluster.nodes[cluster.owner_of(key)];
        let refused = LIB.acquire(&mut node.connection(), key, "a", 1000, &[]);
        assert!(refused.is_err(), "{key}: {refused:?}");
    }
    assert_eq!(sizes(&cluster), before);
}

#[test]
fn an_acl_key_pattern_covers_the_side_keys() {
    let (server, mut admin) = library_server(Config::default());
    let _: () = query(
        &mut admin,
        &["ACL", "SETUSER", "worker", "on", ">pw", "~jobs:*", "+@all"],
    )
    .unwrap();
    let url = format!("redis://worker:pw@127.0.0.1:{}/", server.port);
    let mut con = waiter_connection(&url);
    for key in ["jobs:1", "jobs:{x}:2"] {
        let token = LIB.acquire(&mut con, key, "a", 60_000, &[]).unwrap();
        assert!(token.is_some());
        let (done, granted) = mpsc::channel();
        let waiter_url = url.clone();
        let waiter = thread::spawn(move || {
            let mut con = waiter_connection(&waiter_url);
            let token = wait_acquire(&mut con, &LIB, &WaitRequest::new(key, "b", 60_000));
            done.send(token.unwrap()).unwrap();
        });
        wait_until(Duration::from_secs(10), || {
            LIB.info(&mut con, key).is_some_and(|i| i.waiters == 1)
        });
        assert_eq!(LIB.release(&mut con, key, "a"), 1);
        assert!(granted.recv_timeout(Duration::from_secs(10)).unwrap() > token);
        waiter.join().unwrap();
        assert_eq!(LIB.release(&mut con, key, "b"), 1);
    }
    let refused = LIB
        .acquire(&mut con, "reports:1", "a", 1000, &[])
        .unwrap_err();
    assert_eq!(refused.code(), Some("NOPERM"), "{refused:?}");
    assert_eq!(
        dbsize(&mut admin),
        2,
        "only the two queue keys (token marks) stay"
    );
}

#[test]
fn the_scripts_path_keeps_the_same_contract() {
    // On the default server through EVALSHA, and on Redis 6.2 (no FUNCTION) when a
    // build of it is there (REDIS62_SERVER, else the one `make deps` builds).
    scripts_contract(None);
    match redis62_server() {
        Some(binary) => scripts_contract(Some(binary)),
        None => eprintln!("no Redis 6.2: the scripts path ran on the default server only"),
    }
}

fn scripts_contract(binary: Option<String>) {
    let mut config = Config::default().without_module();
    if let Some(binary) = &binary {
        // Scripts replicate their effects by default since Redis 5; the library
        // asks for it anyway, which this setting (gone in 7.0) proves.
        config = config
            .binary(binary.clone())
            .set("lua-replicate-commands", "no");
    }
    let server = Server::with(config.clone());
    let mut con = server.connection();
    if binary.is_some() {
        let version = info_field(&mut con, "server", "redis_version").unwrap();
        assert!(version.starts_with("6.2"), "{version}");
    }
    let scripts = Backend::scripts(&mut con);
    let first = scripts
        .acquire(&mut con, "k", "a", 60_000, &[])
        .unwrap()
        .unwrap();
    assert_eq!(
        scripts.acquire(&mut con, "k", "a", 60_000, &[]).unwrap(),
        Some(first)
    );
    assert_eq!(
        scripts.acquire(&mut con, "k", "b", 60_000, &[]).unwrap(),
        None
    );
    let error = scripts.acquire(&mut con, "k", "b", 0, &[]).unwrap_err();
    assert_eq!(
        error.detail(),
        Some("invalid ttl: expected a positive integer of milliseconds")
    );
    let info = scripts.info(&mut con, "k").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], first));
    let (done, granted) = mpsc::channel();
    let url = server.url();
    let waiter_backend = scripts.clone();
    let waiter = thread::spawn(move || {
        let mut con = waiter_connection(&url);
        let request = WaitRequest::new("k", "b", 60_000);
        done.send(wait_acquire(&mut con, &waiter_backend, &request).unwrap())
            .unwrap();
    });
    wait_until(Duration::from_secs(10), || {
        scripts.info(&mut con, "k").is_some_and(|i| i.waiters == 1)
    });
    assert_eq!(scripts.release(&mut con, "k", "a"), 1);
    let token = granted
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap();
    assert!(token > first);
    waiter.join().unwrap();
    assert_eq!(scripts.extend(&mut con, "k", "b", 1000), 1);
    let version: Value = scripts
        .cmd("lock_version", None, &[])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        version,
        Value::Int(redis_lock_core::protocol::LIBRARY_VERSION)
    );
    // Under OOM an acquire gets the server's OOM error, with its code; extend and
    // release still run (as LOCK.EXTEND and LOCK.RELEASE do), the release handing
    // the lock to a waiter too.
    scripts
        .call(&mut con, "lock_wait", "k", &["c", "60000"])
        .unwrap();
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let refused = scripts
        .acquire(&mut con, "k2", "a", 60_000, &[])
        .unwrap_err();
    assert_eq!(refused.code(), Some("OOM"), "{refused:?}");
    assert!(
        refused
            .detail()
            .is_some_and(|d| !d.contains("script") && !d.ends_with('\n')),
        "{refused:?}"
    );
    // A busy key too, with nothing to write: refused all the same, as FCALL is.
    let busy = scripts
        .acquire(&mut con, "k", "c", 60_000, &[])
        .unwrap_err();
    assert_eq!(busy.code(), Some("OOM"), "{busy:?}");
    assert_eq!(scripts.extend(&mut con, "k", "b", 60_000), 1);
    assert_eq!(scripts.release(&mut con, "k", "b"), 1);
    let pushed: Vec<i64> = query(&mut con, &["LRANGE", "k{k}:lockg:c", "0", "-1"]).unwrap();
    let info = scripts.info(&mut con, "k").unwrap();
    assert_eq!(
        (info.owner.as_slice(), Some(info.token), info.waiters),
        (&b"c"[..], pushed.first().copied(), 0)
    );
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    // A replica built from the effects holds the same.
    let replica = Server::with(Config {
        binary,
        settings: Vec::new(),
        ..config
    });
    replica.replicate_from(&server);
    let _: i64 = query(&mut con, &["WAIT", "1", "5000"]).unwrap();
    let mut replica_con = replica.connection();
    assert_eq!(dataset(&mut replica_con), dataset(&mut con));
    // A write on the replica gets READONLY, with its code.
    let replica_scripts = Backend::scripts(&mut replica_con);
    let refused = replica_scripts
        .acquire(&mut replica_con, "k3", "a", 60_000, &[])
        .unwrap_err();
    assert_eq!(refused.code(), Some("READONLY"), "{refused:?}");
}

/// Every key that has no expiry (PTTL -1).
fn keys_without_expiry(con: &mut Connection) -> Vec<String> {
    let keys: Vec<String> = query(con, &["KEYS", "*"]).unwrap();
    keys.into_iter()
        .filter(|key| query::<i64>(con, &["PTTL", key]).unwrap() == -1)
        .collect()
}

/// A holding of 1 ms, written where the library sets an absolute expiry (Redis
/// 6.2, where a relative one would replicate as it is; shared holdings on every
/// server): the expiry is read against the server's clock when set, which may
/// already be past it (the library's clock is whole milliseconds, read before), and
/// Redis then deletes the key at once. Nothing the call writes after it may make the
/// key again without an expiry: that lock would be held until a DEL. Through FCALL
/// and EVALSHA on the default server, and through EVALSHA on Redis 6.2 when a build
/// of it is there; 200 rounds each of a grant collected with a 1 ms TTL and of a
/// shared holding extended to 1 ms.
#[test]
fn a_holding_of_one_ms_never_stays_without_an_expiry() {
    let check = |server: &Server, backend: &Backend| {
        let mut con = server.connection();
        for round in 0..200 {
            let _: () = query(&mut con, &["FLUSHALL"]).unwrap();
            assert!(backend
                .acquire(&mut con, "k", "xab", 100_000, &[])
                .unwrap()
                .is_some());
            for owner in ["a", "b"] {
                backend
                    .call(&mut con, "lock_wait", "k", &[owner, "100000"])
                    .unwrap();
            }
            assert_eq!(backend.release(&mut con, "k", "xab"), 1);
            // `a`'s grant, collected with a TTL of 1 ms.
            backend
                .call(&mut con, "lock_wait", "k", &["a", "1"])
                .unwrap();
            assert_eq!(
                keys_without_expiry(&mut con),
                Vec::<String>::new(),
                "{backend:?} round {round}"
            );
            // A shared holding extended to 1 ms.
            let _: () = query(&mut con, &["FLUSHALL"]).unwrap();
            backend
                .acquire(&mut con, "s", "r", 100_000, &["SHARED"])
                .unwrap();
            backend.extend(&mut con, "s", "r", 1);
            assert_eq!(
                keys_without_expiry(&mut con),
                Vec::<String>::new(),
                "{backend:?} shared, round {round}"
            );
        }
    };
    let (server, mut con) = library_server(Config::default());
    let scripts = Backend::scripts(&mut con);
    check(&server, &LIB);
    check(&server, &scripts);
    if let Some(binary) = redis62_server() {
        let server = Server::with(Config::default().without_module().binary(binary));
        let scripts = Backend::scripts(&mut server.connection());
        check(&server, &scripts);
    }
}
