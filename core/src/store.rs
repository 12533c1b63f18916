//! The rules applied to a key, through a [`Store`]: the module's store is an open
//! Redis key, the tests' is a plain struct. Each operation plans with `rules` or
//! `handoff`, changes the key through the store, and says what it did, which the
//! module then tells replicas, the AOF, keyspace-event subscribers and `INFO`.

use std::borrow::Cow;

use crate::handoff::{plan_hand_off, HandOff, Refusal};
use crate::holdings::{holds_at, Kind, Lock, Mode};
use crate::queue::Queues;
use crate::rules::{
    plan_acquire, plan_extend, plan_release, shared_key_expiry, Acquire, AcquirePlan, ExtendPlan,
    LockError, ReleasePlan,
};
use crate::token::TokenMint;

/// A key that holds a lock or nothing. A write that fails (Redis refused it) returns
/// false, and the operation reports [`StoreError`].
pub trait Store {
    /// The lock at the key; `None` when the key is free.
    fn lock(&self) -> Option<&Lock>;
    fn lock_mut(&mut self) -> Option<&mut Lock>;
    /// Stores `lock` as the key's value, replacing what was there.
    fn put(&mut self, lock: Lock) -> bool;
    fn delete(&mut self) -> bool;
    /// The key's expiry (Unix ms), `None` when it has none.
    fn key_expiry(&self) -> Option<i64>;
    fn set_key_expiry(&mut self, at: i64) -> bool;
}

/// The lock at the key as it holds: a key expiry set by hand before a shared
/// holding's own ends it with the key (see [`Lock::as_held`]). Every rule plans on
/// this.
pub fn held(store: &impl Store) -> Option<Cow<'_, Lock>> {
    match store.lock()? {
        lock @ Lock::Shared(_) => Some(lock.as_held(store.key_expiry())),
        lock => Some(Cow::Borrowed(lock)),
    }
}

/// Before a write planned on [`held`]: the stored holdings become those that held.
/// Never a write on its own (a miss changes nothing), and run by replicas and the
/// AOF before the same writes, so they store what the master stores.
pub fn follow_key_expiry(store: &mut impl Store) {
    // Only a shared lock reads the key's expiry: an exclusive one's is its own.
    let cap = match store.lock() {
        Some(lock @ Lock::Shared(_)) => lock.key_cap(store.key_expiry()),
        _ => None,
    };
    if let (Some(cap), Some(lock)) = (cap, store.lock_mut()) {
        lock.cap_expiries(cap);
    }
}

/// Redis refused to store what the rules decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreError;

