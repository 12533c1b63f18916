//! The FIFO queues of clients waiting for a lock (`LOCK.ACQUIRE … WAIT`), one per key
//! and database. Plain data: the waiter handle `W` is whatever the glue uses to
//! answer a blocked client later. A key's queue disappears with its last waiter, so
//! nothing is held for keys nobody waits on.
//!
//! Every operation costs O(log n) in the length of the queue, whatever the position
//! of the waiter it touches: a hand-off, and a mass of waiters that time out or
//! disconnect in any order, stay cheap on a lock that thousands of clients wait for.
//!
//! Waiters' timeouts are kept here too, as absolute deadlines, rather than left to
//! Redis: a grant and a timeout decided in one place can never both answer one
//! client (Redis 7.0 lets a timeout that falls in the same event-loop turn as a
//! grant swallow the grant's reply).

use std::collections::BTreeMap;

use crate::hashing::HashMap;
use std::hash::Hash;

use crate::holdings::{Kind, Mode};

/// One blocked client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<W> {
    pub handle: W,
    pub owner: Box<[u8]>,
    pub ttl: i64,
    /// What it asks for.
    pub kind: Kind,
    /// When its WAIT times out (Unix ms); `None` waits without limit.
    pub deadline: Option<i64>,
    /// When it joined the queue (Unix ms).
    pub queued_at: i64,
}

impl<W> Waiter<W> {
    /// True once its WAIT timeout has passed at `now_ms`: it must get the null reply,
    /// not the lock.
    pub fn has_timed_out(&self, now_ms: i64) -> bool {
        self.deadline.is_some_and(|deadline| deadline <= now_ms)
    }
}

/// The waiters of one key.
#[derive(Debug)]
struct Queue<W> {
    /// By arrival number: the first entry is the longest-waiting client.
    waiters: BTreeMap<u64, Waiter<W>>,
    /// The arrival numbers of each owner's waiters (more than one when a client
    /// retries its WAIT while the first is still queued).
    by_owner: HashMap<Box<[u8]>, Vec<u64>>,
}

impl<W> Queue<W> {
    fn take(&mut self, arrival: u64) -> Option<Waiter<W>> {
        let waiter = self.waiters.remove(&arrival)?;
        if let Some(arrivals) = self.by_owner.get_mut(&waiter.owner) {
            arrivals.retain(|a| *a != arrival);
            if arrivals.is_empty() {
                self.by_owner.remove(&waiter.owner);
            }
        }
        Some(waiter)
    }
}

/// A waiter that left its queue without the lock (timed out, disconnected,
/// unblocked), and what it leaves behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departed<W> {
    pub db: i32,
    pub key: Box<[u8]>,
    pub waiter: Waiter<W>,
    /// It was first in its key's queue and others wait behind it: the new first
    /// waiter may fit where it did not (a writer left before readers, a semaphore's
    /// large request before small ones), so the glue hands off at once.
    pub new_head: bool,
}

/// All queues of the server.
#[derive(Debug)]
pub struct Queues<W> {
    by_db: HashMap<i32, HashMap<Box<[u8]>, Queue<W>>>,
    /// Where each waiter is queued, to remove it by handle alone (disconnect, timeout).
    index: HashMap<W, (i32, Box<[u8]>, u64)>,
    /// Waiters with a timeout, by (deadline, arrival): the first times out first.
    deadlines: BTreeMap<(i64, u64), W>,
    /// The arrival number of the next waiter: orders waiters across all queues.
    next_arrival: u64,
}

impl<W> Default for Queues<W> {
    fn default() -> Self {
        Queues {
            by_db: HashMap::default(),
            index: HashMap::default(),
            deadlines: BTreeMap::new(),
            next_arrival: 0,
        }
    }
}

