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

    /// A claim for a timing cell, while `size` at most are claimed (so `size + 1`
    /// in all): one more cell's actors start while the others' steps run. More
    /// would keep workers waiting for a turn, away from the other cells.
    pub fn claim(&self) -> Option<Claim<'_>> {
        let mut counts = self.counts();
        self.take(&mut counts)
    }

    /// A claim, waiting for one to be dropped when none is left.
    pub fn claim_waiting(&self) -> Claim<'_> {
        let mut counts = self.counts();
        loop {
            if let Some(claim) = self.take(&mut counts) {
                return claim;
            }
            counts = self.freed.wait(counts).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn take(&self, counts: &mut Counts) -> Option<Claim<'_>> {
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
    fn a_waiting_claim_is_given_when_another_is_dropped() {
        let slots = Slots::new(1);
        let first = slots.claim();
        let second = slots.claim();
        assert!(first.is_some() && second.is_some() && slots.claim().is_none());
        std::thread::scope(|scope| {
            let waiting = scope.spawn(|| {
                let _claim = slots.claim_waiting();
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiting.is_finished(), "a third claim while two are held");
            drop(first);
            waiting.join().unwrap();
        });
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
