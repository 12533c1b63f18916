//! What the lock type means in the keyspace: its name and encoding, how a value read
//! back from RDB, RESTORE or MIGRATE is checked, and the module-wide token
//! high-water mark saved beside the keys. The C callbacks are in `ffi::datatype`.

use std::ffi::CStr;

use crate::events;
use crate::ffi::RString;
use crate::lock::Lock;
use crate::state::MINT;

/// `TYPE key` answers this; Redis wants exactly nine characters.
pub const TYPE_NAME: &str = "redislock";
/// Bumped whenever the RDB layout of a lock changes.
pub const ENCODING_VERSION: i32 = 1;
/// The command that re-creates a lock from its effect (replication, AOF).
pub const APPLY_COMMAND: &CStr = c"LOCK.APPLY";

/// A lock read back from RDB or a DUMP payload; `None` rejects a corrupt value. Its
/// token raises the mint's high-water mark, so a key that arrives by RESTORE or
/// cluster migration never sees a smaller token afterwards.
pub fn loaded(owner: &[u8], token: i64) -> Option<Lock> {
    crate::fault::check("rdb_load", owner);
    if owner.is_empty() || token <= 0 {
        return None;
    }
    MINT.observe(token);
    Some(Lock::new(owner, token))
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
