//! A replica holds the same locks, owners, tokens and absolute expiries as its master;
//! it refuses writes, answers LOCK.INFO, and once promoted keeps tokens increasing.

use redis_lock_testkit as common;

use std::time::Duration;

use common::*;
use redis::Connection;

/// Waits until the replica has everything the master wrote so far.
fn sync(master: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(master).unwrap();
    assert_eq!(acked, 1, "replica did not acknowledge");
}

fn expire_time(con: &mut Connection, key: &str) -> i64 {
    query(con, &["PEXPIRETIME", key]).unwrap()
}

fn pair() -> (Server, Server) {
    let master = Server::start();
    let replica = Server::start();
    replica.replicate_from(&master);
    (master, replica)
}

#[test]
fn a_replica_holds_the_same_owner_token_and_expiry() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    let token = acquire(&mut m, "job", "worker-1", 60_000).unwrap();
    sync(&mut m);
    let info = lock_info(&mut r, "job").expect("the replica has the lock");
    assert_eq!(
        (info.owner.as_slice(), info.token),
        (&b"worker-1"[..], token)
    );
    assert_eq!(expire_time(&mut r, "job"), expire_time(&mut m, "job"));

    // A refresh and an extend move the expiry identically on both.
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(acquire(&mut m, "job", "worker-1", 90_000), Some(token));
    sync(&mut m);
    assert_eq!(expire_time(&mut r, "job"), expire_time(&mut m, "job"));
    assert_eq!(extend(&mut m, "job", "worker-1", 120_000), 1);
    sync(&mut m);
    assert_eq!(expire_time(&mut r, "job"), expire_time(&mut m, "job"));

    let digest_m: String = query(&mut m, &["DEBUG", "DIGEST"]).unwrap();
    let digest_r: String = query(&mut r, &["DEBUG", "DIGEST"]).unwrap();
    assert_eq!(digest_m, digest_r);

    assert_eq!(release(&mut m, "job", "worker-1"), 1);
    sync(&mut m);
    assert_eq!(dbsize(&mut r), 0);
}

#[test]
fn an_expiry_on_the_master_removes_the_lock_on_the_replica() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    acquire(&mut m, "job", "a", 30).unwrap();
    sync(&mut m);
    wait_until(Duration::from_secs(5), || dbsize(&mut r) == 0);
    assert_eq!(lock_info(&mut r, "job"), None);
}

#[test]
fn a_replica_refuses_writes_and_answers_info() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    acquire(&mut m, "job", "a", 60_000).unwrap();
    sync(&mut m);
    for args in [
        &["LOCK.ACQUIRE", "job", "a", "100"][..],
        &["LOCK.ACQUIRE", "free", "a", "100"],
        &["LOCK.RELEASE", "job", "a"],
        &["LOCK.EXTEND", "job", "a", "100"],
    ] {
        let error = query::<redis::Value>(&mut r, args).unwrap_err();
        assert_eq!(error.code(), Some("READONLY"), "{args:?}: {error}");
    }
    assert_eq!(lock_info(&mut r, "job").unwrap().owner, b"a");
    assert_eq!(lock_info(&mut m, "job").unwrap().owner, b"a");
}

#[test]
fn a_promoted_replica_keeps_tokens_increasing() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    // Raise the master's tokens far above the clock, so only replication can carry
    // them to the replica.
    let high = 100_000_000_000_000_000_i64;
    raise_token_mark(&mut m, high);
    let mut last = 0;
    for i in 0..10 {
        let key = format!("k{i}");
        last = acquire(&mut m, &key, "a", 60_000).unwrap();
        if i % 2 == 0 {
            release(&mut m, &key, "a");
        }
    }
    assert!(last > high);
    sync(&mut m);
    assert_eq!(lock_stat(&mut r, "last_token"), last);

    let _: () = query(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    let next = acquire(&mut r, "k0", "b", 60_000).unwrap();
    assert!(next > last, "{next} after {last}");
    assert_eq!(
        acquire(&mut r, "k1", "b", 60_000),
        None,
        "k1 is still held by a"
    );
    assert!(lock_stat(&mut m, "last_token") < next);
}

