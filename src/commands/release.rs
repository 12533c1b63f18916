//! `LOCK.RELEASE key owner`

use super::args::parse_owner;
use super::{key_and_rest, lock_in, Command, KeyAccess, Reply, MAX_ARGS};
use crate::blocking;
use crate::events;
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Args, Ctx};
use crate::lock::may_release;
use crate::propagate;
use crate::state::STATS;

pub const COMMAND: Command = Command {
    name: c"lock.release",
    // Not `deny-oom`: a full server must still free and keep its locks, as DEL and
    // PEXPIRE run under OOM. A hand-off it leads to is refused under OOM.
    flags: c"write fast",
    arity: 3,
    acl_categories: c"write fast",
    key_access: KeyAccess::ReadWrite,
    summary: c"Deletes the lock at key if owner holds it: 1, else 0.",
    handler: release,
};

fn release(ctx: Ctx, args: &Args) -> Reply {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = match key_and_rest(args, 3, &mut buf) {
        Ok(parts) => parts,
        Err(reply) => return reply,
    };
    let [owner] = rest else {
        return Reply::WrongArity;
    };
    // Whatever lock.max-owner-len says: it bounds new holdings only (a replica or
    // AOF replays what its master released under the master's own setting).
    let owner = match parse_owner(owner) {
        Ok(owner) => owner,
        Err(error) => return Reply::error(error.to_string()),
    };
    let mut open = OpenKey::write(ctx, key);
    match lock_in(open.slot()) {
        Ok(current) if may_release(current, owner) => {
            if !open.delete() {
                return Reply::error("ERR could not delete the lock");
            }
            events::forget_unlinked();
            drop(open);
            propagate::release_as_called(ctx, Arg::Str(key));
            if !ctx.where_().replaying {
                // Counted where the holder released it, not again on replicas.
                STATS.releases.incr();
            }
            blocking::hand_off(ctx, ctx.selected_db(), key.as_bytes());
            Reply::Integer(1)
        }
        Ok(_) => Reply::Integer(0),
        Err(reply) => reply,
    }
}
