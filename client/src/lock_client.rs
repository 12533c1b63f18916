//! [`LockClient`]: the async lock API on connections of its own, from a
//! [`Connector`] (a [`redis::Client`], a [`Sentinel`](crate::Sentinel)-managed
//! master, a cluster).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue};
use tokio::sync::OnceCell;

use crate::backend::{function_load, Backend};
use crate::connector::Connector;
use crate::drive::tokio::{call, drive};
use crate::error::{Error, Result};
use crate::held::guard::AsyncLockGuard;
use crate::held::path::{extend_on, release_on, FromConnector};
use crate::held::renew::AsyncRenewer;
use crate::held::run::{run_under, Locked};
use crate::info::LockInfo;
use crate::lease::LockLost;
use crate::limits::{CONNECT_LIMIT, RELEASE_LIMIT};
use crate::lock::Lock;
use crate::machine::{info, reply_as, Acquire, Detect, Guard, Release, Withdraw};
use crate::request::Request;
use crate::wait::Wait;

/// The async lock API on connections of its own: waits that hold up nothing else and
/// cancel cleanly, renewals never queued behind other traffic.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{LockClient, Wait};
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let locks = LockClient::new(redis::Client::open("redis://127.0.0.1:6390/").unwrap());
/// let done = locks
///     .run_locked("report:daily", Duration::from_secs(30), Wait::For(Duration::from_secs(60)), |lock, lost| async move {
///         tokio::select! {
///             _ = lost.lost() => Err("lost the lock"),
///             _ = async { /* build the report, fenced with lock.token() */ } => Ok(()),
///         }
///     })
///     .await?;
/// match done {
///     Some(done) if done.held_to_end => println!("built: {:?}", done.value),
///     Some(_) => println!("lost the lock mid-way: writes were fenced off"),
///     None => println!("still busy after a minute"),
/// }
/// # Ok(()) }
/// ```
///
/// The client finds out by itself which form of the lock the server offers (a
/// [`Backend`]): the module if loaded, else the `redislock` function library, else
/// the library sent as a script; [`LockClient::backend`] forces one. Every method
/// works the same on each.
#[derive(Debug, Clone)]
pub struct LockClient<K = redis::Client> {
    connector: K,
    forced: Option<Backend>,
    detected: Arc<OnceCell<Backend>>,
}

impl<K: Connector> LockClient<K> {
    /// Locks through `connector`, on the backend the server offers.
    pub fn new(connector: K) -> Self {
        LockClient {
            connector,
            forced: None,
            detected: Arc::new(OnceCell::new()),
        }
    }

    /// Uses `backend` only (`None`: the one the server offers). The first call
    /// checks that the server has it (and that a library is not older than this
    /// client) and fails otherwise, saying what to do.
    ///
    /// ```no_run
    /// use redis_lock_client::{Backend, LockClient};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/").unwrap();
    /// let locks = LockClient::new(client).backend(Some(Backend::Functions));
    /// ```
    pub fn backend(mut self, backend: Option<Backend>) -> Self {
        self.forced = backend;
        self.detected = Arc::new(OnceCell::new());
        self
    }

    /// The backend this client uses, found out on first use (one probe per client
    /// and its clones).
    pub async fn detect_backend(&self) -> Result<Backend> {
        let backend = self
            .detected
            .get_or_try_init(|| async {
                let mut con = self.connector.connect(Some(CONNECT_LIMIT)).await?;
                drive(&mut con, Detect::new(self.forced)).await
            })
            .await?;
        Ok(*backend)
    }

    /// Installs or upgrades the `redislock` library on the server (`FUNCTION LOAD
    /// REPLACE` of [`LIBRARY_SOURCE`](crate::LIBRARY_SOURCE)); the version it then
    /// answers. On a Cluster, do this on every master.
    pub async fn load_library(&self) -> Result<i64> {
        let mut con = self.connector.connect(Some(CONNECT_LIMIT)).await?;
        call(&mut con, function_load(), |_| Ok(())).await?;
        let version = Backend::Functions.call("lock_version", None, &[]);
        call(&mut con, version, |value| {
            redis::from_redis_value(value).map_err(|e| Error::UnexpectedReply(e.to_string()))
        })
        .await
    }

    /// The connector this client opens its connections with.
    pub fn connector(&self) -> &K {
        &self.connector
    }