#[test]
fn a_full_sync_carries_the_high_water_mark() {
    // The replica attaches after the grants: it learns them from the RDB transfer.
    let master = Server::start();
    let mut m = master.connection();
    let high = 100_000_000_000_000_000_i64;
    raise_token_mark(&mut m, high);
    let token = acquire(&mut m, "held", "a", 60_000).unwrap();
    let replica = Server::start();
    replica.replicate_from(&master);
    let mut r = replica.connection();
    assert_eq!(lock_stat(&mut r, "last_token"), token);
    assert_eq!(lock_info(&mut r, "held").unwrap().token, token);
}

#[test]
fn a_coordinated_failover_keeps_tokens_increasing() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    let high = 100_000_000_000_000_000_i64;
    restore_lock(&mut m, "job", b"a", high, None).unwrap();
    let held = acquire(&mut m, "other", "a", 60_000).unwrap();
    // FAILOVER: the master pauses writes, waits for the replica, and swaps roles.
    let _: () = query(&mut m, &["FAILOVER", "TIMEOUT", "5000"]).unwrap();
    wait_until(Duration::from_secs(20), || {
        info_field(&mut r, "replication", "role").as_deref() == Some("master")
    });
    assert_eq!(lock_info(&mut r, "other").unwrap().token, held);
    assert_eq!(release(&mut r, "job", "a"), 1);
    let next = acquire(&mut r, "job", "b", 60_000).unwrap();
    assert!(next > held && next > high, "{next}");
    let error = query::<redis::Value>(&mut m, &["LOCK.ACQUIRE", "x", "a", "100"]).unwrap_err();
    assert_eq!(
        error.code(),
        Some("READONLY"),
        "the old master is a replica now"
    );
}

/// Subscribes `con` to the keyspace events of `key` in database 0.
fn subscribe(con: &mut Connection, key: &str) {
    let _: () = query(con, &["CONFIG", "SET", "notify-keyspace-events", "KA"]).unwrap();
    let _: () = redis::cmd("SUBSCRIBE")
        .arg(format!("__keyspace@0__:{key}"))
        .exec(con)
        .unwrap();
}

/// The next `n` keyspace events `con` was sent (it subscribed with [`subscribe`]).
fn events(con: &mut Connection, n: usize) -> Vec<String> {
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut pubsub = con.as_pubsub();
    (0..n)
        .map(|_| pubsub.get_message().unwrap().get_payload().unwrap())
        .collect()
}

#[test]
fn master_and_replica_send_the_same_keyspace_events() {
    let (master, replica) = pair();
    let mut m = master.connection();
    let (mut m_events, mut r_events) = (master.connection(), replica.connection());
    subscribe(&mut m_events, "job");
    subscribe(&mut r_events, "job");

    acquire(&mut m, "job", "holder", 60_000).unwrap(); // grant
    acquire(&mut m, "job", "holder", 60_000).unwrap(); // refresh
    assert_eq!(extend(&mut m, "job", "holder", 60_000), 1);
    let mut wcon = master.connection();
    let waiter = std::thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg("job")
            .arg("waiter")
            .arg(60_000)
            .arg("WAIT")
            .arg(10_000)
            .query::<Option<i64>>(&mut wcon)
    });
    wait_until(Duration::from_secs(5), || {
        lock_info(&mut m, "job").is_some_and(|info| info.waiters == 1)
    });
    assert_eq!(release(&mut m, "job", "holder"), 1); // release, then the hand-off
    assert!(waiter.join().unwrap().unwrap().is_some());
    // Calls that change nothing send nothing (an event here would shift the rest).
    assert_eq!(release(&mut m, "job", "nobody"), 0);
    assert_eq!(extend(&mut m, "job", "nobody", 1_000), 0);
    assert_eq!(extend(&mut m, "job", "waiter", 60_000), 1);
    assert_eq!(release(&mut m, "job", "waiter"), 1);
    sync(&mut m);

    let expected = [
        "lock.acquire", // grant
        "expire",       // refresh by the holder
        "lock.refresh",
        "expire", // extend
        "lock.refresh",
        "del", // release
        "lock.release",
        "lock.acquire", // hand-off to the waiter
        "expire",       // the waiter's extend
        "lock.refresh",
        "del", // the waiter's release
        "lock.release",
    ];
    assert_eq!(events(&mut m_events, expected.len()), expected, "master");
    assert_eq!(events(&mut r_events, expected.len()), expected, "replica");
}

