//! `LOCK.ACQUIRE key owner ttl [WAIT timeout]`

use super::args::{parse_acquire, Wait};
use super::{key_and_rest, lock_in, Command, KeyAccess, Reply, MAX_ARGS};
use crate::blocking;
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Args, Ctx};
use crate::lock::{plan_acquire, AcquirePlan, Lock};
use crate::propagate;
use crate::state::{limits, MINT, STATS};

pub const COMMAND: Command = Command {
    name: c"lock.acquire",
    // Not `fast`: with WAIT it may block, as BLPOP does.
    flags: c"write deny-oom blocking",
    arity: -4,
    acl_categories: c"write blocking",
    key_access: KeyAccess::ReadWrite,
    summary: c"Takes the lock at key for owner with a TTL and replies with its fencing token; null while another owner holds it, or with WAIT, queues until it frees.",
    handler: acquire,
};

fn acquire(ctx: Ctx, args: &Args) -> Reply {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = match key_and_rest(args, 4, &mut buf) {
        Ok(parts) => parts,
        Err(reply) => return reply,
    };
    let limits = limits();
    let request = match parse_acquire(rest, &limits) {
        Ok(request) => request,
        Err(error) => return Reply::error(error.to_string()),
    };
    crate::fault::check_command(request.owner);
    let key_bytes = key.as_bytes();
    let db = ctx.selected_db();
    // A free lock with waiters is theirs: hand it to the oldest before looking.
    blocking::hand_off(ctx, db, key_bytes);

    let mut open = OpenKey::write(ctx, key);
    let plan = match lock_in(open.slot()) {
        Ok(current) => plan_acquire(
            current,
            request.owner,
            request.ttl,
            || ctx.now_ms(),
            &MINT,
            limits.max_owner_len,
        ),
        Err(reply) => return reply,
    };
    match plan {
        Ok(AcquirePlan::Grant { token, expires_at }) => {
            if !(open.set_lock(Lock::new(request.owner, token)) && open.set_expires_at(expires_at))
            {
                return Reply::error("ERR could not store the lock");
            }
            let owner = args.string(2).map_or(Arg::Bytes(request.owner), Arg::Str);
            propagate::grant(ctx, Arg::Str(key), owner, token, expires_at);
            STATS.acquisitions.incr();
            Reply::Integer(token)
        }
        Ok(AcquirePlan::Refresh { token, expires_at }) => {
            if !open.set_expires_at(expires_at) {
                return Reply::error("ERR could not set the lock's expiry");
            }
            drop(open);
            propagate::expiry(ctx, Arg::Str(key), expires_at);
            blocking::expiry_changed(ctx, db, key_bytes, expires_at);
            STATS.refreshes.incr();
            Reply::Integer(token)
        }
        Ok(AcquirePlan::Busy) => {
            STATS.contended.incr();
            match request.wait {
                // MULTI, scripts and replicated streams cannot block: as without WAIT.
                Some(wait) if !ctx.where_().cannot_block => {
                    let timeout_ms = match wait {
                        Wait::Forever => None,
                        Wait::Millis(ms) => Some(ms),
                    };
                    let expiry = open.expires_at();
                    drop(open);
                    blocking::enqueue(
                        ctx,
                        key_bytes,
                        request.owner,
                        request.ttl,
                        timeout_ms,
                        expiry,
                    )
                }
                _ => Reply::Null,
            }
        }
        Err(error) => error.into(),
    }
}
