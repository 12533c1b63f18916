//! Marks: keys to look at from a zero-delay timer, because Redis told the module
//! about them from where it may not write (inside a deletion, a flush, a disconnect,
//! the RDB loader). The timer (`fired`) then hands them off, watches them, or looks
//! for where a relocated lock went.

use redis_lock_core::queue::Departed;

use super::timers::{start, TimerJob};
use crate::ffi::Ctx;
use crate::state::{Client, Mark, MODULE};

/// Marks keys for a look from the zero-delay timer, which is armed once.
fn mark(keys: impl IntoIterator<Item = (i32, Box<[u8]>, Mark)>) {
    let arm = MODULE.with(|w| {
        let before = w.marked.len();
        w.marked.extend(keys);
        w.marked.len() > before && !std::mem::replace(&mut w.marked_timer_armed, true)
    });
    if arm == Some(true) {
        start(Ctx::module(), 0, TimerJob::Marked);
    }
}

/// The RDB loader made a lock at `key` whose holdings lapse. A `RESTORE` on a master
/// marks it for a look, which watches them; the rescan after a load sees to loaded
/// keys.
pub fn restored(db: i32, key: Vec<u8>) {
    let ctx = Ctx::module();
    if !ctx.is_loading() && !ctx.is_replica() {
        mark([(db, key.into_boxed_slice(), Mark::Restored)]);
    }
}

/// Redis is removing the lock at `key` (DEL, UNLINK, RENAME, expiry, eviction…),
/// `shared` with holdings. Called from inside Redis's deletion, where writes are not
/// allowed: a timer hands off right after, and looks for where a shared lock went
/// unless the removal was its expiry or eviction ([`key_expired`]).
pub fn key_removed(db: i32, key: &[u8], shared: bool) {
    if MODULE.is_deleting_here() {
        return;
    }
    if MODULE.waiters(db, key) > 0 {
        mark([(db, key.into(), Mark::Removed)]);
    }
    if shared {
        mark([(db, key.into(), Mark::Relocated)]);
    }
}

/// The lock just removed at `key` expired or was evicted: it went nowhere.
pub fn key_expired(db: i32, key: &[u8]) {
    MODULE.with(|w| {
        w.marked
            .retain(|(d, k, mark)| !(*mark == Mark::Relocated && *d == db && **k == *key))
    });
}

/// Redis evicted the lock at `key` for memory (right after its removal).
pub fn key_evicted(db: i32, key: &[u8]) {
    if MODULE.waiters(db, key) > 0 {
        MODULE.with(|w| {
            for (d, k, mark) in w.marked.iter_mut() {
                if *d == db && **k == *key {
                    *mark = Mark::Evicted;
                }
            }
        });
        mark([(db, key.into(), Mark::Evicted)]);
    }
}

/// FLUSHDB (`Some(db)`) or FLUSHALL (`None`) emptied databases, or SWAPDB swapped
/// one (`Some(db)`).
pub fn flushed(db: Option<i32>) {
    let keys = MODULE.with(|w| w.queues.keys(db)).unwrap_or_default();
    mark(keys.into_iter().map(|(db, key)| (db, key, Mark::Removed)));
}

/// A waiter left the head of its queue without the lock: the waiters behind it may
/// fit now, and are granted from the zero-delay timer (a disconnect or an unblock
/// callback may not write), not at the key's next look.
pub fn hand_off_behind(departed: &Departed<Client>) {
    if departed.new_head {
        mark([(departed.db, departed.key.clone(), Mark::Removed)]);
    }
}
