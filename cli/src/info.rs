//! `redis-lock info`, and how a lock is shown: the block of text and the JSON object
//! that `info` prints for one key and `list` for each lock it finds.

use std::time::Duration;

use redis_lock_client::{Connector, Holder, LockClient, LockInfo, Mode, Waiter};
use serde::Serialize;

use crate::events;
use crate::exit;

pub async fn info<K: Connector>(locks: LockClient<K>, key: &str, json: bool) -> i32 {
    let info = match locks.lock_info(key).await {
        Ok(info) => info,
        Err(error) => return exit::failure(&error, key),
    };
    let text = if json {
        let mut line = to_json(&Json::of(key.as_bytes(), info.as_ref()));
        line.push('\n');
        line
    } else {
        as_text(key, info.as_ref())
    };
    if events::out(&text) {
        0
    } else {
        exit::OUTPUT
    }
}

fn mode(mode: Mode) -> &'static str {
    match mode {
        Mode::Shared => "shared",
        _ => "exclusive",
    }
}

fn ttl(ttl: Option<Duration>) -> String {
    ttl.map_or_else(|| "no expiry".into(), |t| short(t).to_string())
}

/// A duration to the millisecond, as people read it (`1m 2s 300ms`).
fn short(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(duration.as_millis() as u64))
}

/// The lock at `key` (shown as given: callers escape keys that are not theirs) as a
/// block of lines: a head line, one line per holder, one per waiter the server
/// reports.
pub fn as_text(key: &str, info: Option<&LockInfo>) -> String {
    let Some(info) = info else {
        return format!("{key}: free\n");
    };
    let mut text = format!(
        "{key}: held ({}), {} holder(s), {} waiting\n",
        mode(info.mode),
        info.holders.len(),
        info.waiters
    );
    for holder in &info.holders {
        text.push_str(&format!(
            "  owner {}  token {}  ttl {}",
            events::escaped(holder.owner.as_bytes()),
            holder.token,
            ttl(holder.ttl)
        ));
        if let Some(limit) = holder.limit {
            text.push_str(&format!("  limit {limit}"));
        }
        text.push('\n');
    }
    for (place, waiter) in info.queue.iter().enumerate() {
        let asked = match waiter.limit {
            Some(limit) => format!("one of {limit} permits"),
            None => mode(waiter.mode).to_string(),
        };
        text.push_str(&format!(
            "  queued {}: {} ({asked}), waited {}\n",
            place + 1,
            events::escaped(waiter.owner.as_bytes()),
            short(waiter.waited)
        ));
    }
    text
}

/// A lock as JSON: `info --json` prints one, `list --json` an array of them. A key
/// or an owner is its text; one that is not UTF-8 also has `key_hex`/`owner_hex`,
/// its exact bytes (the text then has U+FFFD in their place).
#[derive(Serialize)]
pub struct Json {
    key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_hex: Option<String>,
    /// The Cluster master that holds it (`list` on a Cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<String>,
    held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<JsonHolder>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    queue: Vec<JsonWaiter>,
}

#[derive(Serialize)]
struct JsonHolder {
    owner: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_hex: Option<String>,
    token: i64,
    ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
}

#[derive(Serialize)]
struct JsonWaiter {
    owner: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_hex: Option<String>,
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
    waited_ms: u64,
}

/// Bytes as JSON text, with their hex where they are not UTF-8.
fn text_and_hex(bytes: &[u8]) -> (String, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (text.to_string(), None),
        Err(_) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
        ),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl JsonHolder {
    fn of(holder: &Holder) -> JsonHolder {
        let (owner, owner_hex) = text_and_hex(holder.owner.as_bytes());
        JsonHolder {
            owner,
            owner_hex,
            token: holder.token,
            ttl_ms: holder.ttl.map(millis),
            limit: holder.limit,
        }
    }
}

