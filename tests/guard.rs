//! `LOCK.GUARD key token command [arg ...]` (contract.md, "Fenced writes"): the
//! inner command runs only while the holding with that token lives, as the caller
//! would run it from a script, and replicas and the AOF see only its effects.

use std::time::Duration;

use redis_lock_testkit as common;

use common::*;
use redis::{Connection, Value};

fn guard(
    con: &mut Connection,
    key: &str,
    token: i64,
    command: &[&str],
) -> redis::RedisResult<Value> {
    redis::cmd("LOCK.GUARD")
        .arg(key)
        .arg(token)
        .arg(command)
        .query(con)
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    query(con, &["GET", key]).unwrap()
}

fn code(error: &redis::RedisError) -> String {
    error.code().unwrap_or_default().to_string()
}

#[test]
fn the_holders_guarded_write_lands_and_replies_as_the_command_does() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "a", 30_000).unwrap();
    assert_eq!(
        guard(&mut con, "job", token, &["SET", "out", "v"]).unwrap(),
        Value::Okay
    );
    assert_eq!(get(&mut con, "out").as_deref(), Some("v"));
    assert_eq!(
        guard(&mut con, "job", token, &["INCRBY", "n", "5"]).unwrap(),
        Value::Int(5)
    );
    // An error reply of the inner command is the reply, and it ran (nothing else).
    let error = guard(&mut con, "job", token, &["INCR", "out"]).unwrap_err();
    assert_eq!(code(&error), "ERR", "{error}");
    assert!(error.to_string().contains("not an integer"), "{error}");
    // The lock is untouched: same holder, same token.
    let info = lock_info(&mut con, "job").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], token));
}

#[test]
fn the_reply_is_in_the_protocol_the_connection_speaks() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "a", 30_000).unwrap();
    let _: () = query(&mut con, &["HSET", "h", "f", "1"]).unwrap();
    let resp2 = guard(&mut con, "job", token, &["HGETALL", "h"]).unwrap();
    assert!(
        matches!(resp2, Value::Array(ref items) if items.len() == 2),
        "{resp2:?}"
    );
    let mut resp3 = server.resp3_connection();
    let map = guard(&mut resp3, "job", token, &["HGETALL", "h"]).unwrap();
    assert!(
        matches!(map, Value::Map(ref pairs) if pairs.len() == 1),
        "{map:?}"
    );
}

#[test]
fn a_token_that_does_not_hold_runs_nothing_and_says_why() {
    let server = Server::start();
    let mut con = server.connection();
    let free = guard(&mut con, "job", 17, &["SET", "out", "stale"]).unwrap_err();
    assert_eq!(code(&free), "FENCED");
    assert!(
        free.to_string()
            .contains("token 17 does not hold job: the lock is free"),
        "{free}"
    );
    let token = acquire(&mut con, "job", "a", 30_000).unwrap();
    let other = guard(&mut con, "job", token - 1, &["SET", "out", "stale"]).unwrap_err();
    assert_eq!(code(&other), "FENCED");
    assert!(
        other
            .to_string()
            .contains(&format!("it is held with token {token}")),
        "{other}"
    );
    assert_eq!(get(&mut con, "out"), None, "nothing ran");

    // Released, expired, deleted: the old token no longer holds.
    assert_eq!(release(&mut con, "job", "a"), 1);
    let released = guard(&mut con, "job", token, &["SET", "out", "stale"]).unwrap_err();
    assert_eq!(code(&released), "FENCED");
    let token = acquire(&mut con, "job", "a", 30_000).unwrap();
    let _: i64 = query(&mut con, &["DEL", "job"]).unwrap();
    assert_eq!(
        code(&guard(&mut con, "job", token, &["SET", "out", "stale"]).unwrap_err()),
        "FENCED"
    );
    let token = acquire(&mut con, "job", "a", 50).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(
        code(&guard(&mut con, "job", token, &["SET", "out", "stale"]).unwrap_err()),
        "FENCED"
    );
    assert_eq!(get(&mut con, "out"), None, "nothing ran");
}

#[test]
fn a_rivals_token_fences_the_holder_that_lost_the_lock() {
    let server = Server::start();
    let mut con = server.connection();
    let old = acquire(&mut con, "job", "a", 50).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    let new = acquire(&mut con, "job", "b", 30_000).unwrap();
    assert_eq!(
        guard(&mut con, "job", new, &["SET", "out", "rival"]).unwrap(),
        Value::Okay
    );
    let stale = guard(&mut con, "job", old, &["SET", "out", "stale"]).unwrap_err();
    assert_eq!(code(&stale), "FENCED", "{stale}");
    assert_eq!(get(&mut con, "out").as_deref(), Some("rival"));
}