    /// Takes the lock at `key` for `ttl`, waiting in the server's FIFO queue as `wait`
    /// says; `None` if it is still busy when the wait ends.
    pub async fn acquire(&self, key: &str, ttl: Duration, wait: Wait) -> Result<Option<Lock>> {
        self.acquire_with(Request::new(key, ttl).wait(wait)).await
    }

    /// Acquires as `request` says, on a connection of its own, closed when this
    /// returns. A wait of `Wait::For(d)` gets no answer for at most `d` plus
    /// [`WAIT_MARGIN`](crate::WAIT_MARGIN), whatever the server or the network does (then
    /// [`Error::WaitUnanswered`]); `Wait::Forever`
    /// has no response timeout. Dropping the future (a `select!`, a
    /// `tokio::time::timeout`) closes the connection, which takes the request out of
    /// the server's queue, and then releases the request's owner id in the
    /// background, in case the grant crossed the close: no lock is left to an owner
    /// that stopped waiting.
    pub async fn acquire_with(&self, request: Request) -> Result<Option<Lock>> {
        request.check()?; // refused arguments are not worth a connection
        let request = request.backend(self.detect_backend().await?);
        let mut withdraw = WithdrawOnDrop {
            connector: self.connector.clone(),
            request: (!request.owner_given).then(|| request.clone()),
        };
        let wait = request.wait;
        let acquired = async {
            let mut con = self.connector.connect(wait.response_timeout()).await?;
            drive(&mut con, Acquire::new(request)?).await
        }
        .await;
        withdraw.request = None;
        wait.unanswered(acquired)
    }

    /// Takes the lock at `key` for `ttl`, waiting in the server's FIFO queue as
    /// `wait` says, and returns a guard that releases it when dropped. `None` if it
    /// is still busy when the wait ends.
    pub async fn lock_guard(
        &self,
        key: &str,
        ttl: Duration,
        wait: Wait,
    ) -> Result<Option<AsyncLockGuard>> {
        self.lock_guard_with(Request::new(key, ttl).wait(wait))
            .await
    }

    /// [`lock_guard`](Self::lock_guard) for any [`Request`].
    pub async fn lock_guard_with(&self, request: Request) -> Result<Option<AsyncLockGuard>> {
        let lock = self.acquire_with(request).await?;
        Ok(lock.map(|lock| AsyncLockGuard::new(lock, self.path())))
    }

