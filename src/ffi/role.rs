//! Replication role changes. A node that becomes a master (a replica promoted by
//! Sentinel, `REPLICAOF NO ONE`, `FAILOVER`) mints its tokens in a digit of its own
//! from then on (`TokenMint::promote`), so they never equal those of the master it
//! replaced, which may still be granting until it learns it was replaced.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use super::{call, Ctx, ERR, OK};
use crate::state::MINT;

extern "C" fn on_role_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let digit = MINT.promote();
        raw::redis_log(
            ctx,
            &format!("lock module: now a master; its fencing tokens end in the digit {digit}"),
        );
    }));
}

/// Subscribes to replication role changes.
pub fn subscribe(ctx: Ctx) -> bool {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        dataver: 1,
    };
    call!(RedisModule_SubscribeToServerEvent(ctx.raw(), event, Some(on_role_change)) else ERR) == OK
}
