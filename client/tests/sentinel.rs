//! Locks through a Sentinel-managed master, against real redis-sentinel processes:
//! the client finds the master through the sentinels, and after a failover finds the
//! new one, whose tokens are greater than the old master's.

use redis_lock_testkit as common;

#[path = "support/sentinel.rs"]
mod support;

use std::time::{Duration, Instant};

use common::Server;
use redis_lock_client::{LockClient, LockCommands, Request, Sentinel, Wait};
use support::{sentinels, MASTER};

const TTL: Duration = Duration::from_secs(30);

#[test]
fn locks_go_to_the_master_the_sentinels_name() {
    let master = Server::start();
    let replica = Server::start();
    replica.replicate_from(&master);
    let watching = sentinels(&master, 1);
    let sentinel = Sentinel::new(watching.iter().map(|s| s.url()), MASTER).unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let locks = LockClient::new(sentinel.clone());
    let done = runtime
        .block_on(
            locks.run_locked("job", TTL, Wait::No, |lock, lost| async move {
                (lock.token(), lost.is_lost())
            }),
        )
        .unwrap()
        .expect("free");
    assert!(done.held_to_end && matches!(done.released, Ok(true)));

    // The blocking API takes the current master's client.
    let mut con = sentinel.master_client().unwrap();
    let lock = con.try_acquire("job", TTL).unwrap().unwrap();
    assert!(lock.token() > done.value.0);
    let info = master.connection().lock_info("job").unwrap().unwrap();
    assert_eq!(info.token, lock.token(), "held on the master itself");
    assert!(con.release(&lock).unwrap());
}

#[test]
fn after_a_failover_locks_go_to_the_new_master() {
    let mut master = Server::start();
    let replica = Server::start();
    replica.replicate_from(&master);
    let watching = sentinels(&master, 3);
    let sentinel = Sentinel::new(watching.iter().map(|s| s.url()), MASTER).unwrap();
    let locks = LockClient::new(sentinel);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Durable, so the replica has it when the master dies.
    let request = Request::new("job", TTL).durable(1, Duration::from_secs(5));
    let before = runtime
        .block_on(locks.acquire_with(request))
        .unwrap()
        .unwrap();

    master.kill();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(30);
    while watching[0].master_port() != Some(replica.port) {
        assert!(
            Instant::now() < deadline,
            "no failover; sentinel log:\n{}",
            watching[0].log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = loop {
        match runtime.block_on(locks.acquire("next", TTL, Wait::No)) {
            Ok(lock) => break lock.expect("free on the new master"),
            Err(error) => {
                // The promotion is announced before the replica accepts writes.
                assert!(Instant::now() < deadline, "{error}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    let info = replica.connection().lock_info("next").unwrap().unwrap();
    assert_eq!(info.token, after.token(), "granted by the promoted replica");
    assert!(
        after.token() > before.token(),
        "the new master's tokens are greater: {} after {}",
        after.token(),
        before.token()
    );
    runtime.block_on(async {
        // Extends and releases follow the failover too.
        assert!(
            locks.extend(&before, TTL).await.unwrap(),
            "the promoted replica holds it"
        );
        assert!(locks.release(&before).await.unwrap());
        assert!(locks.release(&after).await.unwrap());
    });
}
