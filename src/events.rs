//! What happens when Redis removes a key by itself (expiry, eviction) or on an
//! administrator's command (DEL, UNLINK, RENAME, MOVE, FLUSHDB). Redis tells the data
//! type first ("unlink"), then sends the keyspace event; the pair says that the
//! removed key was a lock and why.

use std::cell::RefCell;

use crate::blocking;
use crate::ffi::Ctx;
use crate::state::STATS;

/// A keyspace event the module acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEvent {
    Expired,
    Evicted,
    /// DEL, UNLINK, RENAME or MOVE took the key away.
    Removed,
}

thread_local! {
    // The key of the lock Redis unlinked last and has not yet reported an event for.
    // The buffer is reused, so tracking costs no allocation once warm.
    static UNLINKED: RefCell<(bool, Vec<u8>)> = const { RefCell::new((false, Vec::new())) };
}

/// Redis is removing the lock at `key` from the keyspace.
pub fn lock_unlinked(key: &[u8]) {
    UNLINKED.with(|cell| {
        if let Ok(mut unlinked) = cell.try_borrow_mut() {
            unlinked.0 = true;
            unlinked.1.clear();
            unlinked.1.extend_from_slice(key);
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

/// Redis reports `event` on `key` in database `db`.
pub fn key_event(ctx: Ctx, event: KeyEvent, db: i32, key: &[u8]) {
    let was_lock = take_unlinked(key);
    if was_lock && event == KeyEvent::Expired {
        STATS.expirations.incr();
    }
    // Whatever was there, the key may be free now for whoever waits on it.
    blocking::key_removed(ctx, db, key);
}
