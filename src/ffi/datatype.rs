//! The `redislock` data type: the C callbacks Redis calls to persist, copy, measure
//! and free a lock value. Each callback only moves bytes; what they mean is decided in
//! `crate::keyspace`.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use redis_module::{native_types::RedisType, raw};

use super::{call, guarded, Ctx, ERR, OK};
use crate::fault;
use crate::keyspace;
use redis_lock_core::{Lock, Mode};

/// The registered type; `TYPE key` answers its 9-character name.
pub static LOCK_TYPE: RedisType = RedisType::new(
    keyspace::TYPE_NAME,
    keyspace::ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        // No copy callback: COPY of a lock is refused ("not supported for this module
        // key"). A copy would be a second live holding of the same owner and token,
        // at a key whose earlier holders may have had greater tokens.
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
        aux_save2: None,
    },
);

/// The type handle Redis gave at registration, null before it.
pub fn lock_type() -> *mut raw::RedisModuleType {
    LOCK_TYPE
        .raw_type
        .try_borrow()
        .map_or(ptr::null_mut(), |t| *t)
}

/// Sets the module's options (one call sets them all):
/// - `HANDLE_IO_ERRORS`: the loaders check `RedisModule_IsIOError` and give up
///   cleanly. Without it Redis treats any short or malformed read of our type as a
///   corrupt RDB and exits, also for a RESTORE payload a client sent: with it,
///   RESTORE replies `Bad data format` as for Redis's own types.
/// - `NO_IMPLICIT_SIGNAL_MODIFIED`: a key opened for writing is not signalled as
///   modified when closed; the module signals the keys it changed (`OpenKey`), so a
///   call that changes nothing (a miss, a refused release, an error) aborts no
///   `WATCH` and invalidates no client-side cache, as `SET … NX` on a held key.
pub fn set_module_options(ctx: Ctx) {
    let options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED;
    call!(RedisModule_SetModuleOptions(ctx.raw(), options as i32) else ());
}

/// # Safety
/// `value` is null or a value of our type, which is always a `Box<Lock>`.
unsafe fn as_lock<'a>(value: *const c_void) -> Option<&'a Lock> {
    // SAFETY: as the caller promises.
    unsafe { value.cast::<Lock>().as_ref() }
}

fn io_failed(io: *mut raw::RedisModuleIO) -> bool {
    call!(RedisModule_IsIOError(io) else 1) != 0
}

extern "C" fn rdb_load(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    // A panic loads nothing: Redis answers RESTORE with `Bad data format`.
    guarded(ptr::null_mut(), || load_lock(io, encver))
}

/// The most holdings a value may claim to have before the loader reserves memory
/// for them: a corrupt count must not make it reserve much (holdings are read one
/// by one anyway).
const MAX_HOLDINGS_RESERVED: u64 = 1024;

fn load_lock(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    let loaded = match encver {
        keyspace::ENCODING_V1 => load_holding(io, false).map(|h| (0, vec![h])),
        keyspace::ENCODING_VERSION => load_holdings(io),
        _ => None,
    };
    match loaded.and_then(|(mode, holdings)| keyspace::loaded(mode, holdings)) {
        Some(lock) => Box::into_raw(Box::new(lock)).cast::<c_void>(),
        None => ptr::null_mut(),
    }
}

fn load_holdings(io: *mut raw::RedisModuleIO) -> Option<(u64, Vec<keyspace::LoadedHolding>)> {
    let mode = call!(RedisModule_LoadUnsigned(io) else 0);
    let count = call!(RedisModule_LoadUnsigned(io) else 0);
    if io_failed(io) {
        return None;
    }
    let mut holdings = Vec::with_capacity(count.min(MAX_HOLDINGS_RESERVED) as usize);
    for _ in 0..count {
        holdings.push(load_holding(io, true)?);
    }
    Some((mode, holdings))
}

/// Owner, token and (version 2) expiry of one holding.
fn load_holding(io: *mut raw::RedisModuleIO, with_expiry: bool) -> Option<keyspace::LoadedHolding> {
    let mut len = 0usize;
    let buf = call!(RedisModule_LoadStringBuffer(io, &mut len) else ptr::null_mut());
    if buf.is_null() || io_failed(io) {
        return None;
    }
    // SAFETY: Redis returned a buffer of `len` bytes that we own until RM_Free.
    let owner = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec();
    call!(RedisModule_Free(buf.cast::<c_void>()) else ());
    let token = call!(RedisModule_LoadSigned(io) else 0);
    let expires_at = if with_expiry {
        call!(RedisModule_LoadSigned(io) else 0)
    } else {
        0
    };
    (!io_failed(io)).then_some((owner, token, expires_at))
}

