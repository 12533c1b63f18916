//! `lock_guard` of the function library (contract.md, "Fenced writes"), through
//! FCALL and through EVALSHA (on Redis 6.2 too where a build is there): a holder's
//! guarded write lands, any other token runs nothing, every key the command touches
//! is declared, and the server's own rules (OOM, a replica, ACL, Cluster) apply.
//! tests/functions_diff.rs checks it against the module's LOCK.GUARD.

mod library;

use std::time::Duration;

use redis::{Connection, Value};
use redis_lock_testkit::*;

use library::{library_server, Backend};

fn code(error: &redis::RedisError) -> String {
    error.code().unwrap_or_default().to_string()
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    query(con, &["GET", key]).unwrap()
}

/// The contract of lock_guard on one backend of the library.
fn guards(backend: &Backend, con: &mut Connection) {
    let token = backend
        .acquire(con, "job", "a", 30_000, &[])
        .unwrap()
        .unwrap();
    let t = token.to_string();
    assert_eq!(
        backend
            .guard(con, "job", &["out"], &t, &["SET", "out", "v"])
            .unwrap(),
        Value::Okay
    );
    assert_eq!(get(con, "out").as_deref(), Some("v"));
    // Several keys, found by COMMAND GETKEYS.
    assert_eq!(
        backend
            .guard(con, "job", &["a", "b"], &t, &["MSET", "a", "1", "b", "2"])
            .unwrap(),
        Value::Okay
    );
    // Not held with this token: nothing runs.
    let stale = backend
        .guard(
            con,
            "job",
            &["out"],
            &(token - 1).to_string(),
            &["SET", "out", "stale"],
        )
        .unwrap_err();
    assert_eq!(code(&stale), "FENCED", "{stale}");
    assert!(
        stale
            .to_string()
            .contains(&format!("it is held with token {token}")),
        "{stale}"
    );
    let free = backend
        .guard(con, "free", &["out"], "5", &["SET", "out", "stale"])
        .unwrap_err();
    assert!(
        free.to_string()
            .contains("token 5 does not hold free: the lock is free"),
        "{free}"
    );
    // A key the command touches that is not declared, the lock key, a lock command,
    // a bad token: errors, nothing runs.
    for (data, token, command, words) in [
        (
            &[][..],
            t.as_str(),
            &["SET", "out", "x"][..],
            "not declared",
        ),
        (
            &["a"],
            t.as_str(),
            &["MSET", "a", "1", "b", "2"],
            "not declared",
        ),
        (&["job"], t.as_str(), &["SET", "job", "x"], "lock key"),
        (
            &["out"],
            t.as_str(),
            &["LOCK.RELEASE", "job", "a"],
            "lock commands",
        ),
        (&["out"], "0", &["SET", "out", "x"], "invalid token"),
        (&["out"], "x1", &["SET", "out", "x"], "invalid token"),
    ] {
        let error = backend.guard(con, "job", data, token, command).unwrap_err();
        assert_eq!(code(&error), "ERR", "{command:?}: {error}");
        assert!(error.to_string().contains(words), "{command:?}: {error}");
    }
    assert_eq!(get(con, "out").as_deref(), Some("v"));
    // A command a script may not run, and the command's own error.
    let multi = backend.guard(con, "job", &[], &t, &["MULTI"]).unwrap_err();
    assert_eq!(code(&multi), "ERR", "{multi}");
    let not_int = backend
        .guard(con, "job", &["out"], &t, &["INCR", "out"])
        .unwrap_err();
    assert!(not_int.to_string().contains("not an integer"), "{not_int}");
    // A shared holding's token holds while it lives.
    let shared: i64 = match backend
        .call(con, "lock_acquire", "rw", &["r1", "30000", "SHARED"])
        .unwrap()
    {
        Value::Int(token) => token,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        backend
            .guard(
                con,
                "rw",
                &["out2"],
                &shared.to_string(),
                &["SET", "out2", "s"]
            )
            .unwrap(),
        Value::Okay
    );
    // The lock is as it was.
    let info = backend.info(con, "job").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], token));
    assert_eq!(backend.release(con, "job", "a"), 1);
    let released = backend
        .guard(con, "job", &["out"], &t, &["SET", "out", "late"])
        .unwrap_err();
    assert_eq!(code(&released), "FENCED", "{released}");
}

#[test]
fn lock_guard_keeps_the_contract_through_fcall_and_evalsha() {
    let (_server, mut con) = library_server(Config::default());
    guards(&Backend::Functions, &mut con);
    let _: () = query(&mut con, &["FLUSHALL"]).unwrap();
    let scripts = Backend::scripts(&mut con);
    guards(&scripts, &mut con);
}

#[test]
fn lock_guard_keeps_the_contract_on_redis_62() {
    let Some(binary) = redis62_server() else {
        return;
    };
    let server = Server::with(Config::default().without_module().binary(binary));
    let mut con = server.connection();
    let scripts = Backend::scripts(&mut con);
    guards(&scripts, &mut con);
}

