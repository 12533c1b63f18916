//! `redis-lock info` and `redis-lock release`.

use std::time::Duration;

use redis_lock_client::{Connector, Error, LockClient, LockInfo, Mode};

use crate::events::Events;
use crate::exit;

pub async fn info<K: Connector>(locks: LockClient<K>, key: &str, json: bool) -> i32 {
    let info = match locks.lock_info(key).await {
        Ok(info) => info,
        Err(error) => return exit::failure(&error, key),
    };
    if json {
        println!("{}", as_json(key, info.as_ref()));
    } else {
        print!("{}", as_text(key, info.as_ref()));
    }
    0
}

pub async fn release<K: Connector>(
    locks: LockClient<K>,
    key: &str,
    owner: &str,
    events: &Events,
) -> i32 {
    let released = async {
        let mut con = locks
            .connector()
            .connect(Some(Duration::from_secs(5)))
            .await?;
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(key)
            .arg(owner)
            .query_async(&mut con)
            .await?;
        Ok::<_, Error>(released == 1)
    };
    match released.await {
        Ok(true) => {
            events.say(format_args!("released {key} (owner {owner})"));
            0
        }
        Ok(false) => {
            eprintln!("redis-lock: {key} is not held by {owner}");
            exit::NOT_HELD
        }
        Err(error) => exit::failure(&error, key),
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
            holder.owner,
            holder.token,
            ttl(holder.ttl)
        ));
    }
    text
}

fn as_json(key: &str, info: Option<&LockInfo>) -> String {
    let Some(info) = info else {
        return format!("{{\"key\":{},\"held\":false}}", string(key));
    };
    let holders: Vec<String> = info
        .holders
        .iter()
        .map(|h| {
            let ttl = h.ttl.map_or("null".into(), |t| t.as_millis().to_string());
            format!(
                "{{\"owner\":{},\"token\":{},\"ttl_ms\":{ttl}}}",
                string(&h.owner.to_string()),
                h.token
            )
        })
        .collect();
    format!(
        "{{\"key\":{},\"held\":true,\"mode\":\"{}\",\"waiters\":{},\"holders\":[{}]}}",
        string(key),
        mode(info),
        info.waiters,
        holders.join(",")
    )
}

/// A JSON string literal.
fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }

    #[test]
    fn a_free_lock_is_said_so() {
        assert_eq!(as_text("job", None), "job: free\n");
        assert_eq!(as_json("job", None), "{\"key\":\"job\",\"held\":false}");
    }
}
