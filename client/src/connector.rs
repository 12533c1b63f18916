//! Where the async clients get their connections: a [`Connector`] opens one with a
//! response timeout, for each wait, renewer and release of a
//! [`LockClient`](crate::LockClient). Implemented here for [`redis::Client`] and,
//! with the `cluster` feature, `redis::cluster::ClusterClient`; `sentinel.rs` adds a
//! Sentinel-managed master.

use std::future::Future;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, RedisResult};

use crate::limits::CONNECT_LIMIT;

/// Where a [`LockClient`](crate::LockClient) gets its connections: each wait,
/// renewer and release opens one of its own.
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
