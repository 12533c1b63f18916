//! `LOCK.INFO key`

use super::{key_and_rest, lock_in, Command, KeyAccess, LockInfo, Reply, MAX_ARGS};
use crate::blocking;
use crate::ffi::key::OpenKey;
use crate::ffi::{Args, Ctx};

pub const COMMAND: Command = Command {
    name: c"lock.info",
    flags: c"readonly fast",
    arity: 2,
    acl_categories: c"read fast",
    key_access: KeyAccess::Read,
    summary: c"Describes the lock at key (owner, ttl, token, waiters), or null when it is free.",
    handler: info,
};

fn info(ctx: Ctx, args: &Args) -> Reply {
    let mut buf = [&[][..]; MAX_ARGS];
    let key = match key_and_rest(args, 2, &mut buf) {
        Ok((key, [])) => key,
        Ok(_) => return Reply::WrongArity,
        Err(reply) => return reply,
    };
    let open = OpenKey::read(ctx, key);
    match lock_in(open.slot()) {
        Ok(Some(lock)) => Reply::Info(LockInfo {
            owner: lock.owner().into(),
            ttl: open
                .expires_at()
                .map_or(-1, |at| at.saturating_sub(ctx.now_ms()).max(0)),
            token: lock.token(),
            waiters: blocking::waiters(ctx.selected_db(), key.as_bytes()) as i64,
        }),
        Ok(None) => Reply::Null,
        Err(reply) => reply,
    }
}
