//! What a write sends to replicas and the AOF: its effect, with the absolute expiry
//! and the token handed out, never a command whose result depends on when or where
//! it runs.

use crate::ffi::{Arg, Ctx};
use crate::keyspace::APPLY_COMMAND;

/// A fresh grant: `LOCK.APPLY key owner token PXAT expires_at`.
pub fn grant(ctx: Ctx, key: Arg<'_>, owner: Arg<'_>, token: i64, expires_at: i64) {
    ctx.replicate(
        APPLY_COMMAND,
        &[
            key,
            owner,
            Arg::Int(token),
            Arg::Bytes(b"PXAT"),
            Arg::Int(expires_at),
        ],
    );
}

/// A new expiry of a held lock (refresh by its holder, EXTEND).
pub fn expiry(ctx: Ctx, key: Arg<'_>, expires_at: i64) {
    ctx.replicate(c"PEXPIREAT", &[key, Arg::Int(expires_at)]);
}

/// A release: the key is gone.
pub fn release(ctx: Ctx, key: Arg<'_>) {
    ctx.replicate(c"DEL", &[key]);
}
