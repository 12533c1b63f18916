//! Errors that fit the call, and arguments refused before anything is sent.

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::time::Duration;

use on_backend::LockCommands;
use redis_lock_client::{Error, LockClient, Wait, MAX_MILLIS};

#[test]
fn bad_ttls_and_waits_are_refused_before_anything_is_sent() {
    // Nothing listens on port 1: any command sent would be a connection error.
    let mut nowhere = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    let cases = [
        (Duration::ZERO, Wait::No, "ttl must be positive"),
        (Duration::MAX, Wait::No, "out of range"),
        (
            Duration::from_millis(MAX_MILLIS + 1),
            Wait::No,
            "out of range",
        ),
        (Duration::from_secs(1), Wait::For(Duration::MAX), "wait of"),
    ];
    for (ttl, wait, says) in cases {
        let error = nowhere.acquire("job", ttl, wait).unwrap_err();
        assert!(
            matches!(&error, Error::InvalidArgument(m) if m.contains(says)),
            "{ttl:?} {wait:?}: {error}"
        );
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let locks = LockClient::new(nowhere.clone());
    let error = runtime
        .block_on(locks.acquire("job", Duration::ZERO, Wait::Forever))
        .unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error}");

    let server = common::lock_server();
    let mut con = server.connection();
    let lock = con
        .try_acquire("job", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    let error = con.extend(&lock, Duration::ZERO).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
    assert!(!lock.is_lost(), "a refused extend changes nothing");
}

#[test]
fn a_tiny_ttl_is_rounded_up_not_refused_and_its_lease_is_already_over() {
    let server = common::lock_server();
    let mut con = server.connection();
    let lock = con
        .try_acquire("job", Duration::from_micros(10))
        .unwrap()
        .unwrap();
    assert_eq!(lock.ttl(), Duration::from_millis(1));
    assert!(
        lock.is_lost(),
        "a lock of 1 ms has no time left after the margin"
    );
}
