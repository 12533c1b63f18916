//! What happens when a lock leaves the keyspace other than by LOCK.RELEASE: expiry,
//! eviction, DEL, UNLINK, RENAME, MOVE, an overwrite, FLUSHDB/FLUSHALL.
//!
//! Redis tells the data type about every removal of one of its keys ("unlink"), so
//! the module needs no keyspace-event subscription for that (one would cost every
//! other command that sends such events). Only expirations are also subscribed to,
//! to count expirations of held locks: Redis sends "expired" right after the unlink.

use std::cell::RefCell;

use crate::blocking;
use crate::state::STATS;

thread_local! {
    // The key of the lock Redis unlinked last, until the next keyspace event.
    // The buffer is reused, so tracking costs no allocation once warm.
    static UNLINKED: RefCell<(bool, Vec<u8>)> = const { RefCell::new((false, Vec::new())) };
}

/// Redis is removing the lock at `key` in database `db`.
pub fn lock_unlinked(db: i32, key: &[u8]) {
    UNLINKED.with(|cell| {
        if let Ok(mut unlinked) = cell.try_borrow_mut() {
            unlinked.0 = true;
            unlinked.1.clear();
            unlinked.1.extend_from_slice(key);
        }
    });
    // Whoever waits on it may get it now.
    blocking::key_removed(db, key);
}

/// The module itself removed the lock it was told about (a release): no expiry
/// event will follow for it.
pub fn forget_unlinked() {
    UNLINKED.with(|cell| {
        if let Ok(mut unlinked) = cell.try_borrow_mut() {
            unlinked.0 = false;
        }
    });
}

/// True once, right after the lock at `key` was unlinked.
fn take_unlinked(key: &[u8]) -> bool {
    UNLINKED.with(|cell| match cell.try_borrow_mut() {
        Ok(mut unlinked) if unlinked.0 && unlinked.1 == key => {
            unlinked.0 = false;
            true
        }
        _ => false,
    })
}

/// Redis reports that `key` expired.
pub fn key_expired(key: &[u8]) {
    if take_unlinked(key) {
        STATS.expirations.incr();
    }
}
