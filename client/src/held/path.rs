//! Where the extends and releases of a held lock go on tokio: clones of the
//! connection it was taken on ([`OnConnection`], the async commands), or connections
//! opened from a [`Connector`] ([`FromConnector`], a `LockClient`). The renewer, the
//! guard and `run_locked` each take a [`LockPath`], so each is written once.

use std::future::Future;
use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::connector::Connector;
use crate::drive::tokio::drive;
use crate::error::Result;
use crate::limits::RELEASE_LIMIT;
use crate::lock::Lock;
use crate::machine::{Extend, Release};

/// Where the extends and releases of a held lock go.
pub(crate) trait LockPath: Clone + Send + Sync + 'static {
    /// The connection an extend or a release is sent on.
    type Connection: ConnectionLike + Send + 'static;

    /// A connection for extends and releases whose replies may take `limit`: a
    /// connector's is opened with it as its response timeout; a clone of the
    /// caller's keeps the bounds the caller gave it.
    fn open(&self, limit: Duration) -> impl Future<Output = Result<Self::Connection>> + Send;

    /// Releases `lock` where no tokio runtime is around (a guard dropped after its
    /// runtime ended), if this path can; the lock otherwise lapses with its TTL.
    fn release_without_runtime(&self, _lock: Lock) {}
}

/// Extends `lock` to `ttl` on a connection of `path`.
pub(crate) async fn extend_on<P: LockPath>(path: &P, lock: &Lock, ttl: Duration) -> Result<bool> {
    let mut con = path.open(RELEASE_LIMIT).await?;
    drive(&mut con, Extend::new(lock, ttl)).await
}

/// Releases `lock` on a connection of `path`.
pub(crate) async fn release_on<P: LockPath>(path: &P, lock: &Lock) -> Result<bool> {
    let mut con = path.open(RELEASE_LIMIT).await?;
    drive(&mut con, Release::new(lock)).await
}

/// Releases `lock` in the background, for at most [`RELEASE_LIMIT`]: spawned on the
/// current tokio runtime or, outside of any, as the path can.
pub(crate) fn release_in_background<P: LockPath>(path: P, lock: Lock) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                let _ = tokio::time::timeout(RELEASE_LIMIT, release_on(&path, &lock)).await;
            });
        }
        Err(_) => path.release_without_runtime(lock),
    }
}

/// Clones of the connection the lock was taken on (a manager reconnects itself).
#[derive(Clone)]
pub(crate) struct OnConnection<C>(pub(crate) C);

impl<C: ConnectionLike + Clone + Send + Sync + 'static> LockPath for OnConnection<C> {
    type Connection = C;

    async fn open(&self, _limit: Duration) -> Result<C> {
        Ok(self.0.clone())
    }
}

/// Connections of their own from a connector, opened for each release or extend,
/// and by a renewer again after any failure (a connection that timed out may be
/// black-holed for good).
#[derive(Clone)]
pub(crate) struct FromConnector<K>(pub(crate) K);

impl<K: Connector> LockPath for FromConnector<K> {
    type Connection = K::Connection;

    async fn open(&self, limit: Duration) -> Result<K::Connection> {
        Ok(self.0.connect(Some(limit)).await?)
    }

    /// On a runtime of its own, for at most twice [`RELEASE_LIMIT`] (the connect
    /// and the release).
    fn release_without_runtime(&self, lock: Lock) {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let release = release_on(self, &lock);
        let _ = runtime.block_on(async { tokio::time::timeout(RELEASE_LIMIT * 2, release).await });
    }
}
