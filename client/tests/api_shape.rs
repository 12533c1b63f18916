//! The four ways to hold a lock (`LockCommands` and `BlockingLockClient` blocking,
//! `AsyncLockCommands` and `LockClient` async) take the same arguments in the same
//! order: `lock_guard(key, ttl, wait)`, `lock_guard_with(request)`,
//! `run_locked(key, ttl, wait, work)`, `run_locked_with(request, work)`, and the
//! guarded write `guard(&lock, keys, command)`. These
//! functions only need to compile: a method whose shape drifts breaks the build of
//! this test. No server is needed.

use std::time::Duration;

use redis_lock_client::{
    AsyncLockCommands, BlockingLockClient, Lock, LockClient, LockCommands, Request, Result, Wait,
};

const TTL: Duration = Duration::from_secs(30);

fn request() -> Request {
    Request::new("job", TTL)
}

fn set() -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg("{job}:out").arg("v");
    cmd
}

#[allow(dead_code)]
fn blocking_trait(con: &mut redis::Connection) -> Result<()> {
    drop(con.lock_guard("job", TTL, Wait::No)?);
    drop(con.lock_guard_with(request())?);
    con.run_locked("job", TTL, Wait::No, |lock, _con| lock.token())?;
    con.run_locked_with(request(), |lock, _con| lock.token())?;
    let lock: Lock = con.try_acquire("{job}", TTL)?.unwrap();
    con.guard::<()>(&lock, &["{job}:out"], &set())?;
    Ok(())
}

#[allow(dead_code)]
fn blocking_client(locks: &BlockingLockClient) -> Result<()> {
    drop(locks.lock_guard("job", TTL, Wait::No)?);
    drop(locks.lock_guard_with(request())?);
    locks.run_locked("job", TTL, Wait::No, |lock| lock.token())?;
    locks.run_locked_with(request(), |lock| lock.token())?;
    let lock: Lock = locks.acquire("{job}", TTL, Wait::No)?.unwrap();
    locks.guard::<()>(&lock, &["{job}:out"], &set())?;
    locks.guard_token::<()>("{job}", lock.token(), &["{job}:out"], &set())?;
    Ok(())
}

#[allow(dead_code)]
async fn async_trait(con: &mut redis::aio::ConnectionManager) -> Result<()> {
    drop(con.lock_guard("job", TTL, Wait::No).await?);
    drop(con.lock_guard_with(request()).await?);
    con.run_locked(
        "job",
        TTL,
        Wait::No,
        |lock, _lost| async move { lock.token() },
    )
    .await?;
    con.run_locked_with(request(), |lock, _lost| async move { lock.token() })
        .await?;
    let lock: Lock = con.try_acquire("{job}", TTL).await?.unwrap();
    con.guard::<()>(&lock, &["{job}:out"], &set()).await?;
    Ok(())
}

#[allow(dead_code)]
async fn async_client(locks: &LockClient) -> Result<()> {
    drop(locks.lock_guard("job", TTL, Wait::No).await?);
    drop(locks.lock_guard_with(request()).await?);
    locks
        .run_locked(
            "job",
            TTL,
            Wait::No,
            |lock, _lost| async move { lock.token() },
        )
        .await?;
    locks
        .run_locked_with(request(), |lock, _lost| async move { lock.token() })
        .await?;
    let lock: Lock = locks.acquire("{job}", TTL, Wait::No).await?.unwrap();
    locks.guard::<()>(&lock, &["{job}:out"], &set()).await?;
    locks
        .guard_token::<()>("{job}", lock.token(), &["{job}:out"], &set())
        .await?;
    Ok(())
}

fn clone_debug_send_sync<T: Clone + std::fmt::Debug + Send + Sync + 'static>() {}

/// A client is shared between tasks and threads by cloning, and shows in logs.
#[test]
fn clients_are_clone_debug_send_and_sync() {
    clone_debug_send_sync::<LockClient>();
    clone_debug_send_sync::<BlockingLockClient>();
    let locks = LockClient::new(redis::Client::open("redis://127.0.0.1:1/").unwrap());
    let shown = format!("{:?}", locks.clone());
    assert!(shown.starts_with("LockClient"), "{shown}");
}