#[test]
fn replies_are_the_commands_read_as_resp2_nulls_in_place() {
    let (server, mut con) = library_server(Config::default());
    let token = Backend::Functions
        .acquire(&mut con, "job", "a", 30_000, &[])
        .unwrap()
        .unwrap()
        .to_string();
    let _: () = query(&mut con, &["HSET", "h", "f", "1"]).unwrap();
    let _: () = query(&mut con, &["SET", "b", "2"]).unwrap();
    let mut resp3 = server.resp3_connection();
    let scripts = Backend::scripts(&mut con);
    for backend in [&Backend::Functions, &scripts] {
        for con in [&mut con, &mut resp3] {
            // A map is a flat array, in either protocol (PROTOCOL.md "lock_guard").
            let flat = backend
                .guard(con, "job", &["h"], &token, &["HGETALL", "h"])
                .unwrap();
            assert!(
                matches!(flat, Value::Array(ref a) if a.len() == 2),
                "{flat:?}"
            );
            // A null inside an array stays in place.
            let got = backend
                .guard(
                    con,
                    "job",
                    &["a", "b", "c"],
                    &token,
                    &["MGET", "a", "b", "c"],
                )
                .unwrap();
            assert_eq!(
                got,
                Value::Array(vec![
                    Value::Nil,
                    Value::BulkString(b"2".to_vec()),
                    Value::Nil
                ]),
                "{backend:?}"
            );
            let missing = backend
                .guard(con, "job", &["none"], &token, &["GET", "none"])
                .unwrap();
            assert_eq!(missing, Value::Nil);
        }
    }
}

#[test]
fn under_oom_evalsha_refuses_what_the_server_denies_and_fcall_refuses_the_call() {
    let (_server, mut con) = library_server(Config::default());
    let token = Backend::Functions
        .acquire(&mut con, "job", "a", 30_000, &[])
        .unwrap()
        .unwrap()
        .to_string();
    let scripts = Backend::scripts(&mut con);
    let _: () = query(&mut con, &["SET", "old", "v"]).unwrap();
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "1"]).unwrap();
    let refused = scripts
        .guard(&mut con, "job", &["out"], &token, &["SET", "out", "v"])
        .unwrap_err();
    assert_eq!(code(&refused), "OOM", "{refused}");
    assert_eq!(
        scripts
            .guard(&mut con, "job", &["old"], &token, &["DEL", "old"])
            .unwrap(),
        Value::Int(1)
    );
    let whole = Backend::Functions
        .guard(&mut con, "job", &["old"], &token, &["DEL", "old"])
        .unwrap_err();
    assert_eq!(code(&whole), "OOM", "{whole}");
    let _: () = query(&mut con, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    assert_eq!(get(&mut con, "out"), None);
}

#[test]
fn a_replica_refuses_a_guarded_write() {
    let (master, mut m) = library_server(Config::default());
    let replica = Server::with(Config::default().without_module());
    replica.replicate_from(&master);
    let mut r = replica.connection();
    let token = Backend::Functions
        .acquire(&mut m, "job", "a", 30_000, &[])
        .unwrap()
        .unwrap()
        .to_string();
    Backend::Functions
        .guard(&mut m, "job", &["out"], &token, &["SET", "out", "v"])
        .unwrap();
    wait_until(Duration::from_secs(5), || get(&mut r, "out").is_some());
    let scripts = Backend::scripts(&mut r);
    for backend in [&Backend::Functions, &scripts] {
        let error = backend
            .guard(&mut r, "job", &["out"], &token, &["SET", "out", "w"])
            .unwrap_err();
        assert_eq!(code(&error), "READONLY", "{error}");
    }
    assert_eq!(get(&mut r, "out").as_deref(), Some("v"));
}

#[test]
fn the_callers_acl_applies_to_the_command_and_its_keys() {
    let (server, mut admin) = library_server(Config::default());
    let token = Backend::Functions
        .acquire(&mut admin, "job:1", "a", 30_000, &[])
        .unwrap()
        .unwrap()
        .to_string();
    let _: () = query(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "worker",
            "on",
            ">pw",
            "~job:*",
            "+fcall",
            "+evalsha",
            "+hget",
            "+exists",
            "+command|getkeys",
            "+set",
            "+get",
            "+time",
        ],
    )
    .unwrap();
    let mut worker = server.connection();
    let _: () = query(&mut worker, &["AUTH", "worker", "pw"]).unwrap();
    assert_eq!(
        Backend::Functions
            .guard(
                &mut worker,
                "job:1",
                &["job:1:out"],
                &token,
                &["SET", "job:1:out", "v"]
            )
            .unwrap(),
        Value::Okay
    );
    // A key outside the user's patterns: refused before the function runs.
    let key = Backend::Functions
        .guard(
            &mut worker,
            "job:1",
            &["other"],
            &token,
            &["SET", "other", "v"],
        )
        .unwrap_err();
    assert_eq!(code(&key), "NOPERM", "{key}");
    // A command the user may not run: refused by the call inside the function.
    let command = Backend::Functions
        .guard(
            &mut worker,
            "job:1",
            &["job:1:out"],
            &token,
            &["DEL", "job:1:out"],
        )
        .unwrap_err();
    assert!(
        matches!(code(&command).as_str(), "NOPERM" | "ERR"),
        "{command}"
    );
    assert_eq!(get(&mut admin, "job:1:out").as_deref(), Some("v"));
    assert_eq!(get(&mut admin, "other"), None);
}

#[test]
fn in_a_cluster_the_declared_keys_share_the_lock_keys_slot() {
    let cluster = Cluster::start_with(3, Config::default().without_module());
    for node in &cluster.nodes {
        load_library(&mut node.connection());
    }
    let key = "{job:1}:lock";
    let mut con = cluster.nodes[cluster.owner_of(key)].connection();
    let token = Backend::Functions
        .acquire(&mut con, key, "a", 30_000, &[])
        .unwrap()
        .unwrap()
        .to_string();
    assert_eq!(
        Backend::Functions
            .guard(
                &mut con,
                key,
                &["{job:1}:out"],
                &token,
                &["SET", "{job:1}:out", "v"]
            )
            .unwrap(),
        Value::Okay
    );
    let cross = Backend::Functions
        .guard(
            &mut con,
            key,
            &["{job:2}:out"],
            &token,
            &["SET", "{job:2}:out", "v"],
        )
        .unwrap_err();
    assert_eq!(code(&cross), "CROSSSLOT", "{cross}");
}
