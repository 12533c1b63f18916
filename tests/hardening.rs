//! What a built-in command would never do, and the module must not either: stall the
//! server on a valid TTL, lose a waiter's reply, wake waiters late, hand a lock on
//! under OOM or after an eviction, abort a WATCH for a call that changed nothing,
//! count expirations of keys that are not locks, load with a misspelled argument,
//! strand a holder when a limit is lowered, forget the token mark in a pure-AOF
//! rewrite, or duplicate a holding with COPY.

use redis_lock_testkit as common;

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::*;
use redis::{Connection, RedisResult, Value};

/// The longest TTL contract.md "Commands" allows: 2^62 - 1 ms would overflow Redis
/// 7.0's timer arithmetic if handed to it as a period.
const LONGEST_TTL: i64 = (1 << 62) - 1;

/// A client that waits for `key` as `owner` on a connection of its own. Its reply
/// must come within 20 s: a waiter that never hears back fails the test.
fn waiter(
    server: &Server,
    key: &str,
    owner: &str,
    ttl: i64,
    timeout: i64,
) -> JoinHandle<RedisResult<Option<i64>>> {
    let mut con = server.connection();
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (key, owner) = (key.to_string(), owner.to_string());
    thread::spawn(move || {
        redis::cmd("LOCK.ACQUIRE")
            .arg(key)
            .arg(owner)
            .arg(ttl)
            .arg("WAIT")
            .arg(timeout)
            .query(&mut con)
    })
}

/// Something done to a lock on a connection.
type Step = fn(&mut Connection);
/// A way to stall the server (the connection is free for it to use).
type Stall = fn(&Server, &mut Connection);

fn wait_for_waiters(con: &mut Connection, key: &str, n: i64) {
    wait_until(Duration::from_secs(10), || {
        lock_info(con, key).map_or(0, |info| info.waiters) == n
    });
}

/// The server answers PING on a fresh connection, promptly, several times over
/// `for_ms` (a spinning event loop answers nothing).
fn assert_responsive(server: &Server, for_ms: u64) {
    let mut con = server.connection();
    con.set_read_timeout(Some(Duration::from_secs(if slow_server() {
        30
    } else {
        3
    })))
    .unwrap();
    let until = Instant::now() + Duration::from_millis(for_ms);
    loop {
        let pong: String = query(&mut con, &["PING"]).expect("the server answers PING");
        assert_eq!(pong, "PONG");
        if Instant::now() >= until {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_lock_with_the_longest_ttl_and_a_waiter_leaves_the_server_responsive() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "big", "a", LONGEST_TTL).unwrap();
    let timed_out = waiter(&server, "big", "b", 1000, 500);
    assert_responsive(&server, 700);
    assert_eq!(timed_out.join().unwrap().unwrap(), None);

    // A hand-off to a waiter that asked for the longest TTL, then a waiter on it.
    let heir = waiter(&server, "big", "c", LONGEST_TTL, 0);
    wait_for_waiters(&mut con, "big", 1);
    assert_eq!(release(&mut con, "big", "a"), 1);
    assert!(heir.join().unwrap().unwrap().is_some());
    let timed_out = waiter(&server, "big", "d", 1000, 300);
    assert_responsive(&server, 500);
    assert_eq!(timed_out.join().unwrap().unwrap(), None);

    // An extend to the longest TTL of a lock with a waiter: the old expiry passes.
    acquire(&mut con, "ex", "o", 200).unwrap();
    let timed_out = waiter(&server, "ex", "w", 1000, 1500);
    wait_for_waiters(&mut con, "ex", 1);
    assert_eq!(extend(&mut con, "ex", "o", LONGEST_TTL), 1);
    assert_responsive(&server, 600);
    assert_eq!(timed_out.join().unwrap().unwrap(), None);
}

#[test]
fn an_expiry_at_the_end_of_time_stops_no_timer() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "forever", "a", 60_000).unwrap();
    let _: i64 = query(&mut con, &["PEXPIREAT", "forever", &i64::MAX.to_string()]).unwrap();
    let _stuck = waiter(&server, "forever", "b", 1000, 0);
    wait_for_waiters(&mut con, "forever", 1);
    // Expiry hand-offs and timeouts keep working on every other key.
    acquire(&mut con, "job", "a", 200).unwrap();
    let heir = waiter(&server, "job", "b", 30_000, 5000);
    let token = heir.join().unwrap().unwrap();
    assert!(
        token.is_some(),
        "the expiry hand-off of another key happened"
    );
    let timed_out = waiter(&server, "job", "c", 1000, 300);
    assert_eq!(timed_out.join().unwrap().unwrap(), None);
    assert_responsive(&server, 200);
    let _: i64 = query(&mut con, &["DEL", "forever"]).unwrap();
}

