//! What to ask the server for: the request and its retry policy.

use std::time::{Duration, Instant};

use rand::Rng;
use redis::RedisError;

use redis_lock_core::holdings::Kind;
use redis_lock_core::protocol;

use crate::backend::Backend;
use crate::error::{is_connection_error, Error, Result};
use crate::info::Mode;
use crate::limits::ttl_millis;
use crate::lock::Lock;
use crate::wait::Wait;

/// What to ask for: a key, a TTL, maybe a wait, a given owner, a retry policy,
/// durability.
///
/// ```
/// use std::time::Duration;
/// use redis_lock_client::{Request, Retry, Wait};
///
/// let request = Request::new("report:daily", Duration::from_secs(30))
///     .wait(Wait::For(Duration::from_secs(10)))
///     .owner("worker-7")
///     .retry(Retry::NONE);
/// assert_eq!(request.owner_id(), "worker-7");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) ttl: Duration,
    pub(crate) wait: Wait,
    pub(crate) retry: Retry,
    pub(crate) durable: Option<Durable>,
    /// The owner came from the caller, who may hold the lock under it already.
    pub(crate) owner_given: bool,
    /// A shared holding (`SHARED`), bounded to `limit` holders (`LIMIT n`) if set.
    pub(crate) shared: bool,
    pub(crate) limit: Option<u32>,
    pub(crate) backend: Backend,
}

/// How many replicas must acknowledge a grant, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    /// Replicas that must have the grant.
    pub replicas: u32,
    /// How long Redis's `WAIT` may take to hear from them.
    pub timeout: Duration,
}

/// A fresh owner that says who holds: `host:pid:` and 16 random hex digits
/// (`web-3:4121:9f0c2a…`), so `LOCK.INFO` and `redis-lock info` name the machine and
/// the process. Still unique per request. The host name is cut at 64 characters.
pub fn fresh_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().chars().take(64).collect::<String>())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "host".into());
    let random = uuid::Uuid::new_v4().simple().to_string();
    let random = random.get(..16).unwrap_or(&random);
    format!("{host}:{}:{random}", std::process::id())
}

impl Request {
    /// A request for `key` with `ttl`, as a fresh owner ([`fresh_owner`]), not
    /// waiting.
    pub fn new(key: impl Into<String>, ttl: Duration) -> Self {
        Request {
            key: key.into(),
            owner: fresh_owner(),
            ttl,
            wait: Wait::No,
            retry: Retry::default(),
            durable: None,
            owner_given: false,
            shared: false,
            limit: None,
            backend: Backend::Module,
        }
    }

    /// Asks for a shared holding (a read lock): granted beside other shared ones,
    /// never beside an exclusive one. Each holding has its own lease and token.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use redis_lock_client::Request;
    /// let read = Request::new("catalog", Duration::from_secs(10)).shared();
    /// ```
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Asks for one of `permits` shared holdings (a counting semaphore: at most
    /// `permits` owners hold the key at once). Implies [`Request::shared`]. The
    /// limit belongs to this request, not to the key: requests that disagree on it
    /// each get their own applied. From 1 to 2^31; anything else is
    /// [`Error::InvalidArgument`] before anything is sent.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use redis_lock_client::Request;
    /// let export = Request::new("exports", Duration::from_secs(60)).limit(5);
    /// ```
    pub fn limit(mut self, permits: u32) -> Self {
        self.shared = true;
        self.limit = Some(permits);
        self
    }

    /// Holds the lock only once `replicas` replicas acknowledge the grant (Redis's
    /// `WAIT replicas timeout`, sent right after the acquire on the same connection).
    /// If fewer acknowledge within `timeout`, the grant is released and the acquire
    /// fails with [`Error::NotReplicated`].
    ///
    /// Redis replication is asynchronous: a failover right after a grant can lose it,
    /// and the promoted replica can then grant the same lock again. Waiting for the
    /// replicas closes most of that window, at the price of a replication round trip
    /// per acquire and of refusing locks while replicas lag. It does not make Redis
    /// a consensus system: `WAIT` does not roll back a write the replicas missed, and
    /// a failover may still pick a replica that has not acknowledged. Fencing tokens
    /// remain the guard that holds. `WAIT` holds up its connection for up to
    /// `timeout`: keep it below the connection's response timeout.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use redis_lock_client::Request;
    /// let request = Request::new("payments", Duration::from_secs(30))
    ///     .durable(1, Duration::from_millis(100));
    /// ```
    pub fn durable(mut self, replicas: u32, timeout: Duration) -> Self {
        self.durable = Some(Durable { replicas, timeout });
        self
    }

    /// Waits in the server's FIFO queue as `wait` says when the lock is busy. Only
    /// APIs that wait on a connection of their own take a waiting request: the
    /// blocking [`LockCommands`](crate::LockCommands) (its connection is the
    /// caller's alone) and [`LockClient`](crate::LockClient); the shared async
    /// connections of [`AsyncLockCommands`](crate::AsyncLockCommands) refuse it.
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.wait = wait.into();
        self
    }

