//! The commands inside MULTI/EXEC and Lua scripts, under ACL key patterns, and under
//! maxmemory.

use redis_lock_testkit as common;

use common::*;
use redis::Value;

#[test]
fn commands_run_inside_multi_exec() {
    let server = Server::start();
    let mut con = server.connection();
    let (token, busy, info, released): (i64, Option<i64>, Value, i64) = redis::pipe()
        .atomic()
        .cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg("a")
        .arg(10_000)
        .cmd("LOCK.ACQUIRE")
        .arg("job")
        .arg("b")
        .arg(10_000)
        .cmd("LOCK.INFO")
        .arg("job")
        .cmd("LOCK.RELEASE")
        .arg("job")
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert!(token > 0);
    assert_eq!(busy, None);
    let info = LockInfo::from_value(info).unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], token));
    assert_eq!(released, 1);
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn watch_sees_a_lock_change() {
    let server = Server::start();
    let mut con = server.connection();
    let mut other = server.connection();
    acquire(&mut con, "job", "a", 10_000).unwrap();
    let _: () = query(&mut con, &["WATCH", "job"]).unwrap();
    assert_eq!(release(&mut other, "job", "a"), 1);
    let result: Option<Vec<Value>> = redis::pipe().atomic().cmd("PING").query(&mut con).unwrap();
    assert_eq!(
        result, None,
        "EXEC must abort after the watched lock changed"
    );
}

#[test]
fn commands_run_inside_lua_scripts() {
    let server = Server::start();
    let mut con = server.connection();
    let script = r#"
        local token = redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 10000)
        local busy = redis.call('LOCK.ACQUIRE', KEYS[1], 'other', 10000)
        local extended = redis.call('LOCK.EXTEND', KEYS[1], ARGV[1], 20000)
        local released = redis.call('LOCK.RELEASE', KEYS[1], ARGV[1])
        return {token, busy == false and 'busy' or 'granted', extended, released}
    "#;
    let (token, busy, extended, released): (i64, String, i64, i64) = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("job")
        .arg("me")
        .query(&mut con)
        .unwrap();
    assert!(token > 0);
    assert_eq!((busy.as_str(), extended, released), ("busy", 1, 1));

    // An error inside a script is a script error, not a crash.
    let error = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 'me', 0)")
        .arg(1)
        .arg("job")
        .query::<Value>(&mut con)
        .unwrap_err();
    assert!(format!("{error}").contains("ttl"), "{error}");
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn scripts_replicate_the_effect_of_lock_commands() {
    let master = Server::start();
    let replica = Server::start();
    replica.replicate_from(&master);
    let mut m = master.connection();
    let token: i64 = redis::cmd("EVAL")
        .arg("return redis.call('LOCK.ACQUIRE', KEYS[1], 'me', 60000)")
        .arg(1)
        .arg("job")
        .query(&mut m)
        .unwrap();
    let _: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut m).unwrap();
    let mut r = replica.connection();
    assert_eq!(lock_info(&mut r, "job").unwrap().token, token);
}

#[test]
fn acl_key_patterns_apply_to_lock_commands() {
    let server = Server::start();
    let mut admin = server.connection();
    let _: () = query(
        &mut admin,
        &[
            "ACL", "SETUSER", "worker", "on", ">secret", "~jobs:*", "+@all",
        ],
    )
    .unwrap();
    let mut con = redis::Client::open(format!("redis://worker:secret@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(acquire(&mut con, "jobs:report", "w", 10_000).is_some());
    for args in [
        &["LOCK.ACQUIRE", "other:report", "w", "100"][..],
        &["LOCK.RELEASE", "other:report", "w"],
        &["LOCK.EXTEND", "other:report", "w", "100"],
        &["LOCK.INFO", "other:report"],
    ] {
        let error = query::<Value>(&mut con, args).unwrap_err();
        assert_eq!(error.code(), Some("NOPERM"), "{args:?}: {error}");
    }
    assert_eq!(dbsize(&mut admin), 1);
}

#[test]
fn lock_lapse_is_refused_from_every_client_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    let token: Option<i64> = query(
        &mut con,
        &["LOCK.ACQUIRE", "doc", "reader", "60000", "SHARED"],
    )
    .unwrap();
    let token = token.unwrap().to_string();
    let digest: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    let forged = ["LOCK.LAPSE", "doc", "reader", token.as_str()];
    let error = query::<Value>(&mut con, &forged).unwrap_err();
    assert!(error.to_string().contains("internal"), "{error}");
    let script = "return redis.call('LOCK.LAPSE', KEYS[1], ARGV[1], ARGV[2])";
    let error =
        query::<Value>(&mut con, &["EVAL", script, "1", "doc", "reader", &token]).unwrap_err();
    assert!(error.to_string().contains("internal"), "{error}");
    let after: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    assert_eq!(after, digest);
}

#[test]
fn lock_apply_is_refused_from_every_client_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.connection();
    let info: Value = query(&mut con, &["COMMAND", "INFO", "LOCK.APPLY"]).unwrap();
    assert!(format!("{info:?}").contains("admin"), "{info:?}");
    acquire(&mut con, "job", "app", 60_000).unwrap();
    let digest: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    let mark = lock_stat(&mut con, "last_token");
    let forged = ["LOCK.APPLY", "job", "forged", "9223372036854775806"];
    // The default user may run every command: the module itself refuses, directly,
    // inside MULTI and from a script.
    let error = query::<Value>(&mut con, &forged).unwrap_err();
    assert!(error.to_string().contains("internal"), "{error}");
    let error = redis::pipe()
        .atomic()
        .cmd(forged[0])
        .arg(&forged[1..])
        .query::<Value>(&mut con)
        .unwrap_err();
    assert!(error.to_string().contains("internal"), "{error}");
    let error = query::<Value>(
        &mut con,
        &[
            "EVAL",
            "return redis.call('LOCK.APPLY', KEYS[1], 'forged', '9223372036854775806')",
            "1",
            "job",
        ],
    )
    .unwrap_err();
    assert!(error.to_string().contains("internal"), "{error}");
    let after: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    assert_eq!(after, digest);
    assert_eq!(lock_stat(&mut con, "last_token"), mark);
    assert_eq!(lock_info(&mut con, "job").unwrap().owner, b"app");
    assert!(acquire(&mut con, "other", "app", 10_000).is_some());
}
