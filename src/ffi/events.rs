//! Keyspace notifications the module listens to.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use super::{call, Ctx, RString, ERR, OK};
use crate::events::{self, KeyEvent};

extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    if event.is_null() {
        return OK;
    }
    // SAFETY: Redis passes the event name as a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(event) }.to_bytes();
    let kind = match name {
        b"expired" => KeyEvent::Expired,
        b"evicted" => KeyEvent::Evicted,
        b"del" | b"rename_from" | b"move_from" => KeyEvent::Removed,
        _ => return OK,
    };
    let ctx = Ctx::new(ctx);
    let key = RString::from_ptr(key).map_or(&[][..], RString::as_bytes);
    // A panic must not unwind into Redis; the event is only counted, so it is dropped.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        events::key_event(ctx, kind, ctx.selected_db(), key)
    }));
    OK
}

/// Subscribes to the events that remove a key: generic (DEL, UNLINK, RENAME, MOVE),
/// expired and evicted.
pub fn subscribe(ctx: Ctx) -> bool {
    let types = (raw::REDISMODULE_NOTIFY_GENERIC
        | raw::REDISMODULE_NOTIFY_EXPIRED
        | raw::REDISMODULE_NOTIFY_EVICTED) as c_int;
    call!(RedisModule_SubscribeToKeyspaceEvents(ctx.raw(), types, Some(on_keyspace_event)) else ERR)
        == OK
}
