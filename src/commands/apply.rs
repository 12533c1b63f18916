//! `LOCK.APPLY key owner token [PXAT unix-ms]`: the effect of a grant, as replicas and
//! the AOF receive it. It stores the lock exactly as given, whatever was at the key,
//! and raises the token high-water mark, so it gives the same result wherever and
//! whenever it runs. Accepted only where a master's decision is replayed (the
//! replication stream from the master, and AOF loading): from any client it is
//! refused, whatever the client's ACL, since it could hand a key's lock to a forged
//! owner or push the token mark to its end. Redis 7.0 puts module commands in no ACL
//! category, so `-@admin` alone would not stop it there.

use super::args::parse_apply;
use super::{key_and_rest, Command, KeyAccess, Reply, MAX_ARGS};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Args, Ctx};
use crate::lock::Lock;
use crate::propagate;
use crate::state::MINT;

pub const COMMAND: Command = Command {
    name: c"lock.apply",
    // `admin`: it sets any owner and token, as RESTORE sets any value; the
    // replication stream and AOF loading run it whatever the ACLs say.
    flags: c"write deny-oom admin",
    arity: -4,
    acl_categories: c"write admin dangerous",
    key_access: KeyAccess::Overwrite,
    summary:
        c"Stores a lock with the given owner, token and absolute expiry (replication and AOF).",
    handler: apply,
};

/// What a client that calls LOCK.APPLY gets.
pub const REFUSED: &str =
    "ERR LOCK.APPLY is internal: only a master's replication stream and AOF loading may run it; use LOCK.ACQUIRE";

fn apply(ctx: Ctx, args: &Args) -> Reply {
    if !ctx.where_().replaying {
        return Reply::error(REFUSED);
    }
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = match key_and_rest(args, 4, &mut buf) {
        Ok(parts) => parts,
        Err(reply) => return reply,
    };
    let request = match parse_apply(rest) {
        Ok(request) => request,
        Err(error) => return Reply::error(error.to_string()),
    };
    MINT.observe(request.token);
    if let Some(mark) = request.mark {
        MINT.observe(mark);
    }
    let mut open = OpenKey::write(ctx, key);
    if !open.set_lock(Lock::new(request.owner, request.token)) {
        return Reply::error("ERR could not store the lock");
    }
    if let Some(at) = request.expires_at {
        if !open.set_expires_at(at) {
            return Reply::error("ERR could not set the lock's expiry");
        }
    }
    propagate::applied(ctx, Arg::Str(key));
    Reply::Ok
}
