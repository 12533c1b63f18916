//! The replies of every command, against a real redis-server, in RESP2 and RESP3.

use redis_lock_testkit as common;

use std::time::Duration;

use common::*;
use redis::Value;

#[test]
fn acquire_a_free_key_returns_a_positive_token_and_sets_the_ttl() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "worker-1", 10_000).expect("free key is granted");
    assert!(token > 0);
    let ttl = pttl(&mut con, "job");
    assert!((9_000..=10_000).contains(&ttl), "PTTL {ttl}");
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "job"]).unwrap(), 1);
    assert_eq!(
        query::<String>(&mut con, &["TYPE", "job"]).unwrap(),
        "redislock"
    );
}

#[test]
fn the_holder_reacquires_with_the_same_token_and_a_fresh_ttl() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "worker-1", 1_000).unwrap();
    let again = acquire(&mut con, "job", "worker-1", 60_000).unwrap();
    assert_eq!(again, token);
    assert!(pttl(&mut con, "job") > 50_000, "TTL was refreshed");
    assert_eq!(lock_stat(&mut con, "refreshes"), 1);
    assert_eq!(lock_stat(&mut con, "acquisitions"), 1);
}

#[test]
fn another_owner_gets_null_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "worker-1", 10_000).unwrap();
    assert_eq!(acquire(&mut con, "job", "worker-2", 60_000), None);
    let info = lock_info(&mut con, "job").unwrap();
    assert_eq!(info.owner, b"worker-1");
    assert_eq!(info.token, token);
    assert!(info.ttl <= 10_000);
    assert_eq!(lock_stat(&mut con, "contended"), 1);
}

#[test]
fn busy_is_a_null_bulk_in_resp2_and_a_null_in_resp3() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "job", "a", 10_000).unwrap();
    let v2: Value = query(&mut con, &["LOCK.ACQUIRE", "job", "b", "100"]).unwrap();
    assert_eq!(v2, Value::Nil);
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "--no-raw"])
        .args(["LOCK.ACQUIRE", "job", "b", "100"])
        .output()
        .expect("redis-cli");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "(nil)");
    let mut con3 = server.resp3_connection();
    let v3: Value = query(&mut con3, &["LOCK.ACQUIRE", "job", "b", "100"]).unwrap();
    assert_eq!(v3, Value::Nil);
    let info3: Value = query(&mut con3, &["LOCK.INFO", "free-key"]).unwrap();
    assert_eq!(info3, Value::Nil);
}

#[test]
fn an_expired_lock_is_free_again_with_a_greater_token() {
    let server = Server::start();
    let mut con = server.connection();
    let first = acquire(&mut con, "job", "a", 30).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(lock_info(&mut con, "job"), None);
    assert_eq!(
        release(&mut con, "job", "a"),
        0,
        "release of an expired lock"
    );
    assert_eq!(
        extend(&mut con, "job", "a", 10_000),
        0,
        "extend never re-creates"
    );
    assert_eq!(query::<i64>(&mut con, &["EXISTS", "job"]).unwrap(), 0);
    let second = acquire(&mut con, "job", "b", 10_000).unwrap();
    assert!(second > first);
}

#[test]
fn release_by_the_holder_deletes_and_by_others_changes_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "job", "a", 10_000).unwrap();
    assert_eq!(release(&mut con, "job", "b"), 0);
    assert_eq!(lock_info(&mut con, "job").unwrap().owner, b"a");
    assert_eq!(release(&mut con, "job", "a"), 1);
    assert_eq!(dbsize(&mut con), 0, "nothing of the lock is left");
    assert_eq!(release(&mut con, "job", "a"), 0, "a free key");
    assert_eq!(lock_stat(&mut con, "releases"), 1);
}

#[test]
fn extend_moves_the_ttl_of_the_holder_and_keeps_the_token() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "a", 1_000).unwrap();
    assert_eq!(extend(&mut con, "job", "b", 60_000), 0);
    assert!(
        pttl(&mut con, "job") <= 1_000,
        "non-owner extend changed the TTL"
    );
    assert_eq!(extend(&mut con, "job", "a", 60_000), 1);
    let ttl = pttl(&mut con, "job");
    assert!((59_000..=60_000).contains(&ttl), "PTTL {ttl}");
    assert_eq!(lock_info(&mut con, "job").unwrap().token, token);
    assert_eq!(
        extend(&mut con, "job", "a", 50),
        1,
        "extend may also shorten"
    );
    assert!(pttl(&mut con, "job") <= 50);
    assert_eq!(lock_stat(&mut con, "extends"), 2);
}