    /// Runs `work` only if the lock at `key` is won within `wait`, renewing it on a
    /// connection of its own (every third of `ttl`) while it runs, and releases it
    /// afterwards, also when `work` panics or this future is dropped. `None` when
    /// it was still busy.
    ///
    /// `work` gets the lock and its [`LockLost`] signal, which fires when a renewal
    /// finds the lock gone and at the latest at the lease's local deadline
    /// ([`Lock::valid_until`]), whatever the network does.
    pub async fn run_locked<T, F, Fut>(
        &self,
        key: &str,
        ttl: Duration,
        wait: Wait,
        work: F,
    ) -> Result<Option<Locked<T>>>
    where
        F: FnOnce(Lock, LockLost) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        self.run_locked_with(Request::new(key, ttl).wait(wait), work)
            .await
    }

    /// [`run_locked`](Self::run_locked) for any [`Request`].
    pub async fn run_locked_with<T, F, Fut>(
        &self,
        request: Request,
        work: F,
    ) -> Result<Option<Locked<T>>>
    where
        F: FnOnce(Lock, LockLost) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        let Some(lock) = self.acquire_with(request).await? else {
            return Ok(None);
        };
        let renewer = self.renewer(&lock);
        Ok(Some(run_under(lock, renewer, self.path(), work).await))
    }

    /// Starts renewing `lock` (from this client or any other) on a connection of its
    /// own, opened again after any failure. Must be called inside a tokio runtime.
    pub fn renewer(&self, lock: &Lock) -> AsyncRenewer {
        AsyncRenewer::spawn(self.path(), lock)
    }

    /// Releases `lock` on a fresh connection; `false` if it was no longer held.
    pub async fn release(&self, lock: &Lock) -> Result<bool> {
        release_on(&self.path(), lock).await
    }

    /// Extends `lock` to `ttl` on a fresh connection; `false` if it is no longer held.
    pub async fn extend(&self, lock: &Lock, ttl: Duration) -> Result<bool> {
        extend_on(&self.path(), lock, ttl).await
    }

    /// Runs `command` only while `lock`'s token holds the lock, checked and run by
    /// the server in one step, on a connection of its own (answered within 2 s): the
    /// command's reply as `T`, or [`Error::Fenced`] (and the lock lost at once). The
    /// keys, replies and errors of [`LockCommands::guard`](crate::LockCommands::guard).
    /// Many writes go faster through
    /// [`AsyncLockCommands::guard`](crate::AsyncLockCommands::guard) on a
    /// connection of yours.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{LockClient, Wait};
    ///
    /// # async fn demo() -> redis_lock_client::Result<()> {
    /// let locks = LockClient::new(redis::Client::open("redis://127.0.0.1:6390/").unwrap());
    /// locks
    ///     .run_locked("{report:daily}", Duration::from_secs(30), Wait::No, |lock, _lost| {
    ///         let locks = locks.clone();
    ///         async move {
    ///             let out = "{report:daily}:out";
    ///             // Err(Error::Fenced): another holder took over, nothing was written.
    ///             locks.guard::<()>(&lock, &[out], redis::cmd("SET").arg(out).arg("rows")).await
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn guard<T: FromRedisValue>(
        &self,
        lock: &Lock,
        keys: &[impl AsRef<[u8]>],
        command: &Cmd,
    ) -> Result<T> {
        let guard = Guard::new(lock, keys, command);
        let mut con = self.connector.connect(Some(CONNECT_LIMIT)).await?;
        reply_as(drive(&mut con, guard).await?)
    }

    /// [`guard`](Self::guard) for a token of a lock held elsewhere (another process:
    /// a job under `redis-lock run` has `REDIS_LOCK_KEY` and `REDIS_LOCK_TOKEN`), on
    /// this client's backend. Without a [`Lock`] there is no loss signal to fire: a
    /// refused write is [`Error::Fenced`] alone.
    ///
    /// ```no_run
    /// use redis_lock_client::LockClient;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// // In a job under `redis-lock run`.
    /// let key = std::env::var("REDIS_LOCK_KEY")?;
    /// let token: i64 = std::env::var("REDIS_LOCK_TOKEN")?.parse()?;
    /// let locks = LockClient::new(redis::Client::open(std::env::var("REDIS_LOCK_URL")?)?);
    /// let out = format!("{key}:out");
    /// let () = locks.guard_token(&key, token, &[&out], redis::cmd("SET").arg(&out).arg("done")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn guard_token<T: FromRedisValue>(
        &self,
        key: &str,
        token: i64,
        keys: &[impl AsRef<[u8]>],
        command: &Cmd,
    ) -> Result<T> {
        let backend = self.detect_backend().await?;
        let guard = Guard::token(backend, key, token, keys, command);
        let mut con = self.connector.connect(Some(CONNECT_LIMIT)).await?;
        reply_as(drive(&mut con, guard).await?)
    }

    /// Who holds the lock at `key`; `None` if it is free.
    pub async fn lock_info(&self, key: &str) -> Result<Option<LockInfo>> {
        let backend = self.detect_backend().await?;
        let mut con = self.connector.connect(Some(CONNECT_LIMIT)).await?;
        drive(&mut con, info(backend, key)).await
    }

    /// Ends `owner`'s holding of the lock at `key` (an operator's release of a
    /// holder it knows by its id); `false` if it held none.
    pub async fn release_owner(&self, key: &str, owner: &str) -> Result<bool> {
        let backend = self.detect_backend().await?;
        let mut con = self.connector.connect(Some(RELEASE_LIMIT)).await?;
        drive(&mut con, Release::owner(backend, key, owner)).await
    }

    /// Where this client's extends and releases go: connections of their own.
    fn path(&self) -> FromConnector<K> {
        FromConnector(self.connector.clone())
    }
}

/// Withdraws a fresh owner's request when the acquire's future is dropped before it
/// answered: its connection is closed by then (it drops first), and a release of the
/// owner id takes back a grant that crossed the close.
struct WithdrawOnDrop<K: Connector> {
    connector: K,
    request: Option<Request>,
}

impl<K: Connector> Drop for WithdrawOnDrop<K> {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime, no connection: the closed one was the withdrawal
        };
        let connector = self.connector.clone();
        runtime.spawn(async move {
            let withdraw = async {
                let mut con = connector.connect(Some(RELEASE_LIMIT)).await?;
                drive(&mut con, Withdraw::new(&request)).await
            };
            let _ = tokio::time::timeout(RELEASE_LIMIT, withdraw).await;
        });
    }
}
