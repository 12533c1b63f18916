//! What happens when a lock leaves the keyspace other than by LOCK.RELEASE: expiry,
//! eviction, DEL, UNLINK, RENAME, MOVE, an overwrite, FLUSHDB/FLUSHALL.
//!
//! Redis tells the data type about every removal of one of its keys ("unlink"), and
//! right after it, in the same call, sends the keyspace event of the removal:
//! `expired` for an expiry, `evicted` for an eviction. The module listens to those two
//! classes only (no other command pays for it), and counts an expiration or eviction
//! only for the event that names the very key object Redis just unlinked a lock
//! under: the object is held until the next such event, so no later key can reuse its
//! address, and an expiry of a key that merely has a lock's old name is never
//! counted.

use std::cell::RefCell;

use crate::blocking;
use crate::ffi::{HeldString, RString};
use crate::state::STATS;

thread_local! {
    // The key object of the lock Redis unlinked last, until the next keyspace event.
    static UNLINKED: RefCell<Option<HeldString>> = const { RefCell::new(None) };
}

/// Redis is removing the lock at `key` in database `db`, `shared` with holdings.
/// Not for a deletion by the module itself ([`blocking::deleting_here`]), which
/// needs neither: no expiry or eviction event follows it, and its caller hands the
/// key on.
pub fn lock_unlinked(db: i32, key: &RString, shared: bool) {
    if blocking::is_deleting_here() {
        return;
    }
    let held = HeldString::hold(key);
    UNLINKED.with(|cell| {
        if let Ok(mut unlinked) = cell.try_borrow_mut() {
            *unlinked = held;
        }
    });
    // Whoever waits on it may get it now; a shared lock may have moved.
    blocking::key_removed(db, key.as_bytes(), shared);
}

/// Forgets the lock unlinked last (another event followed its removal).
fn forget_unlinked() {
    UNLINKED.with(|cell| {
        if let Ok(mut unlinked) = cell.try_borrow_mut() {
            *unlinked = None;
        }
    });
}

/// True once, for the event that follows the unlink of a lock under `key`.
fn take_unlinked(key: &RString) -> bool {
    UNLINKED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut unlinked) => unlinked.take().is_some_and(|held| held.is(key)),
        Err(_) => false,
    })
}

/// Redis sent the keyspace event `event` about `key` in database `db`.
pub fn keyspace_event(db: i32, event: &[u8], key: &RString) {
    match event {
        b"expired" => {
            if take_unlinked(key) {
                STATS.expirations.incr();
                blocking::key_expired(db, key.as_bytes());
            }
        }
        b"evicted" => {
            if take_unlinked(key) {
                STATS.evictions.incr();
                blocking::key_expired(db, key.as_bytes());
                blocking::key_evicted(db, key.as_bytes());
            }
        }
        _ => forget_unlinked(),
    }
}