impl<W: Copy + Eq + Hash> Queues<W> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waiters queued on all keys.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Waiters queued on `key`.
    pub fn waiting(&self, db: i32, key: &[u8]) -> usize {
        self.queue(db, key).map_or(0, |q| q.waiters.len())
    }

    fn queue(&self, db: i32, key: &[u8]) -> Option<&Queue<W>> {
        self.by_db.get(&db)?.get(key)
    }

    fn queue_mut(&mut self, db: i32, key: &[u8]) -> Option<&mut Queue<W>> {
        self.by_db.get_mut(&db)?.get_mut(key)
    }

    /// Appends a waiter at the back of `key`'s queue. A handle already queued is
    /// left where it is.
    pub fn push(&mut self, db: i32, key: &[u8], waiter: Waiter<W>) {
        if self.index.contains_key(&waiter.handle) {
            return;
        }
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.index.insert(waiter.handle, (db, key.into(), arrival));
        if let Some(deadline) = waiter.deadline {
            self.deadlines.insert((deadline, arrival), waiter.handle);
        }
        let queue = self
            .by_db
            .entry(db)
            .or_default()
            .entry(key.into())
            .or_insert_with(|| Queue {
                waiters: BTreeMap::new(),
                by_owner: HashMap::default(),
            });
        queue
            .by_owner
            .entry(waiter.owner.clone())
            .or_default()
            .push(arrival);
        queue.waiters.insert(arrival, waiter);
    }

    /// Takes the waiter that arrived `arrival`-th on `key`, from every index.
    fn take_at(&mut self, db: i32, key: &[u8], arrival: u64) -> Option<Waiter<W>> {
        let waiter = self.queue_mut(db, key)?.take(arrival)?;
        self.forget(&waiter, arrival);
        self.drop_if_empty(db, key);
        Some(waiter)
    }

    /// Drops a waiter already taken from its queue from the indexes by handle and
    /// deadline.
    fn forget(&mut self, waiter: &Waiter<W>, arrival: u64) {
        self.index.remove(&waiter.handle);
        if let Some(deadline) = waiter.deadline {
            self.deadlines.remove(&(deadline, arrival));
        }
    }

    /// The first `n` waiters of `key`, longest-waiting first, left in place: O(n).
    pub fn first(&self, db: i32, key: &[u8], n: usize) -> impl Iterator<Item = &Waiter<W>> {
        self.queue(db, key)
            .into_iter()
            .flat_map(|q| q.waiters.values())
            .take(n)
    }

    /// The longest-waiting client of `key`, left in place.
    pub fn front(&self, db: i32, key: &[u8]) -> Option<&Waiter<W>> {
        self.queue(db, key)?.waiters.values().next()
    }

    /// Takes the longest-waiting client of `key`.
    pub fn pop_front(&mut self, db: i32, key: &[u8]) -> Option<Waiter<W>> {
        let first = *self.queue(db, key)?.waiters.keys().next()?;
        self.take_at(db, key, first)
    }

    /// Takes every waiter of `key` that waits for `owner` in `mode`, oldest first (the
    /// lock was just given to that owner in that mode: they all hold it now). Its
    /// waiters in the other mode stay where they are.
    pub fn take_owner(&mut self, db: i32, key: &[u8], owner: &[u8], mode: Mode) -> Vec<Waiter<W>> {
        let Some(queue) = self.queue_mut(db, key) else {
            return Vec::new();
        };
        let arrivals = queue.by_owner.remove(owner).unwrap_or_default();
        let (mut taken_at, kept): (Vec<u64>, Vec<u64>) = arrivals
            .into_iter()
            .partition(|a| queue.waiters.get(a).is_some_and(|w| w.kind.mode() == mode));
        if !kept.is_empty() {
            queue.by_owner.insert(owner.into(), kept);
        }
        taken_at.sort_unstable();
        let taken: Vec<(u64, Waiter<W>)> = taken_at
            .into_iter()
            .filter_map(|arrival| Some((arrival, queue.waiters.remove(&arrival)?)))
            .collect();
        for (arrival, waiter) in &taken {
            self.forget(waiter, *arrival);
        }
        self.drop_if_empty(db, key);
        taken.into_iter().map(|(_, waiter)| waiter).collect()
    }

    /// Removes a waiter wherever it is queued (it disconnected or was unblocked).
    pub fn remove(&mut self, handle: W) -> Option<Waiter<W>> {
        self.depart(handle).map(|departed| departed.waiter)
    }

    /// Removes a waiter wherever it is queued, saying whether its key has a new
    /// first waiter.
    pub fn depart(&mut self, handle: W) -> Option<Departed<W>> {
        let (db, key, arrival) = self.index.get(&handle)?.clone();
        self.depart_at(db, key, arrival)
    }

    fn depart_at(&mut self, db: i32, key: Box<[u8]>, arrival: u64) -> Option<Departed<W>> {
        let was_first = self
            .queue(db, &key)
            .is_some_and(|q| q.waiters.keys().next() == Some(&arrival));
        let waiter = self.take_at(db, &key, arrival)?;
        let new_head = was_first && self.waiting(db, &key) > 0;
        Some(Departed {
            db,
            key,
            waiter,
            new_head,
        })
    }

    /// The earliest deadline of any waiter, if one has a timeout.
    pub fn next_deadline(&self) -> Option<i64> {
        self.deadlines.keys().next().map(|(deadline, _)| *deadline)
    }

    /// Takes the waiter whose timeout passed first, if its deadline is at or before
    /// `now_ms`, with the key it waited on.
    pub fn pop_timed_out(&mut self, now_ms: i64) -> Option<Departed<W>> {
        let (&(deadline, _), &handle) = self.deadlines.iter().next()?;
        if deadline > now_ms {
            return None;
        }
        self.depart(handle)
    }

    /// Keys with waiters in `db`, or in every database for `None`.
    /// How many keys have waiters now, over every database.
    pub fn keys_waited_on(&self) -> usize {
        self.by_db.values().map(HashMap::len).sum()
    }

    pub fn keys(&self, db: Option<i32>) -> Vec<(i32, Box<[u8]>)> {
        self.by_db
            .iter()
            .filter(|(d, _)| db.is_none_or(|wanted| wanted == **d))
            .flat_map(|(d, keys)| keys.keys().map(move |k| (*d, k.clone())))
            .collect()
    }

    fn drop_if_empty(&mut self, db: i32, key: &[u8]) {
        let Some(keys) = self.by_db.get_mut(&db) else {
            return;
        };
        // A queue with no waiters left is dropped.
        if keys.get(key).is_some_and(|q| q.waiters.is_empty()) {
            keys.remove(key);
        }
        if keys.is_empty() {
            self.by_db.remove(&db);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(handle: u32, owner: &str) -> Waiter<u32> {
        Waiter {
            handle,
            owner: owner.as_bytes().into(),
            ttl: 1000,
            kind: Kind::Exclusive,
            deadline: None,
            queued_at: 0,
        }
    }

    fn waiter_until(handle: u32, owner: &str, deadline: i64) -> Waiter<u32> {
        Waiter {
            deadline: Some(deadline),
            queued_at: 0,
            ..waiter(handle, owner)
        }
    }

    #[test]
    fn waiters_leave_in_the_order_they_came() {
        let mut queues = Queues::new();
        for h in 1..=5 {
            queues.push(0, b"k", waiter(h, &format!("o{h}")));
        }
        assert_eq!(queues.waiting(0, b"k"), 5);
        let order: Vec<u32> = std::iter::from_fn(|| queues.pop_front(0, b"k"))
            .map(|w| w.handle)
            .collect();
        assert_eq!(order, [1, 2, 3, 4, 5]);
        assert!(queues.is_empty());
        assert!(
            queues.keys(None).is_empty(),
            "no memory held for an empty queue"
        );
    }

    #[test]
    fn queues_are_per_key_and_per_database() {
        let mut queues = Queues::new();
        queues.push(0, b"a", waiter(1, "x"));
        queues.push(0, b"b", waiter(2, "x"));
        queues.push(1, b"a", waiter(3, "x"));
        assert_eq!(queues.waiting(0, b"a"), 1);
        assert_eq!(queues.pop_front(1, b"a").map(|w| w.handle), Some(3));
        assert_eq!(queues.pop_front(1, b"a"), None);
        let mut keys = queues.keys(Some(0));
        keys.sort();
        assert_eq!(keys, [(0, b"a"[..].into()), (0, b"b"[..].into())]);
        assert_eq!(queues.keys(Some(1)), []);
        assert_eq!(queues.len(), 2);
    }

    #[test]
    fn a_removed_waiter_is_never_popped() {
        let mut queues = Queues::new();
        queues.push(0, b"k", waiter(1, "a"));
        queues.push(0, b"k", waiter(2, "b"));
        queues.push(0, b"k", waiter(3, "c"));
        assert_eq!(queues.remove(2).map(|w| w.owner), Some(b"b"[..].into()));
        assert_eq!(queues.remove(2), None, "removing twice is harmless");
        assert_eq!(queues.pop_front(0, b"k").map(|w| w.handle), Some(1));
        assert_eq!(queues.pop_front(0, b"k").map(|w| w.handle), Some(3));
        assert!(queues.is_empty());
    }

    #[test]
    fn a_handle_is_queued_once() {
        let mut queues = Queues::new();
        queues.push(0, b"k", waiter(1, "a"));
        queues.push(0, b"other", waiter(1, "a"));
        assert_eq!(queues.len(), 1);
        assert_eq!(queues.waiting(0, b"other"), 0);
    }

    #[test]
    fn waiters_of_the_new_holder_are_taken_together() {
        let mut queues = Queues::new();
        queues.push(0, b"k", waiter(1, "a"));
        queues.push(0, b"k", waiter(2, "b"));
        queues.push(0, b"k", waiter(3, "a"));
        let taken: Vec<u32> = queues
            .take_owner(0, b"k", b"a", Mode::Exclusive)
            .into_iter()
            .map(|w| w.handle)
            .collect();
        assert_eq!(taken, [1, 3]);
        assert_eq!(queues.len(), 1);
        assert_eq!(queues.remove(3), None);
        assert_eq!(queues.pop_front(0, b"k").map(|w| w.handle), Some(2));
    }

    #[test]
    fn waiters_leave_from_any_position_and_the_rest_keep_their_order() {
        let mut queues = Queues::new();
        for h in 1..=6 {
            queues.push(0, b"k", waiter(h, &format!("o{h}")));
        }
        // The back, the middle, then the front: a mass of disconnects in any order.
        for h in [6, 3, 1] {
            assert_eq!(queues.remove(h).map(|w| w.handle), Some(h));
        }
        let order: Vec<u32> = std::iter::from_fn(|| queues.pop_front(0, b"k"))
            .map(|w| w.handle)
            .collect();
        assert_eq!(order, [2, 4, 5]);
        assert!(queues.keys(None).is_empty());
    }

    /// The queues against a plain list of (db, key, waiter) in arrival order,
    /// through random pushes, pops, removals, owner takes and timeouts.
    #[test]
    fn queues_behave_like_a_list_in_arrival_order() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        let mut rng = StdRng::seed_from_u64(7);
        let mut queues = Queues::new();
        let mut model: Vec<(i32, u8, Waiter<u32>)> = Vec::new();
        for handle in 0..20_000u32 {
            let (db, key) = (rng.gen_range(0..2), rng.gen_range(b'a'..b'd'));
            match rng.gen_range(0..12) {
                0..=4 => {
                    let owner = format!("o{}", rng.gen_range(0..6));
                    let w = match rng.gen_range(0..3) {
                        0 => waiter(handle, &owner),
                        _ => waiter_until(handle, &owner, rng.gen_range(0..100)),
                    };
                    queues.push(db, &[key], w.clone());
                    model.push((db, key, w));
                }
                5 | 6 => {
                    let at = model.iter().position(|(d, k, _)| (*d, *k) == (db, key));
                    let expected = at.map(|at| model.remove(at).2);
                    assert_eq!(queues.pop_front(db, &[key]), expected);
                }
                7 | 8 if !model.is_empty() => {
                    let (_, _, w) = model.remove(rng.gen_range(0..model.len()));
                    assert_eq!(queues.remove(w.handle), Some(w));
                }
                9 => {
                    let now = rng.gen_range(0..100);
                    // The first to time out: the earliest deadline, then the earliest
                    // arrival (the model's order).
                    let first = model
                        .iter()
                        .enumerate()
                        .filter(|(_, (_, _, w))| w.has_timed_out(now))
                        .min_by_key(|(_, (_, _, w))| w.deadline)
                        .map(|(at, _)| at);
                    let expected = first.map(|at| {
                        let (d, k, w) = model.remove(at);
                        (d, vec![k].into_boxed_slice(), w)
                    });
                    let popped = queues.pop_timed_out(now).map(|d| (d.db, d.key, d.waiter));
                    assert_eq!(popped, expected);
                }
                _ => {
                    let owner = format!("o{}", rng.gen_range(0..6));
                    let (taken, kept): (Vec<_>, Vec<_>) = model.drain(..).partition(|(d, k, w)| {
                        (*d, *k) == (db, key) && *w.owner == *owner.as_bytes()
                    });
                    model = kept;
                    let expected: Vec<_> = taken.into_iter().map(|(_, _, w)| w).collect();
                    let taken = queues.take_owner(db, &[key], owner.as_bytes(), Mode::Exclusive);
                    assert_eq!(taken, expected);
                }
            }
            assert_eq!(queues.len(), model.len());
            let earliest = model.iter().filter_map(|(_, _, w)| w.deadline).min();
            assert_eq!(queues.next_deadline(), earliest);
        }
        for (db, key, w) in std::mem::take(&mut model) {
            assert_eq!(
                queues.remove(w.handle).map(|q| (db, key, q)),
                Some((db, key, w))
            );
        }
        assert!(queues.is_empty() && queues.keys(None).is_empty());
        assert_eq!(queues.next_deadline(), None);
    }

    #[test]
    fn an_owners_waiters_in_the_other_mode_stay_queued() {
        let mut queues = Queues::new();
        queues.push(0, b"k", waiter(1, "a"));
        queues.push(
            0,
            b"k",
            Waiter {
                kind: Kind::Shared { limit: None },
                ..waiter(2, "a")
            },
        );
        queues.push(0, b"k", waiter(3, "a"));
        let taken: Vec<u32> = queues
            .take_owner(0, b"k", b"a", Mode::Exclusive)
            .into_iter()
            .map(|w| w.handle)
            .collect();
        assert_eq!(taken, [1, 3]);
        assert_eq!(queues.front(0, b"k").map(|w| w.handle), Some(2));
        let shared = queues.take_owner(0, b"k", b"a", Mode::Shared);
        assert_eq!(shared.len(), 1);
        assert!(queues.is_empty());
    }

    #[test]
    fn waiters_time_out_in_deadline_order_whatever_their_keys() {
        let mut queues = Queues::new();
        queues.push(0, b"a", waiter_until(1, "x", 300));
        queues.push(0, b"b", waiter_until(2, "y", 100));
        queues.push(0, b"a", waiter(3, "z"));
        queues.push(1, b"a", waiter_until(4, "x", 200));
        assert_eq!(queues.next_deadline(), Some(100));
        assert_eq!(queues.pop_timed_out(99), None, "nothing is due yet");
        let due: Vec<(i32, u32)> = std::iter::from_fn(|| queues.pop_timed_out(250))
            .map(|d| (d.db, d.waiter.handle))
            .collect();
        assert_eq!(due, [(0, 2), (1, 4)]);
        assert_eq!(queues.next_deadline(), Some(300));
        assert_eq!(queues.waiting(0, b"b"), 0);
        assert_eq!(queues.pop_front(0, b"a").map(|w| w.handle), Some(1));
        assert_eq!(
            queues.next_deadline(),
            None,
            "a waiter that left has no deadline"
        );
        assert_eq!(queues.pop_timed_out(i64::MAX), None);
        assert_eq!(queues.len(), 1, "a waiter without timeout never times out");
    }

    #[test]
    fn a_departure_says_when_its_key_has_a_new_first_waiter() {
        let mut queues = Queues::new();
        queues.push(0, b"k", waiter_until(1, "a", 10));
        queues.push(0, b"k", waiter(2, "b"));
        queues.push(0, b"k", waiter(3, "c"));
        queues.push(0, b"other", waiter(4, "d"));
        let middle = queues.depart(2).unwrap();
        assert!(!middle.new_head, "the first waiter is still there");
        let first = queues.pop_timed_out(10).unwrap();
        assert_eq!((first.waiter.handle, &*first.key), (1, &b"k"[..]));
        assert!(first.new_head, "3 heads the queue now");
        let last = queues.depart(3).unwrap();
        assert!(!last.new_head, "nobody is left behind it");
        assert!(!queues.depart(4).unwrap().new_head);
        assert_eq!(queues.depart(4), None);
    }

    #[test]
    fn a_waiter_that_leaves_any_other_way_takes_its_deadline_along() {
        let mut queues = Queues::new();
        queues.push(0, b"k", waiter_until(1, "a", 10));
        queues.push(0, b"k", waiter_until(2, "b", 20));
        queues.push(0, b"k", waiter_until(3, "a", 30));
        queues.remove(2);
        assert_eq!(queues.take_owner(0, b"k", b"a", Mode::Exclusive).len(), 2);
        assert_eq!(queues.next_deadline(), None);
        assert_eq!(queues.pop_timed_out(i64::MAX), None);
    }

    #[test]
    fn a_waiter_times_out_at_its_deadline_not_before() {
        let w = waiter_until(1, "a", 500);
        assert!(!w.has_timed_out(499));
        assert!(w.has_timed_out(500));
        assert!(!waiter(2, "a").has_timed_out(i64::MAX));
    }
}