#[test]
fn shared_holdings_tokens_hold_while_their_holding_lives() {
    let server = Server::start();
    let mut con = server.connection();
    let long: i64 = query(&mut con, &["LOCK.ACQUIRE", "rw", "r1", "30000", "SHARED"]).unwrap();
    let short: i64 = query(&mut con, &["LOCK.ACQUIRE", "rw", "r2", "50", "SHARED"]).unwrap();
    assert_eq!(
        guard(&mut con, "rw", short, &["SET", "out", "1"]).unwrap(),
        Value::Okay
    );
    std::thread::sleep(Duration::from_millis(120));
    let lapsed = guard(&mut con, "rw", short, &["SET", "out", "2"]).unwrap_err();
    assert_eq!(code(&lapsed), "FENCED", "{lapsed}");
    assert_eq!(
        guard(&mut con, "rw", long, &["SET", "out", "3"]).unwrap(),
        Value::Okay
    );
    assert_eq!(get(&mut con, "out").as_deref(), Some("3"));
}

#[test]
fn bad_calls_are_errors_that_name_what_is_wrong_and_run_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "a", 30_000).unwrap();
    let t = token.to_string();
    let _: () = query(&mut con, &["SET", "str", "x"]).unwrap();
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["LOCK.GUARD", "job", &t],
            "ERR",
            "wrong number of arguments",
        ),
        (&["LOCK.GUARD", "job"], "ERR", "wrong number of arguments"),
        (
            &["LOCK.GUARD", "job", "0", "SET", "out", "v"],
            "ERR",
            "invalid token",
        ),
        (
            &["LOCK.GUARD", "job", "-1", "SET", "out", "v"],
            "ERR",
            "invalid token",
        ),
        (
            &["LOCK.GUARD", "job", "abc", "SET", "out", "v"],
            "ERR",
            "invalid token",
        ),
        (
            &[
                "LOCK.GUARD",
                "job",
                "9223372036854775808",
                "SET",
                "out",
                "v",
            ],
            "ERR",
            "invalid token",
        ),
        (
            &["LOCK.GUARD", "str", "5", "SET", "out", "v"],
            "WRONGTYPE",
            "",
        ),
        (
            &["LOCK.GUARD", "job", &t, "LOCK.RELEASE", "job", "a"],
            "ERR",
            "lock commands",
        ),
        (
            &["LOCK.GUARD", "job", &t, "lock.acquire", "x", "a", "10"],
            "ERR",
            "lock commands",
        ),
        (&["LOCK.GUARD", "job", &t, "DEL", "job"], "ERR", "lock key"),
        (
            &["LOCK.GUARD", "job", &t, "SET", "job", "v"],
            "ERR",
            "lock key",
        ),
        (
            &["LOCK.GUARD", "job", &t, "RENAME", "out", "job"],
            "ERR",
            "lock key",
        ),
        (&["LOCK.GUARD", "job", &t, "MULTI"], "ERR", "not allowed"),
        (
            &["LOCK.GUARD", "job", &t, "WATCH", "out"],
            "ERR",
            "not allowed",
        ),
        (
            &["LOCK.GUARD", "job", &t, "SUBSCRIBE", "c"],
            "ERR",
            "not allowed",
        ),
        (
            &[
                "LOCK.GUARD",
                "job",
                &t,
                "EVAL",
                "return redis.call('SET','out','v')",
                "0",
            ],
            "ERR",
            "not allowed",
        ),
        (
            &["LOCK.GUARD", "job", &t, "FUNCTION", "FLUSH"],
            "ERR",
            "not allowed",
        ),
        (
            &["LOCK.GUARD", "job", &t, "DEBUG", "SLEEP", "1"],
            "ERR",
            "not allowed",
        ),
        (
            &["LOCK.GUARD", "job", &t, "SHUTDOWN", "NOSAVE"],
            "ERR",
            "not allowed",
        ),
        (
            &["LOCK.GUARD", "job", &t, "NOSUCH", "out"],
            "ERR",
            "unknown command",
        ),
        (
            &["LOCK.GUARD", "job", &t, "SET", "out"],
            "ERR",
            "wrong number of arguments",
        ),
    ];
    for (args, want_code, words) in cases {
        let error = query::<Value>(&mut con, args).unwrap_err();
        assert_eq!(code(&error), *want_code, "{args:?}: {error}");
        assert!(
            error.to_string().to_lowercase().contains(words),
            "{args:?}: {error}"
        );
        assert_eq!(get(&mut con, "out"), None, "{args:?} ran");
    }
    // A blocking command answers as in a script: at once, without blocking.
    let popped = guard(&mut con, "job", token, &["BLPOP", "queue", "0"]);
    assert!(
        matches!(popped, Ok(Value::Nil) | Err(_)),
        "{popped:?}: answered at once"
    );
    let info = lock_info(&mut con, "job").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], token));
    assert!(server.log().lines().all(|l| !l.contains("panic")));
}

