//! The `redislock` data type's side of the C API: safe wrappers over the RDB, AOF and
//! digest streams Redis hands the type's callbacks, the type's handle, and the
//! module options. The callbacks themselves are in `ffi::entry`; what a lock's bytes
//! mean is decided in `crate::keyspace`.

use std::ffi::{c_char, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

use super::{call, Ctx, RString};

/// The type handle Redis gave at registration (see [`set_lock_type`]), null before.
static LOCK_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(ptr::null_mut());

/// The type handle, null before registration.
pub fn lock_type() -> *mut raw::RedisModuleType {
    LOCK_TYPE.load(Ordering::Relaxed)
}

/// Records the handle Redis gave the type when the module registered it.
pub fn set_lock_type(handle: *mut raw::RedisModuleType) {
    LOCK_TYPE.store(handle, Ordering::Relaxed);
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

/// The RDB stream (or DUMP payload) a value or the aux data is read from or written
/// to, for the length of one callback.
pub struct ModuleIo(*mut raw::RedisModuleIO);

impl ModuleIo {
    /// # Safety
    /// `io` is the stream Redis passed to the running callback.
    pub(super) unsafe fn from_raw(io: *mut raw::RedisModuleIO) -> Self {
        ModuleIo(io)
    }

    /// Unix time in milliseconds while the value loads (`RedisModule_Milliseconds`
    /// needs no context).
    pub fn now_ms(&self) -> i64 {
        call!(RedisModule_Milliseconds() else 0)
    }

    fn failed(&self) -> bool {
        call!(RedisModule_IsIOError(self.0) else 1) != 0
    }

    /// The database and name of the key whose value is being loaded, when Redis says
    /// (a value loaded from an RDB or a `RESTORE` payload).
    pub fn key(&self) -> Option<(i32, Vec<u8>)> {
        let name = call!(RedisModule_GetKeyNameFromIO(self.0) else ptr::null());
        let name = super::RString::from_ptr(name.cast_mut())?;
        let db = call!(RedisModule_GetDbIdFromIO(self.0) else -1);
        (db >= 0).then(|| (db, name.as_bytes().to_vec()))
    }

    /// The next unsigned integer; `None` if the stream failed.
    pub fn load_unsigned(&self) -> Option<u64> {
        let n = call!(RedisModule_LoadUnsigned(self.0) else 0);
        (!self.failed()).then_some(n)
    }

    /// The next signed integer; `None` if the stream failed.
    pub fn load_signed(&self) -> Option<i64> {
        let n = call!(RedisModule_LoadSigned(self.0) else 0);
        (!self.failed()).then_some(n)
    }

    /// The next string; `None` if the stream failed.
    pub fn load_bytes(&self) -> Option<Vec<u8>> {
        let mut len = 0usize;
        let buf = call!(RedisModule_LoadStringBuffer(self.0, &mut len) else ptr::null_mut());
        if buf.is_null() || self.failed() {
            return None;
        }
        // SAFETY: Redis returned a buffer of `len` bytes that we own until RM_Free.
        let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec();
        call!(RedisModule_Free(buf.cast::<c_void>()) else ());
        Some(bytes)
    }

    pub fn save_unsigned(&self, n: u64) {
        call!(RedisModule_SaveUnsigned(self.0, n) else ());
    }

    pub fn save_signed(&self, n: i64) {
        call!(RedisModule_SaveSigned(self.0, n) else ());
    }

    pub fn save_bytes(&self, bytes: &[u8]) {
        call!(RedisModule_SaveStringBuffer(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len()) else ());
    }
}

/// The AOF being rewritten, and the key whose value is being written to it.
pub struct AofRewrite<'a> {
    io: *mut raw::RedisModuleIO,
    key: &'a RString,
}

impl<'a> AofRewrite<'a> {
    /// # Safety
    /// `io` and `key` are what Redis passed to the running `aof_rewrite` callback.
    pub(super) unsafe fn from_raw(io: *mut raw::RedisModuleIO, key: &'a RString) -> Self {
        AofRewrite { io, key }
    }

    /// Emits `command key owner token word mark`, e.g. `LOCK.APPLY k o 7 MARK 9`.
    pub fn emit_holding(&self, command: &CStr, owner: &[u8], token: i64, word: &CStr, mark: i64) {
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
            return;
        };
        // SAFETY: variadic call matching the format: `s` a RedisModuleString*, `b` a
        // pointer and a length, `l` a long long, `c` a C string.
        unsafe {
            emit(
                self.io,
                command.as_ptr(),
                c"sblcl".as_ptr(),
                self.key.as_ptr(),
                owner.as_ptr().cast::<c_char>(),
                owner.len(),
                token as std::ffi::c_longlong,
                word.as_ptr(),
                mark as std::ffi::c_longlong,
            )
        };
    }

    /// Emits `command key owner token PXAT at SHARED MARK mark`.
    pub fn emit_shared_holding(
        &self,
        command: &CStr,
        owner: &[u8],
        token: i64,
        at: i64,
        mark: i64,
    ) {
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
            return;
        };
        // SAFETY: as in `emit_holding`.
        unsafe {
            emit(
                self.io,
                command.as_ptr(),
                c"sblclccl".as_ptr(),
                self.key.as_ptr(),
                owner.as_ptr().cast::<c_char>(),
                owner.len(),
                token as std::ffi::c_longlong,
                c"PXAT".as_ptr(),
                at as std::ffi::c_longlong,
                c"SHARED".as_ptr(),
                c"MARK".as_ptr(),
                mark as std::ffi::c_longlong,
            )
        };
    }
}

/// The digest `DEBUG DIGEST` builds, for the length of one callback.
pub struct Digest(*mut raw::RedisModuleDigest);

impl Digest {
    /// # Safety
    /// `md` is the digest Redis passed to the running callback.
    pub(super) unsafe fn from_raw(md: *mut raw::RedisModuleDigest) -> Self {
        Digest(md)
    }

    pub fn add_bytes(&self, bytes: &[u8]) {
        call!(RedisModule_DigestAddStringBuffer(self.0, bytes.as_ptr().cast::<c_char>(), bytes.len()) else ());
    }

    pub fn add_i64(&self, n: i64) {
        call!(RedisModule_DigestAddLongLong(self.0, n) else ());
    }

    /// Ends one element of the value (a holding).
    pub fn end_element(&self) {
        call!(RedisModule_DigestEndSequence(self.0) else ());
    }
}
