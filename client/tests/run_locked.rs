//! `run_locked` and guards: the work's result survives a failed release, and the lock
//! is released when the work panics, when the future is cancelled, and when a guard
//! outlives its runtime.

use redis_lock_testkit as common;

#[path = "support/backend.rs"]
mod on_backend;

use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::Server;
use on_backend::{AsyncLockCommands, LockCommands};
use redis_lock_client::{LockClient, Wait};

const TTL: Duration = Duration::from_secs(30);

fn released_soon(server: &Server, key: &str) {
    common::wait_until(Duration::from_secs(3), || {
        server.connection().lock_info(key).unwrap().is_none()
    });
}

#[test]
fn a_failed_release_keeps_the_works_result_blocking() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let mut con = proxy.client().get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let done = con
        .run_locked("job", TTL, Wait::No, |_lock, _con| {
            proxy.black_hole(); // the release will get no answer
            42
        })
        .unwrap()
        .expect("free");
    assert_eq!(done.value, 42, "the job ran: a retry must not run it again");
    assert!(done.released.is_err(), "{:?}", done.released);
    assert!(done.held_to_end, "the lease still held when the work ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_keeps_the_works_result_async() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let mut con = proxy
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let locks = LockClient::new(proxy.client());
    let started = Instant::now();
    let done = con
        .run_locked("job", TTL, Wait::No, |_lock, _lost| async {
            proxy.black_hole();
            42
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!((done.value, done.held_to_end), (42, true));
    assert!(done.released.is_err());
    proxy.heal();
    let done = locks
        .run_locked("other", TTL, Wait::No, |_lock, _lost| async {
            proxy.black_hole();
            "ran"
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.value, "ran");
    assert!(done.released.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "releases are bounded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_releases_when_the_work_panics() {
    let server = common::lock_server();
    let con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut on_task = con.clone();
    let task = tokio::spawn(async move {
        on_task
            .run_locked("job", TTL, Wait::No, |_lock, _lost| async {
                panic!("the job failed")
            })
            .await
    });
    assert!(task.await.unwrap_err().is_panic());
    released_soon(&server, "job");

    let locks = LockClient::new(server.client());
    let task = tokio::spawn(async move {
        locks
            .run_locked("job", TTL, Wait::No, |_lock, _lost| async {
                panic!("again")
            })
            .await
    });
    assert!(task.await.unwrap_err().is_panic());
    released_soon(&server, "job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_locked_releases_when_cancelled() {
    let server = common::lock_server();
    let mut con = server.client().get_connection_manager().await.unwrap();
    let work = |_lock, _lost| async { tokio::time::sleep(Duration::from_secs(60)).await };
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        con.run_locked("job", TTL, Wait::No, work),
    )
    .await;
    assert!(cancelled.is_err(), "the work outlived the timeout");
    released_soon(&server, "job");

    let locks = LockClient::new(server.client());
    let run = locks.run_locked("job", TTL, Wait::No, work);
    assert!(tokio::time::timeout(Duration::from_millis(200), run)
        .await
        .is_err());
    released_soon(&server, "job");
}

#[test]
fn a_guard_that_outlives_its_runtime_still_releases() {
    let server = common::lock_server();
    let locks = LockClient::new(server.client());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let guard = runtime
        .block_on(locks.lock_guard("job", TTL, Wait::No))
        .unwrap()
        .unwrap();
    drop(runtime);
    assert!(server.connection().lock_info("job").unwrap().is_some());
    drop(guard); // no runtime left: released on one of its own
    assert_eq!(server.connection().lock_info("job").unwrap(), None);
}
