//! What a write tells the rest of the server.
//!
//! Replicas and the AOF get its effect, with the absolute expiry and the token handed
//! out, never a command whose result depends on when or where it runs. A release by
//! its holder goes as itself, `LOCK.RELEASE key owner`, as Redis sends `SET … NX` as
//! it is: its effect depends only on the lock it finds, and replicas and the AOF find
//! the same one (the master's stream and AOF loading never see a key as expired).
//! That spares a grant-sized propagation per release.
//!
//! Keyspace-event subscribers get the events of each write, named after its effect, so
//! a master and its replicas (which run the effect) send the same events:
//! `lock.acquire` (class `d`) for a grant; `expire` (class `g`) and `lock.refresh`
//! (`d`) for a new expiry of a holding; `lock.release` (`d`) for a release by its
//! holder, after `del` (`g`) when it was the last holding; `lock.expired` (`d`) for a
//! shared holding that lapsed while others remain. Redis itself sends `expired`,
//! `evicted` and `del` when a lock leaves in its other ways.

use std::ffi::CStr;

use crate::ffi::{Arg, Ctx, EventClass, Word};
use redis_lock_core::holdings::Kind;
use redis_lock_core::store::Lapsed;

/// The command that re-creates a lock from its effect (replication, AOF).
pub const APPLY_COMMAND: &CStr = c"LOCK.APPLY";

/// The word before a holding's absolute expiry in LOCK.APPLY.
static PXAT: Word = Word::new(c"PXAT");

/// The event of a grant, on the master and wherever LOCK.APPLY runs.
const GRANT_EVENT: &std::ffi::CStr = c"lock.acquire";

/// A fresh grant: `LOCK.APPLY key owner token PXAT expires_at [SHARED [LIMIT n]]`.
pub fn grant(ctx: Ctx, key: Arg<'_>, owner: Arg<'_>, token: i64, expires_at: i64, kind: Kind) {
    let head = [
        key,
        owner,
        Arg::Int(token),
        Arg::Word(&PXAT),
        Arg::Int(expires_at),
    ];
    match kind {
        Kind::Exclusive => ctx.replicate(APPLY_COMMAND, &head),
        Kind::Shared { limit } => replicate_shared(ctx, head, limit),
    }
    ctx.notify(EventClass::Module, GRANT_EVENT, key);
}

