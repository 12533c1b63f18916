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
    /// How long each granted waiter waited, from joining the queue to its grant.
    pub wait_ms: Histogram,
}

/// A distribution of durations in milliseconds, as Prometheus keeps one: a count per
/// bucket (reported cumulatively, each bucket counting every duration at most its
/// bound), the sum and the count. O(1) per observation.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [Counter; BUCKETS_MS.len() + 1],
    sum: Counter,
}

/// The buckets' upper bounds in ms; one more bucket takes the rest (`+Inf`).
pub const BUCKETS_MS: [i64; 11] = [1, 5, 10, 50, 100, 500, 1_000, 5_000, 10_000, 30_000, 60_000];

impl Histogram {
    pub const fn new() -> Self {
        Histogram {
            buckets: [const { Counter::new() }; BUCKETS_MS.len() + 1],
            sum: Counter::new(),
        }
    }

    /// Counts one duration (a negative one, from a clock that went back, as 0).
    pub fn observe(&self, ms: i64) {
        let ms = ms.max(0);
        let bucket = BUCKETS_MS
            .iter()
            .position(|&bound| ms <= bound)
            .unwrap_or(BUCKETS_MS.len());
        if let Some(counter) = self.buckets.get(bucket) {
            counter.incr();
        }
        self.sum.add(usize::try_from(ms).unwrap_or(usize::MAX));
    }

    /// The cumulative count of each bucket, `+Inf` last (the total count).
    pub fn cumulative(&self) -> [u64; BUCKETS_MS.len() + 1] {
        let mut total = 0u64;
        let mut out = [0; BUCKETS_MS.len() + 1];
        for (slot, bucket) in out.iter_mut().zip(&self.buckets) {
            total = total.saturating_add(bucket.get());
            *slot = total;
        }
        out
    }

    pub fn sum(&self) -> u64 {
        self.sum.get()
    }
}

/// The INFO names of the wait histogram's fields: one per bucket, then sum and count.
const WAIT_MS_FIELDS: [&CStr; BUCKETS_MS.len() + 1] = [
    c"wait_ms_le_1",
    c"wait_ms_le_5",
    c"wait_ms_le_10",
    c"wait_ms_le_50",
    c"wait_ms_le_100",
    c"wait_ms_le_500",
    c"wait_ms_le_1000",
    c"wait_ms_le_5000",
    c"wait_ms_le_10000",
    c"wait_ms_le_30000",
    c"wait_ms_le_60000",
    c"wait_ms_le_inf",
];

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
            wait_ms: Histogram::new(),
        }
    }

    /// The counters as `(INFO field name, value)`, in a stable order, then the wait
    /// histogram (`wait_ms_le_<bound>` cumulative, `wait_ms_sum`, `wait_ms_count`).
    pub fn fields(&self) -> Vec<(&'static CStr, u64)> {
        let counters = [
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
        ];
        let waits = self.wait_ms.cumulative();
        let count = waits.last().copied().unwrap_or(0);
        counters
            .into_iter()
            .chain(WAIT_MS_FIELDS.into_iter().zip(waits))
            .chain([
                (c"wait_ms_sum", self.wait_ms.sum()),
                (c"wait_ms_count", count),
            ])
            .collect()
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

    #[test]
    fn waits_fall_in_cumulative_buckets_with_their_sum_and_count() {
        let stats = Stats::new();
        for ms in [0, 1, 2, 700, 120_000, -5] {
            stats.wait_ms.observe(ms);
        }
        let fields = stats.fields();
        let field = |name: &CStr| fields.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(field(c"wait_ms_le_1"), Some(3));
        assert_eq!(field(c"wait_ms_le_5"), Some(4));
        assert_eq!(field(c"wait_ms_le_500"), Some(4));
        assert_eq!(field(c"wait_ms_le_1000"), Some(5));
        assert_eq!(field(c"wait_ms_le_60000"), Some(5));
        assert_eq!(field(c"wait_ms_le_inf"), Some(6));
        assert_eq!(field(c"wait_ms_count"), Some(6));
        assert_eq!(field(c"wait_ms_sum"), Some(120_703));
    }
}