#[test]
fn shortening_a_locks_ttl_wakes_its_waiters_at_the_new_expiry() {
    let shorten: [(&str, Step); 3] = [
        ("LOCK.EXTEND", |con| {
            assert_eq!(extend(con, "job", "a", 100), 1)
        }),
        ("a refresh", |con| {
            assert!(acquire(con, "job", "a", 100).is_some());
        }),
        ("PEXPIRE", |con| {
            let set: i64 = query(con, &["PEXPIRE", "job", "100"]).unwrap();
            assert_eq!(set, 1);
        }),
    ];
    for (how, shorten) in shorten {
        let server = Server::start();
        let mut con = server.connection();
        // Redis's own sampling of volatile keys would find the key in the end (with
        // many volatile keys, minutes later): only the module's timer counts here.
        let _: () = query(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
        acquire(&mut con, "job", "a", 60_000).unwrap();
        let heir = waiter(&server, "job", "b", 30_000, 10_000);
        wait_for_waiters(&mut con, "job", 1);
        let shortened = Instant::now();
        shorten(&mut con);
        let token = heir.join().unwrap().unwrap();
        let took = shortened.elapsed();
        assert!(token.is_some(), "{how}: the waiter got the lock");
        let bound = Duration::from_millis(if slow_server() { 10_000 } else { 2_000 });
        assert!(
            took < bound,
            "{how}: woken {took:?} after the TTL was shortened to 100 ms"
        );
    }
}

#[test]
fn a_waiter_is_answered_once_after_a_stall_past_the_ttl_and_its_timeout() {
    let stalls: [(&str, Stall); 2] = [
        ("DEBUG SLEEP", |_, con| {
            let _: () = query(con, &["DEBUG", "SLEEP", "3"]).unwrap();
        }),
        ("SIGSTOP", |server, _| {
            server.pause();
            thread::sleep(Duration::from_secs(3));
            server.resume();
        }),
    ];
    for (how, stall) in stalls {
        let server = Server::start();
        let mut con = server.connection();
        acquire(&mut con, "k", "A", 1000).unwrap();
        // One waiter whose timeout falls before the lock's expiry, one after it: both
        // have passed when the server wakes; each gets exactly one reply.
        let short = waiter(&server, "k", "W0", 1000, 500);
        wait_for_waiters(&mut con, "k", 1);
        let long = waiter(&server, "k", "W1", 1000, 2000);
        wait_for_waiters(&mut con, "k", 2);
        let mut staller = server.connection();
        staller
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stall(&server, &mut staller);
        assert_eq!(short.join().unwrap().expect(how), None, "{how}: W0");
        assert_eq!(long.join().unwrap().expect(how), None, "{how}: W1");
        assert_eq!(lock_stat(&mut con, "hand_offs"), 0, "{how}");
        assert_eq!(lock_stat(&mut con, "wait_timeouts"), 2, "{how}");
        assert_eq!(lock_stat(&mut con, "waiters"), 0, "{how}");
        assert_eq!(lock_info(&mut con, "k"), None, "{how}");
        // Both connections are in step: their next command gets its own reply.
        let pong: String = query(&mut con, &["PING"]).unwrap();
        assert_eq!(pong, "PONG");
    }
}

#[test]
fn under_oom_release_and_extend_run_and_a_hand_off_is_refused() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "job", "a", 60_000).unwrap();
    acquire(&mut con, "other", "a", 60_000).unwrap();
    let refused = waiter(&server, "job", "b", 30_000, 10_000);
    wait_for_waiters(&mut con, "job", 1);
    let _: () = query(
        &mut con,
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    )
    .unwrap();
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();

    let error = query::<Value>(&mut con, &["LOCK.ACQUIRE", "new", "a", "100"]).unwrap_err();
    assert_eq!(error.code(), Some("OOM"), "{error}");
    assert_eq!(extend(&mut con, "other", "a", 120_000), 1);
    assert_eq!(release(&mut con, "job", "a"), 1);
    let error = refused.join().unwrap().unwrap_err();
    assert_eq!(
        error.code(),
        Some("OOM"),
        "the hand-off is refused: {error}"
    );

    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    assert_eq!(lock_info(&mut con, "job"), None);
    assert_eq!(dbsize(&mut con), 1);
    assert_eq!(lock_stat(&mut con, "hand_offs"), 0);
    assert_eq!(lock_stat(&mut con, "waiters"), 0);
}

