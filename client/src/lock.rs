//! The lock value, and what `LOCK.INFO` says about a key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::lease::{Ended, Lease, LockLost, LossCause};

/// A lock this process holds: its key, the owner id it was taken with, its fencing
/// token, and its lease.
///
/// Send the token with every write the lock guards, and have the resource reject
/// tokens lower than the highest it has seen. Rely on the lock only until
/// [`valid_until`](Lock::valid_until): the server keeps it at least until then.
/// Clones share the lease, so a renewal through any of them moves it for all.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::LockCommands;
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
/// if let Some(lock) = con.try_acquire("report:daily", Duration::from_secs(30))? {
///     // Safe for about 27 s (30 s less the 10% margin), unless extended.
///     println!("token {}, {:?} left", lock.token(), lock.remaining());
///     con.release(&lock)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) lease: Arc<Lease>,
    pub(crate) backend: Backend,
    /// The process that acquired it: a holding belongs to it alone (see
    /// [`Lock::in_another_process`]).
    pub(crate) pid: u32,
}

/// The holding as a user reads it: key, owner, token, backend, and the lease's state
/// (not its internals).
impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("backend", &self.backend)
            .field("remaining", &self.remaining())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl PartialEq for Lock {
    /// Two locks are the same holding: same key, owner and token.
    fn eq(&self, other: &Lock) -> bool {
        (&self.key, &self.owner, self.token) == (&other.key, &other.owner, other.token)
    }
}

impl Eq for Lock {}

impl Lock {
    pub(crate) fn new(key: &str, owner: &str, token: i64, sent: Instant, ttl: Duration) -> Lock {
        Lock {
            key: key.into(),
            owner: owner.into(),
            token,
            lease: Lease::new(sent, ttl),
            backend: Backend::Module,
            pid: std::process::id(),
        }
    }

    /// True in a process forked from the one that acquired the lock: there, a
    /// release or an extend sends nothing and answers `false` (the holding is the
    /// parent's, which goes on holding and renewing it), and a guard dropped there
    /// leaves it alone.
    pub(crate) fn in_another_process(&self) -> bool {
        self.pid != std::process::id()
    }

    /// The same lock, held through `backend`.
    pub(crate) fn on(mut self, backend: Backend) -> Lock {
        self.backend = backend;
        self
    }

    /// The backend the lock was taken through, which its release and extend use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Logs the grant.
    pub(crate) fn acquired(&self) {
        tracing::debug!(key = %self.key, owner = %self.owner, token = self.token, ttl_ms = self.ttl().as_millis() as u64, "lock acquired");
    }

    /// An extend sent at `sent` with `ttl` (validated) answered `extended`.
    pub(crate) fn extended(&self, extended: bool, sent: Instant, ttl: Duration) {
        if extended {
            let ms = ttl.as_nanos().div_ceil(1_000_000);
            let ttl = Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
            self.lease.renewed(sent, ttl);
        } else {
            self.lease.end(Ended::Refused);
            tracing::warn!(key = %self.key, owner = %self.owner, token = self.token, "lock lost: the server no longer holds it for this owner");
        }
    }

    /// A release answered `released`.
    pub(crate) fn released(&self, released: bool) {
        self.lease.end(Ended::Released);
        if released {
            tracing::debug!(key = %self.key, owner = %self.owner, token = self.token, "lock released");
        } else {
            tracing::warn!(key = %self.key, owner = %self.owner, token = self.token, "lock released, but the server no longer held it for this owner");
        }
    }

    /// The key the lock lives at.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id the lock was taken with: `host:pid:` and 16 random hex digits,
    /// fresh per acquisition ([`fresh_owner`](crate::fresh_owner)), unless given.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The fencing token of this holding: greater than any token the server handed
    /// out for this key before.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The TTL the lock was taken (or last extended) with, in whole milliseconds as
    /// sent to the server.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// Until when the lock is safe to rely on: the time the last acknowledged acquire
    /// or extend was sent, plus its TTL, less the [`margin`](crate::margin) for clock
    /// drift. In the past once the lock was lost or released.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Time left until [`valid_until`](Lock::valid_until); zero once lost.
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// True once the lease ran out, an extend found the lock gone, or it was released.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Why the lock is lost, as this client saw it; `None` while it holds.
    pub fn cause(&self) -> Option<LossCause> {
        self.lease.cause()
    }

