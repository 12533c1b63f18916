//! How many timing scenarios (their checks depend on the clients' timing) run their
//! steps at once: a few, so that the others keep the rest of the machine. A timing
//! cell is claimed when a worker takes it, but it waits for its turn only once its
//! actors are started and open: an interpreter's start, which can take seconds on a
//! busy machine, never holds a turn another timing cell could use.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

pub struct Slots {
    /// Timing cells whose steps run at once, at most.
    size: usize,
    counts: Mutex<Counts>,
    freed: Condvar,
}

#[derive(Default)]
struct Counts {
    /// Timing cells taken by a worker and not finished.
    claimed: usize,
    /// Those of them running their steps.
    running: usize,
}

impl Slots {
    pub fn new(size: usize) -> Slots {
        Slots {
            size: size.max(1),
            counts: Mutex::new(Counts::default()),
            freed: Condvar::new(),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A claim for a timing cell, while at most `size` are claimed: one more cell's
    /// actors start while the others' steps run. (More would keep workers waiting
    /// for a turn, away from the other cells.)
    pub fn claim(&self) -> Option<Claim<'_>> {
        let mut counts = self.counts();
        if counts.claimed > self.size {
            return None;
        }
        counts.claimed += 1;
        Some(Claim {
            slots: self,
            running: AtomicBool::new(false),
        })
    }
}

/// A timing cell's claim; its turn ends when it is dropped.
pub struct Claim<'a> {
    slots: &'a Slots,
    running: AtomicBool,
}

impl Claim<'_> {
    /// Waits for a turn to run the steps (once: a second call returns at once).
    pub fn run(&self) {
        if self.running.load(Ordering::SeqCst) {
            return;
        }
        let mut counts = self.slots.counts();
        while counts.running >= self.slots.size {
            counts = self
                .slots
                .freed
                .wait(counts)
                .unwrap_or_else(|e| e.into_inner());
        }
        counts.running += 1;
        self.running.store(true, Ordering::SeqCst);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut counts = self.slots.counts();
        counts.claimed = counts.claimed.saturating_sub(1);
        if self.running.load(Ordering::SeqCst) {
            counts.running = counts.running.saturating_sub(1);
        }
        drop(counts);
        self.slots.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    #[test]
    fn claims_stop_at_one_more_than_the_size_and_free_up_when_dropped() {
        let slots = Slots::new(2);
        let claims: Vec<_> = (0..4).filter_map(|_| slots.claim()).collect();
        assert_eq!(claims.len(), 3);
        assert!(slots.claim().is_none());
        drop(claims);
        assert!(slots.claim().is_some());
    }

    #[test]
    fn no_more_than_size_claims_run_at_once() {
        let slots = Slots::new(2);
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                let claim = slots.claim();
                let (running, most) = (&running, &most);
                scope.spawn(move || {
                    let Some(claim) = claim else { return };
                    claim.run();
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                    running.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        let most = most.load(Ordering::SeqCst);
        assert!((1..=2).contains(&most), "{most} ran at once");
    }
}