#[test]
fn an_evicted_lock_is_not_handed_to_its_waiters_while_memory_is_short() {
    for policy in ["allkeys-lru", "volatile-ttl", "volatile-lru"] {
        let server = Server::start();
        let mut con = server.connection();
        acquire(&mut con, "job", "a", 60_000).unwrap();
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let w = waiter(&server, "job", &format!("w{i}"), 30_000, 10_000);
                wait_for_waiters(&mut con, "job", i + 1);
                w
            })
            .collect();
        let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory-policy", policy]).unwrap();
        let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
        // Any write makes Redis evict what it can: the lock.
        let _ = query::<Value>(&mut con, &["SET", "filler", "x"]);
        for (i, w) in waiters.into_iter().enumerate() {
            let reply = w.join().unwrap();
            let error = reply.expect_err("no waiter gets an evicted lock");
            assert_eq!(error.code(), Some("OOM"), "{policy}: w{i}: {error}");
        }
        let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
        assert_eq!(lock_stat(&mut con, "evictions"), 1, "{policy}");
        assert_eq!(lock_stat(&mut con, "expirations"), 0, "{policy}");
        assert_eq!(lock_stat(&mut con, "hand_offs"), 0, "{policy}");
        assert_eq!(lock_info(&mut con, "job"), None, "{policy}");
        assert!(
            server.log().contains("can evict locks"),
            "{policy}: the policy change is warned of"
        );
    }
}

#[test]
fn a_policy_that_can_evict_locks_is_warned_of_at_load() {
    let server = Server::with(Config::default().set("maxmemory-policy", "volatile-lru"));
    assert!(server.log().contains("can evict locks"), "{}", server.log());
    let quiet = Server::start();
    assert!(!quiet.log().contains("can evict locks"), "{}", quiet.log());
}

/// EXEC after `WATCH keys`, with `call` run on another connection in between:
/// true when the transaction ran.
fn exec_survives(server: &Server, watched: &[&str], call: &[&str]) -> bool {
    let mut watcher = server.connection();
    let mut other = server.connection();
    let mut watch = redis::cmd("WATCH");
    watch.arg(watched);
    let _: () = watch.query(&mut watcher).unwrap();
    let _ = query::<Value>(&mut other, call);
    let _: () = query(&mut watcher, &["MULTI"]).unwrap();
    let _: () = query(&mut watcher, &["SET", "side", "1"]).unwrap();
    let exec: Value = query(&mut watcher, &["EXEC"]).unwrap();
    exec != Value::Nil
}

#[test]
fn calls_that_change_nothing_abort_no_watch_and_changes_do() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "k", "a", 60_000).unwrap();
    let _: () = query(&mut con, &["SET", "text", "v"]).unwrap();
    let watched = ["k", "text", "free"];
    let no_ops: [&[&str]; 9] = [
        &["LOCK.ACQUIRE", "k", "b", "100"],
        &["LOCK.ACQUIRE", "k", "b", "100", "WAIT", "50"],
        &["LOCK.RELEASE", "k", "b"],
        &["LOCK.EXTEND", "k", "b", "100"],
        &["LOCK.RELEASE", "free", "b"],
        &["LOCK.EXTEND", "free", "b", "100"],
        &["LOCK.ACQUIRE", "text", "b", "100"],
        &["LOCK.ACQUIRE", "k", "b", "-1"],
        &["LOCK.INFO", "k"],
    ];
    for call in no_ops {
        assert!(
            exec_survives(&server, &watched, call),
            "{call:?} aborted the WATCH"
        );
    }
    let changes: [&[&str]; 4] = [
        &["LOCK.EXTEND", "k", "a", "50000"],
        &["LOCK.ACQUIRE", "k", "a", "40000"],
        &["LOCK.RELEASE", "k", "a"],
        &["LOCK.ACQUIRE", "free", "a", "1000"],
    ];
    for call in changes {
        assert!(
            !exec_survives(&server, &watched, call),
            "{call:?} left the WATCH"
        );
    }
}