    /// The loss signal of this lock, to hand to the work it guards.
    pub fn signal(&self) -> LockLost {
        LockLost {
            lease: Arc::clone(&self.lease),
            key: self.key.clone(),
        }
    }
}

/// Whether a lock's holdings are exclusive (the default) or shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// One holder at a time.
    Exclusive,
    /// Any number of shared holders (read locks, semaphores).
    Shared,
}

/// An owner id as the server keeps it: binary-safe bytes, compared with and shown as
/// text. The owners this crate makes are `host:pid:` and 16 random hex digits
/// ([`fresh_owner`](crate::fresh_owner)).
///
/// ```
/// use redis_lock_client::Owner;
///
/// let owner = Owner::from("worker-7");
/// assert_eq!(owner, "worker-7");
/// assert_eq!(owner.as_str(), Some("worker-7"));
/// assert_eq!(owner.to_string(), "worker-7");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Owner(Vec<u8>);

/// Text where the id is UTF-8 (`Owner("worker-7")`), the bytes escaped otherwise.
impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(text) => f.debug_tuple("Owner").field(&text).finish(),
            Err(_) => write!(f, "Owner(b\"{}\")", self.0.escape_ascii()),
        }
    }
}

impl Owner {
    /// The id as text, if it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for Owner {
    fn from(owner: &str) -> Owner {
        Owner(owner.as_bytes().to_vec())
    }
}

impl From<Vec<u8>> for Owner {
    fn from(owner: Vec<u8>) -> Owner {
        Owner(owner)
    }
}

impl std::fmt::Display for Owner {
    /// The id as text; bytes that are not UTF-8 show as U+FFFD.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl PartialEq<str> for Owner {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Owner {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<String> for Owner {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<[u8]> for Owner {
    fn eq(&self, other: &[u8]) -> bool {
        self.0 == other
    }
}

impl PartialEq<&[u8]> for Owner {
    fn eq(&self, other: &&[u8]) -> bool {
        self.0 == *other
    }
}

/// One holding of a lock, as `LOCK.INFO` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Holder {
    /// Who holds it.
    pub owner: Owner,
    /// Time left before it expires (`None`: no expiry).
    pub ttl: Option<Duration>,
    /// Its fencing token.
    pub token: i64,
    /// The permits of a holding granted with `LIMIT n` (`None`: none given, or a
    /// server that does not report it).
    pub limit: Option<u64>,
}

/// A client queued for a lock, as `LOCK.INFO`'s `queue` reports it (first waiters
/// first; servers that do not report the queue leave it empty).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Who waits.
    pub owner: Owner,
    /// The mode it asked for.
    pub mode: Mode,
    /// The permits it asked for with `LIMIT n`.
    pub limit: Option<u64>,
    /// How long it has waited so far.
    pub waited: Duration,
}

/// What `LOCK.INFO` says about a held lock.
///
/// ```no_run
/// use redis_lock_client::LockCommands;
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
/// if let Some(info) = con.lock_info("report:daily")? {
///     println!("{} holds it with token {}, {} waiting", info.owner, info.token, info.waiters);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Who holds it (of a shared lock: the oldest holder).
    pub owner: Owner,
    /// Time left before that holding expires (`None`: no expiry).
    pub ttl: Option<Duration>,
    /// That holding's fencing token.
    pub token: i64,
    /// Clients waiting for it in the server now.
    pub waiters: u64,
    /// Exclusive or shared.
    pub mode: Mode,
    /// Every holding, oldest first: one for an exclusive lock.
    pub holders: Vec<Holder>,
    /// The first clients queued, in order, where the server reports them.
    pub queue: Vec<Waiter>,
}

impl LockInfo {
    /// Reads a `LOCK.INFO` reply (or the library's `lock_info`): `None` for a free
    /// lock. For callers that send the command themselves, e.g. in a pipeline.
    pub fn from_reply(value: Value) -> Result<Option<LockInfo>> {
        parse_info(value)
    }
}

