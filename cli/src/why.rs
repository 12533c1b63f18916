//! Why `run` could not hold the lock, in words for its event lines: what a busy
//! lock is held by (a semaphore's permits all in use), and what the client saw
//! when a held lock was lost.

use std::time::{Duration, Instant};

use redis_lock_client::{Connector, Lock, LockClient, LockInfo, Mode};

use crate::events::{self, Lost};

/// How long a question to the server about a lost lock may take.
const ASK_LIMIT: Duration = Duration::from_secs(2);

/// Why a request for `limit` permits (or none) found the lock busy, from its info.
pub fn busy(info: &LockInfo, limit: Option<u32>) -> String {
    let holders = &info.holders;
    let held_by = match holders.as_slice() {
        [one] => format!(
            "held by {} ({}token {}, {} left)",
            events::escaped(one.owner.as_bytes()),
            if info.mode == Mode::Shared {
                "shared, "
            } else {
                ""
            },
            one.token,
            one.ttl.map_or("no expiry".into(), |t| {
                humantime::format_duration(Duration::from_millis(t.as_millis() as u64)).to_string()
            })
        ),
        many => {
            let names: Vec<String> = many
                .iter()
                .take(3)
                .map(|h| events::escaped(h.owner.as_bytes()))
                .collect();
            let more = many.len().saturating_sub(names.len());
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!("held by {}{more}", names.join(", "))
        }
    };
    let queued = if info.waiters > 0 {
        format!("; {} waiting before any newcomer", info.waiters)
    } else {
        String::new()
    };
    match limit {
        Some(n) if info.mode == Mode::Shared && holders.len() >= n as usize => {
            format!(": all {n} permits are in use ({held_by}){queued}")
        }
        _ => format!(": {held_by}{queued}"),
    }
}

/// Why the lock was lost, in words: what the client's renewer saw (it says so
/// within moments of the loss signal), and for a renewal answered 0 what the server
/// has at the key now.
pub async fn lost<K: Connector>(locks: &LockClient<K>, lock: &Lock) -> String {
    let deadline = Instant::now() + LOSS_ACCOUNT_LIMIT;
    let mut said = events::renewals();
    while said.lost.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        said = events::renewals();
    }
    match said.lost {
        Some(Lost::Refused) => {
            let now = match tokio::time::timeout(ASK_LIMIT, locks.lock_info(lock.key())).await {
                Ok(Ok(None)) => "; the key no longer exists: deleted, or expired".to_string(),
                Ok(Ok(Some(info))) => format!(
                    "; it is held by {} now",
                    events::escaped(info.owner.as_bytes())
                ),
                _ => String::new(),
            };
            format!("a renewal was answered 0: the server no longer holds it for this owner{now}")
        }
        _ => {
            let mut text = "no renewal was acknowledged before the lease ran out".to_string();
            if let Some(error) = said.last_error {
                text.push_str(&format!("; the last renewal failed: {error}"));
            }
            text
        }
    }
}

/// How long the loss line waits for the renewer's account of the loss.
const LOSS_ACCOUNT_LIMIT: Duration = Duration::from_millis(200);