#[test]
fn only_expirations_of_locks_are_counted() {
    let server = Server::start();
    let mut con = server.connection();
    // A lock deleted, then a string of the same name that expires.
    acquire(&mut con, "ek", "o", 100_000).unwrap();
    let _: i64 = query(&mut con, &["DEL", "ek"]).unwrap();
    let _: () = query(&mut con, &["SET", "ek", "str", "PX", "100"]).unwrap();
    // A lock overwritten by a string that expires.
    acquire(&mut con, "ow", "o", 100_000).unwrap();
    let _: () = query(&mut con, &["SET", "ow", "str", "PX", "100"]).unwrap();
    thread::sleep(Duration::from_millis(300));
    for key in ["ek", "ow"] {
        let gone: Option<String> = query(&mut con, &["GET", key]).unwrap();
        assert_eq!(gone, None);
    }
    assert_eq!(lock_stat(&mut con, "expirations"), 0);
    // A lock that expires is counted, once.
    acquire(&mut con, "real", "o", 100).unwrap();
    thread::sleep(Duration::from_millis(300));
    let exists: i64 = query(&mut con, &["EXISTS", "real"]).unwrap();
    assert_eq!(exists, 0);
    wait_until(Duration::from_secs(2), || {
        lock_stat(&mut con, "expirations") == 1
    });
}

#[test]
fn a_bad_load_argument_refuses_the_load_and_says_why() {
    let cases: [(&[&str], &str); 5] = [
        (&["max_ttl", "5000"], "max_ttl"),
        (&["max-ttl", "abc"], "max-ttl"),
        (&["max-ttl", "-1"], "max-ttl"),
        (&["max-owner-len", "0"], "max-owner-len"),
        (&["max-ttl"], "max-ttl"),
    ];
    for (args, named) in cases {
        let config = Config {
            module_args: args.iter().map(|a| a.to_string()).collect(),
            ..Config::default()
        };
        let error = match Server::try_with(config) {
            Ok(_) => panic!("{args:?}: the module loaded"),
            Err(error) => error,
        };
        let line = error
            .lines()
            .find(|line| line.contains("lock module:"))
            .unwrap_or_else(|| panic!("{args:?}: no reason in the log:\n{error}"));
        assert!(line.contains(named), "{args:?}: {line}");
    }
    let server = Server::with(Config::default().module_arg("max-ttl", "5000"));
    let ttl: Vec<String> =
        query(&mut server.connection(), &["CONFIG", "GET", "lock.max-ttl"]).unwrap();
    assert_eq!(ttl, ["lock.max-ttl", "5000"]);
}

/// A bad `lock.*` config value (in redis.conf, on the command line, or in
/// `MODULE LOADEX … CONFIG`) refuses the load cleanly on every server: the reason in
/// the log names the config, the value and the range, and nothing stays loaded. Redis
/// 7.2+ and Valkey 8 used to crash here (the load reported success with the configs
/// unset, then the server's own unload of a module with a data type crashed).
#[test]
fn a_bad_config_value_refuses_the_load_cleanly_and_says_why() {
    for (name, value, range) in [
        ("lock.max-ttl", "abc", "from 0 to 4611686018427387903"),
        ("lock.max-ttl", "-5", "from 0 to 4611686018427387903"),
        ("lock.max-owner-len", "0", "from 1 to 1048576"),
        (
            "lock.max-owner-len",
            "99999999999999999999",
            "from 1 to 1048576",
        ),
    ] {
        let reason = format!("invalid value '{value}' for {name}: expected an integer {range}");
        let error = match Server::try_with(Config::default().set(name, value)) {
            Ok(_) => panic!("{name} {value}: the server started"),
            Err(error) => error,
        };
        assert!(error.contains(&reason), "{name} {value}: {error}");

        let server = Server::with(
            Config::default()
                .without_module()
                .set("enable-module-command", "yes"),
        );
        let mut con = server.connection();
        let module = module_path();
        let module = module.to_str().unwrap();
        let refused = query::<Value>(
            &mut con,
            &["MODULE", "LOADEX", module, "CONFIG", name, value],
        );
        assert!(refused.is_err(), "{name} {value}: {refused:?}");
        let modules: Vec<Value> = query(&mut con, &["MODULE", "LIST"]).unwrap();
        assert!(
            modules.is_empty(),
            "{name} {value}: left loaded: {modules:?}"
        );
        assert!(
            server.log().contains(&reason),
            "{name} {value}: {}",
            server.log()
        );
        // Nothing half-loaded: the module loads afterwards, with a good value.
        let _: () = query(
            &mut con,
            &["MODULE", "LOADEX", module, "CONFIG", name, "5000"],
        )
        .unwrap();
        let shown: Vec<String> = query(&mut con, &["CONFIG", "GET", name]).unwrap();
        assert_eq!(shown, [name, "5000"]);
        assert!(acquire(&mut con, "k", "a", 1000).is_some());
    }
}