    /// How to retry when the connection fails before the reply arrives (default:
    /// 3 retries from 20 ms, jittered). Retrying is safe: the same owner gets the same
    /// token back if the first try took the lock.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Acquires as `owner` instead of a fresh one ([`fresh_owner`]): the holder of that
    /// id gets the same token back (a retry after a timeout learns it already holds the
    /// lock).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self.owner_given = true;
        self
    }

    /// The key asked for.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id the request acquires as.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// Which form of the lock to ask (default: the module). A
    /// [`LockClient`](crate::LockClient) sets the one it detected or was told.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The backend the request asks.
    pub fn backend_used(&self) -> Backend {
        self.backend
    }

    /// The error that keeps the request from being sent, if any: the arguments of
    /// its acquire, as the protocol module builds them.
    pub(crate) fn check(&self) -> Result<()> {
        let ttl = ttl_millis(self.ttl)?;
        let wait = self.wait.millis()?;
        protocol::acquire_args(self.owner.as_bytes(), ttl, self.kind(), wait)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        Ok(())
    }

    /// The TTL in whole milliseconds as sent (checked by [`Request::check`]).
    pub(crate) fn ttl_ms(&self) -> u64 {
        ttl_millis(self.ttl).unwrap_or(1)
    }

    /// The kind of holding asked for.
    pub(crate) fn kind(&self) -> Kind {
        match (self.shared, self.limit) {
            (_, Some(limit)) => Kind::Shared { limit: Some(limit) },
            (true, None) => Kind::Shared { limit: None },
            (false, None) => Kind::Exclusive,
        }
    }

    /// The TTL as the server gets it, whole milliseconds.
    pub(crate) fn server_ttl(&self) -> Duration {
        Duration::from_millis(ttl_millis(self.ttl).unwrap_or(1))
    }

    /// What to do after attempt number `attempt` (0-based) failed with `error`.
    ///
    /// A lost reply (connection error, timeout) is retried as the same owner, which
    /// learns the token if the lost try got one. Except while waiting: a client-side
    /// timeout then means the request still waits in the server, on a connection
    /// that answers in order, so a retry would only queue behind it.
    ///
    /// Giving up after a lost reply leaves the outcome unknown: the server may still
    /// grant the request. With an owner of its own (a fresh one nobody else knows)
    /// the request is withdrawn by a release of that owner, which runs after it.
    pub(crate) fn after_failure(&self, error: RedisError, attempt: u32) -> Next {
        if !is_connection_error(&error) {
            // A durable acquire is a pipeline: its WAIT may be refused after a grant.
            // A durable acquire is a pipeline: its WAIT may be refused after a grant.
            return Next::Fail(error.into(), self.durable.is_some());
        }
        let waiting = self.wait.waits() && error.is_timeout();
        if !waiting && attempt < self.retry.attempts {
            return Next::Retry(self.retry.delay(attempt));
        }
        let error = if waiting {
            Error::ResponseTimeout(error)
        } else {
            error.into()
        };
        Next::Fail(error, true)
    }

    /// The lock granted to a request sent at `sent`.
    pub(crate) fn granted(&self, token: i64, sent: Instant) -> Lock {
        let mode = if self.shared {
            Mode::Shared
        } else {
            Mode::Exclusive
        };
        Lock::new(&self.key, &self.owner, token, sent, self.server_ttl())
            .on(self.backend)
            .in_mode(mode)
    }
}

/// The step after a failed acquire attempt.
pub(crate) enum Next {
    /// Send the request again after this pause.
    Retry(Duration),
    /// Give up with this error, after withdrawing what the request may have left
    /// (its replies do not matter) if `true`.
    Fail(Error, bool),
}

/// How often and how long to retry a command whose reply was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Tries after the first.
    pub attempts: u32,
    /// The first pause; each next one doubles, with random jitter.
    pub base_delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 3,
            base_delay: Duration::from_millis(20),
        }
    }
}

