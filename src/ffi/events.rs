//! The keyspace notification the module listens to: expirations only.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use super::{call, Ctx, RString, ERR, OK};
use crate::events;

extern "C" fn on_expired(
    _ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: Redis passes the event name as a NUL-terminated string.
    if event.is_null() || unsafe { CStr::from_ptr(event) }.to_bytes() != b"expired" {
        return OK;
    }
    let key = RString::from_ptr(key).map_or(&[][..], RString::as_bytes);
    let _ = catch_unwind(AssertUnwindSafe(|| events::key_expired(key)));
    OK
}

/// Subscribes to expirations (the "expired" class only: no other command pays).
pub fn subscribe(ctx: Ctx) -> bool {
    let types = raw::REDISMODULE_NOTIFY_EXPIRED as c_int;
    call!(RedisModule_SubscribeToKeyspaceEvents(ctx.raw(), types, Some(on_expired)) else ERR) == OK
}