/// `LOCK.APPLY key owner token PXAT at SHARED [LIMIT n]`.
fn replicate_shared(ctx: Ctx, [k, o, t, p, at]: [Arg<'_>; 5], limit: Option<u32>) {
    let shared = Arg::Bytes(b"SHARED");
    match limit {
        None => ctx.replicate(APPLY_COMMAND, &[k, o, t, p, at, shared]),
        Some(n) => {
            let limit = [Arg::Bytes(b"LIMIT"), Arg::Int(i64::from(n))];
            let [l, n] = limit;
            ctx.replicate(APPLY_COMMAND, &[k, o, t, p, at, shared, l, n]);
        }
    }
}

/// What a replayed LOCK.APPLY did, for the event it sends (the one the master sent).
pub enum Applied {
    /// A holding granted.
    Granted,
    /// A shared holding's new expiry (a refresh, an extend).
    Moved,
    /// This many shared holdings that lapsed were removed.
    Lapsed(usize),
}

/// An effect replayed by LOCK.APPLY (replicas, AOF loading): passed on as it came,
/// with the event the master sent for it.
pub fn applied(ctx: Ctx, key: Arg<'_>, what: Applied) {
    ctx.replicate_verbatim();
    match what {
        Applied::Granted => ctx.notify(EventClass::Module, GRANT_EVENT, key),
        Applied::Moved => refreshed(ctx, key),
        Applied::Lapsed(count) => {
            for _ in 0..count {
                ctx.notify(EventClass::Module, LAPSE_EVENT, key);
            }
        }
    }
}

/// A new expiry of a holding (a refresh by its holder, EXTEND): the holding again,
/// with its token and new expiry (`LOCK.APPLY key owner token PXAT at`, plus
/// `SHARED [LIMIT n]` for a shared holding, after which the key expires with its
/// last holding). Not `PEXPIREAT`, which would be cheaper for an exclusive lock: a
/// replica could not tell it from any expiry, and would send `expire` without the
/// `lock.refresh` its master sent.
pub fn expiry(
    ctx: Ctx,
    key: Arg<'_>,
    owner: Arg<'_>,
    token: i64,
    expires_at: i64,
    key_expires_at: i64,
    kind: Kind,
) {
    let at = match kind {
        Kind::Exclusive => key_expires_at,
        Kind::Shared { .. } => expires_at,
    };
    let head = [key, owner, Arg::Int(token), Arg::Word(&PXAT), Arg::Int(at)];
    match kind {
        Kind::Exclusive => ctx.replicate(APPLY_COMMAND, &head),
        Kind::Shared { limit } => replicate_shared(ctx, head, limit),
    }
    refreshed(ctx, key);
}

/// The events of a holding's new expiry: Redis's own `expire`, and the module's
/// `lock.refresh`.
fn refreshed(ctx: Ctx, key: Arg<'_>) {
    ctx.notify(EventClass::Generic, c"expire", key);
    ctx.notify(EventClass::Module, REFRESH_EVENT, key);
}

/// The module's event of a holding's new expiry (a refresh, EXTEND).
const REFRESH_EVENT: &CStr = c"lock.refresh";

/// The module's event of a release by the holder.
const RELEASE_EVENT: &CStr = c"lock.release";

/// A release by its holder, by the command that made it (see above). `key_gone`:
/// it was the last holding.
pub fn release_as_called(ctx: Ctx, key: Arg<'_>, key_gone: bool) {
    ctx.replicate_verbatim();
    released(ctx, key, key_gone);
}

/// The events of a release by the holder: the module's `lock.release`, after Redis's
/// own `del` when it was the last holding (the key is gone).
fn released(ctx: Ctx, key: Arg<'_>, key_gone: bool) {
    if key_gone {
        ctx.notify(EventClass::Generic, c"del", key);
    }
    ctx.notify(EventClass::Module, RELEASE_EVENT, key);
}

/// The event of a shared holding that lapsed and was removed, others remaining.
const LAPSE_EVENT: &std::ffi::CStr = c"lock.expired";

/// Shared holdings the module removed on its own, as their expiries passed (while
/// other holdings may live on), which replicas and the AOF (never judging time
/// themselves) apply as the master did: one as `LOCK.APPLY key owner token LAPSED`,
/// several as one `LOCK.LAPSE key owner token [owner token …]`. One event each.
pub fn lapsed(ctx: Ctx, key: Arg<'_>, lapsed: &[Lapsed]) {
    match lapsed {
        [] => return,
        [(owner, token)] => ctx.replicate(
            APPLY_COMMAND,
            &[
                key,
                Arg::Bytes(owner),
                Arg::Int(*token),
                Arg::Bytes(b"LAPSED"),
            ],
        ),
        many => {
            let mut args = Vec::with_capacity(1 + 2 * many.len());
            args.push(key);
            for (owner, token) in many {
                args.push(Arg::Bytes(owner));
                args.push(Arg::Int(*token));
            }
            ctx.replicate(LAPSE_COMMAND, &args);
        }
    }
    for _ in lapsed {
        ctx.notify(EventClass::Module, LAPSE_EVENT, key);
    }
}

/// The command that removes shared holdings that lapsed together (replication, AOF).
const LAPSE_COMMAND: &CStr = c"LOCK.LAPSE";

/// A release the module made on its own (a grant taken back): the key is gone.
pub fn release(ctx: Ctx, key: Arg<'_>) {
    ctx.replicate(c"DEL", &[key]);
    ctx.notify(EventClass::Generic, c"del", key);
}

/// A grant taken back from one of a key's shared holders, others remaining:
/// `LOCK.RELEASE key owner`, with the event it replays with.
pub fn release_holding(ctx: Ctx, key: Arg<'_>, owner: Arg<'_>) {
    ctx.replicate(c"LOCK.RELEASE", &[key, owner]);
    released(ctx, key, false);
}
