//! A Sentinel-managed master as a [`Connector`]: every connection asks the sentinels
//! where the master is now, so waits, renewals and releases follow a failover.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};

use crate::connector::Connector;
use crate::drive::tokio::timed_out;
use crate::error::Result;
use crate::limits::CONNECT_LIMIT;

/// The master that Redis Sentinel names `master`, found through `sentinels`.
///
/// Use it with a [`LockClient`](crate::LockClient) for the async API, or take the
/// current master's [`redis::Client`] for the blocking one. After a failover the next
/// connection goes to the new master; a lock granted by the old master may have been
/// lost with it (replication is asynchronous), which the new master's greater fencing
/// tokens make harmless; [`Request::durable`](crate::Request::durable) narrows
/// the window.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{LockClient, Sentinel, Wait};
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let sentinel = Sentinel::new(
///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
///     "mymaster",
/// )?;
/// let locks = LockClient::new(sentinel);
/// if let Some(lock) = locks.acquire("report:daily", Duration::from_secs(30), Wait::No).await? {
///     println!("token {} from the current master", lock.token());
///     locks.release(&lock).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Sentinel {
    sentinels: Vec<ConnectionInfo>,
    master: String,
    node: SentinelNodeConnectionInfo,
}

impl Sentinel {
    /// The master named `master`, as the sentinels at `sentinels` know it.
    pub fn new<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        master: impl Into<String>,
    ) -> Result<Sentinel> {
        let sentinels = sentinels
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(Sentinel {
            sentinels,
            master: master.into(),
            node: SentinelNodeConnectionInfo::default(),
        })
    }

    /// How to connect to the master once found (password, database, TLS), as redis-rs
    /// takes it.
    pub fn node_connection_info(mut self, node: SentinelNodeConnectionInfo) -> Self {
        self.node = node;
        self
    }

    fn sentinel_client(&self) -> RedisResult<SentinelClient> {
        SentinelClient::build(
            self.sentinels.clone(),
            self.master.clone(),
            Some(self.node.clone()),
            SentinelServerType::Master,
        )
    }

    /// A client for the master as the sentinels name it now (blocking).
    pub fn master_client(&self) -> Result<redis::Client> {
        Ok(self.sentinel_client()?.get_client()?)
    }
}

impl Connector for Sentinel {
    type Connection = MultiplexedConnection;

    async fn connect(&self, response_timeout: Option<Duration>) -> RedisResult<Self::Connection> {
        // The sentinels are asked with the connect's own bound: a hung one must not
        // hold up a wait's or a renewal's time limit.
        let mut ask = self.sentinel_client()?;
        let master = match tokio::time::timeout(CONNECT_LIMIT, ask.async_get_client()).await {
            Ok(master) => master?,
            Err(elapsed) => return Err(timed_out(elapsed)),
        };
        master.connect(response_timeout).await
    }
}
