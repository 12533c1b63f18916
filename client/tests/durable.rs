//! Durable acquires: `WAIT replicas timeout` right after the grant, on the same
//! connection, whatever the connection kind; a grant the replicas did not acknowledge
//! is released, and the acquire says so (it is not "busy").

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::time::{Duration, Instant};

use common::Server;
use on_backend::{AsyncLockCommands, LockCommands};
use redis_lock_client::{Error, Lock, LockClient, Request, Result};

const TTL: Duration = Duration::from_secs(30);

/// Every connection kind, acquiring `request` on `server`.
fn on_every_kind(
    server: &Server,
    request: impl Fn(&str) -> Request,
) -> Vec<(&'static str, Result<Option<Lock>>)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = server.client();
    let mut answers = vec![
        ("connection", server.connection().acquire_with(request("a"))),
        // A connection per command: the WAIT must still follow the acquire on its
        // connection.
        ("client", client.clone().acquire_with(request("b"))),
    ];
    runtime.block_on(async {
        let mut plain = client.get_multiplexed_async_connection().await.unwrap();
        answers.push(("multiplexed", plain.acquire_with(request("c")).await));
        let mut manager = client.get_connection_manager().await.unwrap();
        answers.push(("manager", manager.acquire_with(request("d")).await));
        let locks = LockClient::new(client.clone());
        answers.push(("lock client", locks.acquire_with(request("e")).await));
    });
    answers
}

#[test]
fn a_durable_acquire_waits_for_replicas_on_every_connection_kind() {
    let master = common::lock_server();
    let replica = common::lock_server();
    replica.replicate_from(&master);
    let durable = |key: &str| Request::new(key, TTL).durable(1, Duration::from_secs(5));
    for (kind, answer) in on_every_kind(&master, durable) {
        let lock = answer.unwrap().unwrap_or_else(|| panic!("{kind}: granted"));
        let on_replica = replica.connection().lock_info(lock.key()).unwrap();
        assert_eq!(on_replica.map(|i| i.token), Some(lock.token()), "{kind}");
    }

    // A stopped replica acknowledges nothing: every kind waits, releases, and says so.
    replica.pause();
    let durable =
        |key: &str| Request::new(format!("{key}:2"), TTL).durable(1, Duration::from_millis(300));
    let started = Instant::now();
    for (kind, answer) in on_every_kind(&master, durable) {
        let error = answer.unwrap_err();
        assert!(
            matches!(
                &error,
                Error::NotReplicated {
                    wanted: 1,
                    acked: 0,
                    released: true,
                    ..
                }
            ),
            "{kind}: {error:?}"
        );
        assert!(error.to_string().contains("replicas"), "{error}");
    }
    assert!(
        started.elapsed() >= Duration::from_millis(5 * 280),
        "each kind's WAIT waited for the replica"
    );
    replica.resume();
    let mut con = master.connection();
    for key in ["a", "b", "c", "d", "e"] {
        assert!(con.lock_info(key).unwrap().is_some(), "{key} is held");
        let refused = format!("{key}:2");
        assert!(
            con.lock_info(&refused).unwrap().is_none(),
            "{refused} was released"
        );
    }
}

#[test]
fn without_replicas_a_durable_acquire_fails_and_holds_nothing() {
    let server = common::lock_server();
    let mut con = server.connection();
    let error = con
        .acquire_with(Request::new("job", TTL).durable(1, Duration::from_millis(100)))
        .unwrap_err();
    assert!(
        matches!(error, Error::NotReplicated { acked: 0, .. }),
        "{error:?}"
    );
    assert_eq!(con.lock_info("job").unwrap(), None, "released");
    // Busy stays busy (`None`), distinct from the failure.
    let held = con.try_acquire("job", TTL).unwrap().unwrap();
    let busy = server
        .connection()
        .acquire_with(Request::new("job", TTL).durable(1, Duration::from_millis(100)))
        .unwrap();
    assert_eq!(busy, None);
    con.release(&held).unwrap();
}

#[test]
fn a_refused_replica_wait_releases_the_grant() {
    let server = common::lock_server();
    let mut admin = server.connection();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "locker", "on", ">pw", "~*", "+@all", "-wait"][..])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://locker:pw@127.0.0.1:{}/", server.port);
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let error = con
        .acquire_with(Request::new("job", TTL).durable(1, Duration::from_millis(100)))
        .unwrap_err();
    assert!(
        matches!(&error, Error::Server(e) if e.code() == Some("NOPERM")),
        "{error:?}"
    );
    assert_eq!(
        admin.lock_info("job").unwrap(),
        None,
        "no lock is left to an owner nobody knows"
    );
}
