//! Shared and counted holdings: read-write locks and semaphores, each holding with
//! its own lease and token, waiters served in FIFO order across modes.

use redis_lock_testkit as common;

use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, RedisResult, Value};

/// `LOCK.ACQUIRE key owner ttl [options…]` on `con`.
fn acquire_with(
    con: &mut Connection,
    key: &str,
    owner: &str,
    ttl: i64,
    options: &[&str],
) -> RedisResult<Option<i64>> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .arg(options)
        .query(con)
}

/// A client waiting on a connection of its own, up to `timeout` ms.
fn waiter(
    server: &Server,
    key: &str,
    owner: &str,
    ttl: i64,
    options: &[&str],
    timeout: i64,
) -> JoinHandle<RedisResult<Option<i64>>> {
    let mut con = server.connection();
    let (key, owner) = (key.to_string(), owner.to_string());
    let mut options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    options.extend(["WAIT".to_string(), timeout.to_string()]);
    thread::spawn(move || {
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        acquire_with(&mut con, &key, &owner, ttl, &options)
    })
}

fn waiting(con: &mut Connection, key: &str) -> i64 {
    lock_info(con, key).map_or(0, |info| info.waiters)
}

fn wait_for_waiters(con: &mut Connection, key: &str, n: i64) {
    wait_until(Duration::from_secs(10), || waiting(con, key) == n);
}

fn owners(con: &mut Connection, key: &str) -> Vec<String> {
    lock_info(con, key).map_or_else(Vec::new, |info| {
        info.holders
            .into_iter()
            .map(|h| String::from_utf8(h.owner).unwrap())
            .collect()
    })
}

