//! What happens when Redis removes a lock by itself (expiry) or on an administrator's
//! DEL. Redis tells the data type first ("unlink"), then sends the keyspace event;
//! only the pair says that the removed key was a lock and why.

use std::cell::RefCell;

use crate::state::STATS;

/// A keyspace event the module acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEvent {
    Expired,
    Deleted,
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

/// Redis reports `event` on `key`.
pub fn key_event(event: KeyEvent, key: &[u8]) {
    if !take_unlinked(key) {
        return;
    }
    match event {
        KeyEvent::Expired => STATS.expirations.incr(),
        KeyEvent::Deleted => {}
    }
}
