//! The async API (tokio), on any [`redis::aio::ConnectionLike`]: a multiplexed
//! connection, a [`redis::aio::ConnectionManager`] (which reconnects), or an async
//! cluster connection.
//!
//! These connections are shared: every clone of a multiplexed connection or manager
//! sends on the same socket, which Redis answers in order. A wait in the server would
//! hold up all of them, so nothing here waits: a busy lock answers `None` at once.
//! To wait, use a [`LockClient`](crate::LockClient), which waits on a connection of
//! its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{Cmd, Value};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::lease::LockLost;
use crate::lock::{parse_info, Lock, LockInfo};
pub(crate) use crate::machine::RELEASE_LIMIT;
use crate::machine::{read_flag, Acquire, Call, Detect, Input, Machine, Scripted, Single, Step};
use crate::renew::AsyncRenewer;
use crate::request::{extend_command, info_command, release_command, Request, Wait};
use crate::sync::Locked;

/// Drives `machine` to its result on `con`, each reply within the bound its step
/// names.
pub(crate) async fn drive<C, M>(con: &mut C, mut machine: M) -> Result<M::Output>
where
    C: ConnectionLike + Send,
    M: Machine + Send,
{
    let mut input = Input::Start;
    loop {
        match machine.step(input) {
            Step::Send(call, bound) => {
                let reply = async {
                    match call {
                        Call::One(cmd) => cmd.query_async::<Value>(con).await,
                        Call::Pipe(pipe) => pipe.query_async::<Value>(con).await,
                    }
                };
                let reply = match bound {
                    Some(bound) => match tokio::time::timeout(bound, reply).await {
                        Ok(reply) => reply,
                        Err(elapsed) => Err(timed_out(elapsed)),
                    },
                    None => reply.await,
                };
                input = Input::Reply(reply);
            }
            Step::Sleep(pause) => {
                tokio::time::sleep(pause).await;
                input = Input::Slept;
            }
            Step::Done(result) => return result,
        }
    }
}

/// One call on `con`, its reply read by `read`.
pub(crate) async fn call<C, T>(con: &mut C, cmd: Cmd, read: fn(Value) -> Result<T>) -> Result<T>
where
    C: ConnectionLike + Send,
    T: Send,
{
    drive(con, Scripted::new(Single::new(cmd, read))).await
}

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
            acquire_on(self, &request).await
        }
    }

    /// Sets the remaining TTL of `lock` to `ttl` and moves its lease; `false` if it is
    /// no longer held (the lock then reports itself lost).
    fn extend(&mut self, lock: &Lock, ttl: Duration) -> impl Future<Output = Result<bool>> + Send {
        let command = extend_command(lock, ttl);
        let lock = lock.clone();
        async move {
            if lock.in_another_process() {
                return Ok(false);
            }
            let command = command?;
            let sent = Instant::now();
            let extended = call(self, command, read_flag).await?;
            lock.extended(extended, sent, ttl);
            Ok(extended)
        }
    }

    /// Releases `lock`; `false` if it was no longer held by this owner.
    fn release(&mut self, lock: &Lock) -> impl Future<Output = Result<bool>> + Send {
        let command = release_command(lock);
        let lock = lock.clone();
        async move {
            if lock.in_another_process() {
                return Ok(false);
            }
            let released = call(self, command?, read_flag).await?;
            lock.released(released);
            Ok(released)
        }
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
        let command = info_command(backend, key);
        async move { call(self, command, parse_info).await }
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
            let releaser: Arc<dyn Releaser> = Arc::new(OnConnection(self.clone()));
            Ok(lock.map(|lock| AsyncLockGuard::new(lock, releaser)))
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
            let releaser: Arc<dyn Releaser> = Arc::new(OnConnection(self.clone()));
            Ok(Some(run_under(lock, renewer, releaser, work).await))
        }
    }
}

impl<C: ConnectionLike + Send + Sized> AsyncLockCommands for C {}

/// The acquire on `con`, retried on lost replies and withdrawn when it cannot be
/// answered; waits if the request says so (callers wait on connections of their own).
pub(crate) async fn acquire_on<C: ConnectionLike + Send>(
    con: &mut C,
    request: &Request,
) -> Result<Option<Lock>> {
    drive(con, Acquire::new(request.clone())?).await
}

