//! Locks on connections of their own: [`LockClient`] over any [`Connector`] (a
//! [`redis::Client`], a [`Sentinel`](crate::Sentinel)-managed master, a cluster).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, RedisResult};

use redis_lock_core::protocol;
use tokio::sync::OnceCell;

use crate::aio::{
    acquire_on, call, run_under, AsyncLockCommands, AsyncLockGuard, BoxFuture, Releaser,
    RELEASE_LIMIT,
};
use crate::backend::{function_load, Backend};
use crate::error::{Error, Result};
use crate::lease::LockLost;
use crate::lock::{Lock, LockInfo};
use crate::machine::read_flag;
use crate::renew::{AsyncRenewer, Fresh};
use crate::request::{release_of, Request, Wait};
use crate::sync::Locked;

/// How long opening a connection for a lock command may take
/// ([`protocol::CONTROL_LIMIT_MS`]).
pub(crate) const CONNECT_LIMIT: Duration = Duration::from_millis(protocol::CONTROL_LIMIT_MS);

/// How long past its wait a waiting acquire may go without an answer before it is
/// given up as unanswered. The server answers a wait that runs out at its end; the
/// margin covers the round trip and a busy server, and bounds the wait when the
/// server hangs or the network drops everything. The project's one value for every
/// client ([`protocol::WAIT_MARGIN_MS`], 1 s, says why).
pub const WAIT_MARGIN: Duration = Duration::from_millis(protocol::WAIT_MARGIN_MS);

/// Where a [`LockClient`] gets its connections: each wait, renewer and release
/// opens one of its own.
///
/// Implemented for [`redis::Client`], [`Sentinel`](crate::Sentinel) and, with the
/// `cluster` feature, `redis::cluster::ClusterClient`.
pub trait Connector: Clone + Send + Sync + 'static {
    /// The connection this connector opens.
    type Connection: ConnectionLike + Clone + Send + Sync + 'static;

    /// Opens a new connection whose replies time out after `response_timeout`
    /// (`None`: never, for waits).
    fn connect(
        &self,
        response_timeout: Option<Duration>,
    ) -> impl Future<Output = RedisResult<Self::Connection>> + Send;
}

impl Connector for redis::Client {
    type Connection = MultiplexedConnection;

    fn connect(
        &self,
        response_timeout: Option<Duration>,
    ) -> impl Future<Output = RedisResult<MultiplexedConnection>> + Send {
        let connect_timeout = response_timeout.unwrap_or(CONNECT_LIMIT).min(CONNECT_LIMIT);
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(response_timeout)
            .set_connection_timeout(Some(connect_timeout));
        async move {
            self.get_multiplexed_async_connection_with_config(&config)
                .await
        }
    }
}

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
                con.detect_backend(self.forced).await
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
    /// [`WAIT_MARGIN`], whatever the server or the network does (then
    /// [`Error::WaitUnanswered`](crate::Error::WaitUnanswered)); `Wait::Forever`
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
        let response_timeout = match request.wait {
            Wait::For(wait) if request.wait.waits() => Some(wait.saturating_add(WAIT_MARGIN)),
            Wait::Forever => None,
            _ => Some(CONNECT_LIMIT),
        };
        let acquired = async {
            let mut con = self.connector.connect(response_timeout).await?;
            acquire_on(&mut con, &request).await
        }
        .await;
        withdraw.request = None;
        match (acquired, request.wait) {
            (Err(Error::ResponseTimeout(_)), Wait::For(wait)) => Err(Error::WaitUnanswered {
                wait,
                margin: WAIT_MARGIN,
            }),
            (acquired, _) => acquired,
        }
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
        Ok(lock.map(|lock| AsyncLockGuard::new(lock, self.releaser())))
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
        Ok(Some(run_under(lock, renewer, self.releaser(), work).await))
    }

    /// Starts renewing `lock` (from this client or any other) on a connection of its
    /// own, opened again after any failure. Must be called inside a tokio runtime.
    pub fn renewer(&self, lock: &Lock) -> AsyncRenewer {
        let path = Fresh {
            connector: self.connector.clone(),
            con: None,
        };
        AsyncRenewer::spawn(path, lock)
    }

    /// Releases `lock` on a fresh connection; `false` if it was no longer held.
    pub async fn release(&self, lock: &Lock) -> Result<bool> {
        self.releaser().release(lock.clone()).await
    }

    /// Extends `lock` to `ttl` on a fresh connection; `false` if it is no longer held.
    pub async fn extend(&self, lock: &Lock, ttl: Duration) -> Result<bool> {
        self.releaser().extend(lock.clone(), ttl).await
    }

    /// Who holds the lock at `key`; `None` if it is free.
    pub async fn lock_info(&self, key: &str) -> Result<Option<LockInfo>> {
        let backend = self.detect_backend().await?;
        let mut con = self.connector.connect(Some(CONNECT_LIMIT)).await?;
        con.lock_info_with(key, backend).await
    }

    /// Ends `owner`'s holding of the lock at `key` (an operator's release of a
    /// holder it knows by its id); `false` if it held none.
    pub async fn release_owner(&self, key: &str, owner: &str) -> Result<bool> {
        let backend = self.detect_backend().await?;
        let command = release_of(backend, key, owner)?;
        let mut con = self.connector.connect(Some(RELEASE_LIMIT)).await?;
        call(&mut con, command, read_flag).await
    }

    fn releaser(&self) -> Arc<dyn Releaser> {
        Arc::new(FromConnector(self.connector.clone()))
    }
}