/// Why an operation did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Rule(LockError),
    Store(StoreError),
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Self {
        Failure::Rule(error)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

fn done(ok: bool) -> Result<(), StoreError> {
    if ok {
        Ok(())
    } else {
        Err(StoreError)
    }
}

/// A shared holding that lapsed: its owner and token.
pub type Lapsed = (Box<[u8]>, i64);

/// Removes the shared holdings whose expiry has passed at `now_ms` (deleting the key
/// if none is left, else moving its expiry to the last of the others); returns
/// their owners and tokens, oldest first. The module does this before every write to a shared
/// lock and from its timer, and propagates each removal, so that replicas, which
/// never judge time, hold what the master holds.
pub fn settle(store: &mut impl Store, now_ms: i64) -> Result<Vec<Lapsed>, StoreError> {
    // Looked at before it is touched: a write through the store is a change of the
    // key (WATCH, client-side caching), which a settle that finds nothing is not.
    let any_lapsed = match store.lock() {
        Some(Lock::Shared(holdings)) => holdings.earliest().is_some_and(|at| !holds_at(at, now_ms)),
        _ => false,
    };
    if !any_lapsed {
        return Ok(Vec::new());
    }
    follow_key_expiry(store);
    let Some(lock) = store.lock_mut() else {
        return Ok(Vec::new());
    };
    let lapsed = lock.remove_lapsed(now_ms);
    if lapsed.is_empty() {
        return Ok(lapsed);
    }
    let rest = lock.key_expiry(None).filter(|_| !lock.is_empty());
    expire_with_last_holding(store, rest)?;
    Ok(lapsed)
}

/// After shared holdings left: the key expires with the last holding (`rest`, its
/// expiry), or is deleted when none is left.
fn expire_with_last_holding(store: &mut impl Store, rest: Option<i64>) -> Result<(), StoreError> {
    match rest {
        None => done(store.delete()),
        Some(at) => shared_key_expiry_at(store, at),
    }
}

/// Removes the shared holdings the master found lapsed (`owner`, `token` each, as
/// [`settle`] returned them), as a replica or the AOF replays them: a holding is
/// removed only if that owner still holds it with that token. Then, as `settle`
/// did, the key expires with the last of the others, or is deleted. Returns how
/// many were removed.
pub fn remove_lapsed(store: &mut impl Store, lapsed: &[(&[u8], i64)]) -> Result<usize, StoreError> {
    let ours = |lock: &Lock, (owner, token): &(&[u8], i64)| {
        lock.mode() == Mode::Shared && lock.token_of(owner, Mode::Shared) == Some(*token)
    };
    if !store
        .lock()
        .is_some_and(|lock| lapsed.iter().any(|l| ours(lock, l)))
    {
        return Ok(0);
    }
    // As the master's settle: the holdings first end by a key expiry set by hand.
    follow_key_expiry(store);
    let Some(lock) = store.lock_mut() else {
        return Ok(0);
    };
    let mut removed = 0;
    for held in lapsed {
        if ours(lock, held) && lock.remove(held.0) {
            removed += 1;
        }
    }
    let rest = lock.key_expiry(None).filter(|_| !lock.is_empty());
    expire_with_last_holding(store, rest)?;
    Ok(removed)
}

/// Adds `owner`'s new holding of `kind` with `token`, expiring at `expires_at`; the
/// key then expires at `key_expires_at`.
fn add_holding(
    store: &mut impl Store,
    owner: &[u8],
    kind: Kind,
    token: i64,
    expires_at: i64,
    key_expires_at: i64,
) -> Result<(), StoreError> {
    let limit = match kind {
        Kind::Shared { limit } => limit,
        Kind::Exclusive => None,
    };
    match (store.lock_mut(), kind.mode()) {
        (Some(lock @ Lock::Shared(_)), Mode::Shared) => {
            lock.add_shared(owner, token, expires_at, limit);
            // Readers joining with one TTL mostly leave the key's expiry where it is:
            // a hand-off to N of them sets it once, not N times.
            return shared_key_expiry_at(store, key_expires_at);
        }
        (_, Mode::Shared) => done(store.put(Lock::shared(owner, token, expires_at, limit)))?,
        (_, Mode::Exclusive) => done(store.put(Lock::exclusive(owner, token)))?,
    }
    done(store.set_key_expiry(key_expires_at))
}

/// Moves the expiry of `owner`'s holding of `kind` to `expires_at`, and the key's. A
/// shared holding takes the refresh's limit: it holds as last asked.
fn move_expiry(
    store: &mut impl Store,
    owner: &[u8],
    kind: Kind,
    expires_at: i64,
    key_expires_at: i64,
) -> Result<(), StoreError> {
    match kind {
        Kind::Shared { limit } => {
            if let Some(Lock::Shared(holdings)) = store.lock_mut() {
                holdings.set_expiry(owner, expires_at);
                holdings.set_limit(owner, limit);
            }
            shared_key_expiry_at(store, key_expires_at)
        }
        Kind::Exclusive => done(store.set_key_expiry(key_expires_at)),
    }
}

/// Sets a shared lock's key expiry, unless it is already that: the rules read it
/// before (see [`held`]), and a holding that leaves or moves mostly leaves the last
/// one where it was.
fn shared_key_expiry_at(store: &mut impl Store, at: i64) -> Result<(), StoreError> {
    if store.key_expiry() == Some(at) {
        return Ok(());
    }
    done(store.set_key_expiry(at))
}

/// LOCK.ACQUIRE, applied (see [`plan_acquire`]).
pub fn acquire(
    store: &mut impl Store,
    request: Acquire<'_>,
    queued: bool,
    now_ms: impl FnOnce() -> i64,
    mint: &TokenMint,
    max_owner_len: usize,
) -> Result<AcquirePlan, Failure> {
    let current = held(store);
    let plan = plan_acquire(
        current.as_deref(),
        request,
        queued,
        now_ms,
        mint,
        max_owner_len,
    )?;
    drop(current);
    if plan != AcquirePlan::Busy {
        follow_key_expiry(store);
    }
    match plan {
        AcquirePlan::Grant {
            token,
            expires_at,
            key_expires_at,
        } => add_holding(
            store,
            request.owner,
            request.kind,
            token,
            expires_at,
            key_expires_at,
        )?,
        AcquirePlan::Refresh {
            expires_at,
            key_expires_at,
            ..
        } => move_expiry(
            store,
            request.owner,
            request.kind,
            expires_at,
            key_expires_at,
        )?,
        AcquirePlan::Busy => {}
    }
    Ok(plan)
}

/// LOCK.RELEASE, applied (see [`plan_release`]).
pub fn release(
    store: &mut impl Store,
    owner: &[u8],
    now_ms: impl FnOnce() -> Option<i64>,
) -> Result<ReleasePlan, StoreError> {
    let current = held(store);
    let plan = plan_release(current.as_deref(), owner, now_ms);
    drop(current);
    if plan != ReleasePlan::NotHeld {
        follow_key_expiry(store);
    }
    match plan {
        ReleasePlan::NotHeld => {}
        ReleasePlan::DeleteKey => done(store.delete())?,
        ReleasePlan::RemoveHolding { key_expires_at } => {
            if let Some(lock) = store.lock_mut() {
                lock.remove(owner);
            }
            shared_key_expiry_at(store, key_expires_at)?;
        }
    }
    Ok(plan)
}

/// LOCK.EXTEND, applied (see [`plan_extend`]).
pub fn extend(
    store: &mut impl Store,
    owner: &[u8],
    ttl_ms: i64,
    now_ms: i64,
) -> Result<Option<ExtendPlan>, Failure> {
    let current = held(store);
    let plan = plan_extend(current.as_deref(), owner, ttl_ms, now_ms)?;
    drop(current);
    if let Some(extend) = plan {
        follow_key_expiry(store);
        move_expiry(
            store,
            owner,
            extend.kind,
            extend.expires_at,
            extend.key_expires_at,
        )?;
    }
    Ok(plan)
}

/// A hand-off of the key to its waiters, applied (see [`plan_hand_off`]): every
/// grant is stored before the step returns.
pub fn hand_off<W: Copy + Eq + std::hash::Hash>(
    store: &mut impl Store,
    queues: &mut Queues<W>,
    db: i32,
    key: &[u8],
    refusal: Option<Refusal>,
    now_ms: i64,
    mint: &TokenMint,
) -> Result<HandOff<W>, StoreError> {
    let current = held(store);
    let step = plan_hand_off(queues, db, key, current.as_deref(), refusal, now_ms, mint);
    drop(current);
    apply_hand_off(store, &step, now_ms)?;
    Ok(step)
}

/// Stores the grants of a planned hand-off step, in order: a fresh holding is added
/// (a new lock for an exclusive one), a refreshed one gets its new expiry; the key
/// then expires with its last holding.
pub fn apply_hand_off<W>(
    store: &mut impl Store,
    step: &HandOff<W>,
    now_ms: i64,
) -> Result<(), StoreError> {
    if !step.grants.is_empty() {
        follow_key_expiry(store);
    }
    for grant in &step.grants {
        let key_expires_at = match grant.kind.mode() {
            Mode::Exclusive => grant.expires_at,
            Mode::Shared => {
                let current = store.lock().filter(|lock| lock.mode() == Mode::Shared);
                shared_key_expiry(current, &grant.owner, grant.expires_at, now_ms)
            }
        };
        if grant.fresh {
            add_holding(
                store,
                &grant.owner,
                grant.kind,
                grant.token,
                grant.expires_at,
                key_expires_at,
            )?;
        } else {
            move_expiry(
                store,
                &grant.owner,
                grant.kind,
                grant.expires_at,
                key_expires_at,
            )?;
        }
    }
    Ok(())
}

/// A [`Store`] in memory, with a clock, for tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemoryStore {
    pub lock: Option<Lock>,
    pub expiry: Option<i64>,
}