impl Retry {
    /// No retries.
    pub const NONE: Retry = Retry {
        attempts: 0,
        base_delay: Duration::ZERO,
    };

    /// The pause before retry number `attempt` (0-based): exponential, with
    /// jitter between half and all of it so retrying clients spread out.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let full = self.base_delay.saturating_mul(1 << attempt.min(16));
        let low = full / 2;
        let spread = u64::try_from((full - low).as_micros()).unwrap_or(u64::MAX);
        low + Duration::from_micros(rand::thread_rng().gen_range(0..=spread))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_owners_say_host_and_process_and_are_distinct() {
        let a = Request::new("k", Duration::from_secs(1));
        let b = Request::new("k", Duration::from_secs(1));
        assert_ne!(a.owner, b.owner);
        let parts: Vec<&str> = a.owner.split(':').collect();
        let [host, pid, random] = parts[..] else {
            panic!("{} is not host:pid:random", a.owner);
        };
        assert!(!host.is_empty() && host.len() <= 64);
        assert_eq!(pid, std::process::id().to_string());
        assert!(random.len() == 16 && u64::from_str_radix(random, 16).is_ok());
    }

    #[test]
    fn ttls_and_waits_out_of_range_are_refused_before_sending() {
        let zero = Request::new("job", Duration::ZERO).check();
        assert!(matches!(zero, Err(Error::InvalidArgument(m)) if m.contains("ttl")));
        let huge = Request::new("job", Duration::MAX).check();
        assert!(matches!(huge, Err(Error::InvalidArgument(m)) if m.contains("out of range")));
        let max = Request::new("job", Duration::from_millis(crate::limits::MAX_MILLIS)).check();
        assert!(max.is_ok());
        // 2^62 ms is one over what the module takes (it refuses it).
        let over = Request::new("job", Duration::from_millis(1 << 62)).check();
        assert!(matches!(over, Err(Error::InvalidArgument(m)) if m.contains("out of range")));
        let wait = Request::new("job", Duration::from_secs(1))
            .wait(Wait::For(Duration::MAX))
            .check();
        assert!(matches!(wait, Err(Error::InvalidArgument(m)) if m.contains("wait")));
        assert_eq!(ttl_millis(Duration::from_micros(1)).unwrap(), 1);
        let limit = Request::new("job", Duration::from_secs(1)).limit(0).check();
        assert!(matches!(limit, Err(Error::InvalidArgument(m)) if m.contains("limit 0")));
    }

    fn timeout() -> RedisError {
        std::io::Error::from(std::io::ErrorKind::TimedOut).into()
    }

    fn withdraws(next: &Next) -> bool {
        matches!(next, Next::Fail(_, true))
    }

    #[test]
    fn a_lost_reply_is_retried_then_withdrawn() {
        let request = Request::new("job", Duration::from_secs(5));
        assert!(matches!(
            request.after_failure(timeout(), 0),
            Next::Retry(_)
        ));
        let last = request.after_failure(timeout(), request.retry.attempts);
        assert!(matches!(last, Next::Fail(Error::Connection(_), _)));
        assert!(withdraws(&last));
        // A refusal is final and leaves nothing to withdraw.
        let refused: RedisError = (redis::ErrorKind::Client, "WRONGTYPE").into();
        assert!(matches!(
            request.after_failure(refused, 0),
            Next::Fail(_, false)
        ));
    }

    #[test]
    fn a_timeout_while_waiting_is_not_retried() {
        let request = Request::new("job", Duration::from_secs(5)).wait(Duration::from_secs(9));
        let next = request.after_failure(timeout(), 0);
        assert!(matches!(next, Next::Fail(Error::ResponseTimeout(_), _)));
        assert!(withdraws(&next));
    }

    #[test]
    fn a_given_owner_is_never_withdrawn() {
        // Its caller may hold the lock under it already (a refresh).
        let request = Request::new("job", Duration::from_secs(5)).owner("me");
        let next = request.after_failure(timeout(), request.retry.attempts);
        assert!(matches!(next, Next::Fail(Error::Connection(_), _)));
    }

    #[test]
    fn retry_delays_grow_with_jitter() {
        let retry = Retry {
            attempts: 5,
            base_delay: Duration::from_millis(10),
        };
        for attempt in 0..4 {
            let full = Duration::from_millis(10 << attempt);
            let d = retry.delay(attempt);
            assert!(d >= full / 2 && d <= full, "{d:?} for attempt {attempt}");
        }
    }
}
