//! `LOCK.RELEASE key owner`

use super::common::{key_and_rest, lock_in, MAX_ARGS};
use crate::ffi::command::{KeyAccess, Param, ParamKind, Spec};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Argv, Ctx};
use crate::propagate;
use crate::reply::Reply;
use crate::state::MODULE;
use crate::waiting::handoff::hand_off;
use crate::waiting::settle::settle;
use redis_lock_core::args::parse_owner;
use redis_lock_core::rules::ReleasePlan;
use redis_lock_core::store::{self, Store};
use redis_lock_core::token::held_since;

pub const SPEC: Spec = Spec {
    name: c"lock.release",
    // Not `deny-oom`: a full server must still free and keep its locks, as DEL and
    // PEXPIRE run under OOM. A hand-off it leads to is refused under OOM.
    flags: c"write fast",
    arity: 3,
    acl_categories: c"write fast",
    key_access: KeyAccess::ReadWrite,
    summary: c"Ends owner's holding of the lock at key: 1, else 0.",
    complexity: c"O(log n) for n holdings of the key (O(1) for an exclusive lock)",
    params: &[
        Param::new(c"key", ParamKind::Key),
        Param::new(c"owner", ParamKind::String),
    ],
    history: &[],
    runs_command_at: None,
};

pub fn release(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    let mut buf = [&[][..]; MAX_ARGS];
    let (key, rest) = key_and_rest(args, 3, &mut buf)?;
    let [owner] = rest else {
        return Err(Reply::WrongArity);
    };
    // Whatever lock.max-owner-len says: it bounds new holdings only (a replica or
    // AOF replays what its master released under the master's own setting).
    let owner = parse_owner(owner)?;
    let replaying = ctx.call_site().replaying;
    let mut open = OpenKey::write(ctx, key);
    lock_in(&open)?;
    // The master judges lapses and says so; a replica follows (see `settle`).
    if !replaying {
        settle(ctx, &mut open, Arg::Str(key));
    }
    let now = || (!replaying).then(|| ctx.now_ms());
    // The holding's token, for the hold-time histogram: where the holder released it,
    // not again where the release is replayed.
    let token = match replaying {
        false => open.lock().and_then(|lock| lock.holding_of(owner)),
        true => None,
    };
    // The hand-off below follows at once.
    let plan = MODULE.deleting_here(|| store::release(&mut open, owner, now))?;
    drop(open);
    let db = ctx.selected_db();
    match plan {
        ReleasePlan::NotHeld => return Ok(Reply::Integer(0)),
        ReleasePlan::DeleteKey => propagate::release_as_called(ctx, Arg::Str(key), true),
        // The key's lapse timer stays as it was: it is due by the earliest expiry of
        // the holdings, which a holding that leaves can only make later.
        ReleasePlan::RemoveHolding { .. } => {
            propagate::release_as_called(ctx, Arg::Str(key), false)
        }
    }
    if !replaying {
        // Counted where the holder released it, not again on replicas.
        MODULE.stats.releases.incr();
        if let Some(token) = token {
            let held = ctx.now_ms().saturating_sub(held_since(token));
            MODULE.stats.hold_ms.observe(held);
        }
    }
    hand_off(ctx, db, key.as_bytes());
    Ok(Reply::Integer(1))
}