impl MemoryStore {
    /// The key as Redis would show it at `now_ms`: gone once its expiry passed.
    pub fn expire(&mut self, now_ms: i64) {
        if self.expiry.is_some_and(|at| at < now_ms) {
            self.lock = None;
            self.expiry = None;
        }
    }
}

impl Store for MemoryStore {
    fn lock(&self) -> Option<&Lock> {
        self.lock.as_ref()
    }

    fn lock_mut(&mut self) -> Option<&mut Lock> {
        self.lock.as_mut()
    }

    fn put(&mut self, lock: Lock) -> bool {
        self.lock = Some(lock);
        self.expiry = None;
        true
    }

    fn delete(&mut self) -> bool {
        self.lock = None;
        self.expiry = None;
        true
    }

    fn key_expiry(&self) -> Option<i64> {
        self.expiry
    }

    fn set_key_expiry(&mut self, at: i64) -> bool {
        self.expiry = Some(at);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: Kind = Kind::Shared { limit: None };

    fn take(
        store: &mut MemoryStore,
        mint: &TokenMint,
        owner: &[u8],
        ttl: i64,
        kind: Kind,
        now: i64,
    ) -> AcquirePlan {
        let request = Acquire { owner, ttl, kind };
        acquire(store, request, false, || now, mint, 64).unwrap()
    }

    /// Two readers, the first ending at 500 and the second at 100000, whose key a
    /// `PEXPIRE` set to end at 700.
    fn readers_with_a_key_expiry_set_by_hand() -> (MemoryStore, TokenMint) {
        let (mut store, mint) = (MemoryStore::default(), TokenMint::new());
        take(&mut store, &mint, b"r1", 500, SHARED, 0);
        take(&mut store, &mint, b"r2", 100_000, SHARED, 0);
        store.expiry = Some(700);
        (store, mint)
    }

    fn expiries(store: &MemoryStore) -> Vec<Option<i64>> {
        let lock = store.lock.as_ref().unwrap();
        lock.holders(None).map(|h| h.expires_at).collect()
    }

    #[test]
    fn a_holding_keeps_its_grant_s_limit_takes_a_refresh_s_and_an_extend_keeps_it() {
        let (mut store, mint) = (MemoryStore::default(), TokenMint::new());
        let limits = |store: &MemoryStore| -> Vec<Option<u32>> {
            let lock = store.lock.as_ref().unwrap();
            lock.holders(None).map(|h| h.limit).collect()
        };
        take(
            &mut store,
            &mint,
            b"p1",
            1000,
            Kind::Shared { limit: Some(3) },
            0,
        );
        take(&mut store, &mint, b"p2", 1000, SHARED, 0);
        assert_eq!(limits(&store), [Some(3), None]);
        take(
            &mut store,
            &mint,
            b"p1",
            1000,
            Kind::Shared { limit: Some(5) },
            10,
        );
        assert_eq!(limits(&store), [Some(5), None]);
        extend(&mut store, b"p1", 2000, 20).unwrap();
        assert_eq!(limits(&store), [Some(5), None]);
        let mut solo = MemoryStore::default();
        take(&mut solo, &mint, b"x", 1000, Kind::Exclusive, 0);
        assert_eq!(limits(&solo), [None]);
    }

    #[test]
    fn a_key_expiry_set_by_hand_ends_the_holdings_that_would_outlive_it() {
        let (mut store, mint) = readers_with_a_key_expiry_set_by_hand();
        let held = held(&store).unwrap();
        let ends: Vec<_> = held.holders(None).map(|h| h.expires_at).collect();
        assert_eq!(
            ends,
            [Some(500), Some(700)],
            "r1 keeps its own, r2 ends with the key"
        );
        drop(held);
        // r1 lapses at its own time; the key keeps the expiry set by hand.
        assert_eq!(settle(&mut store, 600).unwrap().len(), 1);
        assert_eq!(store.expiry, Some(700));
        assert_eq!(expiries(&store), [Some(700)]);
        assert_eq!(
            take(&mut store, &mint, b"w", 100, Kind::Exclusive, 600),
            AcquirePlan::Busy
        );
        assert_eq!(store.expiry, Some(700), "a refused acquire changes nothing");
        // A reader that joins keeps its own TTL, and the key lives with the last.
        let plan = take(&mut store, &mint, b"r3", 1_000, SHARED, 600);
        assert!(matches!(
            plan,
            AcquirePlan::Grant {
                expires_at: 1_600,
                key_expires_at: 1_600,
                ..
            }
        ));
        assert_eq!(expiries(&store), [Some(700), Some(1_600)]);
        assert_eq!(store.expiry, Some(1_600));
    }

    #[test]
    fn a_later_key_expiry_or_none_lengthens_no_holding_and_the_key_goes_with_the_last() {
        for key_expiry in [None, Some(10_000)] {
            let (mut store, mint) = (MemoryStore::default(), TokenMint::new());
            take(&mut store, &mint, b"r1", 500, SHARED, 0);
            take(&mut store, &mint, b"r2", 800, SHARED, 0);
            store.expiry = key_expiry; // PERSIST, PEXPIRE 10000
            let held_now = held(&store).unwrap();
            assert_eq!(held_now.live_holders(key_expiry, 600).count(), 1);
            assert_eq!(held_now.next_lapse(), Some(500));
            drop(held_now);
            assert_eq!(settle(&mut store, 501).unwrap().len(), 1);
            assert_eq!(
                store.expiry,
                Some(800),
                "the key goes with the last holding"
            );
            assert_eq!(store.lock.as_ref().and_then(Lock::next_lapse), Some(800));
            assert_eq!(settle(&mut store, 801).unwrap().len(), 1);
            assert!(store.lock.is_none(), "nothing of the lock is left");
        }
    }

    #[test]
    fn a_lapsed_holding_stays_lapsed_whatever_the_key_expiry_becomes() {
        let (mut store, mint) = (MemoryStore::default(), TokenMint::new());
        let permits = Kind::Shared { limit: Some(2) };
        take(&mut store, &mint, b"p1", 1_000, permits, 0);
        take(&mut store, &mint, b"p2", 60_000, permits, 0);
        // Past p1's expiry, before the module removed it, a PEXPIRE 30000.
        store.expiry = Some(31_200);
        let live: Vec<_> = store
            .lock
            .as_ref()
            .unwrap()
            .live_holders(store.expiry, 1_200)
            .map(|h| (h.owner.to_vec(), h.expires_at))
            .collect();
        assert_eq!(live, [(b"p2".to_vec(), Some(31_200))]);
        assert_eq!(
            settle(&mut store, 1_200).unwrap().len(),
            1,
            "p1 lapses still"
        );
        let plan = take(&mut store, &mint, b"p3", 1_000, permits, 1_200);
        assert!(
            matches!(plan, AcquirePlan::Grant { .. }),
            "p1's permit is free"
        );
        assert_eq!(expiries(&store), [Some(31_200), Some(2_200)]);
    }
}
