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

use redis_lock_core::{Lock, Mode};

use super::marks::{key_evicted, key_expired, key_removed};
use crate::ffi::{HeldString, RString};
use crate::state::MODULE;

/// Redis is removing `lock` from `key` in database `db`. Not for a deletion by the
/// module itself (`Module::deleting_here`), which needs neither: no expiry or
/// eviction event follows it, and its caller hands the key on.
pub fn lock_unlinked(db: i32, key: &RString, lock: Option<&Lock>) {
    if MODULE.is_deleting_here() {
        return;
    }
    let shared = lock.is_some_and(|lock| lock.mode() == Mode::Shared && !lock.is_empty());
    let held = HeldString::hold(key);
    // The one held before is freed out of the state (a call into Redis).
    let before = MODULE.with(|w| std::mem::replace(&mut w.unlinked, held));
    drop(before);
    // Whoever waits on it may get it now; a shared lock may have moved.
    key_removed(db, key.as_bytes(), shared);
}

/// Forgets the lock unlinked last (another event followed its removal).
fn forget_unlinked() {
    let before = MODULE.with(|w| w.unlinked.take());
    drop(before);
}

/// True once, for the event that follows the unlink of a lock under `key`.
fn take_unlinked(key: &RString) -> bool {
    let held = MODULE.with(|w| w.unlinked.take()).flatten();
    held.is_some_and(|held| held.is(key))
}

/// Redis sent the keyspace event `event` about `key` in database `db`.
pub fn keyspace_event(db: i32, event: &[u8], key: &RString) {
    match event {
        b"expired" => {
            if take_unlinked(key) {
                MODULE.stats.expirations.incr();
                key_expired(db, key.as_bytes());
            }
        }
        b"evicted" => {
            if take_unlinked(key) {
                MODULE.stats.evictions.incr();
                key_expired(db, key.as_bytes());
                key_evicted(db, key.as_bytes());
            }
        }
        _ => forget_unlinked(),
    }
}
