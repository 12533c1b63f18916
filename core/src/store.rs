//! The rules applied to a key, through a [`Store`]: the module's store is an open
//! Redis key, the tests' is a plain struct. Each operation plans with `rules` or
//! `handoff`, changes the key through the store, and says what it did, which the
//! module then tells replicas, the AOF, keyspace-event subscribers and `INFO`.

use std::borrow::Cow;

use crate::handoff::{plan_hand_off, HandOff, Refusal};
use crate::holdings::{holds_at, Kind, Lock, Mode, NO_EXPIRY};
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
    /// Sets the key's expiry; [`NO_EXPIRY`] removes it.
    fn set_key_expiry(&mut self, at: i64) -> bool;
}

/// The lock at the key as it holds: a shared lock whose key expiry was set by hand
/// holds every holding until it (see [`Lock::as_held`]). Every rule plans on this.
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
    if !matches!(store.lock(), Some(Lock::Shared(_))) {
        return;
    }
    let key_expires_at = store.key_expiry();
    if let Some(lock) = store.lock_mut() {
        lock.follow_key_expiry(key_expires_at);
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
    // With an expiry set by hand every holding ends with the key, which Redis
    // removes: none lapses before the others.
    let any_lapsed = match store.lock() {
        Some(lock @ Lock::Shared(holdings)) => {
            lock.expiry_set_by_hand(store.key_expiry()).is_none()
                && holdings.iter().any(|h| !holds_at(h.expires_at, now_ms))
        }
        _ => false,
    };
    if !any_lapsed {
        return Ok(Vec::new());
    }
    let Some(lock) = store.lock_mut() else {
        return Ok(Vec::new());
    };
    let lapsed = lock.remove_lapsed(now_ms);
    if lapsed.is_empty() {
        return Ok(lapsed);
    }
    let rest = lock.key_expiry(None);
    match rest {
        None => done(store.delete())?,
        Some(at) => done(store.set_key_expiry(at))?,
    }
    Ok(lapsed)
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
    match (store.lock_mut(), kind.mode()) {
        (Some(lock @ Lock::Shared(_)), Mode::Shared) => lock.add_shared(owner, token, expires_at),
        (_, Mode::Shared) => done(store.put(Lock::shared(owner, token, expires_at)))?,
        (_, Mode::Exclusive) => done(store.put(Lock::exclusive(owner, token)))?,
    }
    done(store.set_key_expiry(key_expires_at))
}

/// Moves the expiry of `owner`'s holding in `mode` to `expires_at`, and the key's.
fn move_expiry(
    store: &mut impl Store,
    owner: &[u8],
    mode: Mode,
    expires_at: i64,
    key_expires_at: i64,
) -> Result<(), StoreError> {
    if mode == Mode::Shared {
        if let Some(lock) = store.lock_mut() {
            lock.set_shared_expiry(owner, expires_at);
        }
    }
    done(store.set_key_expiry(key_expires_at))
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
            request.kind.mode(),
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
            done(store.set_key_expiry(key_expires_at))?;
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
            extend.mode,
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
                grant.kind.mode(),
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
        self.expiry = (at != NO_EXPIRY).then_some(at);
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

    #[test]
    fn a_key_expiry_set_by_hand_is_every_shared_holdings() {
        let (mut store, mint) = readers_with_a_key_expiry_set_by_hand();
        let held = held(&store).unwrap();
        let ends: Vec<_> = held.holders(None).map(|h| h.expires_at).collect();
        assert_eq!(ends, [Some(700), Some(700)]);
        assert_eq!(held.next_lapse(), None);
        drop(held);
        // Past r1's own expiry, it still holds: nothing lapses, a writer waits.
        assert_eq!(settle(&mut store, 600).unwrap(), []);
        assert_eq!(
            take(&mut store, &mint, b"w", 100, Kind::Exclusive, 600),
            AcquirePlan::Busy
        );
        let limited = Kind::Shared { limit: Some(2) };
        assert_eq!(
            take(&mut store, &mint, b"r3", 100, limited, 600),
            AcquirePlan::Busy
        );
        assert_eq!(store.expiry, Some(700), "a refused acquire changes nothing");
        // A write stores what held: r2's release leaves r1 until 700, not 500.
        release(&mut store, b"r2", || Some(600)).unwrap();
        assert_eq!(store.expiry, Some(700));
        assert_eq!(store.lock.as_ref().and_then(Lock::next_lapse), None);
        let r1 = store.lock.as_ref().unwrap().holders(None).next().unwrap();
        assert_eq!((r1.owner, r1.expires_at), (&b"r1"[..], Some(700)));
    }

    #[test]
    fn a_holding_taken_beside_an_expiry_set_by_hand_keeps_its_own() {
        let (mut store, mint) = readers_with_a_key_expiry_set_by_hand();
        let plan = take(&mut store, &mint, b"r3", 1_000, SHARED, 600);
        assert!(matches!(
            plan,
            AcquirePlan::Grant {
                expires_at: 1_600,
                key_expires_at: 1_600,
                ..
            }
        ));
        assert_eq!(store.expiry, Some(1_600));
        // r1 and r2 end at 700, r3 at 1600: r1 and r2 lapse then, r3 holds on.
        assert_eq!(store.lock.as_ref().and_then(Lock::next_lapse), Some(700));
        let lapsed = settle(&mut store, 701).unwrap();
        assert_eq!(lapsed.len(), 2);
        assert_eq!(store.lock.as_ref().map(Lock::len), Some(1));
    }

    #[test]
    fn a_shared_lock_whose_key_was_persisted_holds_until_released() {
        let (mut store, mint) = (MemoryStore::default(), TokenMint::new());
        take(&mut store, &mint, b"r1", 500, SHARED, 0);
        store.expiry = None; // PERSIST
        assert_eq!(settle(&mut store, 10_000).unwrap(), []);
        let held_now = held(&store).unwrap();
        assert_eq!(
            held_now
                .live_holders(None, 10_000)
                .map(|h| h.expires_at)
                .collect::<Vec<_>>(),
            [None]
        );
        drop(held_now);
        assert_eq!(
            take(&mut store, &mint, b"w", 100, Kind::Exclusive, 10_000),
            AcquirePlan::Busy
        );
        // A second reader: the first keeps no expiry, so neither does the key.
        take(&mut store, &mint, b"r2", 100, SHARED, 10_000);
        assert_eq!(store.expiry, None);
        assert_eq!(store.lock.as_ref().and_then(Lock::next_lapse), Some(10_100));
        assert_eq!(settle(&mut store, 10_101).unwrap().len(), 1);
        // An extend gives the first its TTL back, and the key with it.
        extend(&mut store, b"r1", 100, 20_000).unwrap();
        assert_eq!(store.expiry, Some(20_100));
        release(&mut store, b"r1", || Some(20_000)).unwrap();
        assert!(store.lock.is_none());
    }
}
