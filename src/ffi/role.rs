//! Replication role changes. A node that becomes a master (a replica promoted by
//! Sentinel, `REPLICAOF NO ONE`, `FAILOVER`) mints its tokens in a digit of its own
//! from then on (`TokenMint::promote`), so they never equal those of the master it
//! replaced, which may still be granting until it learns it was replaced.
//!
//! An entry point like those of `entry`, in a file of its own so that it stays one
//! subscription there.

use std::ffi::c_void;

use redis_module::raw;

use super::{guarded, Ctx};
use crate::state::MINT;

extern "C" fn role_changed(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
        return;
    }
    // SAFETY: the context Redis passed to this callback, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || {
        // Its master judged the lapses of shared holdings until now: this node does.
        crate::rescan::start(ctx);
        let digit = MINT.promote();
        raw::redis_log(
            ctx.raw(),
            &format!("lock module: now a master; its fencing tokens end in the digit {digit}"),
        );
    });
}

/// Subscribes to replication role changes.
pub fn subscribe(ctx: Ctx) -> bool {
    ctx.subscribe_server_event(
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        Some(role_changed),
    )
}
