//! The lock value and the request and reply shapes shared by the sync and async APIs.

use std::time::Duration;

use rand::Rng;
use redis::{Cmd, RedisError, Value};

use crate::error::{is_connection_error, Error, Result};

/// A lock this process holds: its key, the owner id it was taken with, and its
/// fencing token. Send the token with every write the lock guards, and have the
/// resource reject tokens lower than the highest it has seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) ttl: Duration,
}

impl Lock {
    /// The key the lock lives at.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id the lock was taken with (a fresh UUID v4 unless given).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The fencing token of this holding: greater than any token the server handed
    /// out for this key before.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The TTL the lock was taken (or last extended) with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// What `LOCK.INFO` says about a held lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// Who holds it.
    pub owner: Vec<u8>,
    /// Time left before it expires (`None`: no expiry, an administrator removed it).
    pub ttl: Option<Duration>,
    /// The fencing token of the current holding.
    pub token: i64,
    /// Clients waiting for it in the server now.
    pub waiters: u64,
}

/// What to ask for: a key, a TTL, maybe a wait, maybe a given owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) ttl: Duration,
    pub(crate) wait: Option<Duration>,
    pub(crate) retry: Retry,
    pub(crate) durable: Option<Durable>,
    /// The owner came from the caller, who may hold the lock under it already.
    pub(crate) owner_given: bool,
}

/// How many replicas must acknowledge a grant, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    /// Replicas that must have the grant.
    pub replicas: u32,
    /// How long Redis's `WAIT` may take to hear from them.
    pub timeout: Duration,
}

impl Request {
    /// A request for `key` with `ttl`, as a fresh owner (UUID v4), without waiting.
    pub fn new(key: impl Into<String>, ttl: Duration) -> Self {
        Request {
            key: key.into(),
            owner: uuid::Uuid::new_v4().to_string(),
            ttl,
            wait: None,
            retry: Retry::default(),
            durable: None,
            owner_given: false,
        }
    }

    /// Holds the lock only once `replicas` replicas acknowledge the grant (Redis's
    /// `WAIT replicas timeout` after the acquire); otherwise releases it and answers
    /// `None`, as if the lock were busy.
    ///
    /// Redis replication is asynchronous: a failover right after a grant can lose it,
    /// and the promoted replica can then grant the same lock again. Waiting for the
    /// replicas closes most of that window, at the price of a replication round trip
    /// per acquire and of refusing locks while replicas lag. It does not make Redis
    /// a consensus system: `WAIT` does not roll back a write the replicas missed, and
    /// a failover may still pick a replica that has not acknowledged. Fencing tokens
    /// remain the guard that holds.
    pub fn durable(mut self, replicas: u32, timeout: Duration) -> Self {
        self.durable = Some(Durable { replicas, timeout });
        self
    }

    /// How to retry when the connection fails before the reply arrives (default:
    /// 3 retries from 20 ms, jittered). Retrying is safe: the same owner gets the same
    /// token back if the first try took the lock.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Waits in the server up to `wait` for the lock (`Duration::ZERO`: no limit), on
    /// a connection that nothing else uses meanwhile: Redis answers nothing else sent
    /// on it until the wait ends.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Acquires as `owner` instead of a fresh UUID: the holder of that id gets the same
    /// token back (a retry after a timeout learns it already holds the lock).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self.owner_given = true;
        self
    }

    pub(crate) fn command(&self) -> Cmd {
        let mut cmd = redis::cmd("LOCK.ACQUIRE");
        cmd.arg(&self.key).arg(&self.owner).arg(millis(self.ttl));
        if let Some(wait) = self.wait {
            cmd.arg("WAIT").arg(wait_millis(wait));
        }
        cmd
    }

    /// What to do after attempt number `attempt` (0-based) failed with `error`.
    ///
    /// A lost reply (connection error, timeout) is retried as the same owner, which
    /// learns the token if the lost try got one. Except while waiting: a client-side
    /// timeout then means the request still waits in the server, on a connection
    /// that answers in order, so a retry would only queue behind it.
    ///
    /// Giving up after a lost reply leaves the outcome unknown: the server may still
    /// grant the request. With an owner of its own (a fresh UUID nobody else knows)
    /// the request is withdrawn by a release of that owner, which runs after it.
    pub(crate) fn after_failure(&self, error: RedisError, attempt: u32) -> Next {
        if !is_connection_error(&error) {
            return Next::Fail(error.into(), None);
        }
        let waiting = self.wait.is_some() && error.is_timeout();
        if !waiting && attempt < self.retry.attempts {
            return Next::Retry(self.retry.delay(attempt));
        }
        let withdraw = (!self.owner_given).then(|| release_of(&self.key, &self.owner));
        let error = if waiting {
            Error::ResponseTimeout(error)
        } else {
            error.into()
        };
        Next::Fail(error, withdraw)
    }

    pub(crate) fn granted(&self, token: Option<i64>) -> Option<Lock> {
        token.map(|token| Lock {
            key: self.key.clone(),
            owner: self.owner.clone(),
            token,
            ttl: self.ttl,
        })
    }
}

