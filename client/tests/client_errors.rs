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

/// Every TTL and wait the contract allows works, up to 2^62 - 1 ms: held, renewed
/// and extended without a loss or an overflow, a waiter of that long queued and
/// granted; and TTLs at or under the lease margin are granted (their lease is over
/// at once), not an internal error.
#[test]
fn the_largest_ttl_and_wait_work() {
    let server = common::lock_server();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let longest = Duration::from_millis(MAX_MILLIS);
    runtime.block_on(async {
        let locks = LockClient::new(server.client());
        let lock = locks
            .acquire("huge", longest, Wait::No)
            .await
            .unwrap()
            .expect("free");
        let renewer = locks.renewer(&lock);
        assert!(locks.extend(&lock, longest).await.unwrap());
        assert!(lock.remaining() > Duration::from_secs(86_400 * 365));
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                locks
                    .acquire("huge", Duration::from_secs(5), Wait::For(longest))
                    .await
            })
        };
        let mut con = server.connection();
        common::wait_until(Duration::from_secs(5), || {
            con.lock_info("huge")
                .unwrap()
                .is_some_and(|info| info.waiters == 1)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!lock.is_lost(), "{:?}", lock.cause());
        assert!(!renewer.stop());
        assert!(locks.release(&lock).await.unwrap());
        let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter was granted the lock at once")
            .unwrap()
            .unwrap()
            .expect("granted");
        assert!(locks.release(&granted).await.unwrap());
        for ttl in [1, 50] {
            let lock = locks
                .acquire(&format!("short{ttl}"), Duration::from_millis(ttl), Wait::No)
                .await
                .unwrap()
                .expect("granted");
            assert!(lock.is_lost(), "{ttl} ms: no lease time at all");
        }
    });
}