#[test]
fn keys_are_the_lock_key_and_the_inner_commands() {
    let server = Server::start();
    let mut con = server.connection();
    let keys: Vec<String> = query(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "LOCK.GUARD",
            "job",
            "5",
            "MSET",
            "a",
            "1",
            "b",
            "2",
        ],
    )
    .unwrap();
    assert_eq!(keys, ["job", "a", "b"]);
    let keys: Vec<String> = query(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "LOCK.GUARD",
            "job",
            "5",
            "LMOVE",
            "x",
            "y",
            "LEFT",
            "RIGHT",
        ],
    )
    .unwrap();
    assert_eq!(keys, ["job", "x", "y"]);
    let keys: Vec<String> = query(
        &mut con,
        &["COMMAND", "GETKEYS", "LOCK.GUARD", "job", "5", "PING"],
    )
    .unwrap();
    assert_eq!(keys, ["job"]);
}

#[test]
fn the_callers_acl_applies_to_the_inner_command_and_its_keys() {
    let server = Server::start();
    let mut admin = server.connection();
    let token = acquire(&mut admin, "job:1", "a", 30_000).unwrap();
    let _: () = query(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "worker",
            "on",
            ">pw",
            "~job:*",
            "%R~conf:*",
            "+lock.guard",
            "+set",
            "+get",
            "+incr",
        ],
    )
    .unwrap();
    let mut worker = server.connection();
    let _: () = query(&mut worker, &["AUTH", "worker", "pw"]).unwrap();
    assert_eq!(
        guard(&mut worker, "job:1", token, &["SET", "job:1:out", "v"]).unwrap(),
        Value::Okay
    );
    for (command, what) in [
        (&["SET", "other", "v"][..], "key"),
        (&["SET", "conf:x", "v"], "key"),
        (&["DEL", "job:1:out"], "command"),
    ] {
        let error = guard(&mut worker, "job:1", token, command).unwrap_err();
        assert_eq!(code(&error), "NOPERM", "{command:?}: {error}");
        assert!(error.to_string().contains(what), "{command:?}: {error}");
    }
    assert_eq!(get(&mut admin, "other"), None);
    assert_eq!(get(&mut admin, "conf:x"), None);
    assert_eq!(get(&mut admin, "job:1:out").as_deref(), Some("v"));
}

#[test]
fn under_oom_a_write_the_server_denies_under_oom_is_refused_and_a_delete_runs() {
    let server = Server::start();
    let mut con = server.connection();
    let token = acquire(&mut con, "job", "a", 30_000).unwrap();
    let _: () = query(&mut con, &["SET", "old", "v"]).unwrap();
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let error = guard(&mut con, "job", token, &["SET", "out", "v"]).unwrap_err();
    assert_eq!(code(&error), "OOM", "{error}");
    assert_eq!(
        guard(&mut con, "job", token, &["DEL", "old"]).unwrap(),
        Value::Int(1)
    );
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    assert_eq!(get(&mut con, "out"), None);
}