/// `CONFIG SET` of a bad value answers why, in the same words, and changes nothing.
#[test]
fn a_bad_config_set_names_the_value_and_the_range() {
    let server = Server::start();
    let mut con = server.connection();
    let _: () = query(&mut con, &["CONFIG", "SET", "lock.max-ttl", "7000"]).unwrap();
    for value in ["abc", "-1", "4611686018427387904", ""] {
        let error =
            query::<Value>(&mut con, &["CONFIG", "SET", "lock.max-ttl", value]).unwrap_err();
        let expected = format!(
            "invalid value '{value}' for lock.max-ttl: expected an integer from 0 to 4611686018427387903"
        );
        assert!(error.to_string().contains(&expected), "{value}: {error}");
    }
    let shown: Vec<String> = query(&mut con, &["CONFIG", "GET", "lock.max-ttl"]).unwrap();
    assert_eq!(shown, ["lock.max-ttl", "7000"]);
}

#[test]
fn lowering_max_owner_len_strands_no_holder() {
    let server = Server::start();
    let mut con = server.connection();
    let long = "o".repeat(100);
    let token = acquire(&mut con, "k", &long, 60_000).unwrap();
    let _: () = query(&mut con, &["CONFIG", "SET", "lock.max-owner-len", "10"]).unwrap();
    assert_eq!(
        acquire(&mut con, "k", &long, 60_000),
        Some(token),
        "a refresh"
    );
    assert_eq!(extend(&mut con, "k", &long, 30_000), 1);
    let error = query::<Value>(&mut con, &["LOCK.ACQUIRE", "new", &long, "1000"]).unwrap_err();
    assert!(error.to_string().contains("max-owner-len"), "{error}");
    let error =
        query::<Value>(&mut con, &["LOCK.ACQUIRE", "k", &"p".repeat(11), "1000"]).unwrap_err();
    assert!(error.to_string().contains("max-owner-len"), "{error}");
    assert_eq!(release(&mut con, "k", &long), 1);
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn a_pure_aof_rewrite_keeps_the_token_mark() {
    let high: i64 = 100_000_000_000_000_000;
    let mut server = Server::with(Config::default().aof().set("aof-use-rdb-preamble", "no"));
    let mut con = server.connection();
    // A lock older than the mark, and the mark raised by a lock that is gone.
    let old = acquire(&mut con, "held", "a", 600_000).unwrap();
    raise_token_mark(&mut con, high);
    assert!(old < high);
    let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_until(Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
            && info_field(&mut con, "persistence", "aof_last_bgrewrite_status").as_deref()
                == Some("ok")
    });
    server.restart();
    let mut con = server.connection();
    assert_eq!(lock_info(&mut con, "held").unwrap().token, old);
    let next = acquire(&mut con, "fresh", "b", 1000).unwrap();
    assert!(next > high, "{next} after a mark of {high}");
}

#[test]
fn copy_of_a_lock_is_refused() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "k", "a", 60_000).unwrap();
    let digest: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    for call in [&["COPY", "k", "k2"][..], &["COPY", "k", "k2", "DB", "1"]] {
        let error = query::<Value>(&mut con, call).unwrap_err();
        assert!(
            error.to_string().contains("not supported"),
            "{call:?}: {error}"
        );
    }
    let after: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    assert_eq!(after, digest);
    assert_eq!(dbsize(&mut con), 1);
}
