//! `LOCK.INFO key`

use super::common::{key_and_rest, lock_in, MAX_ARGS};
use crate::ffi::command::{KeyAccess, Param, ParamKind, Spec};
use crate::ffi::key::OpenKey;
use crate::ffi::{Argv, Ctx};
use crate::reply::{HolderInfo, LockInfo, Reply, WaiterInfo, QUEUE_SHOWN};
use crate::state::MODULE;

pub const SPEC: Spec = Spec {
    name: c"lock.info",
    flags: c"readonly fast",
    arity: 2,
    acl_categories: c"read fast",
    key_access: KeyAccess::Read,
    summary: c"Describes the lock at key (mode, holders with owner, ttl and token, how many wait, the first 10 waiters), or null when it is free.",
    complexity: c"O(n) for n holdings of the key (the first 10 waiters: O(1))",
    params: &[Param::new(c"key", ParamKind::Key)],
    history: &[],
    runs_command_at: None,
};

pub fn info(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    let mut buf = [&[][..]; MAX_ARGS];
    let key = match key_and_rest(args, 2, &mut buf)? {
        (key, []) => key,
        _ => return Err(Reply::WrongArity),
    };
    let open = OpenKey::read(ctx, key);
    let Some(lock) = lock_in(&open)? else {
        return Ok(Reply::Null);
    };
    let now = ctx.now_ms();
    // A holding whose TTL has lapsed is gone, also on a replica, which keeps it
    // until its master says it lapsed.
    let holders: Vec<HolderInfo> = lock
        .live_holders(open.expires_at(), now)
        .map(|h| HolderInfo {
            owner: h.owner.into(),
            ttl: h.expires_at.map_or(-1, |at| at.saturating_sub(now).max(0)),
            token: h.token,
            limit: h.limit,
        })
        .collect();
    if holders.is_empty() {
        return Ok(Reply::Null);
    }
    let db = ctx.selected_db();
    let queue = MODULE
        .with(|live| {
            live.queues
                .first(db, key.as_bytes(), QUEUE_SHOWN)
                .map(|w| WaiterInfo {
                    owner: w.owner.clone(),
                    kind: w.kind,
                    waited: now.saturating_sub(w.queued_at).max(0),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Reply::Info(Box::new(LockInfo {
        mode: lock.mode(),
        holders,
        waiters: MODULE.waiters(db, key.as_bytes()) as i64,
        queue,
    })))
}
