//! What the module tells operators: `INFO lock` (the counters and the token
//! high-water mark) and the warnings it logs.

#![forbid(unsafe_code)]

use std::ffi::CStr;

use crate::ffi::datatype;
use crate::state::MODULE;

/// `(field name, value)` pairs of the INFO section; Redis prefixes them with `lock_`:
/// the counters, the gauges (`locks` in the keyspace, `keys_with_waiters`), the
/// token high-water mark, then the wait histogram (see `Stats::fields`).
pub fn info_fields() -> Vec<(&'static CStr, i64)> {
    let keys_with_waiters = MODULE
        .with(|live| live.queues.keys_waited_on())
        .unwrap_or(0);
    let gauges = [
        (c"locks", datatype::values()),
        (
            c"keys_with_waiters",
            i64::try_from(keys_with_waiters).unwrap_or(i64::MAX),
        ),
        (c"last_token", MODULE.mint.high_water()),
    ];
    let mut fields: Vec<(&'static CStr, i64)> = MODULE
        .stats
        .fields()
        .into_iter()
        .map(|(name, value)| (name, i64::try_from(value).unwrap_or(i64::MAX)))
        .collect();
    // The gauges after the counters, before the histogram: INFO readers that read
    // the counters by position keep them where they were.
    let counters = fields
        .iter()
        .position(|(name, _)| name.to_bytes().starts_with(b"wait_ms"));
    let at = counters.unwrap_or(fields.len());
    fields.splice(at..at, gauges);
    fields
}

/// The warning to log when `maxmemory-policy` is `policy`, if that policy can evict
/// locks: every policy but `noeviction` can (the volatile ones too, since every lock
/// has a TTL), and an evicted lock is lost to its holder.
pub fn eviction_warning(policy: &str) -> Option<String> {
    (policy != "noeviction").then(|| {
        format!(
            "lock module: maxmemory-policy {policy} can evict locks: a lock evicted for memory \
             is lost to its holder, and its waiters get OOM errors while memory is short; \
             use noeviction on a server that holds locks"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_but_noeviction_is_warned_of() {
        assert_eq!(eviction_warning("noeviction"), None);
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "volatile-lru",
            "allkeys-random",
        ] {
            let warning = eviction_warning(policy).unwrap();
            assert!(warning.contains(policy) && warning.contains("can evict locks"));
        }
    }
}