#[test]
fn shared_holdings_send_the_same_keyspace_events_on_master_and_replica() {
    let (master, replica) = pair();
    let mut m = master.connection();
    let (mut m_events, mut r_events) = (master.connection(), replica.connection());
    subscribe(&mut m_events, "doc");
    subscribe(&mut r_events, "doc");
    let shared = |con: &mut Connection, owner: &str, ttl: &str| {
        let token: Option<i64> =
            query(con, &["LOCK.ACQUIRE", "doc", owner, ttl, "SHARED"]).unwrap();
        assert!(token.is_some());
    };
    shared(&mut m, "r1", "60000"); // grant
    shared(&mut m, "r2", "200"); // grant
    shared(&mut m, "r1", "60000"); // refresh
    wait_until(Duration::from_secs(5), || {
        lock_stat(&mut m, "expirations") == 1
    }); // r2 lapses
    shared(&mut m, "r3", "60000"); // grant
    assert_eq!(release(&mut m, "doc", "r3"), 1); // one of two
    assert_eq!(release(&mut m, "doc", "r1"), 1); // the last
    sync(&mut m);
    let expected = [
        "lock.acquire",
        "lock.acquire",
        "expire",
        "lock.refresh",
        "lock.expired",
        "lock.acquire",
        "lock.release",
        "del",
        "lock.release",
    ];
    assert_eq!(events(&mut m_events, expected.len()), expected, "master");
    assert_eq!(events(&mut r_events, expected.len()), expected, "replica");
}

#[test]
fn a_release_replays_on_replicas_and_from_the_aof_whatever_their_owner_limit() {
    // A release travels as LOCK.RELEASE itself. Where it is replayed, a smaller
    // lock.max-owner-len must not refuse what the master accepted.
    let mut master = Server::with(Config::default().aof());
    let replica = Server::with(Config::default().module_arg("max-owner-len", "8"));
    replica.replicate_from(&master);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let owner = "a-forty-byte-owner-id-0123456789abcdefgh";
    let released = ["released", "by-script", "in-multi"];
    for key in released.iter().chain(&["held"]) {
        acquire(&mut m, key, owner, 60_000).unwrap();
    }
    assert_eq!(release(&mut m, "released", owner), 1);
    // From a script and inside MULTI, it travels within their transaction.
    let script = "return redis.call('LOCK.RELEASE', KEYS[1], ARGV[1])";
    let by_script: i64 = query(&mut m, &["EVAL", script, "1", "by-script", owner]).unwrap();
    let (in_multi,): (i64,) = redis::pipe()
        .atomic()
        .cmd("LOCK.RELEASE")
        .arg("in-multi")
        .arg(owner)
        .query(&mut m)
        .unwrap();
    assert_eq!((by_script, in_multi), (1, 1));
    sync(&mut m);
    for (name, con) in [("replica", &mut r), ("master", &mut m)] {
        for key in released {
            assert_eq!(lock_info(con, key), None, "{name}: {key}");
        }
        assert_eq!(
            lock_info(con, "held").unwrap().owner,
            owner.as_bytes(),
            "{name}"
        );
    }
    assert_eq!(
        lock_stat(&mut r, "releases"),
        0,
        "counted where the holder released"
    );

    master.restart_with(Config::default().aof().module_arg("max-owner-len", "8"));
    let mut m = master.connection();
    for key in released {
        assert_eq!(lock_info(&mut m, key), None, "{key} replayed from the AOF");
    }
    assert_eq!(lock_info(&mut m, "held").unwrap().owner, owner.as_bytes());
}

