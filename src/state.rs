//! The module's process-wide state: the token mint, the INFO counters and the
//! settings. Redis runs module code on its main thread; atomics make these statics
//! `Sync` without `unsafe`.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::commands::args::Limits;
use crate::lock::{Stats, TokenMint};

pub static MINT: TokenMint = TokenMint::new();
pub static STATS: Stats = Stats::new();

/// `lock.max-ttl`: largest TTL in ms a command may ask for, 0 for no cap.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(0);
/// `lock.max-owner-len`: longest owner in bytes.
pub static MAX_OWNER_LEN: AtomicI64 = AtomicI64::new(DEFAULT_MAX_OWNER_LEN);

pub const DEFAULT_MAX_OWNER_LEN: i64 = 256;

/// The settings in force for this call.
pub fn limits() -> Limits {
    Limits {
        max_ttl: MAX_TTL.load(Ordering::Relaxed),
        max_owner_len: usize::try_from(MAX_OWNER_LEN.load(Ordering::Relaxed)).unwrap_or(0),
    }
}
