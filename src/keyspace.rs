//! What the lock type means in the keyspace: its name and encoding, how a value read
//! back from RDB, RESTORE or MIGRATE is checked, and the module-wide token
//! high-water mark saved beside the keys. The C callbacks are in `ffi::datatype`.
//!
//! Encoding version 2 (shared holdings): the mode (0 exclusive, 1 shared) and the
//! number of holdings as unsigned integers, then for each holding its owner, token
//! and absolute expiry (0 for an exclusive holding, whose expiry is the key's).
//! Version 1, a single exclusive holding as owner and token, still loads.

use std::ffi::CStr;

use crate::events;
use crate::ffi::RString;
use crate::state::MINT;
use redis_lock_core::holdings::SharedHolding;
use redis_lock_core::owner::Owner;
use redis_lock_core::{Lock, Mode};

/// `TYPE key` answers this; Redis wants exactly nine characters.
pub const TYPE_NAME: &str = "redislock";
/// Bumped whenever the RDB layout of a lock changes.
pub const ENCODING_VERSION: i32 = 2;
/// The first layout: one exclusive holding, owner and token.
pub const ENCODING_V1: i32 = 1;
/// The command that re-creates a lock from its effect (replication, AOF).
pub const APPLY_COMMAND: &CStr = c"LOCK.APPLY";

/// The mode as encoded.
pub fn mode_code(mode: Mode) -> u64 {
    match mode {
        Mode::Exclusive => 0,
        Mode::Shared => 1,
    }
}

/// One holding as read back: owner, token, expiry.
pub type LoadedHolding = (Vec<u8>, i64, i64);

/// A lock read back from RDB or a DUMP payload; `None` rejects a corrupt value. Its
/// tokens raise the mint's high-water mark, so a key that arrives by RESTORE or
/// cluster migration never sees a smaller token afterwards.
pub fn loaded(mode: u64, holdings: Vec<LoadedHolding>) -> Option<Lock> {
    for (owner, token, _) in &holdings {
        crate::fault::check("rdb_load", owner);
        if owner.is_empty() || *token <= 0 {
            return None;
        }
    }
    let lock = match (mode, holdings.as_slice()) {
        (0, [(owner, token, _)]) => Lock::exclusive(owner, *token),
        (1, [_, ..]) => {
            let mut shared = Vec::with_capacity(holdings.len());
            for (owner, token, expires_at) in holdings {
                let duplicate = shared
                    .iter()
                    .any(|h: &SharedHolding| h.owner.as_bytes() == owner);
                if expires_at <= 0 || duplicate {
                    return None;
                }
                shared.push(SharedHolding {
                    token,
                    expires_at,
                    owner: Owner::new(&owner),
                });
            }
            Lock::Shared(shared)
        }
        _ => return None,
    };
    for holder in lock.holders(None) {
        MINT.observe(holder.token);
    }
    Some(lock)
}

/// Saved in every RDB before the keys: the highest token minted or seen.
pub fn aux_value() -> i64 {
    MINT.high_water()
}

pub fn aux_loaded(high_water: i64) {
    MINT.observe(high_water);
}

/// Redis is removing the lock at `key` in database `db` from the keyspace.
pub fn unlinked(db: i32, key: &RString) {
    events::lock_unlinked(db, key);
}
