//! The rules applied to a key, through a [`Store`]: the module's store is an open
//! Redis key, the tests' is a plain struct. Each operation plans with `rules` or
//! `handoff`, changes the key through the store, and says what it did, which the
//! module then tells replicas, the AOF, keyspace-event subscribers and `INFO`.

use crate::handoff::{plan_hand_off, HandOff, Refusal};
use crate::holdings::{holds_at, Kind, Lock, Mode};
use crate::queue::Queues;
use crate::rules::{
    plan_acquire, plan_extend, plan_release, Acquire, AcquirePlan, ExtendPlan, LockError,
    ReleasePlan,
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
        Some(Lock::Shared(holdings)) => holdings.iter().any(|h| !holds_at(h.expires_at, now_ms)),
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
    let plan = plan_acquire(store.lock(), request, queued, now_ms, mint, max_owner_len)?;
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
    let plan = plan_release(store.lock(), owner, now_ms);
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
    let plan = plan_extend(store.lock(), owner, ttl_ms, now_ms)?;
    if let Some(extend) = plan {
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
    let step = plan_hand_off(queues, db, key, store.lock(), refusal, now_ms, mint);
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
    for grant in &step.grants {
        let key_expires_at = match grant.kind.mode() {
            Mode::Exclusive => grant.expires_at,
            Mode::Shared => store
                .lock()
                .filter(|lock| lock.mode() == Mode::Shared)
                .and_then(|lock| {
                    lock.holders(None)
                        .filter(|h| *h.owner != *grant.owner)
                        .filter_map(|h| h.expires_at)
                        .filter(|at| holds_at(*at, now_ms))
                        .max()
                })
                .map_or(grant.expires_at, |rest| rest.max(grant.expires_at)),
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
        self.expiry = Some(at);
        true
    }
}
