//! The notifications the module listens to: expirations and evictions (see
//! `crate::events`), and changes of `maxmemory-policy`.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use super::{call, Ctx, RString, ERR, OK};
use crate::{events, observe};

extern "C" fn on_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    if event.is_null() {
        return OK;
    }
    // SAFETY: Redis passes the event name as a NUL-terminated string.
    let event = unsafe { CStr::from_ptr(event) }.to_bytes();
    let Some(key) = RString::from_ptr(key) else {
        return OK;
    };
    // Redis selects the event's database in the context it passes.
    let db = Ctx::new(ctx).selected_db();
    let _ = catch_unwind(AssertUnwindSafe(|| events::keyspace_event(db, event, key)));
    OK
}

/// Subscribes to the expired and evicted classes only: Redis builds a context for
/// a subscriber on every event of its classes, so DEL, SET and the rest do not pay
/// for the module.
pub fn subscribe(ctx: Ctx) -> bool {
    let types = (raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED) as c_int;
    call!(RedisModule_SubscribeToKeyspaceEvents(ctx.raw(), types, Some(on_event)) else ERR) == OK
}

/// Logs the eviction warning if the server's `maxmemory-policy` can evict locks.
pub fn warn_if_locks_can_be_evicted(ctx: Ctx) {
    if let Some(warning) = ctx
        .config_get(c"maxmemory-policy")
        .and_then(|policy| observe::eviction_warning(&policy))
    {
        super::log_warning(&warning);
    }
}

extern "C" fn on_config_change(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut std::ffi::c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE {
        return;
    }
    // SAFETY: the config event passes a RedisModuleConfigChange.
    let Some(change) = (unsafe { data.cast::<raw::RedisModuleConfigChange>().as_ref() }) else {
        return;
    };
    if change.config_names.is_null() {
        return;
    }
    // SAFETY: Redis passes `num_changes` NUL-terminated names.
    let names =
        unsafe { std::slice::from_raw_parts(change.config_names, change.num_changes as usize) };
    let policy_changed = names.iter().any(|&name| {
        // SAFETY: as above.
        !name.is_null() && unsafe { CStr::from_ptr(name) }.to_bytes() == b"maxmemory-policy"
    });
    if policy_changed {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            warn_if_locks_can_be_evicted(Ctx::new(ctx))
        }));
    }
}

/// Subscribes to configuration changes (CONFIG SET).
pub fn subscribe_config(ctx: Ctx) -> bool {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_CONFIG,
        dataver: 1,
    };
    call!(RedisModule_SubscribeToServerEvent(ctx.raw(), event, Some(on_config_change)) else ERR)
        == OK
}