/// Reads a LOCK.INFO reply: null, a RESP3 map or a RESP2 flat array; with a
/// `holders` list (contract version 2) or only the one holder's fields (version 1).
pub(crate) fn parse_info(value: Value) -> Result<Option<LockInfo>> {
    let Some(fields) = pairs(value)? else {
        return Ok(None);
    };
    let mut mode = Mode::Exclusive;
    let mut holders = Vec::new();
    let mut waiters = 0;
    let mut queue = Vec::new();
    let mut single = Holder::default();
    let mut listed = false;
    for (name, value) in fields {
        match field_name(name)?.as_str() {
            "mode" => {
                let name: String = redis::from_redis_value(value).map_err(unexpected)?;
                mode = if name == "shared" {
                    Mode::Shared
                } else {
                    Mode::Exclusive
                };
            }
            "holders" => {
                listed = true;
                let list: Vec<Value> = redis::from_redis_value(value).map_err(unexpected)?;
                for holder in list {
                    holders.push(parse_holder(holder)?);
                }
            }
            "waiters" => waiters = redis::from_redis_value(value).map_err(unexpected)?,
            "queue" => queue = parse_queue(value),
            name => holder_field(&mut single, name, value)?,
        }
    }
    if !listed {
        holders.push(single);
    }
    let first = holders.first().cloned().unwrap_or_default();
    Ok(Some(LockInfo {
        owner: first.owner,
        ttl: first.ttl,
        token: first.token,
        waiters,
        mode,
        holders,
        queue,
    }))
}

/// The `queue` field: each waiter's `owner`, `mode`, `limit` and `waited` (ms).
/// Entries or fields of another shape are skipped: the queue is for people to read,
/// and a reply a newer server shapes differently must not make the whole info fail.
fn parse_queue(value: Value) -> Vec<Waiter> {
    let Ok(list) = redis::from_redis_value::<Vec<Value>>(value) else {
        return Vec::new();
    };
    let mut queue = Vec::new();
    for entry in list {
        let Ok(Some(fields)) = pairs(entry) else {
            continue;
        };
        let mut waiter = Waiter {
            owner: Owner::default(),
            mode: Mode::Exclusive,
            limit: None,
            waited: Duration::ZERO,
        };
        for (name, value) in fields {
            let Ok(name) = field_name(name) else {
                continue;
            };
            match name.as_str() {
                "owner" => {
                    if let Ok(bytes) = redis::from_redis_value::<Vec<u8>>(value) {
                        waiter.owner = Owner(bytes);
                    }
                }
                "mode" => {
                    let shared =
                        redis::from_redis_value::<String>(value).is_ok_and(|m| m == "shared");
                    waiter.mode = if shared {
                        Mode::Shared
                    } else {
                        Mode::Exclusive
                    };
                }
                "limit" => waiter.limit = redis::from_redis_value(value).ok(),
                "waited" => {
                    let ms = redis::from_redis_value::<u64>(value).unwrap_or(0);
                    waiter.waited = Duration::from_millis(ms);
                }
                _ => {}
            }
        }
        queue.push(waiter);
    }
    queue
}

fn parse_holder(value: Value) -> Result<Holder> {
    let mut holder = Holder::default();
    for (name, value) in pairs(value)?.unwrap_or_default() {
        holder_field(&mut holder, &field_name(name)?, value)?;
    }
    Ok(holder)
}

fn holder_field(holder: &mut Holder, name: &str, value: Value) -> Result<()> {
    match name {
        "owner" => {
            let bytes: Vec<u8> = redis::from_redis_value(value).map_err(unexpected)?;
            holder.owner = Owner(bytes);
        }
        "ttl" => {
            let ms: i64 = redis::from_redis_value(value).map_err(unexpected)?;
            holder.ttl = u64::try_from(ms).ok().map(Duration::from_millis);
        }
        "token" => holder.token = redis::from_redis_value(value).map_err(unexpected)?,
        "limit" => holder.limit = redis::from_redis_value(value).map_err(unexpected)?,
        _ => {} // fields a newer server adds
    }
    Ok(())
}

fn pairs(value: Value) -> Result<Option<Vec<(Value, Value)>>> {
    match value {
        Value::Nil => Ok(None),
        Value::Map(pairs) => Ok(Some(pairs)),
        Value::Array(items) => {
            let mut items = items.into_iter();
            Ok(Some(
                std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect(),
            ))
        }
        other => Err(Error::UnexpectedReply(format!("LOCK.INFO: {other:?}"))),
    }
}

fn field_name(name: Value) -> Result<String> {
    redis::from_redis_value(name).map_err(unexpected)
}

