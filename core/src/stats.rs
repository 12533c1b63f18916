//! Counters reported by `INFO lock`.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// One counter per event contract.md "Observability" names. Module code runs on
/// Redis's main thread; the atomics only make the static `Sync` without `unsafe`.
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
    /// How long each holding released by its holder was held, from its first grant
    /// (read from its token, see `held_since`) to the release.
    pub hold_ms: Histogram,
    /// For each grant to a queued waiter, how long the lock stood free before it:
    /// from the release, `DEL` or lapse that made room to the grant.
    pub handoff_ms: Histogram,
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

    /// The histogram's INFO values in the order of `histogram_fields!`: the
    /// cumulative buckets, the sum, the count.
    fn values(&self) -> impl Iterator<Item = u64> {
        let buckets = self.cumulative();
        let count = buckets.last().copied().unwrap_or(0);
        buckets.into_iter().chain([self.sum(), count])
    }
}

/// The INFO field names of a histogram: one per bucket (`<name>_le_<bound>`, then
/// `<name>_le_inf`), its sum and its count. Checked when the crate compiles.
macro_rules! histogram_fields {
    ($name:literal) => {
        [
            cstr(concat!($name, "_le_1\0")),
            cstr(concat!($name, "_le_5\0")),
            cstr(concat!($name, "_le_10\0")),
            cstr(concat!($name, "_le_50\0")),
            cstr(concat!($name, "_le_100\0")),
            cstr(concat!($name, "_le_500\0")),
            cstr(concat!($name, "_le_1000\0")),
            cstr(concat!($name, "_le_5000\0")),
            cstr(concat!($name, "_le_10000\0")),
            cstr(concat!($name, "_le_30000\0")),
            cstr(concat!($name, "_le_60000\0")),
            cstr(concat!($name, "_le_inf\0")),
            cstr(concat!($name, "_sum\0")),
            cstr(concat!($name, "_count\0")),
        ]
    };
}

/// A C string literal made by `concat!`; evaluated at compile time only.
const fn cstr(text: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(text.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("a histogram field name is not a C string"),
    }
}

/// Fields per histogram: its buckets, `+Inf`, the sum and the count.
const HISTOGRAM_FIELDS: usize = BUCKETS_MS.len() + 3;
const WAIT_MS_FIELDS: [&CStr; HISTOGRAM_FIELDS] = histogram_fields!("wait_ms");
const HOLD_MS_FIELDS: [&CStr; HISTOGRAM_FIELDS] = histogram_fields!("hold_ms");
const HANDOFF_MS_FIELDS: [&CStr; HISTOGRAM_FIELDS] = histogram_fields!("handoff_ms");

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
            hold_ms: Histogram::new(),
            handoff_ms: Histogram::new(),
        }
    }

    /// The counters as `(INFO field name, value)`, in a stable order, then the
    /// histograms of waits, holds and hand-offs (`wait_ms_le_<bound>` cumulative,
    /// `wait_ms_sum`, `wait_ms_count`, and so on).
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
        counters
            .into_iter()
            .chain(WAIT_MS_FIELDS.into_iter().zip(self.wait_ms.values()))
            .chain(HOLD_MS_FIELDS.into_iter().zip(self.hold_ms.values()))
            .chain(HANDOFF_MS_FIELDS.into_iter().zip(self.handoff_ms.values()))
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

    #[test]
    fn each_histogram_has_its_own_fields() {
        let stats = Stats::new();
        stats.hold_ms.observe(7);
        stats.handoff_ms.observe(0);
        stats.handoff_ms.observe(40);
        let fields = stats.fields();
        let field = |name: &CStr| fields.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        assert_eq!(field(c"hold_ms_le_5"), Some(0));
        assert_eq!(field(c"hold_ms_le_10"), Some(1));
        assert_eq!(field(c"hold_ms_sum"), Some(7));
        assert_eq!(field(c"handoff_ms_le_1"), Some(1));
        assert_eq!(field(c"handoff_ms_le_50"), Some(2));
        assert_eq!(field(c"handoff_ms_count"), Some(2));
        assert_eq!(field(c"wait_ms_count"), Some(0));
        assert_eq!(fields.len(), 10 + 3 * HISTOGRAM_FIELDS);
    }
}
