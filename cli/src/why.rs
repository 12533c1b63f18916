//! Why `run` could not hold the lock, in words for its event lines: what a busy
//! lock is held by (a semaphore's permits all in use), and what the client saw
//! when a held lock was lost.

use std::time::{Duration, Instant};

use redis_lock_client::{Connector, Lock, LockClient, LockInfo, LossCause, Mode};

use crate::events;

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

/// Why the lock was lost, in words: what the client saw (`Lock::cause`; a renewal
/// in flight when the lease ran out may still be answered 0, so a lease run out is
/// given that long to say more), and for a renewal answered 0 what the server has at
/// the key now.
pub async fn lost<K: Connector>(locks: &LockClient<K>, lock: &Lock) -> String {
    let deadline = Instant::now() + LOSS_ACCOUNT_LIMIT;
    let mut cause = lock.cause();
    while !matches!(cause, Some(LossCause::Refused | LossCause::Released))
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
        cause = lock.cause();
    }
    match cause {
        Some(LossCause::Refused) => {
            let now = match tokio::time::timeout(ASK_LIMIT, locks.lock_info(lock.key())).await {
                Ok(Ok(None)) => "; the key no longer exists: deleted, or expired".to_string(),
                Ok(Ok(Some(info))) => format!(
                    "; it is held by {} now",
                    events::escaped(info.owner.as_bytes())
                ),
                _ => String::new(),
            };
            format!("{}{now}", LossCause::Refused)
        }
        Some(cause) => cause.to_string(),
        None => LossCause::LeaseRanOut { last_error: None }.to_string(),
    }
}

/// How long the loss line waits for the renewer's account of the loss.
const LOSS_ACCOUNT_LIMIT: Duration = Duration::from_millis(200);