#[test]
fn a_replica_refuses_a_guarded_write_and_runs_a_guarded_read() {
    let master = Server::start();
    let replica = Server::start();
    replica.replicate_from(&master);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let token = acquire(&mut m, "job", "a", 30_000).unwrap();
    let _: () = query(&mut m, &["SET", "out", "v"]).unwrap();
    wait_until(Duration::from_secs(5), || get(&mut r, "out").is_some());
    let error = guard(&mut r, "job", token, &["SET", "out", "w"]).unwrap_err();
    assert_eq!(code(&error), "READONLY", "{error}");
    assert_eq!(
        guard(&mut r, "job", token, &["GET", "out"]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
}

#[test]
fn replicas_and_the_aof_get_the_inner_commands_effects_never_the_check() {
    let master = Server::with(Config::default().aof());
    let replica = Server::start();
    replica.replicate_from(&master);
    let (mut m, mut r) = (master.connection(), replica.connection());
    let token = acquire(&mut m, "job", "a", 30_000).unwrap();
    guard(&mut m, "job", token, &["SET", "out", "v", "EX", "100"]).unwrap();
    guard(&mut m, "job", token, &["INCR", "n"]).unwrap();
    wait_until(Duration::from_secs(5), || get(&mut r, "n").is_some());
    assert_eq!(get(&mut r, "out").as_deref(), Some("v"));
    let ttl: i64 = query(&mut r, &["TTL", "out"]).unwrap();
    assert!((90..=100).contains(&ttl), "{ttl}");
    // The AOF holds the effects (a relative expiry made absolute), not LOCK.GUARD.
    let aof = std::fs::read_dir(master.dir().join("appendonlydir"))
        .unwrap()
        .filter_map(|e| std::fs::read(e.unwrap().path()).ok())
        .map(|bytes| String::from_utf8_lossy(&bytes).to_uppercase())
        .collect::<String>();
    assert!(aof.contains("PXAT") || aof.contains("PEXPIREAT"), "{aof}");
    assert!(aof.contains("INCR"), "{aof}");
    assert!(!aof.contains("LOCK.GUARD"), "{aof}");
}

#[test]
fn guarded_writes_in_one_exec_all_run_even_if_the_lock_lapses_meanwhile() {
    let server = Server::start();
    let mut con = server.connection();
    // A lock of 200 ms, then an EXEC that sleeps 0.4 s between its two guarded writes.
    // Both run, or (on a machine so loaded that the EXEC came after the lapse) both
    // are refused: never one without the other. Tried until both ran once.
    let mut both_ran = false;
    for round in 0..5 {
        let key = format!("job{round}");
        let token = acquire(&mut con, &key, "a", 200).unwrap();
        let guarded = |out: &str| {
            let mut cmd = redis::cmd("LOCK.GUARD");
            cmd.arg(&key).arg(token).arg(&["SET", out, "1"]);
            cmd
        };
        let _: () = query(&mut con, &["MULTI"]).unwrap();
        let _: () = guarded("a").query(&mut con).unwrap();
        let _: () = query(&mut con, &["DEBUG", "SLEEP", "0.4"]).unwrap();
        let _: () = guarded("b").query(&mut con).unwrap();
        let replies: Vec<Value> = query(&mut con, &["EXEC"]).unwrap();
        let ok = |v: &Value| *v == Value::Okay;
        let fenced = |v: &Value| matches!(v, Value::ServerError(e) if e.code() == "FENCED");
        match replies.as_slice() {
            [first, Value::Okay, second] if ok(first) && ok(second) => {
                both_ran = true;
                // After the EXEC the lock has lapsed: a guarded write is refused.
                let error = guard(&mut con, &key, token, &["SET", "c", "1"]).unwrap_err();
                assert_eq!(code(&error), "FENCED", "{error}");
                break;
            }
            [first, Value::Okay, second] if fenced(first) && fenced(second) => continue,
            other => panic!("one guarded write ran without the other: {other:?}"),
        }
    }
    assert!(both_ran, "the EXEC never started while the lock was held");
}

#[test]
fn a_guarded_write_leaves_the_lock_untouched_for_watch_and_events() {
    let server = Server::start();
    let mut con = server.connection();
    let mut other = server.connection();
    let token = acquire(&mut con, "job", "a", 30_000).unwrap();
    let _: () = query(&mut con, &["WATCH", "job"]).unwrap();
    guard(&mut other, "job", token, &["SET", "out", "v"]).unwrap();
    let result: Option<Vec<Value>> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
    assert!(
        result.is_some(),
        "a guarded write does not touch the lock key"
    );
}

#[test]
fn in_a_cluster_the_guard_routes_by_its_keys() {
    let cluster = Cluster::start(3);
    let key = "{job:1}:lock";
    let node = cluster.owner_of(key);
    let mut con = cluster.nodes[node].connection();
    let token = acquire(&mut con, key, "a", 30_000).unwrap();
    assert_eq!(
        guard(&mut con, key, token, &["SET", "{job:1}:out", "v"]).unwrap(),
        Value::Okay
    );
    let cross = guard(&mut con, key, token, &["SET", "{job:2}:out", "v"]).unwrap_err();
    assert!(
        matches!(code(&cross).as_str(), "CROSSSLOT" | "MOVED"),
        "{cross}"
    );
    let elsewhere = (node + 1) % cluster.nodes.len();
    let moved = guard(
        &mut cluster.nodes[elsewhere].connection(),
        key,
        token,
        &["SET", "{job:1}:out", "w"],
    )
    .unwrap_err();
    assert_eq!(code(&moved), "MOVED", "{moved}");
    assert_eq!(get(&mut con, "{job:1}:out").as_deref(), Some("v"));
}