/// The step after a failed acquire attempt.
pub(crate) enum Next {
    /// Send the request again after this pause.
    Retry(Duration),
    /// Give up with this error, after sending the withdrawal, if any (its reply does
    /// not matter).
    Fail(Error, Option<Cmd>),
}

/// Milliseconds of a duration, at least 1 (the server refuses 0).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// Milliseconds of a WAIT timeout: 0 means no limit.
pub(crate) fn wait_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `WAIT replicas timeout`, sent after a durable grant.
pub(crate) fn wait_replicas_command(durable: &Durable) -> Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(durable.replicas).arg(wait_millis(durable.timeout));
    cmd
}

pub(crate) fn release_command(lock: &Lock) -> Cmd {
    release_of(&lock.key, &lock.owner)
}

fn release_of(key: &str, owner: &str) -> Cmd {
    let mut cmd = redis::cmd("LOCK.RELEASE");
    cmd.arg(key).arg(owner);
    cmd
}

pub(crate) fn extend_command(lock: &Lock, ttl: Duration) -> Cmd {
    let mut cmd = redis::cmd("LOCK.EXTEND");
    cmd.arg(&lock.key).arg(&lock.owner).arg(millis(ttl));
    cmd
}

pub(crate) fn info_command(key: &str) -> Cmd {
    let mut cmd = redis::cmd("LOCK.INFO");
    cmd.arg(key);
    cmd
}

/// Reads a LOCK.INFO reply: null, a RESP3 map or a RESP2 flat array.
pub(crate) fn parse_info(value: Value) -> Result<Option<LockInfo>> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Nil => return Ok(None),
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
        }
        other => return Err(Error::UnexpectedReply(format!("LOCK.INFO: {other:?}"))),
    };
    let mut info = LockInfo {
        owner: Vec::new(),
        ttl: None,
        token: 0,
        waiters: 0,
    };
    for (name, value) in pairs {
        let name: String = redis::from_redis_value(name).map_err(unexpected)?;
        match name.as_str() {
            "owner" => info.owner = redis::from_redis_value(value).map_err(unexpected)?,
            "ttl" => {
                let ms: i64 = redis::from_redis_value(value).map_err(unexpected)?;
                info.ttl = u64::try_from(ms).ok().map(Duration::from_millis);
            }
            "token" => info.token = redis::from_redis_value(value).map_err(unexpected)?,
            "waiters" => info.waiters = redis::from_redis_value(value).map_err(unexpected)?,
            _ => {} // fields a newer server adds
        }
    }
    Ok(Some(info))
}

fn unexpected(error: impl std::fmt::Display) -> Error {
    Error::UnexpectedReply(error.to_string())
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
    fn a_request_builds_the_acquire_command() {
        let request = Request::new("job", Duration::from_secs(5))
            .owner("me")
            .wait(Duration::from_millis(250));
        let packed = String::from_utf8(request.command().get_packed_command()).unwrap();
        assert!(packed.contains("LOCK.ACQUIRE"));
        for part in ["job", "me", "5000", "WAIT", "250"] {
            assert!(packed.contains(&format!("\r\n{part}\r\n")), "{packed:?}");
        }
    }

    #[test]
    fn fresh_owners_are_distinct_uuids() {
        let a = Request::new("k", Duration::from_secs(1));
        let b = Request::new("k", Duration::from_secs(1));
        assert_ne!(a.owner, b.owner);
        assert!(uuid::Uuid::parse_str(&a.owner).is_ok());
    }

    #[test]
    fn info_parses_both_protocols() {
        let fields = vec![
            (
                Value::BulkString(b"owner".to_vec()),
                Value::BulkString(b"me".to_vec()),
            ),
            (Value::BulkString(b"ttl".to_vec()), Value::Int(1500)),
            (Value::BulkString(b"token".to_vec()), Value::Int(42)),
            (Value::BulkString(b"waiters".to_vec()), Value::Int(2)),
        ];
        let flat = Value::Array(
            fields
                .iter()
                .flat_map(|(k, v)| [k.clone(), v.clone()])
                .collect(),
        );
        let expected = LockInfo {
            owner: b"me".to_vec(),
            ttl: Some(Duration::from_millis(1500)),
            token: 42,
            waiters: 2,
        };
        assert_eq!(
            parse_info(Value::Map(fields)).unwrap(),
            Some(expected.clone())
        );
        assert_eq!(parse_info(flat).unwrap(), Some(expected));
        assert_eq!(parse_info(Value::Nil).unwrap(), None);
        assert!(parse_info(Value::Int(3)).is_err());
    }

    fn timeout() -> RedisError {
        std::io::Error::from(std::io::ErrorKind::TimedOut).into()
    }

    fn withdraws(next: &Next) -> bool {
        matches!(next, Next::Fail(_, Some(cmd)) if cmd.args_iter().count() == 3)
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
            Next::Fail(_, None)
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
        assert!(matches!(next, Next::Fail(Error::Connection(_), None)));
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

    #[test]
    fn durations_become_server_milliseconds() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
        assert_eq!(wait_millis(Duration::ZERO), 0);
    }
}