#[test]
fn a_promoted_replica_never_mints_a_token_of_the_master_it_replaced() {
    // The old master was cut off and does not know it was replaced: both grant, in
    // the same milliseconds, at the clock floor.
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    let before = acquire(&mut m, "before", "a", 60_000).unwrap();
    sync(&mut m);
    let _: () = query(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    let (mut old, mut new) = (Vec::new(), Vec::new());
    for i in 0..300 {
        old.push(acquire(&mut m, &format!("old{i}"), "a", 60_000).unwrap());
        new.push(acquire(&mut r, &format!("new{i}"), "b", 60_000).unwrap());
    }
    assert!(old.iter().all(|t| t % 10 == before % 10), "{old:?}");
    assert!(new.iter().all(|t| t % 10 != before % 10), "{new:?}");
    assert!(new.iter().all(|t| !old.contains(t)));
    assert!(new[0] > before);
    assert!(replica
        .log()
        .contains("now a master; its fencing tokens end in the digit"));
}

#[test]
fn shared_holdings_that_lapse_together_travel_as_one_command_and_replay_as_the_master_did() {
    // 40 shared holdings that lapse together, 2 that live on: the master's settle
    // removes those that lapsed at once and sends one LOCK.LAPSE; the replica and the AOF end
    // with the same 2 holdings, and the replica sends the 40 events the master sent.
    let mut master = Server::with(Config::default().aof());
    let replica = Server::start();
    replica.replicate_from(&master);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let mut r_events = replica.connection();
    subscribe(&mut r_events, "doc");
    for owner in ["stays-1", "stays-2"] {
        let token: Option<i64> =
            query(&mut m, &["LOCK.ACQUIRE", "doc", owner, "600000", "SHARED"]).unwrap();
        assert!(token.is_some());
    }
    let mut pipe = redis::pipe();
    for i in 0..40 {
        pipe.cmd("LOCK.ACQUIRE")
            .arg("doc")
            .arg(format!("short-{i}"))
            .arg(300)
            .arg("SHARED");
    }
    let _: Vec<i64> = pipe.query(&mut m).unwrap();
    sync(&mut m);
    wait_until(Duration::from_secs(5), || {
        lock_stat(&mut m, "expirations") == 40
    });
    sync(&mut m);
    // Their expiries spread over the milliseconds the pipeline took: a settle takes
    // all that lapsed by then, so a few commands carry the 40, not 40.
    let lapses = command_calls(&mut r, "lock.lapse");
    assert!(
        (1..=5).contains(&lapses),
        "{lapses} LOCK.LAPSE for 40 lapses"
    );
    let holders = |con: &mut Connection| -> Vec<Vec<u8>> {
        let mut owners: Vec<Vec<u8>> = lock_info(con, "doc")
            .unwrap()
            .holders
            .into_iter()
            .map(|h| h.owner)
            .collect();
        owners.sort();
        owners
    };
    let expected = vec![b"stays-1".to_vec(), b"stays-2".to_vec()];
    assert_eq!(holders(&mut r), expected);
    let digest: Vec<String> = query(&mut m, &["DEBUG", "DIGEST-VALUE", "doc"]).unwrap();
    let replica_digest: Vec<String> = query(&mut r, &["DEBUG", "DIGEST-VALUE", "doc"]).unwrap();
    assert_eq!(replica_digest, digest);
    assert_eq!(
        expire_time(&mut r, "doc"),
        expire_time(&mut m, "doc"),
        "the key expires with the last holding"
    );
    let lapse_events = events(&mut r_events, 82)
        .into_iter()
        .filter(|e| e == "lock.expired")
        .count();
    assert_eq!(lapse_events, 40);
    // The AOF replays the same.
    master.restart();
    let mut m = master.connection();
    assert_eq!(holders(&mut m), expected);
    let reloaded: Vec<String> = query(&mut m, &["DEBUG", "DIGEST-VALUE", "doc"]).unwrap();
    assert_eq!(reloaded, digest);
}

/// A waiter whose owner already holds the lock when it is served (here: a `RESTORE`
/// put the owner's holding in place while it waited) is granted a refresh of that
/// holding, with the waiter's TTL and limit: the replica gets the same holding,
/// expiry and events as the master (`LOCK.APPLY … PXAT`, then `expire` and
/// `lock.refresh`).
#[test]
fn a_hand_off_that_refreshes_a_holding_reaches_the_replica_as_on_the_master() {
    let (master, replica) = pair();
    let (mut m, mut r) = (master.connection(), replica.connection());
    let now: i64 = {
        let (secs, micros): (i64, i64) = query(&mut m, &["TIME"]).unwrap();
        secs * 1000 + micros / 1000
    };
    for (key, mode, options) in [("sem", 1, &["LIMIT", "3"][..]), ("job", 0, &[][..])] {
        let (mut m_events, mut r_events) = (master.connection(), replica.connection());
        subscribe(&mut m_events, key);
        subscribe(&mut r_events, key);
        acquire(&mut m, key, "other", 60_000).unwrap();
        let mut wcon = master.connection();
        let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
        let waiter = std::thread::spawn(move || {
            redis::cmd("LOCK.ACQUIRE")
                .arg(key)
                .arg("a")
                .arg(30_000)
                .arg(&options)
                .arg("WAIT")
                .arg(10_000)
                .query::<Option<i64>>(&mut wcon)
        });
        wait_until(Duration::from_secs(5), || {
            lock_info(&mut m, key).is_some_and(|info| info.waiters == 1)
        });
        // The owner's holding, expiring in 10 s; the waiter's grant moves it to 30 s.
        let holding_expiry = if mode == 1 { now + 10_000 } else { 0 };
        let payload = if mode == 1 {
            shared_lock_payload(&mut m, "probe", &[(b"a", 777_000, holding_expiry)])
        } else {
            lock_payload(&mut m, "probe", b"a", 777_000)
        };
        let _: () = redis::cmd("RESTORE")
            .arg(key)
            .arg(now + 10_000)
            .arg(payload)
            .arg("REPLACE")
            .arg("ABSTTL")
            .query(&mut m)
            .unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), Some(777_000), "{key}");
        sync(&mut m);
        let holders = |con: &mut Connection| -> Vec<(Vec<u8>, i64, Option<i64>)> {
            let info = lock_info(con, key).expect("held");
            info.holders
                .into_iter()
                .map(|h| (h.owner, h.token, h.limit))
                .collect()
        };
        let on_master = holders(&mut m);
        let limit = (mode == 1).then_some(3);
        assert_eq!(on_master, [(b"a".to_vec(), 777_000, limit)], "{key}");
        assert_eq!(holders(&mut r), on_master, "{key}");
        let at = expire_time(&mut m, key);
        assert!(
            at > now + 20_000,
            "{key}: the grant's TTL, not the restored one"
        );
        assert_eq!(expire_time(&mut r, key), at, "{key}");
        let digest = |con: &mut Connection| -> Vec<String> {
            query(con, &["DEBUG", "DIGEST-VALUE", key]).unwrap()
        };
        assert_eq!(digest(&mut r), digest(&mut m), "{key}");
        let expected = ["lock.acquire", "restore", "expire", "lock.refresh"];
        assert_eq!(events(&mut m_events, 4), expected, "{key}: master");
        assert_eq!(events(&mut r_events, 4), expected, "{key}: replica");
    }
}