impl JsonWaiter {
    fn of(waiter: &Waiter) -> JsonWaiter {
        let (owner, owner_hex) = text_and_hex(waiter.owner.as_bytes());
        JsonWaiter {
            owner,
            owner_hex,
            mode: mode(waiter.mode),
            limit: waiter.limit,
            waited_ms: millis(waiter.waited),
        }
    }
}

impl Json {
    pub fn of(key: &[u8], info: Option<&LockInfo>) -> Json {
        let (key, key_hex) = text_and_hex(key);
        Json {
            key,
            key_hex,
            node: None,
            held: info.is_some(),
            mode: info.map(|i| mode(i.mode)),
            waiters: info.map(|i| i.waiters),
            holders: info.map(|i| i.holders.iter().map(JsonHolder::of).collect()),
            queue: info.map_or_else(Vec::new, |i| i.queue.iter().map(JsonWaiter::of).collect()),
        }
    }

    /// The same, naming the Cluster master it was found on.
    pub fn on(mut self, node: String) -> Json {
        self.node = Some(node).filter(|n| !n.is_empty());
        self
    }
}

/// Serializes `value` in one line. Strings and integers cannot fail to serialize;
/// the fallback is never printed.
pub fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn map(fields: Vec<(&str, Value)>) -> Value {
        Value::Map(fields.into_iter().map(|(k, v)| (bulk(k), v)).collect())
    }

    /// A semaphore's holding with its limit, and the queue, where the server
    /// reports them (LOCK.INFO's `limit` and `queue`).
    #[test]
    fn a_holding_s_limit_and_the_queue_are_shown_when_reported() {
        let reply = map(vec![
            ("mode", bulk("shared")),
            (
                "holders",
                Value::Array(vec![map(vec![
                    ("owner", bulk("p1")),
                    ("ttl", Value::Int(2500)),
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
                        ("waited", Value::Int(5000)),
                    ]),
                    map(vec![
                        ("owner", bulk("w2")),
                        ("mode", bulk("shared")),
                        ("limit", Value::Int(3)),
                        ("waited", Value::Int(40)),
                    ]),
                ]),
            ),
        ]);
        let info = LockInfo::from_reply(reply).unwrap();
        assert_eq!(
            as_text("sem", info.as_ref()),
            "sem: held (shared), 1 holder(s), 2 waiting\n\
             \x20 owner p1  token 7  ttl 2s 500ms  limit 3\n\
             \x20 queued 1: w1 (exclusive), waited 5s\n\
             \x20 queued 2: w2 (one of 3 permits), waited 40ms\n"
        );
        let json = to_json(&Json::of(b"sem", info.as_ref()));
        assert!(json.contains(r#""ttl_ms":2500,"limit":3}"#), "{json}");
        assert!(
            json.contains(r#""queue":[{"owner":"w1","mode":"exclusive","waited_ms":5000},{"owner":"w2","mode":"shared","limit":3,"waited_ms":40}]"#),
            "{json}"
        );
        // Without them (today's servers), nothing about them is shown.
        let plain = map(vec![
            ("mode", bulk("exclusive")),
            (
                "holders",
                Value::Array(vec![map(vec![
                    ("owner", bulk("a")),
                    ("ttl", Value::Int(1000)),
                    ("token", Value::Int(1)),
                ])]),
            ),
            ("waiters", Value::Int(0)),
        ]);
        let info = LockInfo::from_reply(plain).unwrap();
        assert!(!as_text("job", info.as_ref()).contains("limit"));
        assert!(!to_json(&Json::of(b"job", info.as_ref())).contains("queue"));
    }

    #[test]
    fn a_free_lock_is_said_so() {
        assert_eq!(as_text("job", None), "job: free\n");
        assert_eq!(
            to_json(&Json::of(b"job", None)),
            "{\"key\":\"job\",\"held\":false}"
        );
        assert_eq!(
            to_json(&Json::of(b"j\xffb", None)),
            "{\"key\":\"j\u{fffd}b\",\"key_hex\":\"6aff62\",\"held\":false}"
        );
    }
}
