//! `LOCK.EXTEND key owner ttl`

use super::args::parse_extend;
use super::{key_and_rest, lock_in, Command, KeyAccess, Reply, MAX_ARGS};
use crate::blocking;
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Argv, Ctx};
use crate::state::{limits, STATS};
use redis_lock_core::store;

pub const COMMAND: Command = Command {
    name: c"lock.extend",
    // Not `deny-oom`: a full server must still free and keep its locks, as DEL and
    // PEXPIRE run under OOM. A hand-off it leads to is refused under OOM.
    flags: c"write fast",
    arity: 4,
    acl_categories: c"write fast",
    key_access: KeyAccess::ReadWrite,
    summary: c"Sets the remaining TTL of owner's holding of the lock at key: 1, else 0. Never re-creates an expired holding.",
    handler: extend,
};

fn extend(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = key_and_rest(args, 4, &mut buf)?;
    let request = parse_extend(rest, &limits())?;
    let mut open = OpenKey::write(ctx, key);
    lock_in(&open)?;
    blocking::settle(ctx, &mut open, Arg::Str(key));
    let Some(plan) = store::extend(&mut open, request.owner, request.ttl, ctx.now_ms())? else {
        return Ok(Reply::Integer(0));
    };
    let owner = args.string(2).map_or(Arg::Bytes(request.owner), Arg::Str);
    let moved = blocking::Moved {
        mode: plan.mode,
        expires_at: plan.expires_at,
        key_expires_at: plan.key_expires_at,
    };
    blocking::holding_moved(ctx, open, key, owner, plan.token, moved);
    STATS.extends.incr();
    Ok(Reply::Integer(1))
}
