//! What a write tells the rest of the server.
//!
//! Replicas and the AOF get its effect, with the absolute expiry and the token handed
//! out, never a command whose result depends on when or where it runs. A release by
//! its holder goes as itself, `LOCK.RELEASE key owner`, as Redis sends `SET … NX` as
//! it is: its effect depends only on the lock it finds, and replicas and the AOF find
//! the same one (the master's stream and AOF loading never see a key as expired).
//! That spares a grant-sized propagation per release.
//!
//! Keyspace-event subscribers get one event per write, named after that effect, so a
//! master and its replicas (which run the effect) send the same events:
//! `lock.acquire` (class `d`) for a grant, `expire` (class `g`) for a new expiry of a
//! held lock, `del` (class `g`) for a release. Redis itself sends `expired`, `evicted`
//! and `del` when a lock leaves in its other ways.

use std::ffi::CStr;

use crate::ffi::{Arg, Ctx, EventClass};
use redis_lock_core::store::Lapsed;
use redis_lock_core::Mode;

/// The command that re-creates a lock from its effect (replication, AOF).
pub const APPLY_COMMAND: &CStr = c"LOCK.APPLY";

/// The event of a grant, on the master and wherever LOCK.APPLY runs.
const GRANT_EVENT: &std::ffi::CStr = c"lock.acquire";

/// A fresh grant: `LOCK.APPLY key owner token PXAT expires_at [SHARED]`.
pub fn grant(ctx: Ctx, key: Arg<'_>, owner: Arg<'_>, token: i64, expires_at: i64, mode: Mode) {
    let head = [
        key,
        owner,
        Arg::Int(token),
        Arg::Bytes(b"PXAT"),
        Arg::Int(expires_at),
    ];
    match mode {
        Mode::Exclusive => ctx.replicate(APPLY_COMMAND, &head),
        Mode::Shared => {
            let [k, o, t, p, at] = head;
            ctx.replicate(APPLY_COMMAND, &[k, o, t, p, at, Arg::Bytes(b"SHARED")]);
        }
    }
    ctx.notify(EventClass::Module, GRANT_EVENT, key);
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
        Applied::Moved => ctx.notify(EventClass::Generic, c"expire", key),
        Applied::Lapsed(count) => {
            for _ in 0..count {
                ctx.notify(EventClass::Module, LAPSE_EVENT, key);
            }
        }
    }
}

/// A new expiry of a holding (a refresh by its holder, EXTEND): for an exclusive
/// lock, the key's (`PEXPIREAT`); for a shared holding, the holding again, with its
/// token and new expiry (`LOCK.APPLY … SHARED`, after which the key expires with its
/// last holding).
pub fn expiry(
    ctx: Ctx,
    key: Arg<'_>,
    owner: Arg<'_>,
    token: i64,
    expires_at: i64,
    key_expires_at: i64,
    mode: Mode,
) {
    match mode {
        Mode::Exclusive => ctx.replicate(c"PEXPIREAT", &[key, Arg::Int(key_expires_at)]),
        Mode::Shared => ctx.replicate(
            APPLY_COMMAND,
            &[
                key,
                owner,
                Arg::Int(token),
                Arg::Bytes(b"PXAT"),
                Arg::Int(expires_at),
                Arg::Bytes(b"SHARED"),
            ],
        ),
    }
    ctx.notify(EventClass::Generic, c"expire", key);
}

/// A release by its holder, by the command that made it (see above). `key_gone`:
/// it was the last holding.
pub fn release_as_called(ctx: Ctx, key: Arg<'_>, key_gone: bool) {
    ctx.replicate_verbatim();
    if key_gone {
        ctx.notify(EventClass::Generic, c"del", key);
    } else {
        ctx.notify(EventClass::Module, c"lock.release", key);
    }
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

/// A grant taken back from one of a key's shared holders: `LOCK.RELEASE key owner`.
pub fn release_holding(ctx: Ctx, key: Arg<'_>, owner: Arg<'_>, key_gone: bool) {
    ctx.replicate(c"LOCK.RELEASE", &[key, owner]);
    if key_gone {
        ctx.notify(EventClass::Generic, c"del", key);
    } else {
        ctx.notify(EventClass::Module, c"lock.release", key);
    }
}
