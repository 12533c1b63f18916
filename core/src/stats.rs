//! Counters reported by `INFO lock`.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter per event the spec names. Module code runs on Redis's main thread; the
/// atomics only make the static `Sync` without `unsafe`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Fresh grants (not refreshes by the holder), including hand-offs to waiters.
    pub acquisitions: Counter,
    /// Acquires by the holder that refreshed its TTL.
    pub refreshes: Counter,
    /// Acquires that found the lock held by another owner.
    pub contended: Counter,
    /// Successful releases by the holder.
    pub releases: Counter,
    /// Successful extends by the holder.
    pub extends: Counter,
    /// Held locks that reached their TTL and were removed by Redis.
    pub expirations: Counter,
    /// Held locks evicted by Redis for memory (any policy but noeviction).
    pub evictions: Counter,
    /// Clients blocked in a WAIT queue right now.
    pub waiters: Counter,
    /// Waiters whose timeout passed before they got the lock.
    pub wait_timeouts: Counter,
    /// Locks handed to a waiter when they freed.
    pub hand_offs: Counter,
}

/// A counter that can go up and, for gauges such as `waiters`, down.
///
/// Redis runs module code on its main thread only, so each counter has one writer:
/// a plain load and store (as in `TokenMint::mint`) is enough, and keeps a locked
/// read-modify-write instruction off every command.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }

    pub fn incr(&self) {
        self.set(self.get().saturating_add(1));
    }

    /// Adds `n`, never past `u64::MAX`.
    pub fn add(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.set(self.get().saturating_add(n));
    }

    /// Subtracts `n`, never below 0.
    pub fn sub(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.set(self.get().saturating_sub(n));
    }

    /// Decrements, never below 0.
    pub fn decr(&self) {
        self.sub(1);
    }

    fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Stats {
    pub const fn new() -> Self {
        Stats {
            acquisitions: Counter::new(),
            refreshes: Counter::new(),
            contended: Counter::new(),
            releases: Counter::new(),
            extends: Counter::new(),
            expirations: Counter::new(),
            evictions: Counter::new(),
            waiters: Counter::new(),
            wait_timeouts: Counter::new(),
            hand_offs: Counter::new(),
        }
    }

    /// The counters as `(INFO field name, value)`, in a stable order.
    pub fn fields(&self) -> [(&'static CStr, u64); 10] {
        [
            (c"acquisitions", self.acquisitions.get()),
            (c"refreshes", self.refreshes.get()),
            (c"contended", self.contended.get()),
            (c"releases", self.releases.get()),
            (c"extends", self.extends.get()),
            (c"expirations", self.expirations.get()),
            (c"evictions", self.evictions.get()),
            (c"waiters", self.waiters.get()),
            (c"wait_timeouts", self.wait_timeouts.get()),
            (c"hand_offs", self.hand_offs.get()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_count_and_gauges_stop_at_zero() {
        let stats = Stats::new();
        stats.releases.incr();
        stats.releases.incr();
        stats.waiters.decr();
        let fields = stats.fields();
        assert!(fields.contains(&(c"releases", 2)));
        assert!(fields.contains(&(c"waiters", 0)));
    }
}
