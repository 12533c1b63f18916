//! `LOCK.ACQUIRE key owner ttl [WAIT timeout]`

use super::args::parse_acquire;
use super::{key_and_rest, lock_in, Command, KeyAccess, Reply, MAX_ARGS};
use crate::ffi::key::OpenKey;
use crate::ffi::{Args, Ctx};
use crate::lock::{plan_acquire, AcquirePlan, Lock};
use crate::propagate;
use crate::state::{limits, MINT, STATS};

pub const COMMAND: Command = Command {
    name: c"lock.acquire",
    flags: c"write deny-oom fast",
    arity: -4,
    key_access: KeyAccess::ReadWrite,
    summary: c"Takes the lock at key for owner with a TTL and replies with its fencing token; null while another owner holds it.",
    handler: acquire,
};

fn acquire(ctx: Ctx, args: &Args) -> Reply {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = match key_and_rest(args, 4, &mut buf) {
        Ok(parts) => parts,
        Err(reply) => return reply,
    };
    let request = match parse_acquire(rest, &limits()) {
        Ok(request) => request,
        Err(error) => return Reply::error(error.to_string()),
    };
    if request.wait.is_some() {
        return Reply::error("ERR WAIT is not supported by this build of the lock module");
    }
    let mut open = OpenKey::write(ctx, key);
    let now = ctx.now_ms();
    let plan = match lock_in(open.slot()) {
        Ok(current) => plan_acquire(current, request.owner, request.ttl, now, &MINT),
        Err(reply) => return reply,
    };
    match plan {
        Ok(AcquirePlan::Grant { token, expires_at }) => {
            if !(open.set_lock(Lock::new(request.owner, token)) && open.set_expires_at(expires_at))
            {
                return Reply::error("ERR could not store the lock");
            }
            propagate::grant(ctx, key, request.owner, token, expires_at);
            STATS.acquisitions.incr();
            Reply::Integer(token)
        }
        Ok(AcquirePlan::Refresh { token, expires_at }) => {
            if !open.set_expires_at(expires_at) {
                return Reply::error("ERR could not set the lock's expiry");
            }
            propagate::expiry(ctx, key, expires_at);
            STATS.refreshes.incr();
            Reply::Integer(token)
        }
        Ok(AcquirePlan::Busy) => {
            STATS.contended.incr();
            Reply::Null
        }
        Err(error) => error.into(),
    }
}
