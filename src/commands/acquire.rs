//! `LOCK.ACQUIRE key owner ttl [SHARED | LIMIT n] [WAIT timeout]`

use super::common::{key_and_rest, lock_in, MAX_ARGS};
use crate::ffi::command::{KeyAccess, Param, ParamKind, Spec};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Argv, Ctx};
use crate::propagate;
use crate::reply::Reply;
use crate::state::MODULE;
use crate::waiting::handoff::hand_off;
use crate::waiting::queue::{enqueue, Request};
use crate::waiting::settle::{expiry_changed, next_lapse, settle, Deadlines, NewExpiry};
use crate::waiting::timers::watch_lapse;
use redis_lock_core::args::{parse_acquire, Wait};
use redis_lock_core::rules::{Acquire, AcquirePlan};
use redis_lock_core::store;

pub const SPEC: Spec = Spec {
    name: c"lock.acquire",
    // Not `fast`: with WAIT it may block, as BLPOP does.
    flags: c"write deny-oom blocking",
    arity: -4,
    acl_categories: c"write blocking",
    key_access: KeyAccess::ReadWrite,
    summary: c"Takes a holding of the lock at key for owner with a TTL (exclusive, SHARED, or one of LIMIT n) and replies with its fencing token; null while it cannot be granted, or with WAIT, queues until it can.",
    complexity: c"O(log n) for n holdings of the key (O(1) for an exclusive lock)",
    params: &[
        Param::new(c"key", ParamKind::Key),
        Param::new(c"owner", ParamKind::String),
        Param::new(c"ttl", ParamKind::Integer),
        Param {
            optional: true,
            parts: &[
                Param {
                    token: Some(c"SHARED"),
                    ..Param::new(c"shared", ParamKind::PureToken)
                },
                Param {
                    token: Some(c"LIMIT"),
                    ..Param::new(c"limit", ParamKind::Integer)
                },
            ],
            ..Param::new(c"mode", ParamKind::OneOf)
        },
        Param {
            token: Some(c"WAIT"),
            optional: true,
            ..Param::new(c"timeout", ParamKind::Integer)
        },
    ],
    history: &[],
    runs_command_at: None,
};

pub fn acquire(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = key_and_rest(args, 4, &mut buf)?;
    let limits = MODULE.limits();
    let request = parse_acquire(rest, &limits)?;
    crate::fault::check_command(request.owner);
    let key_bytes = key.as_bytes();
    let db = ctx.selected_db();
    // Whatever freed the lock since, its waiters get it before anyone looks.
    hand_off(ctx, db, key_bytes);

    let mut open = OpenKey::write(ctx, key);
    lock_in(&open)?;
    settle(ctx, &mut open, Arg::Str(key));
    let queued = MODULE.waiters(db, key_bytes) > 0;
    let rule = Acquire {
        owner: request.owner,
        ttl: request.ttl,
        kind: request.kind,
    };
    let now = || ctx.now_ms();
    let plan = store::acquire(
        &mut open,
        rule,
        queued,
        now,
        &MODULE.mint,
        limits.max_owner_len,
    )?;
    match plan {
        AcquirePlan::Grant {
            token, expires_at, ..
        } => {
            let lapse = next_lapse(&open);
            drop(open);
            let owner = args.string(2).map_or(Arg::Bytes(request.owner), Arg::Str);
            propagate::grant(ctx, Arg::Str(key), owner, token, expires_at, request.kind);
            MODULE.stats.acquisitions.incr();
            watch_lapse(ctx, db, key_bytes, lapse);
            Ok(Reply::Integer(token))
        }
        AcquirePlan::Refresh {
            token,
            expires_at,
            key_expires_at,
        } => {
            let owner = args.string(2).map_or(Arg::Bytes(request.owner), Arg::Str);
            let moved = NewExpiry {
                kind: request.kind,
                expires_at,
                key_expires_at,
            };
            expiry_changed(ctx, open, key, owner, token, moved);
            MODULE.stats.refreshes.incr();
            Ok(Reply::Integer(token))
        }
        AcquirePlan::Busy => {
            MODULE.stats.contended.incr();
            match request.wait {
                // MULTI, scripts and replicated streams cannot block: as without WAIT.
                Some(wait) if !ctx.call_site().cannot_block => {
                    let timeout_ms = match wait {
                        Wait::Forever => None,
                        Wait::Millis(ms) => Some(ms),
                    };
                    let deadlines = Deadlines::of(&open);
                    drop(open);
                    let waiting = Request {
                        owner: request.owner,
                        ttl: request.ttl,
                        kind: request.kind,
                        timeout_ms,
                    };
                    Ok(enqueue(ctx, key_bytes, waiting, deadlines))
                }
                _ => Ok(Reply::Null),
            }
        }
    }
}
