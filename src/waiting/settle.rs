//! Settling a lock before a write (removing the shared holdings whose expiry
//! passed), and what a write that moved a holding's expiry must watch.

use redis_lock_core::holdings::Kind;
use redis_lock_core::store::{self, Store};
use redis_lock_core::Lock;

use super::timers::{watch_expiry, watch_lapse};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Ctx, RString};
use crate::propagate;
use crate::state::MODULE;

/// Removes the shared holdings of the open `key` whose expiry has passed, and tells
/// replicas and the AOF (`LOCK.APPLY key owner token LAPSED` each): the master
/// judges time, its replicas follow. Every write to a shared lock does this first.
#[inline]
pub fn settle(ctx: Ctx, open: &mut OpenKey, key: Arg<'_>) {
    // Inline: an exclusive lock, the common case, costs one comparison here.
    if matches!(open.lock(), Some(Lock::Shared(_))) {
        settle_shared(ctx, open, key);
    }
}

fn settle_shared(ctx: Ctx, open: &mut OpenKey, key: Arg<'_>) {
    let Ok(lapsed) = store::settle(open, ctx.now_ms()) else {
        return;
    };
    propagate::lapsed(ctx, key, &lapsed);
    MODULE.stats.expirations.add(lapsed.len());
}

/// When the earliest shared holding of the open key lapses (see
/// [`Lock::next_lapse`]): the key timer must then look.
#[inline]
pub fn next_lapse(open: &OpenKey) -> Option<i64> {
    open.lock().and_then(Lock::next_lapse)
}

/// When the lock the caller read expires, and when its first shared holding lapses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deadlines {
    pub expiry: Option<i64>,
    pub lapse: Option<i64>,
}

impl Deadlines {
    pub fn of(open: &OpenKey) -> Deadlines {
        Deadlines {
            expiry: open.expires_at(),
            lapse: next_lapse(open),
        }
    }
}

/// A holding's new expiry, set by the module (a refresh, LOCK.EXTEND).
pub struct NewExpiry {
    /// The holding's mode, and the limit it now holds with.
    pub kind: Kind,
    /// The holding's own.
    pub expires_at: i64,
    /// The key's, after it.
    pub key_expires_at: i64,
}

/// A holding of the open `key` got a new expiry from the module (a refresh,
/// LOCK.EXTEND): tells replicas and subscribers, and watches what changed (the
/// waiters' timer fires sooner if the lock now expires sooner; a shared holding may
/// now lapse first).
pub fn expiry_changed(
    ctx: Ctx,
    open: OpenKey,
    key: &RString,
    owner: Arg<'_>,
    token: i64,
    new: NewExpiry,
) {
    let next_lapse = next_lapse(&open);
    drop(open);
    let (at, key_at) = (new.expires_at, new.key_expires_at);
    propagate::expiry(ctx, Arg::Str(key), owner, token, at, key_at, new.kind);
    // Nothing to watch on a key without waiters or lapses: the common case.
    if next_lapse.is_some() || MODULE.any_waiting() {
        let (db, key) = (ctx.selected_db(), key.as_bytes());
        watch_expiry(ctx, db, key, Some(key_at));
        watch_lapse(ctx, db, key, next_lapse);
    }
}
