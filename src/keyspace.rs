//! What the lock type means in the keyspace: its name and encoding, how a value read
//! back from RDB, RESTORE or MIGRATE is checked, and the module-wide token
//! high-water mark saved beside the keys. The C callbacks are in `ffi::datatype`;
//! `entry` ties the two together.
//!
//! Encoding version 3: the mode (0 exclusive, 1 shared) and the number of holdings as
//! unsigned integers, then for each holding its owner, token, absolute expiry (0 for
//! an exclusive holding, whose expiry is the key's) and the `LIMIT` it was granted
//! with (0: none). Version 2 (the same without the limit) and version 1 (a single
//! exclusive holding as owner and token) still load.

use redis_lock_core::hashing::HashSet;

use crate::fault;
use crate::ffi::datatype::{AofRewrite, Digest, ModuleIo};
use crate::propagate::APPLY_COMMAND;
use crate::state::MODULE;
use redis_lock_core::args::{MAX_DURATION_MS, MAX_LIMIT};
use redis_lock_core::holdings::{SharedHolding, SharedHoldings};
use redis_lock_core::owner::Owner;
use redis_lock_core::{Lock, Mode};

/// `TYPE key` answers this; Redis wants exactly nine characters.
pub const TYPE_NAME: &str = "redislock";
/// Bumped whenever the RDB layout of a lock changes.
pub const ENCODING_VERSION: i32 = 3;
/// The layout before holdings kept their limit.
pub const ENCODING_V2: i32 = 2;
/// The first layout: one exclusive holding, owner and token.
pub const ENCODING_V1: i32 = 1;

/// The mode as encoded.
pub fn mode_code(mode: Mode) -> u64 {
    match mode {
        Mode::Exclusive => 0,
        Mode::Shared => 1,
    }
}

/// One holding as read back: owner, token, expiry, limit.
pub type LoadedHolding = (Vec<u8>, i64, i64, Option<u32>);

/// A lock read back from RDB or a DUMP payload; `None` rejects a corrupt value. Its
/// tokens raise the mint's high-water mark, so a key that arrives by RESTORE or
/// cluster migration never sees a smaller token afterwards.
///
/// Shared holdings are refused when two share an owner or a token (tokens are
/// distinct, contract.md "Fencing tokens"), or when one expires later than a TTL of at most
/// [`MAX_DURATION_MS`] from now could reach. Each check is O(log n) or O(1) a
/// holding: a lock of 100k holdings loads in O(n log n), never stalling the server
/// in RESTORE, DEBUG RELOAD or a restart.
fn loaded(mode: u64, holdings: Vec<LoadedHolding>, now_ms: i64) -> Option<Lock> {
    for (owner, token, _, _) in &holdings {
        fault::check("rdb_load", owner);
        if owner.is_empty() || *token <= 0 {
            return None;
        }
    }
    let lock = match (mode, holdings.as_slice()) {
        (0, [(owner, token, _, None)]) => Lock::exclusive(owner, *token),
        (1, [_, ..]) => {
            let latest = now_ms.max(0).saturating_add(MAX_DURATION_MS);
            let mut tokens = HashSet::with_capacity_and_hasher(holdings.len(), Default::default());
            let mut shared = SharedHoldings::new();
            for (owner, token, expires_at, limit) in holdings {
                if expires_at <= 0 || expires_at > latest || !tokens.insert(token) {
                    return None;
                }
                let holding = SharedHolding {
                    token,
                    expires_at,
                    owner: Owner::new(&owner),
                    limit,
                };
                if !shared.push(holding) {
                    return None;
                }
            }
            Lock::Shared(Box::new(shared))
        }
        _ => return None,
    };
    for holder in lock.holders(None) {
        MODULE.mint.observe(holder.token);
    }
    Some(lock)
}

/// The most holdings a value may claim to have before the loader reserves memory
/// for them: a corrupt count must not make it reserve much (holdings are read one
/// by one anyway).
const MAX_HOLDINGS_RESERVED: u64 = 1024;