extern "C" fn rdb_save(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || {
        // SAFETY: Redis passes a value of our type.
        let Some(lock) = (unsafe { as_lock(value) }) else {
            return;
        };
        let holders = lock.holders(None);
        call!(RedisModule_SaveUnsigned(io, keyspace::mode_code(lock.mode())) else ());
        call!(RedisModule_SaveUnsigned(io, holders.len() as u64) else ());
        for holder in holders {
            let owner = holder.owner;
            fault::check("rdb_save", owner);
            call!(RedisModule_SaveStringBuffer(io, owner.as_ptr().cast::<c_char>(), owner.len()) else ());
            call!(RedisModule_SaveSigned(io, holder.token) else ());
            // An exclusive holding's expiry is the key's, which Redis saves.
            let expires_at = match lock.mode() {
                Mode::Exclusive => 0,
                Mode::Shared => holder.expires_at.unwrap_or(0),
            };
            call!(RedisModule_SaveSigned(io, expires_at) else ());
        }
    })
}

extern "C" fn aof_rewrite(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded((), || {
        // SAFETY: Redis passes a value of our type.
        let Some(lock) = (unsafe { as_lock(value) }) else {
            return;
        };
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
            return;
        };
        let mark = keyspace::aux_value() as std::ffi::c_longlong;
        for holder in lock.holders(None) {
            let owner = holder.owner;
            fault::check("aof_rewrite", owner);
            let token = holder.token as std::ffi::c_longlong;
            match (lock.mode(), holder.expires_at) {
                // Redis appends the key's PEXPIREAT after what a type emits, so an
                // exclusive holding carries no expiry of its own. Each lock carries
                // the token mark too: an AOF rewritten without RDB preamble has no
                // other place for it.
                (Mode::Exclusive, _) | (Mode::Shared, None) => {
                    // SAFETY: variadic call matching the format: `s` a
                    // RedisModuleString*, `b` a pointer and a length, `l` a long
                    // long, `c` a C string.
                    unsafe {
                        emit(
                            io,
                            keyspace::APPLY_COMMAND.as_ptr(),
                            c"sblcl".as_ptr(),
                            key,
                            owner.as_ptr().cast::<c_char>(),
                            owner.len(),
                            token,
                            c"MARK".as_ptr(),
                            mark,
                        )
                    }
                }
                (Mode::Shared, Some(at)) => {
                    // SAFETY: as above.
                    unsafe {
                        emit(
                            io,
                            keyspace::APPLY_COMMAND.as_ptr(),
                            c"sblclccl".as_ptr(),
                            key,
                            owner.as_ptr().cast::<c_char>(),
                            owner.len(),
                            token,
                            c"PXAT".as_ptr(),
                            at as std::ffi::c_longlong,
                            c"SHARED".as_ptr(),
                            c"MARK".as_ptr(),
                            mark,
                        )
                    }
                }
            };
        }
    })
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    guarded(0, || {
        // SAFETY: Redis passes a value of our type.
        unsafe { as_lock(value) }.map_or(0, |lock| {
            for holder in lock.holders(None) {
                fault::check("mem_usage", holder.owner);
            }
            std::mem::size_of::<Lock>() + lock.heap_size()
        })
    })
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || {
        // SAFETY: Redis passes a value of our type.
        let Some(lock) = (unsafe { as_lock(value) }) else {
            return;
        };
        for holder in lock.holders(None) {
            let owner = holder.owner;
            fault::check("digest", owner);
            call!(RedisModule_DigestAddStringBuffer(md, owner.as_ptr().cast::<c_char>(), owner.len()) else ());
            call!(RedisModule_DigestAddLongLong(md, holder.token) else ());
            if lock.mode() == Mode::Shared {
                call!(RedisModule_DigestAddLongLong(md, holder.expires_at.unwrap_or(0)) else ());
            }
            call!(RedisModule_DigestEndSequence(md) else ());
        }
    })
}

extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // A panic while dropping leaks the value: better than an aborted server.
        guarded((), || {
            // SAFETY: every value of our type was made by `Box::into_raw(Box<Lock>)`,
            // and Redis frees each exactly once.
            drop(unsafe { Box::from_raw(value.cast::<Lock>()) });
        })
    }
}

/// Redis is removing a lock from the keyspace: DEL, UNLINK, RENAME, MOVE, expiry,
/// eviction, an overwrite, or a release (not FLUSHALL, which has its own event).
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    guarded((), || {
        let key = call!(RedisModule_GetKeyNameFromOptCtx(ctx) else ptr::null());
        let db = call!(RedisModule_GetDbIdFromOptCtx(ctx) else 0);
        if let Some(key) = super::RString::from_ptr(key.cast_mut()) {
            keyspace::unlinked(db, key);
        }
    })
}

extern "C" fn aux_save(io: *mut raw::RedisModuleIO, when: c_int) {
    guarded((), || {
        if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            call!(RedisModule_SaveSigned(io, keyspace::aux_value()) else ());
        }
    })
}

extern "C" fn aux_load(io: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    guarded(ERR, || {
        let known = encver == keyspace::ENCODING_VERSION || encver == keyspace::ENCODING_V1;
        if !known || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            return ERR;
        }
        let high_water = call!(RedisModule_LoadSigned(io) else 0);
        if io_failed(io) {
            return ERR;
        }
        keyspace::aux_loaded(high_water);
        OK
    })
}
