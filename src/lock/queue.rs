//! The FIFO queues of clients waiting for a lock (`LOCK.ACQUIRE … WAIT`), one per key
//! and database. Plain data: the waiter handle `W` is whatever the glue uses to
//! answer a blocked client later. A key's queue disappears with its last waiter, so
//! nothing is held for keys nobody waits on.
//!
//! Every operation costs O(log n) in the length of the queue, whatever the position
//! of the waiter it touches: a hand-off, and a mass of waiters that time out or
//! disconnect in any order, stay cheap on a lock that thousands of clients wait for.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// One blocked client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<W> {
    pub handle: W,
    pub owner: Box<[u8]>,
    pub ttl: i64,
}

/// The waiters of one key and the timer that watches the key's expiry.
#[derive(Debug)]
struct Queue<W> {
    /// By arrival number: the first entry is the longest-waiting client.
    waiters: BTreeMap<u64, Waiter<W>>,
    /// The arrival numbers of each owner's waiters (more than one when a client
    /// retries its WAIT while the first is still queued).
    by_owner: HashMap<Box<[u8]>, Vec<u64>>,
    expiry_timer: Option<u64>,
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

/// All queues of the server.
#[derive(Debug)]
pub struct Queues<W> {
    by_db: HashMap<i32, HashMap<Box<[u8]>, Queue<W>>>,
    /// Where each waiter is queued, to remove it by handle alone (disconnect, timeout).
    index: HashMap<W, (i32, Box<[u8]>, u64)>,
    /// The arrival number of the next waiter: orders waiters across all queues.
    next_arrival: u64,
}

impl<W> Default for Queues<W> {
    fn default() -> Self {
        Queues {
            by_db: HashMap::new(),
            index: HashMap::new(),
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
        let queue = self
            .by_db
            .entry(db)
            .or_default()
            .entry(key.into())
            .or_insert_with(|| Queue {
                waiters: BTreeMap::new(),
                by_owner: HashMap::new(),
                expiry_timer: None,
            });
        queue
            .by_owner
            .entry(waiter.owner.clone())
            .or_default()
            .push(arrival);
        queue.waiters.insert(arrival, waiter);
    }

    /// Takes the longest-waiting client of `key`.
    pub fn pop_front(&mut self, db: i32, key: &[u8]) -> Option<Waiter<W>> {
        let queue = self.queue_mut(db, key)?;
        let first = *queue.waiters.keys().next()?;
        let waiter = queue.take(first)?;
        self.index.remove(&waiter.handle);
        self.drop_if_empty(db, key);
        Some(waiter)
    }

    /// Takes every waiter of `key` that waits for `owner`, oldest first (the lock was
    /// just given to that owner: they all hold it now).
    pub fn take_owner(&mut self, db: i32, key: &[u8], owner: &[u8]) -> Vec<Waiter<W>> {
        let Some(queue) = self.queue_mut(db, key) else {
            return Vec::new();
        };
        let mut arrivals = queue.by_owner.remove(owner).unwrap_or_default();
        arrivals.sort_unstable();
        let taken: Vec<Waiter<W>> = arrivals
            .into_iter()
            .filter_map(|arrival| queue.waiters.remove(&arrival))
            .collect();
        for waiter in &taken {
            self.index.remove(&waiter.handle);
        }
        self.drop_if_empty(db, key);
        taken
    }

    /// Removes a waiter wherever it is queued (it disconnected or timed out).
    pub fn remove(&mut self, handle: W) -> Option<Waiter<W>> {
        let (db, key, arrival) = self.index.remove(&handle)?;
        let waiter = self.queue_mut(db, &key)?.take(arrival);
        self.drop_if_empty(db, &key);
        waiter
    }

    /// The expiry timer of `key`'s queue, if it has a queue.
    pub fn expiry_timer(&self, db: i32, key: &[u8]) -> Option<u64> {
        self.queue(db, key)?.expiry_timer
    }

    /// Records the expiry timer of `key`'s queue; returns the one it replaces. Does
    /// nothing (and returns `timer` back) when nobody waits on `key`.
    pub fn set_expiry_timer(&mut self, db: i32, key: &[u8], timer: Option<u64>) -> Option<u64> {
        match self.queue_mut(db, key) {
            Some(queue) => std::mem::replace(&mut queue.expiry_timer, timer),
            None => timer,
        }
    }

    /// Keys with waiters in `db`, or in every database for `None`.
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
        // A queue with no waiters left is dropped, with the timer id it held: the
        // glue stops timers before the last waiter leaves, or lets them find no queue.
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
            .take_owner(0, b"k", b"a")
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

    /// The queues against a plain list of (db, key, waiter), through random pushes,
    /// pops, removals and owner takes.
    #[test]
    fn queues_behave_like_a_list_in_arrival_order() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        let mut rng = StdRng::seed_from_u64(7);
        let mut queues = Queues::new();
        let mut model: Vec<(i32, u8, Waiter<u32>)> = Vec::new();
        for handle in 0..20_000u32 {
            let (db, key) = (rng.gen_range(0..2), rng.gen_range(b'a'..b'd'));
            match rng.gen_range(0..10) {
                0..=4 => {
                    let w = waiter(handle, &format!("o{}", rng.gen_range(0..6)));
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
                _ => {
                    let owner = format!("o{}", rng.gen_range(0..6));
                    let (taken, kept): (Vec<_>, Vec<_>) = model.drain(..).partition(|(d, k, w)| {
                        (*d, *k) == (db, key) && *w.owner == *owner.as_bytes()
                    });
                    model = kept;
                    let expected: Vec<_> = taken.into_iter().map(|(_, _, w)| w).collect();
                    assert_eq!(queues.take_owner(db, &[key], owner.as_bytes()), expected);
                }
            }
            assert_eq!(queues.len(), model.len());
        }
        for (db, key, w) in std::mem::take(&mut model) {
            assert_eq!(
                queues.remove(w.handle).map(|q| (db, key, q)),
                Some((db, key, w))
            );
        }
        assert!(queues.is_empty() && queues.keys(None).is_empty());
    }

    #[test]
    fn the_expiry_timer_lives_with_the_queue() {
        let mut queues = Queues::new();
        assert_eq!(
            queues.set_expiry_timer(0, b"k", Some(9)),
            Some(9),
            "no queue"
        );
        queues.push(0, b"k", waiter(1, "a"));
        assert_eq!(queues.set_expiry_timer(0, b"k", Some(7)), None);
        assert_eq!(queues.expiry_timer(0, b"k"), Some(7));
        assert_eq!(queues.set_expiry_timer(0, b"k", Some(8)), Some(7));
        queues.pop_front(0, b"k");
        assert_eq!(queues.expiry_timer(0, b"k"), None);
    }
}
