//! Shared and counted requests through the client: read-write locks and semaphores,
//! a lease per holding, info with every holder.

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::time::Duration;

use on_backend::LockCommands;
use redis_lock_client::{Error, LockClient, Mode, Request, Wait, MAX_PERMITS};

const TTL: Duration = Duration::from_secs(30);

#[test]
fn readers_share_and_a_writer_waits_for_them() {
    let server = common::lock_server();
    let mut con = server.connection();
    let reader = |con: &mut redis::Connection| con.acquire_with(Request::new("doc", TTL).shared());
    let r1 = reader(&mut con).unwrap().expect("a reader");
    let r2 = reader(&mut con).unwrap().expect("a second reader shares");
    assert!(r2.token() > r1.token());
    assert_eq!(
        con.try_acquire("doc", TTL).unwrap(),
        None,
        "a writer waits for the readers"
    );
    let info = con.lock_info("doc").unwrap().unwrap();
    assert_eq!(info.mode, Mode::Shared);
    assert_eq!(info.holders.len(), 2);
    assert!(
        con.extend(&r1, TTL * 2).unwrap(),
        "each reader renews its own lease"
    );
    assert!(con.release(&r1).unwrap() && con.release(&r2).unwrap());
    assert!(con.try_acquire("doc", TTL).unwrap().is_some());
}

#[test]
fn a_semaphore_gives_out_its_permits_and_no_more() {
    let server = common::lock_server();
    let mut con = server.connection();
    let permit = || Request::new("exports", TTL).limit(3);
    let held: Vec<_> = (0..3)
        .map(|_| con.acquire_with(permit()).unwrap().expect("a permit"))
        .collect();
    assert_eq!(con.acquire_with(permit()).unwrap(), None, "three are out");
    // A waiter gets the permit the first holder gives back.
    let mut waiter = server.connection();
    let queued = std::thread::spawn(move || {
        waiter.acquire_with(permit().wait(Wait::For(Duration::from_secs(10))))
    });
    common::wait_until(Duration::from_secs(10), || {
        con.lock_info("exports")
            .unwrap()
            .is_some_and(|info| info.waiters == 1)
    });
    assert!(con.release(&held[0]).unwrap());
    let fourth = queued.join().unwrap().unwrap().expect("the freed permit");
    assert!(fourth.token() > held[2].token());
}

#[test]
fn a_limit_outside_its_range_is_refused_before_anything_is_sent() {
    let server = common::lock_server();
    let mut con = server.connection();
    for permits in [0, MAX_PERMITS + 1] {
        let error = con
            .acquire_with(Request::new("k", TTL).limit(permits))
            .unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error}");
    }
    assert_eq!(common::dbsize(&mut con), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_client_waits_for_a_permit_on_its_own_connection() {
    let server = common::lock_server();
    let client = LockClient::new(server.client());
    let first = client
        .acquire_with(Request::new("jobs", TTL).limit(1))
        .await
        .unwrap()
        .unwrap();
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move {
            let request = Request::new("jobs", TTL)
                .limit(1)
                .wait(Duration::from_secs(10));
            client.acquire_with(request).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.release(&first).await.unwrap();
    let next = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("the permit, once freed");
    assert!(next.token() > first.token());
}
