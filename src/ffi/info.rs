//! The `INFO lock` section.

use std::ffi::c_int;

use redis_module::raw;

use super::{call, Ctx, ERR, OK};
use crate::observe;

extern "C" fn info(info_ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    super::guarded((), || {
        crate::fault::check_info();
        // A null name makes the section's name the module's: `# lock`, shown by
        // `INFO lock`.
        call!(RedisModule_InfoAddSection(info_ctx, std::ptr::null()) else ERR);
        for (name, value) in observe::info_fields() {
            // Fields are prefixed with the module name by Redis: `lock_<name>`.
            call!(RedisModule_InfoAddFieldLongLong(info_ctx, name.as_ptr(), value) else ERR);
        }
    })
}

/// Makes `INFO lock` (and `INFO everything`) show the module's counters.
pub fn register(ctx: Ctx) -> bool {
    call!(RedisModule_RegisterInfoFunc(ctx.raw(), Some(info)) else ERR) == OK
}
