//! `redis-lock info`.

use std::time::Duration;

use redis_lock_client::{Connector, Holder, LockClient, LockInfo, Mode};
use serde::Serialize;

use crate::events;
use crate::exit;

pub async fn info<K: Connector>(locks: LockClient<K>, key: &str, json: bool) -> i32 {
    let info = match locks.lock_info(key).await {
        Ok(info) => info,
        Err(error) => return exit::failure(&error, key),
    };
    let text = if json {
        as_json(key, info.as_ref())
    } else {
        as_text(key, info.as_ref())
    };
    if events::out(&text) {
        0
    } else {
        exit::OUTPUT
    }
}

fn mode(info: &LockInfo) -> &'static str {
    match info.mode {
        Mode::Shared => "shared",
        _ => "exclusive",
    }
}

fn ttl(ttl: Option<Duration>) -> String {
    ttl.map_or_else(
        || "no expiry".into(),
        |t| humantime::format_duration(Duration::from_millis(t.as_millis() as u64)).to_string(),
    )
}

fn as_text(key: &str, info: Option<&LockInfo>) -> String {
    let Some(info) = info else {
        return format!("{key}: free\n");
    };
    let mut text = format!(
        "{key}: held ({}), {} holder(s), {} waiting\n",
        mode(info),
        info.holders.len(),
        info.waiters
    );
    for holder in &info.holders {
        text.push_str(&format!(
            "  owner {}  token {}  ttl {}\n",
            events::escaped(holder.owner.as_bytes()),
            holder.token,
            ttl(holder.ttl)
        ));
    }
    text
}

/// `info --json`: one object per line. An owner is its text; one that is not UTF-8
/// also has `owner_hex`, its exact bytes (the text then has U+FFFD in their place).
#[derive(Serialize)]
struct Json<'a> {
    key: &'a str,
    held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waiters: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Vec<JsonHolder>>,
}

#[derive(Serialize)]
struct JsonHolder {
    owner: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_hex: Option<String>,
    token: i64,
    ttl_ms: Option<u64>,
}

impl JsonHolder {
    fn of(holder: &Holder) -> JsonHolder {
        let bytes = holder.owner.as_bytes();
        let (owner, owner_hex) = match holder.owner.as_str() {
            Some(text) => (text.to_string(), None),
            None => (
                String::from_utf8_lossy(bytes).into_owned(),
                Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
            ),
        };
        JsonHolder {
            owner,
            owner_hex,
            token: holder.token,
            ttl_ms: holder
                .ttl
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

fn as_json(key: &str, info: Option<&LockInfo>) -> String {
    let json = Json {
        key,
        held: info.is_some(),
        mode: info.map(mode),
        waiters: info.map(|i| i.waiters),
        holders: info.map(|i| i.holders.iter().map(JsonHolder::of).collect()),
    };
    // Serializing strings and integers cannot fail; the fallback is never printed.
    let mut line = serde_json::to_string(&json).unwrap_or_else(|_| "{}".into());
    line.push('\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_lock_is_said_so() {
        assert_eq!(as_text("job", None), "job: free\n");
        assert_eq!(as_json("job", None), "{\"key\":\"job\",\"held\":false}\n");
    }
}
