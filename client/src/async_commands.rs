//! [`AsyncLockCommands`]: the async API (tokio) on any
//! [`redis::aio::ConnectionLike`]: a multiplexed connection, a
//! [`redis::aio::ConnectionManager`] (which reconnects), or an async cluster
//! connection.
//!
//! These connections are shared: every clone of a multiplexed connection or manager
//! sends on the same socket, which Redis answers in order. A wait in the server would
//! hold up all of them, so nothing here waits: a busy lock answers `None` at once.
//! To wait, use a [`LockClient`](crate::LockClient), which waits on a connection of
//! its own.

use std::future::Future;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue};

use crate::backend::Backend;
use crate::drive::tokio::drive;
use crate::error::{Error, Result};
use crate::held::guard::AsyncLockGuard;
use crate::held::path::OnConnection;
use crate::held::renew::AsyncRenewer;
use crate::held::run::{run_under, Locked};
use crate::info::LockInfo;
use crate::lease::LockLost;
use crate::lock::Lock;
use crate::machine::{info, reply_as, Acquire, Detect, Extend, Guard, Release};
use crate::request::Request;
use crate::wait::Wait;

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

    /// Acquires as `request` says, sending it again as the same owner after a
    /// connection error or timeout. A request that waits ([`Request::wait`]) is
    /// refused with [`Error::InvalidArgument`], before anything is sent: its wait
    /// would hold up every command on this shared connection. Wait with a
    /// [`LockClient`](crate::LockClient).
    fn acquire_with(
        &mut self,
        request: Request,
    ) -> impl Future<Output = Result<Option<Lock>>> + Send {
        async move {
            if request.wait.waits() {
                return Err(Error::InvalidArgument(
                    "a wait on a shared async connection would hold up every command sent \
                     on it until the lock frees: wait with a LockClient, on a connection of \
                     its own"
                        .into(),
                ));
            }
            drive(self, Acquire::new(request)?).await
        }
    }

    /// Sets the remaining TTL of `lock` to `ttl` and moves its lease; `false` if it is
    /// no longer held (the lock then reports itself lost).
    fn extend(&mut self, lock: &Lock, ttl: Duration) -> impl Future<Output = Result<bool>> + Send {
        let extend = Extend::new(lock, ttl);
        async move { drive(self, extend).await }
    }

    /// Releases `lock`; `false` if it was no longer held by this owner.
    fn release(&mut self, lock: &Lock) -> impl Future<Output = Result<bool>> + Send {
        let release = Release::new(lock);
        async move { drive(self, release).await }
    }

    /// Runs `command` only while `lock`'s token holds the lock, checked and run by
    /// the server in one step: the command's reply as `T`, or [`Error::Fenced`] (and
    /// the lock lost at once). The keys, replies and errors of
    /// [`LockCommands::guard`](crate::LockCommands::guard).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{AsyncLockCommands, Error};
    ///
    /// # async fn demo() -> redis_lock_client::Result<()> {
    /// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap()
    ///     .get_connection_manager().await.unwrap();
    /// if let Some(lock) = con.try_acquire("{report:daily}", Duration::from_secs(30)).await? {
    ///     let out = "{report:daily}:out";
    ///     match con.guard::<()>(&lock, &[out], redis::cmd("SET").arg(out).arg("rows 1-500")).await {
    ///         Err(Error::Fenced { .. }) => eprintln!("another holder took over: stop"),
    ///         done => done?,
    ///     }
    ///     con.release(&lock).await?;
    /// }
    /// # Ok(()) }
    /// ```
    fn guard<T>(
        &mut self,
        lock: &Lock,
        keys: &[impl AsRef<[u8]>],
        command: &Cmd,
    ) -> impl Future<Output = Result<T>> + Send
    where
        T: FromRedisValue + Send,
    {
        let guard = Guard::new(lock, keys, command);
        async move { reply_as(drive(self, guard).await?) }
    }

    /// Who holds the lock at `key`, its TTL, token and waiters; `None` if it is free.
    /// Asks the module; [`lock_info_with`](Self::lock_info_with) asks a backend.
    fn lock_info(&mut self, key: &str) -> impl Future<Output = Result<Option<LockInfo>>> + Send {
        self.lock_info_with(key, Backend::Module)
    }

    /// [`lock_info`](Self::lock_info) through `backend`.
    fn lock_info_with(
        &mut self,
        key: &str,
        backend: Backend,
    ) -> impl Future<Output = Result<Option<LockInfo>>> + Send {
        let info = info(backend, key);
        async move { drive(self, info).await }
    }

    /// Which backend the server offers (`forced`: that one, checked): the module if
    /// loaded, else the `redislock` library, else the library as a script.
    fn detect_backend(
        &mut self,
        forced: Option<Backend>,
    ) -> impl Future<Output = Result<Backend>> + Send {
        async move { drive(self, Detect::new(forced)).await }
    }

    /// Takes the lock at `key` and returns a guard that releases it when dropped (in
    /// a background task). `None` if it is busy. A shared connection cannot wait:
    /// `wait` other than [`Wait::No`] is refused (see
    /// [`acquire_with`](Self::acquire_with)); wait with a
    /// [`LockClient`](crate::LockClient).
    fn lock_guard(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send
    where
        Self: Clone + Sync + 'static,
    {
        self.lock_guard_with(Request::new(key, ttl).wait(wait))
    }

    /// [`lock_guard`](Self::lock_guard) for any [`Request`]: a backend, a mode, a
    /// given owner.
    fn lock_guard_with(
        &mut self,
        request: Request,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send
    where
        Self: Clone + Sync + 'static,
    {
        async move {
            let lock = self.acquire_with(request).await?;
            Ok(lock.map(|lock| AsyncLockGuard::new(lock, OnConnection(self.clone()))))
        }
    }

    /// Runs `work` only if the lock at `key` is free, renewing it in the background
    /// (every third of `ttl`, on a clone of this connection, each renewal bounded by
    /// the lease) while it runs, and releases it afterwards, also when `work`
    /// panics or this future is dropped. `None` when the lock was busy.
    ///
    /// `work` gets the lock and its [`LockLost`] signal, which fires when a renewal
    /// finds the lock gone and at the latest at the lease's local deadline: stop
    /// there (`tokio::select!` on [`LockLost::lost`]). Renewals go out on this
    /// connection's socket; a [`LockClient`](crate::LockClient) renews on a
    /// connection of its own instead.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{AsyncLockCommands, Wait};
    ///
    /// # async fn demo() -> redis_lock_client::Result<()> {
    /// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap()
    ///     .get_connection_manager().await.unwrap();
    /// let done = con
    ///     .run_locked("report:daily", Duration::from_secs(30), Wait::No, |lock, lost| async move {
    ///         tokio::select! {
    ///             _ = lost.lost() => None,
    ///             report = async { /* build it, fenced with lock.token() */ 42 } => Some(report),
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    fn run_locked<T, F, Fut>(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
        work: F,
    ) -> impl Future<Output = Result<Option<Locked<T>>>> + Send
    where
        Self: Clone + Sync + 'static,
        F: FnOnce(Lock, LockLost) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.run_locked_with(Request::new(key, ttl).wait(wait), work)
    }

    /// [`run_locked`](Self::run_locked) for any [`Request`]: a given owner, another
    /// retry policy, durability.
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
            let renewer = AsyncRenewer::start(self.clone(), &lock);
            Ok(Some(
                run_under(lock, renewer, OnConnection(self.clone()), work).await,
            ))
        }
    }
}

impl<C: ConnectionLike + Send + Sized> AsyncLockCommands for C {}