fn unexpected(error: impl std::fmt::Display) -> Error {
    Error::UnexpectedReply(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn an_owner_debugs_as_text_where_it_is_text() {
        assert_eq!(
            format!("{:?}", Owner::from("worker-7")),
            r#"Owner("worker-7")"#
        );
        let raw = Owner(vec![0xff, b'a', b'\n']);
        assert_eq!(format!("{raw:?}"), r#"Owner(b"\xffa\n")"#);
    }

    #[test]
    fn info_parses_both_protocols() {
        let fields = vec![
            (bulk("owner"), bulk("me")),
            (bulk("ttl"), Value::Int(1500)),
            (bulk("token"), Value::Int(42)),
            (bulk("waiters"), Value::Int(2)),
        ];
        let flat = Value::Array(
            fields
                .iter()
                .flat_map(|(k, v)| [k.clone(), v.clone()])
                .collect(),
        );
        let holder = Holder {
            owner: "me".into(),
            ttl: Some(Duration::from_millis(1500)),
            token: 42,
            limit: None,
        };
        let expected = LockInfo {
            owner: "me".into(),
            ttl: holder.ttl,
            token: 42,
            waiters: 2,
            mode: Mode::Exclusive,
            holders: vec![holder],
            queue: Vec::new(),
        };
        assert_eq!(
            parse_info(Value::Map(fields)).unwrap(),
            Some(expected.clone())
        );
        assert_eq!(parse_info(flat).unwrap(), Some(expected));
        assert_eq!(parse_info(Value::Nil).unwrap(), None);
        assert!(parse_info(Value::Int(3)).is_err());
    }

    #[test]
    fn info_reads_the_holders_of_a_shared_lock() {
        let holder = |owner: &str, token| {
            Value::Map(vec![
                (bulk("owner"), bulk(owner)),
                (bulk("ttl"), Value::Int(900)),
                (bulk("token"), Value::Int(token)),
            ])
        };
        let reply = Value::Map(vec![
            (bulk("mode"), bulk("shared")),
            (
                bulk("holders"),
                Value::Array(vec![holder("a", 7), holder("b", 8)]),
            ),
            (bulk("waiters"), Value::Int(0)),
        ]);
        let info = parse_info(reply).unwrap().unwrap();
        assert_eq!(info.mode, Mode::Shared);
        assert_eq!(
            (info.owner.as_str(), info.token),
            (Some("a"), 7),
            "the oldest"
        );
        let owners: Vec<_> = info
            .holders
            .iter()
            .map(|h| (h.owner.to_string(), h.token))
            .collect();
        assert_eq!(owners, [("a".to_string(), 7), ("b".to_string(), 8)]);
    }

    #[test]
    fn info_reads_a_holding_s_limit_and_the_queue_where_reported() {
        let map = |fields: Vec<(&str, Value)>| {
            Value::Map(fields.into_iter().map(|(k, v)| (bulk(k), v)).collect())
        };
        let reply = map(vec![
            ("mode", bulk("shared")),
            (
                "holders",
                Value::Array(vec![map(vec![
                    ("owner", bulk("a")),
                    ("ttl", Value::Int(900)),
                    ("token", Value::Int(7)),
                    ("limit", Value::Int(3)),
                ])]),
            ),
            ("waiters", Value::Int(2)),
            (
                "queue",
                Value::Array(vec![
                    map(vec![
                        ("owner", bulk("w1")),
                        ("mode", bulk("exclusive")),
                        ("waited", Value::Int(1200)),
                    ]),
                    map(vec![
                        ("owner", bulk("w2")),
                        ("mode", bulk("shared")),
                        ("limit", Value::Int(3)),
                        ("waited", Value::Int(40)),
                        ("since", Value::Int(1)),
                    ]),
                    Value::Int(5),
                ]),
            ),
        ]);
        let info = parse_info(reply).unwrap().unwrap();
        assert_eq!(info.holders[0].limit, Some(3));
        assert_eq!(info.queue.len(), 2, "an entry of another shape is skipped");
        assert_eq!(info.queue[0].owner, "w1");
        assert_eq!(info.queue[0].mode, Mode::Exclusive);
        assert_eq!(info.queue[0].waited, Duration::from_millis(1200));
        assert_eq!(
            (info.queue[1].mode, info.queue[1].limit),
            (Mode::Shared, Some(3))
        );
    }

    #[test]
    fn clones_of_a_lock_share_its_lease() {
        let lock = Lock::new("job", "me", 1, Instant::now(), Duration::from_secs(60));
        let clone = lock.clone();
        assert_eq!(lock, clone);
        lock.lease.end(Ended::Refused);
        assert!(clone.is_lost());
        assert_eq!(clone.remaining(), Duration::ZERO);
    }
}
