//! Keyspace and server events, and the `INFO` section: their subscriptions and C
//! callbacks, monomorphised over the caller's [`Events`], which says what each
//! means to the module.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

use redis_module::raw;

use super::{call, guarded, Ctx, RString, ERR, OK};

/// What the module does on each event. Each function runs inside a callback from
/// Redis, with panics caught.
pub trait Events: 'static {
    /// A key expired (`event` b"expired") or was evicted (b"evicted"), in `db`.
    fn keyspace(db: i32, event: &[u8], key: &RString);
    /// FLUSHDB (`Some(db)`) or FLUSHALL (`None`) emptied databases.
    fn flushed(db: Option<i32>);
    /// SWAPDB swapped two databases.
    fn swapped(ctx: Ctx, first: i32, second: i32);
    /// The RDB or AOF finished loading (at start, `DEBUG RELOAD`, a replica's full
    /// synchronisation).
    fn loaded(ctx: Ctx);
    /// `CONFIG SET` changed `maxmemory-policy`.
    fn eviction_policy_changed(ctx: Ctx);
    /// This server became a master.
    fn became_master(ctx: Ctx);
    /// The fields of the module's `INFO` section: Redis prefixes each name with the
    /// module's name.
    fn info() -> Vec<(&'static CStr, i64)>;
}

/// Subscribes `E` to expirations and evictions, flushes, SWAPDB, the end of loading,
/// config changes and role changes, and registers its `INFO` section.
pub fn subscribe<E: Events>(ctx: Ctx) -> bool {
    // Expirations and evictions only: Redis builds a context for a subscriber on
    // every event of its classes, so DEL, SET and the rest do not pay.
    let classes = (raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED) as c_int;
    call!(RedisModule_SubscribeToKeyspaceEvents(ctx.raw(), classes, Some(keyspace::<E>)) else ERR)
        == OK
        && call!(RedisModule_RegisterInfoFunc(ctx.raw(), Some(info::<E>)) else ERR) == OK
        && server_event(ctx, raw::REDISMODULE_EVENT_FLUSHDB, Some(flushed::<E>))
        && server_event(ctx, raw::REDISMODULE_EVENT_SWAPDB, Some(swapped::<E>))
        && server_event(ctx, raw::REDISMODULE_EVENT_LOADING, Some(loading::<E>))
        && server_event(
            ctx,
            raw::REDISMODULE_EVENT_CONFIG,
            Some(config_changed::<E>),
        )
        && server_event(
            ctx,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            Some(role_changed::<E>),
        )
}

fn server_event(ctx: Ctx, id: u64, callback: raw::RedisModuleEventCallback) -> bool {
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    call!(RedisModule_SubscribeToServerEvent(ctx.raw(), event, callback) else ERR) == OK
}

extern "C" fn keyspace<E: Events>(
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
    // SAFETY: the key Redis passed, alive for the callback.
    let Some(key) = (unsafe { RString::from_ptr(key) }) else {
        return OK;
    };
    // SAFETY: the context Redis passed to this call, used during it. Redis selects
    // the event's database in it.
    let db = unsafe { Ctx::from_raw(ctx) }.selected_db();
    guarded((), || E::keyspace(db, event, key));
    OK
}

extern "C" fn flushed<E: Events>(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: the flush event passes a RedisModuleFlushInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
        return;
    };
    // dbnum is -1 for FLUSHALL.
    let db = (info.dbnum >= 0).then_some(info.dbnum);
    guarded((), || E::flushed(db));
}

extern "C" fn swapped<E: Events>(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: the swapdb event passes a RedisModuleSwapDbInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    let (first, second) = (info.dbnum_first, info.dbnum_second);
    // SAFETY: the context Redis passed to this callback, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || E::swapped(ctx, first, second));
}

extern "C" fn loading<E: Events>(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
        return;
    }
    // SAFETY: the context Redis passed to this callback, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || E::loaded(ctx));
}

extern "C" fn config_changed<E: Events>(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
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
        // SAFETY: the context Redis passed to this call, used during it.
        let ctx = unsafe { Ctx::from_raw(ctx) };
        guarded((), || E::eviction_policy_changed(ctx));
    }
}

extern "C" fn role_changed<E: Events>(
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
    guarded((), || E::became_master(ctx));
}

/// The module's `INFO` section (`INFO lock`, `INFO everything`).
extern "C" fn info<E: Events>(info_ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    guarded((), || {
        // A null name makes the section's name the module's: `# lock`.
        call!(RedisModule_InfoAddSection(info_ctx, ptr::null()) else ERR);
        for (name, value) in E::info() {
            call!(RedisModule_InfoAddFieldLongLong(info_ctx, name.as_ptr(), value) else ERR);
        }
    })
}
