//! What a write sends to replicas and the AOF: its effect, with the absolute expiry
//! and the token handed out, never a command whose result depends on when or where
//! it runs.

use crate::ffi::Ctx;
use crate::keyspace::APPLY_COMMAND;

/// A fresh grant: the lock, its token and its absolute expiry.
pub fn grant(ctx: Ctx, key: &[u8], owner: &[u8], token: i64, expires_at: i64) {
    let mut token_text = itoa::Buffer::new();
    let mut at_text = itoa::Buffer::new();
    ctx.replicate(
        APPLY_COMMAND,
        &[
            key,
            owner,
            token_text.format(token).as_bytes(),
            b"PXAT",
            at_text.format(expires_at).as_bytes(),
        ],
    );
}

/// A new expiry of a held lock (refresh by its holder, EXTEND).
pub fn expiry(ctx: Ctx, key: &[u8], expires_at: i64) {
    let mut at_text = itoa::Buffer::new();
    ctx.replicate(c"PEXPIREAT", &[key, at_text.format(expires_at).as_bytes()]);
}

/// A release: the key is gone.
pub fn release(ctx: Ctx, key: &[u8]) {
    ctx.replicate(c"DEL", &[key]);
}
