//! `LOCK.ACQUIRE key owner ttl [SHARED | LIMIT n] [WAIT timeout]`

use super::args::{parse_acquire, Wait};
use super::{key_and_rest, lock_in, Command, KeyAccess, Reply, MAX_ARGS};
use crate::blocking;
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Argv, Ctx};
use crate::propagate;
use crate::state::{limits, MINT, STATS};
use redis_lock_core::rules::{Acquire, AcquirePlan};
use redis_lock_core::store;

pub const COMMAND: Command = Command {
    name: c"lock.acquire",
    // Not `fast`: with WAIT it may block, as BLPOP does.
    flags: c"write deny-oom blocking",
    arity: -4,
    acl_categories: c"write blocking",
    key_access: KeyAccess::ReadWrite,
    summary: c"Takes a holding of the lock at key for owner with a TTL (exclusive, SHARED, or one of LIMIT n) and replies with its fencing token; null while it cannot be granted, or with WAIT, queues until it can.",
    handler: acquire,
};

fn acquire(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = key_and_rest(args, 4, &mut buf)?;
    let limits = limits();
    let request = parse_acquire(rest, &limits)?;
    crate::fault::check_command(request.owner);
    let key_bytes = key.as_bytes();
    let db = ctx.selected_db();
    // Whatever freed the lock since, its waiters get it before anyone looks.
    blocking::hand_off(ctx, db, key_bytes);

    let mut open = OpenKey::write(ctx, key);
    lock_in(&open)?;
    blocking::settle(ctx, &mut open, Arg::Str(key));
    let queued = blocking::waiters(db, key_bytes) > 0;
    let rule = Acquire {
        owner: request.owner,
        ttl: request.ttl,
        kind: request.kind,
    };
    let now = || ctx.now_ms();
    let plan = store::acquire(&mut open, rule, queued, now, &MINT, limits.max_owner_len)?;
    let mode = request.kind.mode();
    match plan {
        AcquirePlan::Grant {
            token, expires_at, ..
        } => {
            let next_lapse = blocking::next_lapse(&open);
            drop(open);
            let owner = args.string(2).map_or(Arg::Bytes(request.owner), Arg::Str);
            propagate::grant(ctx, Arg::Str(key), owner, token, expires_at, mode);
            STATS.acquisitions.incr();
            blocking::watch_lapse(ctx, db, key_bytes, next_lapse);
            Ok(Reply::Integer(token))
        }
        AcquirePlan::Refresh {
            token,
            expires_at,
            key_expires_at,
        } => {
            let owner = args.string(2).map_or(Arg::Bytes(request.owner), Arg::Str);
            let moved = blocking::Moved {
                mode,
                expires_at,
                key_expires_at,
            };
            blocking::holding_moved(ctx, open, key, owner, token, moved);
            STATS.refreshes.incr();
            Ok(Reply::Integer(token))
        }
        AcquirePlan::Busy => {
            STATS.contended.incr();
            match request.wait {
                // MULTI, scripts and replicated streams cannot block: as without WAIT.
                Some(wait) if !ctx.where_().cannot_block => {
                    let timeout_ms = match wait {
                        Wait::Forever => None,
                        Wait::Millis(ms) => Some(ms),
                    };
                    let deadlines = blocking::Deadlines::of(&open);
                    drop(open);
                    let waiting = blocking::Request {
                        owner: request.owner,
                        ttl: request.ttl,
                        kind: request.kind,
                        timeout_ms,
                    };
                    Ok(blocking::enqueue(ctx, key_bytes, waiting, deadlines))
                }
                _ => Ok(Reply::Null),
            }
        }
    }
}