/// The work under a held lock, renewed by `renewer`, released by `releaser` when it
/// ends or when this future is dropped (cancellation, a panic in the work).
pub(crate) async fn run_under<T, F, Fut>(
    lock: Lock,
    renewer: AsyncRenewer,
    releaser: Arc<dyn Releaser>,
    work: F,
) -> Locked<T>
where
    F: FnOnce(Lock, LockLost) -> Fut + Send,
    Fut: Future<Output = T> + Send,
{
    let mut on_drop = ReleaseOnDrop {
        releaser: Arc::clone(&releaser),
        lock: Some(lock.clone()),
    };
    let value = work(lock.clone(), lock.signal()).await;
    let held = !lock.is_lost();
    renewer.stop();
    let released = match tokio::time::timeout(RELEASE_LIMIT, releaser.release(lock.clone())).await {
        Ok(released) => released,
        Err(elapsed) => Err(Error::Connection(timed_out(elapsed))),
    };
    on_drop.lock = None;
    Locked::new(value, held, released)
}

pub(crate) fn timed_out(_: tokio::time::error::Elapsed) -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time").into()
}

/// A boxed future, for the release paths kept behind [`Releaser`].
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Where a guard's release and extend go: the connection the lock was taken on, or
/// fresh connections from a [`Connector`](crate::Connector).
pub(crate) trait Releaser: Send + Sync + 'static {
    fn release(&self, lock: Lock) -> BoxFuture<Result<bool>>;
    fn extend(&self, lock: Lock, ttl: Duration) -> BoxFuture<Result<bool>>;
    /// Releases without a runtime around (a guard dropped after its runtime ended),
    /// if this path can; the lock otherwise lapses with its TTL.
    fn release_without_runtime(&self, _lock: Lock) {}
}

/// Releases and extends on (a clone of) the connection the lock was taken on.
pub(crate) struct OnConnection<C>(pub(crate) C);

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Releaser for OnConnection<C> {
    fn release(&self, lock: Lock) -> BoxFuture<Result<bool>> {
        let mut con = self.0.clone();
        Box::pin(async move { con.release(&lock).await })
    }

    fn extend(&self, lock: Lock, ttl: Duration) -> BoxFuture<Result<bool>> {
        let mut con = self.0.clone();
        Box::pin(async move { con.extend(&lock, ttl).await })
    }
}

/// Releases in the background: spawned on the current tokio runtime, or, outside
/// of any, as the releaser can.
pub(crate) fn release_in_background(releaser: Arc<dyn Releaser>, lock: Lock) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(RELEASE_LIMIT, releaser.release(lock)).await;
            });
        }
        Err(_) => releaser.release_without_runtime(lock),
    }
}

/// Releases its lock when dropped while still armed.
struct ReleaseOnDrop {
    releaser: Arc<dyn Releaser>,
    lock: Option<Lock>,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            release_in_background(Arc::clone(&self.releaser), lock);
        }
    }
}

/// A held lock, released when the guard is dropped.
///
/// Dropped inside a tokio runtime, the guard spawns the release and returns at once
/// (never blocking the runtime). A guard from a [`LockClient`](crate::LockClient)
/// dropped outside of any runtime releases on a connection and runtime of its own,
/// for at most a second. Otherwise, and when the runtime shuts down before the
/// spawned release ran (a guard dropped at the very end of `#[tokio::main]`), the
/// lock lapses with its TTL: call [`release`](AsyncLockGuard::release) and await it
/// where that matters.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{AsyncLockCommands, Wait};
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap()
///     .get_multiplexed_async_connection().await.unwrap();
/// if let Some(guard) = con.lock_guard("cleanup", Duration::from_secs(10), Wait::No).await? {
///     println!("token {}", guard.lock().token());
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct AsyncLockGuard {
    lock: Lock,
    releaser: Arc<dyn Releaser>,
    released: bool,
}

impl AsyncLockGuard {
    pub(crate) fn new(lock: Lock, releaser: Arc<dyn Releaser>) -> AsyncLockGuard {
        AsyncLockGuard {
            lock,
            releaser,
            released: false,
        }
    }

    /// The held lock.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The lock's loss signal.
    pub fn signal(&self) -> LockLost {
        self.lock.signal()
    }

    /// Extends the lock to `ttl` from now; [`Error::LockLost`] if it is no longer held.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        if !self.releaser.extend(self.lock.clone(), ttl).await? {
            return Err(Error::LockLost {
                key: self.lock.key.clone(),
            });
        }
        Ok(())
    }

    /// Releases now and waits for the answer; `false` if it was no longer held.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        self.releaser.release(self.lock.clone()).await
    }
}

impl std::fmt::Debug for AsyncLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncLockGuard")
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

impl Drop for AsyncLockGuard {
    fn drop(&mut self) {
        if !self.released {
            release_in_background(Arc::clone(&self.releaser), self.lock.clone());
        }
    }
}