#[test]
fn readers_share_a_writer_waits_for_all_of_them_and_readers_behind_it_wait_for_it() {
    let server = Server::start();
    let mut con = server.connection();
    let r1 = acquire_with(&mut con, "doc", "r1", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    let r2 = acquire_with(&mut con, "doc", "r2", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    assert!(r2 > r1, "shared tokens are distinct and increase");
    let info = lock_info(&mut con, "doc").unwrap();
    assert_eq!(info.mode, "shared");
    assert_eq!(owners(&mut con, "doc"), ["r1", "r2"]);
    assert_eq!(
        acquire_with(&mut con, "doc", "w", 1000, &[]).unwrap(),
        None,
        "a writer waits for readers"
    );

    let writer = waiter(&server, "doc", "w", 60_000, &[], 10_000);
    wait_for_waiters(&mut con, "doc", 1);
    // A reader that comes after a queued writer does not overtake it.
    assert_eq!(
        acquire_with(&mut con, "doc", "late", 1000, &["SHARED"]).unwrap(),
        None
    );
    let reader = waiter(&server, "doc", "r3", 60_000, &["SHARED"], 10_000);
    wait_for_waiters(&mut con, "doc", 2);

    assert_eq!(release(&mut con, "doc", "r1"), 1);
    assert_eq!(
        owners(&mut con, "doc"),
        ["r2"],
        "the writer still waits for r2"
    );
    assert_eq!(release(&mut con, "doc", "r2"), 1);
    let w = writer.join().unwrap().unwrap().expect("the writer gets it");
    assert!(w > r2);
    assert_eq!(lock_info(&mut con, "doc").unwrap().mode, "exclusive");
    assert_eq!(waiting(&mut con, "doc"), 1, "r3 waits for the writer");
    assert_eq!(release(&mut con, "doc", "w"), 1);
    assert!(reader.join().unwrap().unwrap().unwrap() > w);
    assert_eq!(owners(&mut con, "doc"), ["r3"]);
}

#[test]
fn a_writers_release_grants_every_reader_at_the_head_of_the_queue_in_one_step() {
    let server = Server::start();
    let mut con = server.connection();
    acquire_with(&mut con, "doc", "w1", 60_000, &[])
        .unwrap()
        .unwrap();
    let mut readers = Vec::new();
    for i in 0..3 {
        readers.push(waiter(
            &server,
            "doc",
            &format!("r{i}"),
            60_000,
            &["SHARED"],
            10_000,
        ));
        wait_for_waiters(&mut con, "doc", i + 1);
    }
    let writer = waiter(&server, "doc", "w2", 60_000, &[], 10_000);
    wait_for_waiters(&mut con, "doc", 4);
    let late_reader = waiter(&server, "doc", "r9", 60_000, &["SHARED"], 10_000);
    wait_for_waiters(&mut con, "doc", 5);

    assert_eq!(release(&mut con, "doc", "w1"), 1);
    let tokens: Vec<i64> = readers
        .into_iter()
        .map(|r| r.join().unwrap().unwrap().unwrap())
        .collect();
    assert!(
        tokens.windows(2).all(|t| t[0] < t[1]),
        "granted in arrival order: {tokens:?}"
    );
    assert_eq!(owners(&mut con, "doc"), ["r0", "r1", "r2"]);
    assert_eq!(
        waiting(&mut con, "doc"),
        2,
        "w2 and the reader behind it wait"
    );
    assert_eq!(lock_stat(&mut con, "hand_offs"), 3);
    for owner in ["r0", "r1", "r2"] {
        release(&mut con, "doc", owner);
    }
    assert!(writer.join().unwrap().unwrap().is_some());
    release(&mut con, "doc", "w2");
    assert!(late_reader.join().unwrap().unwrap().is_some());
}

/// One holder's own record: when it learned it held a permit, and when it was about
/// to give it back.
#[derive(Debug, Clone, Copy)]
struct Held {
    arrival: usize,
    token: i64,
    from: Instant,
    to: Instant,
}

#[test]
fn five_permits_and_twenty_waiters_never_hold_six_at_once_and_come_in_arrival_order() {
    let server = Server::start();
    let mut con = server.connection();
    for i in 0..5 {
        acquire_with(
            &mut con,
            "exports",
            &format!("first{i}"),
            60_000,
            &["LIMIT", "5"],
        )
        .unwrap()
        .unwrap();
    }
    assert_eq!(
        acquire_with(&mut con, "exports", "sixth", 1000, &["LIMIT", "5"]).unwrap(),
        None
    );
    let records = Arc::new(Mutex::new(Vec::<Held>::new()));
    let mut clients = Vec::new();
    for arrival in 0..20 {
        let mut own = server.connection();
        let records = Arc::clone(&records);
        clients.push(thread::spawn(move || {
            let owner = format!("w{arrival}");
            let token = acquire_with(
                &mut own,
                "exports",
                &owner,
                30_000,
                &["LIMIT", "5", "WAIT", "20000"],
            )
            .unwrap()
            .expect("every waiter gets a permit");
            let from = Instant::now();
            thread::sleep(Duration::from_millis(30));
            let to = Instant::now();
            records.lock().unwrap().push(Held {
                arrival,
                token,
                from,
                to,
            });
            assert_eq!(release(&mut own, "exports", &owner), 1);
        }));
        wait_for_waiters(&mut con, "exports", arrival as i64 + 1);
    }
    for i in 0..5 {
        assert_eq!(release(&mut con, "exports", &format!("first{i}")), 1);
    }
    for client in clients {
        client.join().unwrap();
    }
    let mut held = records.lock().unwrap().clone();
    assert_eq!(held.len(), 20, "each granted once");
    held.sort_by_key(|h| h.token);
    let arrivals: Vec<usize> = held.iter().map(|h| h.arrival).collect();
    assert_eq!(
        arrivals,
        (0..20).collect::<Vec<_>>(),
        "tokens in arrival order"
    );
    let most = held
        .iter()
        .map(|h| {
            held.iter()
                .filter(|o| o.from <= h.from && h.from < o.to)
                .count()
        })
        .max()
        .unwrap();
    assert!(most <= 5, "{most} holders at once");
    assert!(most >= 2, "permits are shared ({most} at most)");
    assert_eq!(lock_info(&mut con, "exports"), None);
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn a_crashed_holders_permit_frees_at_its_own_ttl_while_the_others_keep_theirs() {
    let server = Server::start();
    let mut con = server.connection();
    // Only the module's own timer can free the permit: Redis expires the key with its
    // last holding, much later.
    let _: () = query(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let keeper = acquire_with(&mut con, "jobs", "keeper", 60_000, &["LIMIT", "2"])
        .unwrap()
        .unwrap();
    acquire_with(&mut con, "jobs", "crashed", 300, &["LIMIT", "2"])
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let next = waiter(&server, "jobs", "next", 60_000, &["LIMIT", "2"], 10_000);
    let token = next.join().unwrap().unwrap().expect("the permit freed");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(290),
        "not before its TTL: {took:?}"
    );
    let bound = Duration::from_millis(if slow_server() { 5_000 } else { 1_000 });
    assert!(took < bound, "freed {took:?} after a 300 ms TTL");
    let info = lock_info(&mut con, "jobs").unwrap();
    let tokens: Vec<i64> = info.holders.iter().map(|h| h.token).collect();
    assert_eq!(tokens, [keeper, token]);
    assert!(info.holders[0].ttl > 50_000, "the keeper keeps its lease");
    assert_eq!(lock_stat(&mut con, "expirations"), 1);
}

#[test]
fn an_owner_cannot_change_mode_and_a_limit_belongs_to_the_request() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire_with(&mut con, "k", "a", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    let error = acquire_with(&mut con, "k", "a", 60_000, &[]).unwrap_err();
    assert!(error.to_string().contains("mode"), "{error}");
    // SHARED LIMIT n is the shared mode: a refresh, same token.
    assert_eq!(
        acquire_with(&mut con, "k", "a", 60_000, &["SHARED", "LIMIT", "3"]).unwrap(),
        Some(token)
    );
    acquire_with(&mut con, "k", "b", 60_000, &["LIMIT", "5"])
        .unwrap()
        .unwrap();
    assert_eq!(
        acquire_with(&mut con, "k", "c", 60_000, &["LIMIT", "2"]).unwrap(),
        None,
        "two hold already"
    );
    assert!(acquire_with(&mut con, "k", "c", 60_000, &["LIMIT", "3"])
        .unwrap()
        .is_some());
    let error = acquire_with(&mut con, "x", "o", 100, &["LIMIT", "0"]).unwrap_err();
    assert!(error.to_string().contains("limit"), "{error}");
    let error = acquire_with(&mut con, "x", "o", 100, &["SHARED", "SHARED"]).unwrap_err();
    assert!(error.to_string().contains("SHARED"), "{error}");
}

#[test]
fn extend_and_release_act_on_one_holding_and_the_key_lives_with_the_last() {
    let server = Server::start();
    let mut con = server.connection();
    acquire_with(&mut con, "k", "a", 5_000, &["SHARED"])
        .unwrap()
        .unwrap();
    acquire_with(&mut con, "k", "b", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    assert!(
        pttl(&mut con, "k") > 50_000,
        "the key lives with its last holding"
    );
    assert_eq!(extend(&mut con, "k", "a", 120_000), 1);
    assert!(pttl(&mut con, "k") > 110_000);
    assert_eq!(release(&mut con, "k", "a"), 1);
    let ttl = pttl(&mut con, "k");
    assert!((50_000..=60_000).contains(&ttl), "back to b's lease: {ttl}");
    assert_eq!(release(&mut con, "k", "a"), 0);
    assert_eq!(release(&mut con, "k", "b"), 1);
    assert_eq!(dbsize(&mut con), 0);
}

/// Holdings as `(owner, token)`, and the key's absolute expiry, on a server.
/// The holdings (owner, token, limit) of `key`, and the key's expiry.
type Holdings = (Vec<(Vec<u8>, i64, Option<i64>)>, i64);

fn holdings_of(con: &mut Connection, key: &str) -> Holdings {
    let info = lock_info(con, key).expect("held");
    let at: i64 = query(con, &["PEXPIRETIME", key]).unwrap();
    (
        info.holders
            .into_iter()
            .map(|h| (h.owner, h.token, h.limit))
            .collect(),
        at,
    )
}

#[test]
fn info_shows_the_limit_each_holding_holds_with() {
    let server = Server::start();
    let mut con = server.connection();
    acquire_with(&mut con, "sem", "a", 60_000, &["LIMIT", "3"])
        .unwrap()
        .unwrap();
    acquire_with(&mut con, "sem", "b", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    acquire_with(&mut con, "solo", "x", 60_000, &[])
        .unwrap()
        .unwrap();
    let limits = |con: &mut Connection, key: &str| -> Vec<Option<i64>> {
        let info = lock_info(con, key).unwrap();
        info.holders.iter().map(|h| h.limit).collect()
    };
    assert_eq!(limits(&mut con, "sem"), [Some(3), None]);
    assert_eq!(limits(&mut con, "solo"), [None]);
    // A refresh holds with the limit it asks; an extend keeps it.
    acquire_with(&mut con, "sem", "a", 60_000, &["LIMIT", "5"])
        .unwrap()
        .unwrap();
    assert_eq!(extend(&mut con, "sem", "a", 30_000), 1);
    assert_eq!(limits(&mut con, "sem"), [Some(5), None]);
    acquire_with(&mut con, "sem", "a", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    assert_eq!(limits(&mut con, "sem"), [None, None]);
}

#[test]
fn a_replica_and_an_aof_restart_hold_the_same_shared_holdings_and_lapses() {
    let mut master = Server::with(Config::default().aof());
    let replica = Server::start();
    replica.replicate_from(&master);
    let (mut m, mut r) = (master.connection(), replica.connection());
    acquire_with(&mut m, "doc", "keeper", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    acquire_with(&mut m, "doc", "short", 300, &["SHARED"])
        .unwrap()
        .unwrap();
    acquire_with(&mut m, "doc", "third", 30_000, &["LIMIT", "5"])
        .unwrap()
        .unwrap();
    assert_eq!(extend(&mut m, "doc", "third", 40_000), 1);
    // The short holding lapses: the master removes it on its own (nobody touches the
    // key) and says so.
    wait_until(Duration::from_secs(5), || {
        lock_stat(&mut m, "expirations") == 1
    });
    assert_eq!(owners(&mut m, "doc"), ["keeper", "third"]);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    let on_master = holdings_of(&mut m, "doc");
    assert_eq!(
        on_master.0[1].2,
        Some(5),
        "the limit travels with the holding"
    );
    assert_eq!(holdings_of(&mut r, "doc"), on_master);
    let digest = |con: &mut Connection| -> String {
        query(con, &["DEBUG", "DIGEST-VALUE", "doc"])
            .map(|v: Vec<String>| v.concat())
            .unwrap()
    };
    assert_eq!(
        digest(&mut r),
        digest(&mut m),
        "the same holdings and expiries"
    );
    master.kill();
    master.restart();
    let mut m = master.connection();
    assert_eq!(holdings_of(&mut m, "doc"), on_master);
}

#[test]
fn shared_holdings_survive_dump_restore_and_debug_reload() {
    let server = Server::start();
    let mut con = server.connection();
    acquire_with(&mut con, "doc", "a", 60_000, &["SHARED"])
        .unwrap()
        .unwrap();
    acquire_with(&mut con, "doc", "b", 50_000, &["LIMIT", "4"])
        .unwrap()
        .unwrap();
    let before = holdings_of(&mut con, "doc");
    assert_eq!(before.0[1].2, Some(4));
    let payload: Vec<u8> = query(&mut con, &["DUMP", "doc"]).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(payload)
        .arg("ABSTTL")
        .query(&mut con)
        .unwrap_or_else(|e: redis::RedisError| panic!("{e}"));
    assert_eq!(holdings_of(&mut con, "copy").0, before.0);
    let _: Value = query(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(holdings_of(&mut con, "doc"), before);
}

/// TTLs long enough for a restart or a promotion to finish before they lapse.
fn lapse_ms() -> i64 {
    if slow_server() {
        12_000
    } else {
        3_000
    }
}

/// Two holdings of `key`: "keeper" for ten minutes, "short" for `lapse_ms()`.
fn keeper_and_short(con: &mut Connection, key: &str, options: &[&str]) {
    for (owner, ttl) in [("keeper", 600_000), ("short", lapse_ms())] {
        acquire_with(con, key, owner, ttl, options)
            .unwrap()
            .unwrap();
    }
}

/// Waits until `n` holdings have lapsed, the short one's time and some more.
fn wait_for_lapses(con: &mut Connection, n: i64) {
    wait_until(Duration::from_millis(lapse_ms() as u64 * 2 + 5_000), || {
        lock_stat(con, "expirations") == n
    });
}

#[test]
fn after_an_aof_restart_a_lapse_frees_its_permit_for_a_waiter_untouched() {
    let mut server = Server::with(Config::default().aof());
    let mut con = server.connection();
    let permits = ["LIMIT", "2"];
    keeper_and_short(&mut con, "exports", &permits);
    server.kill();
    server.restart();
    let mut con = server.connection();
    // The restarted server granted neither holding: it still watches their lapses.
    let queued = waiter(&server, "exports", "next", 60_000, &permits, 60_000);
    wait_for_waiters(&mut con, "exports", 1);
    let asked = Instant::now();
    assert!(queued.join().unwrap().unwrap().is_some());
    assert!(asked.elapsed() < Duration::from_millis(lapse_ms() as u64 + 5_000));
    assert_eq!(owners(&mut con, "exports"), ["keeper", "next"]);
    assert_eq!(lock_stat(&mut con, "expirations"), 1);
}

#[test]
fn after_a_restart_nobody_touching_the_key_a_lapse_is_removed_on_time() {
    let mut server = Server::with(Config::default().aof());
    let mut con = server.connection();
    keeper_and_short(&mut con, "doc", &["SHARED"]);
    server.kill();
    server.restart();
    let mut con = server.connection();
    wait_for_lapses(&mut con, 1);
    assert_eq!(owners(&mut con, "doc"), ["keeper"]);
}

#[test]
fn a_promoted_replica_removes_the_lapses_its_master_never_sent() {
    let mut master = Server::start();
    let replica = Server::start();
    replica.replicate_from(&master);
    let mut m = master.connection();
    keeper_and_short(&mut m, "doc", &["SHARED"]);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    master.kill();
    let mut r = replica.connection();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    wait_for_lapses(&mut r, 1);
    assert_eq!(owners(&mut r, "doc"), ["keeper"]);
}

#[test]
fn a_restored_lock_removes_its_lapses_on_time() {
    let server = Server::start();
    let mut con = server.connection();
    keeper_and_short(&mut con, "doc", &["SHARED"]);
    let payload: Vec<u8> = query(&mut con, &["DUMP", "doc"]).unwrap();
    let _: i64 = query(&mut con, &["DEL", "doc"]).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(payload)
        .query(&mut con)
        .unwrap_or_else(|e: redis::RedisError| panic!("{e}"));
    wait_for_lapses(&mut con, 1);
    assert_eq!(owners(&mut con, "copy"), ["keeper"]);
}

#[test]
fn lapses_are_removed_on_time_after_debug_reload_and_swapdb() {
    let server = Server::start();
    let mut con = server.connection();
    keeper_and_short(&mut con, "doc", &["SHARED"]);
    let _: () = query(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    // The scan after the reload has long ended when the swap comes.
    thread::sleep(Duration::from_millis(500));
    keeper_and_short(&mut con, "moved", &["SHARED"]);
    let _: () = query(&mut con, &["SWAPDB", "0", "1"]).unwrap();
    wait_for_lapses(&mut con, 2);
    let _: () = query(&mut con, &["SELECT", "1"]).unwrap();
    assert_eq!(owners(&mut con, "doc"), ["keeper"]);
    assert_eq!(owners(&mut con, "moved"), ["keeper"]);
}

#[test]
fn a_migrated_lock_removes_its_lapses_on_time_whatever_ttl_it_arrives_with() {
    let (source, target) = (Server::start(), Server::start());
    let (mut src, mut dst) = (source.connection(), target.connection());
    keeper_and_short(&mut src, "moved", &["SHARED"]);
    keeper_and_short(&mut src, "slow", &["SHARED"]);
    let port = target.url().rsplit(':').next().unwrap().to_string();
    let _: () = query(
        &mut src,
        &["MIGRATE", "127.0.0.1", &port, "moved", "0", "5000"],
    )
    .unwrap();
    // MIGRATE sends the TTL left, which arrives later than it was sent: as over a
    // slow link, a relative TTL 100 ms past the last holding's.
    let payload: Vec<u8> = query(&mut src, &["DUMP", "slow"]).unwrap();
    let ttl = pttl(&mut src, "slow") + 100;
    let _: () = redis::cmd("RESTORE")
        .arg("slow")
        .arg(ttl)
        .arg(payload)
        .query(&mut dst)
        .unwrap_or_else(|e: redis::RedisError| panic!("{e}"));
    wait_for_lapses(&mut dst, 2);
    assert_eq!(owners(&mut dst, "moved"), ["keeper"]);
    assert_eq!(owners(&mut dst, "slow"), ["keeper"]);
}

/// Every holding's TTL as `LOCK.INFO` tells it.
fn ttls(con: &mut Connection, key: &str) -> Vec<i64> {
    lock_info(con, key).map_or_else(Vec::new, |info| {
        info.holders.iter().map(|h| h.ttl).collect()
    })
}

#[test]
fn a_shorter_key_expiry_ends_the_shared_holdings_that_would_outlive_it_on_master_and_replica() {
    let master = Server::start();
    let replica = Server::start();
    replica.replicate_from(&master);
    let (mut m, mut r) = (master.connection(), replica.connection());
    // The keys' expiry, long enough that the checks below come before it even on a
    // loaded machine (the setup, a waiter's connection and the 800 ms sleep
    // come first).
    const KEY_MS: i64 = 3_000;
    // "doc" gets a reader and a waiter after the PEXPIRE; "quiet" nothing.
    for key in ["doc", "quiet"] {
        acquire_with(&mut m, key, "r1", 500, &["SHARED"])
            .unwrap()
            .unwrap();
        acquire_with(&mut m, key, "r2", 100_000, &["SHARED"])
            .unwrap()
            .unwrap();
        let _: i64 = query(&mut m, &["PEXPIRE", key, &KEY_MS.to_string()]).unwrap();
        assert!(ttls(&mut m, key)
            .iter()
            .all(|ttl| (1..=KEY_MS).contains(ttl)));
    }
    // A reader that joins now keeps its own TTL.
    acquire_with(&mut m, "doc", "r3", 300, &["SHARED"])
        .unwrap()
        .unwrap();
    let writer = waiter(&master, "doc", "w", 10_000, &[], 20_000);
    wait_for_waiters(&mut m, "doc", 1);
    let asked = Instant::now();
    // r1 and r3 lapse at their own TTLs; r2 holds on, to the key's expiry.
    thread::sleep(Duration::from_millis(800));
    assert_eq!(lock_stat(&mut m, "expirations"), 3);
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    let digest = |con: &mut Connection, key: &str| -> String {
        query(con, &["DEBUG", "DIGEST-VALUE", key])
            .map(|v: Vec<String>| v.concat())
            .unwrap()
    };
    let at =
        |con: &mut Connection, key: &str| -> i64 { query(con, &["PEXPIRETIME", key]).unwrap() };
    for key in ["doc", "quiet"] {
        assert_eq!(owners(&mut m, key), ["r2"]);
        assert!(
            (1..=KEY_MS).contains(&pttl(&mut m, key)),
            "{key} keeps its expiry"
        );
        assert_eq!(
            digest(&mut r, key),
            digest(&mut m, key),
            "{key} on the replica"
        );
        assert_eq!(at(&mut r, key), at(&mut m, key));
    }
    // The writer gets the lock when the key's expiry passes, not r2's 100 s.
    assert!(writer.join().unwrap().unwrap().is_some());
    let waited = asked.elapsed();
    assert!(waited < Duration::from_millis(6_500), "waited {waited:?}");
    assert_eq!(owners(&mut m, "doc"), ["w"]);
}

#[test]
fn a_persisted_or_longer_key_lengthens_no_shared_holding_and_nothing_is_left_after_the_last() {
    let mut server = Server::with(Config::default().aof().set("aof-use-rdb-preamble", "no"));
    let mut con = server.connection();
    for (key, by_hand) in [
        ("persisted", &["PERSIST", "persisted"][..]),
        ("longer", &["PEXPIRE", "longer", "600000"]),
    ] {
        acquire_with(&mut con, key, "r1", 300, &["SHARED"])
            .unwrap()
            .unwrap();
        let _: i64 = query(&mut con, by_hand).unwrap();
    }
    wait_until(Duration::from_secs(5), || dbsize(&mut con) == 0);
    assert_eq!(lock_stat(&mut con, "expirations"), 2);
    // Persisted, then rewritten into the AOF and loaded back: the restarted server
    // still removes it when its holding lapses.
    acquire_with(&mut con, "untouched", "r1", lapse_ms(), &["SHARED"])
        .unwrap()
        .unwrap();
    let _: i64 = query(&mut con, &["PERSIST", "untouched"]).unwrap();
    let _: () = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_until(Duration::from_secs(10), || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    server.kill();
    server.restart();
    let mut con = server.connection();
    assert_eq!(owners(&mut con, "untouched"), ["r1"]);
    wait_for_lapses(&mut con, 1);
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn a_lapsed_permit_stays_free_when_a_pexpire_comes_before_the_module_removed_it() {
    let server = Server::start();
    let mut con = server.connection();
    let permits = ["LIMIT", "2"];
    acquire_with(&mut con, "k", "p1", 1_000, &permits)
        .unwrap()
        .unwrap();
    acquire_with(&mut con, "k", "p2", 60_000, &permits)
        .unwrap()
        .unwrap();
    // One batch: no timer runs between p1's expiry passing and the PEXPIRE.
    let (_, _, info): (Value, i64, Value) = redis::pipe()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("1.2")
        .cmd("PEXPIRE")
        .arg("k")
        .arg(30_000)
        .cmd("LOCK.INFO")
        .arg("k")
        .query(&mut con)
        .unwrap();
    let info = LockInfo::from_value(info).unwrap();
    let holders: Vec<&[u8]> = info.holders.iter().map(|h| &h.owner[..]).collect();
    assert_eq!(holders, [b"p2"]);
    assert!(acquire_with(&mut con, "k", "p3", 1_000, &permits)
        .unwrap()
        .is_some());
}

#[test]
fn a_renamed_or_moved_shared_lock_removes_its_lapses_and_goes_with_its_last_holding() {
    let server = Server::start();
    let mut con = server.connection();
    acquire_with(&mut con, "doc", "keeper", 600_000, &["SHARED"])
        .unwrap()
        .unwrap();
    acquire_with(&mut con, "doc", "short", 300, &["SHARED"])
        .unwrap()
        .unwrap();
    let _: () = query(&mut con, &["RENAME", "doc", "renamed"]).unwrap();
    // Lengthened by hand, then moved: only its holding's lapse can end it.
    acquire_with(&mut con, "once", "r1", 300, &["SHARED"])
        .unwrap()
        .unwrap();
    let _: i64 = query(&mut con, &["PERSIST", "once"]).unwrap();
    let _: i64 = query(&mut con, &["MOVE", "once", "1"]).unwrap();
    wait_until(Duration::from_secs(5), || {
        lock_stat(&mut con, "expirations") == 2
    });
    assert_eq!(owners(&mut con, "renamed"), ["keeper"]);
    let _: () = query(&mut con, &["SELECT", "1"]).unwrap();
    assert_eq!(dbsize(&mut con), 0, "nothing of the moved lock is left");
}

/// RESTORE of a shared lock built from `holdings` (owner, token, expiry) at `key`.
fn restore_shared(
    con: &mut Connection,
    key: &str,
    holdings: &[(&[u8], i64, i64)],
) -> RedisResult<()> {
    let payload = shared_lock_payload(con, "probe", holdings);
    redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(payload)
        .query(con)
}

fn unix_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| d.as_millis() as i64)
}

#[test]
fn a_restored_shared_lock_whose_holdings_share_a_token_is_refused() {
    let server = Server::start();
    let mut con = server.connection();
    let at = unix_ms() + 600_000;
    let twins: &[(&[u8], i64, i64)] = &[(b"a", 7, at), (b"b", 8, at), (b"c", 7, at)];
    let refused = restore_shared(&mut con, "twins", twins).unwrap_err();
    assert!(refused.to_string().contains("Bad data"), "{refused}");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "twins"]).unwrap(), 0);
    // The same payload with distinct tokens loads: only the duplicate was refused.
    let distinct: &[(&[u8], i64, i64)] = &[(b"a", 7, at), (b"b", 8, at), (b"c", 9, at)];
    restore_shared(&mut con, "distinct", distinct).unwrap();
    assert_eq!(lock_info(&mut con, "distinct").unwrap().holders.len(), 3);
}

#[test]
fn a_restored_shared_holding_beyond_the_longest_ttl_is_refused() {
    let server = Server::start();
    let mut con = server.connection();
    let longest = unix_ms() + (1 << 62) - 1;
    for end in [i64::MAX, longest + 60_000] {
        let holdings: &[(&[u8], i64, i64)] = &[(b"a", 7, unix_ms() + 600_000), (b"b", 8, end)];
        let refused = restore_shared(&mut con, "forever", holdings).unwrap_err();
        assert!(refused.to_string().contains("Bad data"), "{end}: {refused}");
        assert_eq!(query::<i64>(&mut con, &["EXISTS", "forever"]).unwrap(), 0);
    }
    // The longest TTL a client may ask for loads.
    let holdings: &[(&[u8], i64, i64)] = &[(b"a", 7, unix_ms() + 600_000), (b"b", 8, longest)];
    restore_shared(&mut con, "longest", holdings).unwrap();
    let ttl = lock_info(&mut con, "longest").unwrap().holders[1].ttl;
    assert!(ttl > 1 << 61 && ttl < 1 << 62, "{ttl}");
}
