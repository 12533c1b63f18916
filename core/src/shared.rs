//! The shared holdings of one lock, indexed so that a lock read or written by many
//! owners at once costs each of them O(log n) in the number of holdings.
//!
//! Clients build a lock of tens of thousands of readers or permits with plain
//! `SHARED` acquires, and every holding then pays for every other if they sit in one
//! list: an acquire, release or extend would look for its owner through them all,
//! a release would search them for the key's next expiry, a hand-off to N readers
//! would do so N times, and loading such a lock (restart, full resync, RESTORE,
//! MIGRATE) would compare each holding with every earlier one. Here each holding is
//! kept three ways:
//!
//! - in grant order (oldest first), as replies, RDB, AOF and digests list them;
//! - by owner, for the rules' one question about a caller's holding;
//! - by expiry, for the next to lapse, the last to go (the key's expiry), and the
//!   lapsed ones, which a settle removes at O(log n) each.

use std::collections::{BTreeMap, BTreeSet};

use crate::hashing::HashMap;
use std::ops::Bound;

use crate::owner::Owner;

/// One shared holding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedHolding {
    pub token: i64,
    /// Absolute expiry, Unix ms.
    pub expires_at: i64,
    pub owner: Owner,
    /// The `LIMIT` it was granted with (a semaphore's permits), if any.
    pub limit: Option<u32>,
}

/// The shared holdings of a lock, each owner's at most once.
#[derive(Debug, Clone, Default)]
pub struct SharedHoldings {
    /// By grant number: the first entry is the oldest holding.
    by_grant: BTreeMap<u64, SharedHolding>,
    /// Each owner's grant number.
    by_owner: HashMap<Owner, u64>,
    /// (expiry, grant number) of every holding: the first lapses first.
    by_expiry: BTreeSet<(i64, u64)>,
    /// The grant number of the next holding added.
    next_grant: u64,
    /// Heap bytes of owners too long to sit inline, kept up to date so that
    /// `MEMORY USAGE` does not walk the holdings.
    owner_heap: usize,
}

/// Bytes a holding costs in the three indexes beside its own (an estimate of the
/// trees' and table's per-entry overhead, for `MEMORY USAGE`).
const INDEX_BYTES_PER_HOLDING: usize =
    std::mem::size_of::<(u64, Owner)>() + std::mem::size_of::<(i64, u64)>() + 3 * 8;

impl PartialEq for SharedHoldings {
    /// The same holdings in the same grant order (grant numbers are private).
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for SharedHoldings {}

impl SharedHoldings {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.by_grant.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_grant.is_empty()
    }

