//! Module configs (`lock.<name>`), registered and loaded by the module itself.
//!
//! The crate's `redis_module!` macro registers configs and calls
//! `RedisModule_LoadConfigs` without looking at the result (redis-module 2.0.8,
//! macros.rs): a bad value in redis.conf or in `MODULE LOADEX … CONFIG` then left the
//! module loaded with its configs unset, and Redis 7.2+ crashed unloading it (its
//! post-load unload of a module with a data type dereferences a null error pointer).
//! Here the result is checked and the load refused before the data type exists.
//!
//! The configs are registered as string configs so that the module parses each value
//! itself: the reason Redis logs (and `CONFIG SET` answers) then names the config, the
//! value and the allowed range, where a numeric config's names neither the value nor
//! the module's meaning.
//!
//! The callbacks are monomorphised over [`Settings`]: the table of configs is the
//! caller's, and this layer imports nothing above it.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::{call, guarded, Ctx, ERR, OK};

/// The configs a module registers, by index.
pub trait Settings: 'static {
    /// How many configs there are.
    const COUNT: usize;
    /// The name of config `index`, without the `lock.` prefix Redis adds.
    fn name(index: usize) -> &'static str;
    /// Its value as `CONFIG GET` shows it.
    fn show(index: usize) -> String;
    /// Sets it from `value`; `Err` says why `value` is refused, and changes nothing.
    fn set(index: usize, value: &[u8]) -> Result<(), String>;
}

/// Room for this many configs: the strings `CONFIG GET` last read, kept alive until
/// the next read (Redis copies them at once).
const MAX_CONFIGS: usize = 8;

#[allow(clippy::declare_interior_mutable_const)]
const NO_STRING: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
static SHOWN: [AtomicPtr<raw::RedisModuleString>; MAX_CONFIGS] = [NO_STRING; MAX_CONFIGS];

/// Registers every config of `S` with its current value as the default, then applies
/// what redis.conf or `MODULE LOADEX … CONFIG` gave. `Err` says why the load must be
/// refused; Redis has logged the config's own reason (from [`Settings::set`]) already.
pub fn register_and_load<S: Settings>(ctx: Ctx) -> Result<(), String> {
    if S::COUNT > MAX_CONFIGS {
        return Err("too many configs".into());
    }
    for index in 0..S::COUNT {
        let name = CString::new(S::name(index)).map_err(|_| "a config name has a NUL")?;
        let default = CString::new(S::show(index)).map_err(|_| "a default has a NUL")?;
        let registered = call!(RedisModule_RegisterStringConfig(
            ctx.raw(),
            name.as_ptr(),
            default.as_ptr(),
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get::<S>),
            Some(set::<S>),
            None,
            // The index, not a pointer: the callbacks look the config up in `S`.
            index as *mut c_void,
        ) else ERR);
        if registered != OK {
            return Err(format!("could not register config lock.{}", S::name(index)));
        }
    }
    if call!(RedisModule_LoadConfigs(ctx.raw()) else ERR) != OK {
        return Err(
            "a lock.* config has a bad value (the line above says which); \
                    the module is not loaded"
                .into(),
        );
    }
    Ok(())
}

extern "C" fn get<S: Settings>(
    _name: *const c_char,
    privdata: *mut c_void,
) -> *mut raw::RedisModuleString {
    guarded(ptr::null_mut(), || {
        let index = privdata as usize;
        let Some(slot) = SHOWN.get(index).filter(|_| index < S::COUNT) else {
            return ptr::null_mut();
        };
        let text = S::show(index);
        let shown = call!(RedisModule_CreateString(
            ptr::null_mut(),
            text.as_ptr().cast(),
            text.len()
        ) else ptr::null_mut());
        let previous = slot.swap(shown, Ordering::Relaxed);
        if !previous.is_null() {
            call!(RedisModule_FreeString(ptr::null_mut(), previous) else ());
        }
        shown
    })
}

extern "C" fn set<S: Settings>(
    _name: *const c_char,
    value: *mut raw::RedisModuleString,
    privdata: *mut c_void,
    err: *mut *mut raw::RedisModuleString,
) -> c_int {
    let outcome = guarded(Err("internal error".to_string()), || {
        let index = privdata as usize;
        if index >= S::COUNT {
            return Err("unknown config".to_string());
        }
        let mut len = 0;
        let bytes = call!(RedisModule_StringPtrLen(value, &mut len) else ptr::null());
        let value: &[u8] = if bytes.is_null() {
            &[]
        } else {
            // SAFETY: Redis passes a live string of `len` bytes for this call.
            unsafe { std::slice::from_raw_parts(bytes.cast(), len) }
        };
        S::set(index, value)
    });
    match outcome {
        Ok(()) => OK,
        Err(reason) => {
            if !err.is_null() {
                let reason = call!(RedisModule_CreateString(
                    ptr::null_mut(),
                    reason.as_ptr().cast(),
                    reason.len()
                ) else ptr::null_mut());
                // SAFETY: Redis passes a place for the error string, which it frees.
                unsafe { *err = reason };
            }
            ERR
        }
    }
}