#[test]
fn info_is_a_map_in_resp3_and_a_flat_array_in_resp2() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "a", 10_000).unwrap();

    let v2: Value = query(&mut con, &["LOCK.INFO", "job"]).unwrap();
    let Value::Array(items) = &v2 else {
        panic!("RESP2 LOCK.INFO is {v2:?}")
    };
    // Version 1's owner, ttl, token and waiters come first, as before; then mode,
    // holders and the first waiters.
    assert_eq!(items.len(), 14);
    let names: Vec<String> = items
        .iter()
        .step_by(2)
        .map(|name| redis::from_redis_value(name.clone()).unwrap())
        .collect();
    assert_eq!(
        names,
        ["owner", "ttl", "token", "waiters", "mode", "holders", "queue"]
    );
    let info2 = LockInfo::from_value(v2.clone()).unwrap();

    let mut con3 = server.resp3_connection();
    let v3: Value = query(&mut con3, &["LOCK.INFO", "job"]).unwrap();
    assert!(matches!(v3, Value::Map(_)), "RESP3 LOCK.INFO is {v3:?}");
    let info3 = LockInfo::from_value(v3).unwrap();

    for info in [info2, info3] {
        assert_eq!(info.mode, "exclusive");
        assert_eq!(info.holders.len(), 1);
        assert_eq!(info.owner, b"a");
        assert_eq!(info.token, token);
        assert_eq!(info.waiters, 0);
        assert!((9_000..=10_000).contains(&info.ttl));
    }
    assert_eq!(lock_info(&mut con, "other"), None);
}

#[test]
fn owners_are_binary_safe() {
    let server = Server::start();
    let mut con = server.connection();
    let owner: &[u8] = b"\x00\xff\r\nowner";
    let token: i64 = redis::cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(owner)
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    let other: &[u8] = b"\x00\xff\r\nowneR";
    let busy: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg(other)
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(busy, None);
    let info = lock_info(&mut con, "job").unwrap();
    assert_eq!(info.owner, owner);
    assert_eq!(info.token, token);
    let released: i64 = redis::cmd("LOCK.RELEASE")
        .arg("job")
        .arg(owner)
        .query(&mut con)
        .unwrap();
    assert_eq!(released, 1);
}

#[test]
fn a_lock_is_an_ordinary_key() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "a", 10_000).unwrap();
    let (cursor, keys): (String, Vec<String>) = query(&mut con, &["SCAN", "0"]).unwrap();
    assert_eq!((cursor.as_str(), keys), ("0", vec!["job".to_string()]));
    let usage: i64 = query(&mut con, &["MEMORY", "USAGE", "job"]).unwrap();
    assert!(usage > 0);
    let encoding: Option<String> = query(&mut con, &["OBJECT", "ENCODING", "job"]).unwrap();
    assert!(encoding.is_some());

    // DUMP / RESTORE keep owner and token; the expiry is RESTORE's to set.
    let payload: Vec<u8> = query(&mut con, &["DUMP", "job"]).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(5_000)
        .arg(payload)
        .query(&mut con)
        .unwrap();
    let restored = lock_info(&mut con, "copy").unwrap();
    assert_eq!(
        (restored.owner.as_slice(), restored.token),
        (&b"a"[..], token)
    );
    assert!(restored.ttl <= 5_000 && restored.ttl > 0);

    // DEL is the administrator's force-release.
    assert_eq!(query::<i64>(&mut con, &["DEL", "job", "copy"]).unwrap(), 2);
    assert_eq!(dbsize(&mut con), 0);
    let next = acquire(&mut con, "job", "b", 10_000).unwrap();
    assert!(next > token);
}

#[test]
fn locks_are_independent_per_key() {
    let server = Server::start();
    let mut con = server.connection();
    let a = acquire(&mut con, "a", "x", 10_000).unwrap();
    let b = acquire(&mut con, "b", "y", 10_000).unwrap();
    assert_ne!(a, b);
    assert_eq!(acquire(&mut con, "a", "y", 10_000), None);
    assert_eq!(release(&mut con, "b", "x"), 0);
    assert_eq!(release(&mut con, "b", "y"), 1);
    assert_eq!(lock_info(&mut con, "a").unwrap().owner, b"x");
}