    /// The holdings, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &SharedHolding> + '_ {
        self.by_grant.values()
    }

    /// `owner`'s holding, lapsed or not.
    pub fn get(&self, owner: &[u8]) -> Option<&SharedHolding> {
        self.by_grant.get(self.by_owner.get(owner)?)
    }

    /// Adds a holding after the others; false (and nothing changes) when its owner
    /// already has one.
    pub fn push(&mut self, holding: SharedHolding) -> bool {
        if self.by_owner.contains_key(holding.owner.as_bytes()) {
            return false;
        }
        let grant = self.next_grant;
        // 2^64 adds to one lock cannot happen; saturating keeps it panic-free anyway.
        self.next_grant = grant.saturating_add(1);
        self.by_expiry.insert((holding.expires_at, grant));
        self.by_owner.insert(holding.owner.clone(), grant);
        self.owner_heap = self.owner_heap.saturating_add(holding.owner.heap_size());
        self.by_grant.insert(grant, holding);
        true
    }

    /// Sets the token and expiry of `owner`'s holding, which keeps its place in
    /// grant order; false when it has none.
    pub fn set(&mut self, owner: &[u8], token: i64, expires_at: i64) -> bool {
        let Some(&grant) = self.by_owner.get(owner) else {
            return false;
        };
        let Some(holding) = self.by_grant.get_mut(&grant) else {
            return false;
        };
        if holding.expires_at != expires_at {
            self.by_expiry.remove(&(holding.expires_at, grant));
            self.by_expiry.insert((expires_at, grant));
            holding.expires_at = expires_at;
        }
        holding.token = token;
        true
    }

    /// Sets the limit `owner`'s holding was granted with; false when it has none.
    pub fn set_limit(&mut self, owner: &[u8], limit: Option<u32>) -> bool {
        let Some(&grant) = self.by_owner.get(owner) else {
            return false;
        };
        match self.by_grant.get_mut(&grant) {
            Some(holding) => {
                holding.limit = limit;
                true
            }
            None => false,
        }
    }

    /// Sets the expiry of `owner`'s holding; false when it has none.
    pub fn set_expiry(&mut self, owner: &[u8], expires_at: i64) -> bool {
        match self.get(owner).map(|h| h.token) {
            Some(token) => self.set(owner, token, expires_at),
            None => false,
        }
    }

    /// Removes `owner`'s holding and returns it.
    pub fn remove(&mut self, owner: &[u8]) -> Option<SharedHolding> {
        let grant = self.by_owner.remove(owner)?;
        self.take(grant)
    }

    /// Removes the holding with grant number `grant` from the grant and expiry
    /// indexes (the caller has removed it by owner).
    fn take(&mut self, grant: u64) -> Option<SharedHolding> {
        let holding = self.by_grant.remove(&grant)?;
        self.by_expiry.remove(&(holding.expires_at, grant));
        self.owner_heap = self.owner_heap.saturating_sub(holding.owner.heap_size());
        Some(holding)
    }

    /// The earliest expiry.
    pub fn earliest(&self) -> Option<i64> {
        self.by_expiry.first().map(|(at, _)| *at)
    }

    /// The latest expiry.
    pub fn latest(&self) -> Option<i64> {
        self.by_expiry.last().map(|(at, _)| *at)
    }

    /// The latest expiry among the holdings of owners other than `owner`.
    pub fn latest_but(&self, owner: &[u8]) -> Option<i64> {
        let mine = self.by_owner.get(owner);
        // At most one entry is `owner`'s: the last two entries decide.
        self.by_expiry
            .iter()
            .rev()
            .find(|(_, grant)| Some(grant) != mine)
            .map(|(at, _)| *at)
    }

    /// How many holdings expire before `now_ms` (lapsed: a holding holds until its
    /// time is strictly past). O(log n) plus the lapsed ones, which a settle removes.
    pub fn lapsed_count(&self, now_ms: i64) -> usize {
        self.by_expiry.range(..(now_ms, 0)).count()
    }

    /// Removes the holdings that expire before `now_ms`; returns them oldest first.
    pub fn remove_lapsed(&mut self, now_ms: i64) -> Vec<SharedHolding> {
        let mut grants = Vec::new();
        while let Some(&(at, grant)) = self.by_expiry.first() {
            if at >= now_ms {
                break;
            }
            self.by_expiry.pop_first();
            grants.push(grant);
        }
        grants.sort_unstable();
        let mut lapsed = Vec::with_capacity(grants.len());
        for grant in grants {
            if let Some(holding) = self.by_grant.remove(&grant) {
                self.by_owner.remove(holding.owner.as_bytes());
                self.owner_heap = self.owner_heap.saturating_sub(holding.owner.heap_size());
                lapsed.push(holding);
            }
        }
        lapsed
    }

    /// Ends every holding by `cap` at the latest: O(log n) for each holding moved.
    pub fn cap_expiries(&mut self, cap: i64) {
        let later: Vec<(i64, u64)> = self
            .by_expiry
            .range((Bound::Excluded((cap, u64::MAX)), Bound::Unbounded))
            .copied()
            .collect();
        for (at, grant) in later {
            self.by_expiry.remove(&(at, grant));
            self.by_expiry.insert((cap, grant));
            if let Some(holding) = self.by_grant.get_mut(&grant) {
                holding.expires_at = cap;
            }
        }
    }

    /// Heap bytes these holdings own (for `MEMORY USAGE`), without walking them.
    pub fn heap_size(&self) -> usize {
        let per_holding = std::mem::size_of::<SharedHolding>() + INDEX_BYTES_PER_HOLDING;
        self.len()
            .saturating_mul(per_holding)
            .saturating_add(self.owner_heap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(owner: &str, token: i64, expires_at: i64) -> SharedHolding {
        SharedHolding {
            token,
            expires_at,
            owner: Owner::new(owner.as_bytes()),
            limit: None,
        }
    }

    #[test]
    fn a_shared_holding_with_its_limit_is_64_bytes() {
        // Token, expiry, a 36-byte owner inline, and the limit: a holding's limit
        // costs 8 of them.
        assert_eq!(std::mem::size_of::<SharedHolding>(), 64);
    }

    fn owners(holdings: &SharedHoldings) -> Vec<&[u8]> {
        holdings.iter().map(|h| h.owner.as_bytes()).collect()
    }

    /// Every index agrees with the holdings in grant order.
    fn check(holdings: &SharedHoldings) {
        assert_eq!(holdings.by_owner.len(), holdings.len());
        assert_eq!(holdings.by_expiry.len(), holdings.len());
        for (grant, h) in &holdings.by_grant {
            assert_eq!(holdings.by_owner.get(h.owner.as_bytes()), Some(grant));
            assert!(holdings.by_expiry.contains(&(h.expires_at, *grant)));
        }
        let heap: usize = holdings.iter().map(|h| h.owner.heap_size()).sum();
        assert_eq!(holdings.owner_heap, heap);
    }

    #[test]
    fn holdings_keep_grant_order_through_moves_and_removals() {
        let mut holdings = SharedHoldings::new();
        assert!(holdings.push(holding("a", 1, 300)));
        assert!(holdings.push(holding("b", 2, 100)));
        assert!(holdings.push(holding("c", 3, 200)));
        assert!(
            !holdings.push(holding("b", 9, 900)),
            "one holding per owner"
        );
        assert!(holdings.set_expiry(b"a", 50));
        assert!(holdings.set(b"c", 7, 400));
        assert!(!holdings.set(b"z", 1, 1));
        check(&holdings);
        assert_eq!(owners(&holdings), [&b"a"[..], b"b", b"c"]);
        assert_eq!(
            holdings.get(b"c").map(|h| (h.token, h.expires_at)),
            Some((7, 400))
        );
        assert_eq!(holdings.remove(b"b").map(|h| h.token), Some(2));
        assert!(holdings.remove(b"b").is_none());
        assert!(holdings.push(holding("b", 8, 10)));
        assert_eq!(owners(&holdings), [&b"a"[..], b"c", b"b"], "back in last");
        check(&holdings);
    }

    #[test]
    fn the_expiry_index_answers_first_last_and_lapsed() {
        let mut holdings = SharedHoldings::new();
        for (owner, token, at) in [("a", 1, 300), ("b", 2, 100), ("c", 3, 300), ("d", 4, 200)] {
            holdings.push(holding(owner, token, at));
        }
        assert_eq!(
            (holdings.earliest(), holdings.latest()),
            (Some(100), Some(300))
        );
        assert_eq!(holdings.latest_but(b"c"), Some(300), "a ends then too");
        holdings.set_expiry(b"a", 250);
        assert_eq!(holdings.latest_but(b"c"), Some(250));
        assert_eq!(holdings.latest_but(b"zz"), Some(300));
        assert_eq!(holdings.lapsed_count(100), 0, "holds until strictly past");
        assert_eq!(holdings.lapsed_count(201), 2);
        let lapsed = holdings.remove_lapsed(251);
        let tokens: Vec<i64> = lapsed.iter().map(|h| h.token).collect();
        assert_eq!(tokens, [1, 2, 4], "oldest first, whatever their expiries");
        assert_eq!(owners(&holdings), [&b"c"[..]]);
        assert_eq!(holdings.latest_but(b"c"), None);
        check(&holdings);
    }

    #[test]
    fn a_cap_moves_only_the_holdings_that_outlive_it() {
        let mut holdings = SharedHoldings::new();
        for (owner, at) in [("a", 100), ("b", 500), ("c", 700), ("d", 300)] {
            holdings.push(holding(owner, 1, at));
        }
        holdings.cap_expiries(300);
        let ends: Vec<i64> = holdings.iter().map(|h| h.expires_at).collect();
        assert_eq!(ends, [100, 300, 300, 300]);
        assert_eq!(holdings.latest(), Some(300));
        holdings.cap_expiries(i64::MAX);
        holdings.cap_expiries(i64::MIN);
        assert_eq!(holdings.latest(), Some(i64::MIN));
        check(&holdings);
    }

    #[test]
    fn long_owners_are_counted_once_in_memory() {
        let mut holdings = SharedHoldings::new();
        let long = "x".repeat(100);
        holdings.push(holding(&long, 1, 1));
        holdings.push(holding("short", 2, 2));
        let with_long = holdings.heap_size();
        assert!(with_long >= 100);
        holdings.remove(long.as_bytes());
        assert_eq!(with_long - holdings.heap_size() - 100, holdings.heap_size());
        holdings.remove_lapsed(3);
        assert_eq!(holdings.heap_size(), 0);
        check(&holdings);
    }

    #[test]
    fn equal_holdings_compare_equal_whatever_their_history() {
        let mut built = SharedHoldings::new();
        built.push(holding("x", 1, 1));
        built.push(holding("a", 2, 2));
        built.remove(b"x");
        let mut fresh = SharedHoldings::new();
        fresh.push(holding("a", 2, 2));
        assert_eq!(built, fresh);
        fresh.push(holding("b", 3, 3));
        assert_ne!(built, fresh);
    }
}
