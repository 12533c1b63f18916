//! `LOCK.EXTEND key owner ttl`

use super::common::{key_and_rest, lock_in, MAX_ARGS};
use crate::ffi::command::{KeyAccess, Param, ParamKind, Spec};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Argv, Ctx};
use crate::reply::Reply;
use crate::state::MODULE;
use crate::waiting::settle::{expiry_changed, settle, NewExpiry};
use redis_lock_core::args::parse_extend;
use redis_lock_core::store;

pub const SPEC: Spec = Spec {
    name: c"lock.extend",
    // Not `deny-oom`: a full server must still free and keep its locks, as DEL and
    // PEXPIRE run under OOM. A hand-off it leads to is refused under OOM.
    flags: c"write fast",
    arity: 4,
    acl_categories: c"write fast",
    key_access: KeyAccess::ReadWrite,
    summary: c"Sets the remaining TTL of owner's holding of the lock at key: 1, else 0. Never re-creates an expired holding.",
    complexity: c"O(log n) for n holdings of the key (O(1) for an exclusive lock)",
    params: &[
        Param::new(c"key", ParamKind::Key),
        Param::new(c"owner", ParamKind::String),
        Param::new(c"ttl", ParamKind::Integer),
    ],
    history: &[],
    runs_command_at: None,
};

pub fn extend(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = key_and_rest(args, 4, &mut buf)?;
    let request = parse_extend(rest, &MODULE.limits())?;
    let mut open = OpenKey::write(ctx, key);
    lock_in(&open)?;
    settle(ctx, &mut open, Arg::Str(key));
    let Some(plan) = store::extend(&mut open, request.owner, request.ttl, ctx.now_ms())? else {
        return Ok(Reply::Integer(0));
    };
    let owner = args.string(2).map_or(Arg::Bytes(request.owner), Arg::Str);
    let moved = NewExpiry {
        kind: plan.kind,
        expires_at: plan.expires_at,
        key_expires_at: plan.key_expires_at,
    };
    expiry_changed(ctx, open, key, owner, plan.token, moved);
    MODULE.stats.extends.incr();
    Ok(Reply::Integer(1))
}