#[test]
fn expirations_of_held_locks_are_counted() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "short", "a", 20).unwrap();
    acquire(&mut con, "long", "a", 60_000).unwrap();
    let _: () = query(&mut con, &["SET", "plain", "v", "PX", "20"]).unwrap();
    wait_until(Duration::from_secs(5), || {
        query::<i64>(&mut con, &["EXISTS", "short"]).unwrap() == 0
    });
    wait_until(Duration::from_secs(5), || {
        query::<i64>(&mut con, &["DBSIZE"]).unwrap() == 1
    });
    assert_eq!(
        lock_stat(&mut con, "expirations"),
        1,
        "only the lock counts"
    );
    release(&mut con, "long", "a");
    // A plain key of the same name expiring after a release is not a lock expiring.
    let _: () = query(&mut con, &["SET", "long", "v", "PX", "20"]).unwrap();
    wait_until(Duration::from_secs(5), || {
        query::<i64>(&mut con, &["EXISTS", "long"]).unwrap() == 0
    });
    let _: () = query(&mut con, &["SET", "x", "1"]).unwrap();
    let _: i64 = query(&mut con, &["DEL", "x"]).unwrap();
    assert_eq!(lock_stat(&mut con, "expirations"), 1);
}

#[test]
fn module_list_names_it_lock_and_configs_are_readable() {
    let server = Server::with(Config::default().module_arg("max-ttl", "5000"));
    let mut con = server.connection();
    let modules: Value = query(&mut con, &["MODULE", "LIST"]).unwrap();
    assert!(format!("{modules:?}").contains("lock"));
    let max_ttl: Vec<String> = query(&mut con, &["CONFIG", "GET", "lock.max-ttl"]).unwrap();
    assert_eq!(max_ttl, ["lock.max-ttl", "5000"]);
    let owner_len: Vec<String> = query(&mut con, &["CONFIG", "GET", "lock.max-owner-len"]).unwrap();
    assert_eq!(owner_len, ["lock.max-owner-len", "256"]);
    let _: () = query(&mut con, &["CONFIG", "SET", "lock.max-ttl", "100"]).unwrap();
    assert!(query::<Value>(&mut con, &["LOCK.ACQUIRE", "k", "a", "101"]).is_err());
    assert!(acquire(&mut con, "k", "a", 100).is_some());
    let _: () = query(&mut con, &["CONFIG", "SET", "lock.max-owner-len", "3"]).unwrap();
    assert!(query::<Value>(&mut con, &["LOCK.ACQUIRE", "k2", "abcd", "50"]).is_err());
    assert!(acquire(&mut con, "k2", "abc", 50).is_some());
}

#[test]
fn info_lock_reports_every_counter_of_the_spec() {
    let server = Server::start();
    let mut con = server.connection();
    for name in [
        "acquisitions",
        "contended",
        "releases",
        "extends",
        "expirations",
        "waiters",
        "wait_timeouts",
        "hand_offs",
        "last_token",
    ] {
        assert_eq!(lock_stat(&mut con, name), 0, "{name}");
    }
    let token = acquire(&mut con, "k", "a", 1_000).unwrap();
    assert_eq!(lock_stat(&mut con, "acquisitions"), 1);
    assert_eq!(lock_stat(&mut con, "last_token"), token);
}

#[test]
fn key_specs_route_the_key_argument() {
    let server = Server::start();
    let mut con = server.connection();
    for args in [
        &["LOCK.ACQUIRE", "k1", "o", "100"][..],
        &["LOCK.ACQUIRE", "k1", "o", "100", "WAIT", "5"],
        &["LOCK.RELEASE", "k1", "o"],
        &["LOCK.EXTEND", "k1", "o", "100"],
        &["LOCK.INFO", "k1"],
    ] {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("GETKEYS");
        for a in args {
            cmd.arg(*a);
        }
        let keys: Vec<String> = cmd.query(&mut con).unwrap();
        assert_eq!(keys, ["k1"], "{args:?}");
    }
    let info: Value = query(&mut con, &["COMMAND", "INFO", "LOCK.INFO", "LOCK.ACQUIRE"]).unwrap();
    let text = format!("{info:?}");
    assert!(text.contains("readonly") && text.contains("write") && text.contains("denyoom"));
    assert!(text.contains("fast"));
}

#[test]
fn command_docs_describe_every_argument_as_for_built_in_commands() {
    let server = Server::start();
    let mut con = server.connection();
    let docs: Value = query(
        &mut con,
        &["COMMAND", "DOCS", "LOCK.ACQUIRE", "LOCK.INFO", "LOCK.APPLY"],
    )
    .unwrap();
    let text = format!("{docs:?}");
    for word in [
        "owner",
        "ttl",
        "SHARED",
        "LIMIT",
        "WAIT",
        "timeout",
        "O(n) for n holdings",
        "Internal",
    ] {
        assert!(
            text.contains(word),
            "{word} missing from COMMAND DOCS: {text}"
        );
    }
    // COMMAND GETKEYS uses the key spec; the arguments do not change it.
    let keys: Vec<String> = query(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "LOCK.ACQUIRE",
            "job",
            "me",
            "100",
            "LIMIT",
            "3",
            "WAIT",
            "10",
        ],
    )
    .unwrap();
    assert_eq!(keys, ["job"]);
}
