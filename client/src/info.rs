//! What `LOCK.INFO` (or the library's `lock_info`) says about a key: its holders,
//! its mode and its queue.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};

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
}
