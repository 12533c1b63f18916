//! `LOCK.EXTEND key owner ttl`

use super::args::parse_extend;
use super::{key_and_rest, lock_in, Command, KeyAccess, Reply, MAX_ARGS};
use crate::blocking;
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Args, Ctx};
use crate::lock::plan_extend;
use crate::propagate;
use crate::state::{limits, STATS};

pub const COMMAND: Command = Command {
    name: c"lock.extend",
    // Not `deny-oom`: a full server must still free and keep its locks, as DEL and
    // PEXPIRE run under OOM. A hand-off it leads to is refused under OOM.
    flags: c"write fast",
    arity: 4,
    acl_categories: c"write fast",
    key_access: KeyAccess::ReadWrite,
    summary: c"Sets the remaining TTL of the lock at key if owner holds it: 1, else 0. Never re-creates an expired lock.",
    handler: extend,
};

fn extend(ctx: Ctx, args: &Args) -> Reply {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = match key_and_rest(args, 4, &mut buf) {
        Ok(parts) => parts,
        Err(reply) => return reply,
    };
    let request = match parse_extend(rest, &limits()) {
        Ok(request) => request,
        Err(error) => return Reply::error(error.to_string()),
    };
    let mut open = OpenKey::write(ctx, key);
    let plan = match lock_in(open.slot()) {
        Ok(current) => plan_extend(current, request.owner, request.ttl, ctx.now_ms()),
        Err(reply) => return reply,
    };
    match plan {
        Ok(Some(expires_at)) => {
            if !open.set_expires_at(expires_at) {
                return Reply::error("ERR could not set the lock's expiry");
            }
            drop(open);
            propagate::expiry(ctx, Arg::Str(key), expires_at);
            blocking::expiry_changed(ctx, ctx.selected_db(), key.as_bytes(), expires_at);
            STATS.extends.incr();
            Reply::Integer(1)
        }
        Ok(None) => Reply::Integer(0),
        Err(error) => error.into(),
    }
}
