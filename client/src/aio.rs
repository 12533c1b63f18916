//! The async API (tokio), on any [`redis::aio::ConnectionLike`]: a multiplexed
//! connection, a [`redis::aio::ConnectionManager`] (which reconnects), or an async
//! cluster connection.
//!
//! Waiting (`WAIT`) keeps the command open until the lock frees: use a connection whose
//! response timeout is longer than the wait (redis-rs's async default is 500 ms;
//! `AsyncConnectionConfig::set_response_timeout(None)` removes it). If that timeout
//! runs out first, the acquire fails with [`Error::ResponseTimeout`] and withdraws the
//! request, so no lock is left with an owner nobody knows.

use std::future::Future;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::AsyncConnectionConfig;

use crate::error::{Error, Result};
use crate::lock::{
    extend_command, info_command, parse_info, release_command, wait_replicas_command, Lock,
    LockInfo, Next, Request,
};
use crate::renew::{self, LockLost};
use crate::sync::Locked;

/// How long a failed acquire waits for the reply to its withdrawal.
const WITHDRAW_LIMIT: Duration = Duration::from_secs(1);

/// The lock commands, for every async connection. Import the trait and `.await`
/// them on the connection, as with [`redis::AsyncCommands`].
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::AsyncLockCommands;
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// let mut con = client.get_connection_manager().await.unwrap();
/// if let Some(lock) = con.try_acquire("report:daily", Duration::from_secs(30)).await? {
///     println!("token {}", lock.token());
///     con.release(&lock).await?;
/// }
/// # Ok(()) }
/// ```
pub trait AsyncLockCommands: ConnectionLike + Send + Sized {
    /// Takes the lock at `key` for `ttl` if it is free; `None` if someone else holds it.
    fn try_acquire(
        &mut self,
        key: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send {
        self.acquire_with(Request::new(key, ttl))
    }

    /// Takes the lock at `key`, waiting in the server (FIFO) up to `wait` for it
    /// (`Duration::ZERO`: no limit); `None` if the wait ran out.
    ///
    /// The wait holds up the connection: Redis answers nothing else sent on it (on
    /// any clone of a multiplexed connection or `ConnectionManager`, too) until the
    /// wait ends, and dropping this future does not take the request out of the
    /// server's queue while the connection lives. Wait on a connection of its own:
    /// [`AsyncClientLockExt::acquire_on_own_connection`].
    fn acquire(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send {
        self.acquire_with(Request::new(key, ttl).wait(wait))
    }

    /// Acquires as `request` says, sending it again as the same owner after a
    /// connection error or timeout.
    fn acquire_with(
        &mut self,
        request: Request,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send {
        async move {
            let command = request.command();
            let mut attempt = 0;
            loop {
                match command.query_async::<Option<i64>>(self).await {
                    Ok(token) => {
                        let granted = request.granted(token);
                        let (Some(lock), Some(durable)) = (granted.clone(), request.durable) else {
                            return Ok(granted);
                        };
                        let acked: i64 = wait_replicas_command(&durable).query_async(self).await?;
                        if acked >= i64::from(durable.replicas) {
                            return Ok(Some(lock));
                        }
                        self.release(&lock).await?;
                        return Ok(None);
                    }
                    Err(error) => match request.after_failure(error, attempt) {
                        Next::Retry(delay) => {
                            tokio::time::sleep(delay).await;
                            attempt += 1;
                        }
                        Next::Fail(error, withdraw) => {
                            if let Some(withdraw) = withdraw {
                                // Sent on the first poll; its reply may come only
                                // after the wait it follows, and is not needed.
                                let sent = withdraw.query_async::<i64>(self);
                                let _ = tokio::time::timeout(WITHDRAW_LIMIT, sent).await;
                            }
                            return Err(error);
                        }
                    },
                }
            }
        }
    }

    /// Sets the remaining TTL of `lock` to `ttl`; `false` if it is no longer held.
    fn extend(&mut self, lock: &Lock, ttl: Duration) -> impl Future<Output = Result<bool>> + Send {
        let command = extend_command(lock, ttl);
        async move { Ok(command.query_async::<i64>(self).await? == 1) }
    }

    /// Releases `lock`; `false` if it was no longer held by this owner.
    fn release(&mut self, lock: &Lock) -> impl Future<Output = Result<bool>> + Send {
        let command = release_command(lock);
        async move { Ok(command.query_async::<i64>(self).await? == 1) }
    }

    /// Who holds the lock at `key`, its TTL, token and waiters; `None` if it is free.
    fn lock_info(&mut self, key: &str) -> impl Future<Output = Result<Option<LockInfo>>> + Send {
        let command = info_command(key);
        async move { parse_info(command.query_async(self).await?) }
    }

    /// Takes the lock at `key` (waiting up to `wait` if given) and returns a guard that
    /// releases it when dropped, in the background.
    fn lock_guard(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard<Self>>>> + Send
    where
        Self: Clone + Sync + 'static,
    {
        let mut request = Request::new(key, ttl);
        if let Some(wait) = wait {
            request = request.wait(wait);
        }
        async move {
            let lock = self.acquire_with(request).await?;
            Ok(lock.map(|lock| AsyncLockGuard {
                con: self.clone(),
                lock,
                released: false,
            }))
        }
    }

    /// Runs `work` only if the lock at `key` is won, renewing the lock in the
    /// background (every third of `ttl`) while it runs, and always releases it
    /// afterwards. `work` gets the lock and a [`LockLost`] signal that fires the moment
    /// a renewal finds the lock gone, so it can stop before doing harm. `None` when
    /// the lock was busy.
    fn run_locked<T, F, Fut>(
        &mut self,
        key: &str,
        ttl: Duration,
        work: F,
    ) -> impl Future<Output = Result<Option<Locked<T>>>> + Send
    where
        Self: Clone + Sync + 'static,
        F: FnOnce(Lock, LockLost) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.run_locked_with(Request::new(key, ttl), work)
    }

    /// [`run_locked`](Self::run_locked) for any [`Request`]: with a wait in the
    /// server, a given owner, or another retry policy.
    fn run_locked_with<T, F, Fut>(
        &mut self,
        request: Request,
        work: F,
    ) -> impl Future<Output = Result<Option<Locked<T>>>> + Send
    where
        Self: Clone + Sync + 'static,
        F: FnOnce(Lock, LockLost) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        async move {
            let Some(lock) = self.acquire_with(request).await? else {
                return Ok(None);
            };
            let renewal = renew::spawn(self.clone(), lock.clone());
            let value = work(lock.clone(), renewal.signal()).await;
            let lost = renewal.stop();
            let released = self.release(&lock).await?;
            Ok(Some(Locked {
                value,
                held_to_end: released && !lost,
            }))
        }
    }
}

impl<C: ConnectionLike + Send + Sized> AsyncLockCommands for C {}

/// Waiting from a [`redis::Client`], each wait on a connection of its own: the way to
/// wait without holding up a shared connection, and to cancel a wait safely.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{AsyncClientLockExt, AsyncLockCommands, Request};
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// let request = Request::new("report:daily", Duration::from_secs(30)).wait(Duration::from_secs(60));
/// if let Some(lock) = client.acquire_on_own_connection(request).await? {
///     // … work, stamping writes with lock.token() …
///     let mut con = client.get_multiplexed_async_connection().await.unwrap();
///     con.release(&lock).await?;
/// }
/// # Ok(()) }
/// ```
pub trait AsyncClientLockExt {
    /// Acquires as `request` says (usually with [`Request::wait`]) on a new connection
    /// without a response timeout, closed when this returns. Nothing else queues
    /// behind the wait; and dropping the future (a `tokio::time::timeout`, a
    /// `select!`) closes the connection, which takes the request out of the server's
    /// queue, so no lock goes to an owner that stopped waiting.
    fn acquire_on_own_connection(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send;
}

impl AsyncClientLockExt for redis::Client {
    fn acquire_on_own_connection(
        &self,
        request: Request,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send {
        let client = self.clone();
        async move {
            let config = AsyncConnectionConfig::new().set_response_timeout(None);
            let mut con = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            con.acquire_with(request).await
        }
    }
}

/// A held lock released when the guard is dropped: in a background task, so dropping
/// never blocks the runtime. Outside a tokio runtime the lock is left to its TTL.
pub struct AsyncLockGuard<C: ConnectionLike + Clone + Send + Sync + 'static> {
    con: C,
    lock: Lock,
    released: bool,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> AsyncLockGuard<C> {
    /// The held lock.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Extends the lock to `ttl` from now; [`Error::LockLost`] if it is no longer held.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        if !self.con.extend(&self.lock, ttl).await? {
            return Err(Error::LockLost {
                key: self.lock.key.clone(),
            });
        }
        self.lock.ttl = ttl;
        Ok(())
    }

    /// Releases now and waits for the answer; `false` if it was no longer held.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        let lock = self.lock.clone();
        self.con.release(&lock).await
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Drop for AsyncLockGuard<C> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (mut con, lock) = (self.con.clone(), self.lock.clone());
            runtime.spawn(async move {
                // A failed release leaves the lock to its TTL.
                let _ = con.release(&lock).await;
            });
        }
    }
}