/// Reads a lock value written with encoding `encver`; `None` for a corrupt or
/// unknown one (Redis then refuses the RDB or RESTORE payload).
pub fn load(io: &ModuleIo, encver: i32) -> Option<Lock> {
    let (mode, holdings) = match encver {
        ENCODING_V1 => (0, vec![load_holding(io, ENCODING_V1)?]),
        ENCODING_V2 | ENCODING_VERSION => {
            let mode = io.load_unsigned()?;
            let count = io.load_unsigned()?;
            let mut holdings = Vec::with_capacity(count.min(MAX_HOLDINGS_RESERVED) as usize);
            for _ in 0..count {
                holdings.push(load_holding(io, encver)?);
            }
            (mode, holdings)
        }
        _ => return None,
    };
    loaded(mode, holdings, io.now_ms())
}

/// Owner, token, (version 2 on) expiry and (version 3) limit of one holding. A
/// limit out of `LIMIT`'s range is corrupt.
fn load_holding(io: &ModuleIo, encver: i32) -> Option<LoadedHolding> {
    let owner = io.load_bytes()?;
    let token = io.load_signed()?;
    let expires_at = if encver >= ENCODING_V2 {
        io.load_signed()?
    } else {
        0
    };
    let limit = match encver {
        ENCODING_VERSION => match io.load_unsigned()? {
            0 => None,
            n => Some(u32::try_from(n).ok().filter(|n| *n <= MAX_LIMIT)?),
        },
        _ => None,
    };
    Some((owner, token, expires_at, limit))
}

/// Writes `lock` in the current encoding.
pub fn save(io: &ModuleIo, lock: &Lock) {
    let holders = lock.holders(None);
    io.save_unsigned(mode_code(lock.mode()));
    io.save_unsigned(lock.len() as u64);
    for holder in holders {
        fault::check("rdb_save", holder.owner);
        io.save_bytes(holder.owner);
        io.save_signed(holder.token);
        // An exclusive holding's expiry is the key's, which Redis saves.
        io.save_signed(match lock.mode() {
            Mode::Exclusive => 0,
            Mode::Shared => holder.expires_at.unwrap_or(0),
        });
        io.save_unsigned(holder.limit.map_or(0, u64::from));
    }
}

/// Writes `lock` to a rewritten AOF as the commands that re-create it. Redis appends
/// the key's PEXPIREAT after them, so an exclusive holding carries no expiry of its
/// own. Each holding carries the token mark too: an AOF rewritten without RDB
/// preamble has no other place for it.
pub fn rewrite(aof: &AofRewrite<'_>, lock: &Lock) {
    let mark = aux_value();
    for holder in lock.holders(None) {
        fault::check("aof_rewrite", holder.owner);
        match lock.mode() {
            Mode::Shared => {
                let at = holder.expires_at.unwrap_or(0);
                let holding = (holder.owner, holder.token, at, holder.limit);
                aof.emit_shared_holding(APPLY_COMMAND, holding, mark)
            }
            Mode::Exclusive => {
                aof.emit_holding(APPLY_COMMAND, holder.owner, holder.token, c"MARK", mark)
            }
        }
    }
}

/// Adds `lock` to `DEBUG DIGEST`: each holding's owner, token and (shared) expiry.
pub fn digest(digest: &Digest, lock: &Lock) {
    for holder in lock.holders(None) {
        fault::check("digest", holder.owner);
        digest.add_bytes(holder.owner);
        digest.add_i64(holder.token);
        if lock.mode() == Mode::Shared {
            digest.add_i64(holder.expires_at.unwrap_or(0));
        }
        if let Some(limit) = holder.limit {
            digest.add_i64(i64::from(limit));
        }
        digest.end_element();
    }
}

/// What `MEMORY USAGE` counts for `lock`.
pub fn memory(lock: &Lock) -> usize {
    for holder in lock.holders(None) {
        fault::check("mem_usage", holder.owner);
    }
    std::mem::size_of::<Lock>() + lock.heap_size()
}

/// Saved in every RDB before the keys: the highest token minted or seen.
pub fn aux_value() -> i64 {
    MODULE.mint.high_water()
}

/// Reads the aux data saved by [`aux_value`] (the same in every encoding so far);
/// false for an unknown encoding.
pub fn aux_load(io: &ModuleIo, encver: i32) -> bool {
    if !(ENCODING_V1..=ENCODING_VERSION).contains(&encver) {
        return false;
    }
    match io.load_signed() {
        Some(high_water) => {
            MODULE.mint.observe(high_water);
            true
        }
        None => false,
    }
}