/// A grant taken back (its waiter vanished before the reply) leaves as `DEL` does:
/// `del` alone, no `lock.release` (no holder released it), on the master and the
/// replica alike, for an exclusive grant and for the last shared holding.
#[test]
fn a_grant_taken_back_sends_del_alone_on_master_and_replica() {
    let (master, replica) = pair();
    let mut m = master.connection();
    for shared in [false, true] {
        let (mut m_events, mut r_events) = (master.connection(), replica.connection());
        subscribe(&mut m_events, "job");
        subscribe(&mut r_events, "job");
        acquire(&mut m, "job", "holder", 60_000).unwrap();
        let mut first = master.connection();
        let first_id: i64 = query(&mut first, &["CLIENT", "ID"]).unwrap();
        let waiter = std::thread::spawn(move || {
            let mut acquire = redis::cmd("LOCK.ACQUIRE");
            acquire.arg("job").arg("first").arg(60_000);
            if shared {
                acquire.arg("SHARED");
            }
            acquire.arg("WAIT").arg(0).query::<Option<i64>>(&mut first)
        });
        wait_until(Duration::from_secs(5), || {
            lock_info(&mut m, "job").is_some_and(|info| info.waiters == 1)
        });
        // The release hands the lock to the waiter, killed before its reply.
        let _: (i64, i64) = redis::pipe()
            .atomic()
            .cmd("LOCK.RELEASE")
            .arg("job")
            .arg("holder")
            .cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(first_id)
            .query(&mut m)
            .unwrap();
        assert!(
            waiter.join().unwrap().is_err(),
            "the waiter never got a reply"
        );
        wait_until(Duration::from_secs(5), || dbsize(&mut m) == 0);
        sync(&mut m);
        let expected = [
            "lock.acquire", // holder
            "del",          // its release
            "lock.release",
            "lock.acquire", // the hand-off to the waiter
            "del",          // taken back
        ];
        assert_eq!(all_events(&mut m_events), expected, "shared: {shared}");
        assert_eq!(all_events(&mut r_events), expected, "shared: {shared}");
    }
}

/// Every keyspace event `con` was sent until none came for 300 ms.
fn all_events(con: &mut Connection) -> Vec<String> {
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut pubsub = con.as_pubsub();
    std::iter::from_fn(|| pubsub.get_message().ok()?.get_payload().ok()).collect()
}