/// Releases and extends on fresh connections from a connector.
struct FromConnector<K>(K);

impl<K: Connector> Releaser for FromConnector<K> {
    fn release(&self, lock: Lock) -> BoxFuture<Result<bool>> {
        let connector = self.0.clone();
        Box::pin(async move {
            let mut con = connector.connect(Some(RELEASE_LIMIT)).await?;
            con.release(&lock).await
        })
    }

    fn extend(&self, lock: Lock, ttl: Duration) -> BoxFuture<Result<bool>> {
        let connector = self.0.clone();
        Box::pin(async move {
            let mut con = connector.connect(Some(RELEASE_LIMIT)).await?;
            con.extend(&lock, ttl).await
        })
    }

    /// On a runtime of its own, for at most [`RELEASE_LIMIT`] (plus the connect).
    fn release_without_runtime(&self, lock: Lock) {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let release = self.release(lock);
        let _ = runtime.block_on(async { tokio::time::timeout(RELEASE_LIMIT * 2, release).await });
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
            let release = async {
                let mut con = connector.connect(Some(RELEASE_LIMIT)).await?;
                if request.backend.is_library() {
                    // The place in the queue, and a grant not collected.
                    let owner = [request.owner.as_bytes().to_vec()];
                    let cancel = request
                        .backend
                        .call("lock_cancel", Some(&request.key), &owner);
                    call(&mut con, cancel, read_flag).await?;
                }
                let release = release_of(request.backend, &request.key, &request.owner)?;
                call(&mut con, release, read_flag).await
            };
            let _ = tokio::time::timeout(RELEASE_LIMIT, release).await;
        });
    }
}

#[cfg(feature = "cluster")]
impl Connector for redis::cluster::ClusterClient {
    type Connection = redis::cluster_async::ClusterConnection;

    fn connect(
        &self,
        response_timeout: Option<Duration>,
    ) -> impl Future<Output = RedisResult<Self::Connection>> + Send {
        // A cluster connection always has a response timeout: a year stands for none.
        let timeout = response_timeout.unwrap_or(Duration::from_secs(365 * 86_400));
        let config = redis::cluster::ClusterConfig::new()
            .set_connection_timeout(timeout.min(CONNECT_LIMIT))
            .set_response_timeout(timeout);
        self.get_async_connection_with_config(config)
    }
}
