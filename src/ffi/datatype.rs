//! The lock data type's side of the C API: its registration and C callbacks
//! (monomorphised over the caller's [`LockType`], which says what a lock's bytes
//! mean), safe wrappers over the RDB, AOF and digest streams Redis hands them, the
//! type's handle, and the module options.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

use redis_lock_core::Lock;
use redis_module::raw;

use super::block::take_payload;
use super::Ctx;
use super::{call, guarded, RString, ERR, OK};

/// What the lock type does in each of its callbacks; the value is always a
/// `Box<Lock>`. Each function runs inside a callback from Redis, with panics caught.
pub trait LockType: 'static {
    /// `TYPE key` answers this; Redis wants exactly nine characters.
    const NAME: &'static str;
    /// The encoding version written with every value.
    const ENCODING_VERSION: c_int;
    /// Reads a value written with `encver`; `None` rejects it (Redis then refuses
    /// the RDB or the RESTORE payload).
    fn load(io: &ModuleIo, encver: c_int) -> Option<Lock>;
    fn save(io: &ModuleIo, lock: &Lock);
    /// Writes the commands that re-create `lock` to a rewritten AOF.
    fn rewrite(aof: &AofRewrite<'_>, lock: &Lock);
    /// What `MEMORY USAGE` counts.
    fn memory(lock: &Lock) -> usize;
    fn digest(digest: &Digest, lock: &Lock);
    /// Redis is removing the lock at `key` in database `db` from the keyspace: DEL,
    /// UNLINK, RENAME, MOVE, expiry, eviction, an overwrite, or the module's own
    /// delete (not FLUSHALL, which has its own event).
    fn unlinked(db: i32, key: &RString, lock: Option<&Lock>);
    /// The aux value saved before the keys of every RDB.
    fn aux_value() -> i64;
    /// Reads it back; false refuses the RDB.
    fn aux_load(io: &ModuleIo, encver: c_int) -> bool;
}

/// How many values of the type Redis holds: one more for each stored (a write, an
/// RDB or RESTORE load), one less for each freed. Atomic: Redis frees values in a
/// background thread after `FLUSHALL ASYNC`.
static VALUES: AtomicI64 = AtomicI64::new(0);

/// How many locks the keyspace holds now (every database; a lock whose holdings
/// all lapsed counts until Redis or the module removes it).
pub fn values() -> i64 {
    VALUES.load(Ordering::Relaxed).max(0)
}

/// One more value stored.
pub(super) fn value_stored() {
    VALUES.fetch_add(1, Ordering::Relaxed);
}

/// The type handle Redis gave at registration (see [`create_type`]), null before.
static LOCK_TYPE: AtomicPtr<raw::RedisModuleType> = AtomicPtr::new(ptr::null_mut());

/// The type handle, null before registration.
pub(super) fn lock_type() -> *mut raw::RedisModuleType {
    LOCK_TYPE.load(Ordering::Relaxed)
}

/// Registers the lock type `T`.
pub fn create_type<T: LockType>(ctx: Ctx) -> Result<(), String> {
    if T::NAME.len() != 9 {
        return Err(format!("the type name {} is not nine characters", T::NAME));
    }
    let name = CString::new(T::NAME).map_err(|_| "the type name has a NUL".to_string())?;
    let mut methods = raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load::<T>),
        rdb_save: Some(rdb_save::<T>),
        aof_rewrite: Some(aof_rewrite::<T>),
        mem_usage: Some(mem_usage::<T>),
        digest: Some(digest::<T>),
        free: Some(free),
        aux_load: Some(aux_load::<T>),
        aux_save: Some(aux_save::<T>),
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
        unlink2: Some(unlink2::<T>),
        copy2: None,
        aux_save2: None,
    };
    // Redis copies the methods before returning.
    let handle = call!(RedisModule_CreateDataType(
        ctx.raw(),
        name.as_ptr(),
        T::ENCODING_VERSION,
        &mut methods
    ) else ptr::null_mut());
    if handle.is_null() {
        return Err(format!("Redis refused the data type {}", T::NAME));
    }
    LOCK_TYPE.store(handle, Ordering::Relaxed);
    Ok(())
}

/// # Safety
/// `value` is null or a value of our type, which is always a `Box<Lock>`.
unsafe fn as_lock<'a>(value: *const c_void) -> Option<&'a Lock> {
    // SAFETY: as the caller promises.
    unsafe { value.cast::<Lock>().as_ref() }
}

/// Stores `lock` as a value Redis owns (given back to [`free`]).
pub(super) fn into_value(lock: Lock) -> *mut c_void {
    value_stored();
    Box::into_raw(Box::new(lock)).cast::<c_void>()
}

extern "C" fn rdb_load<T: LockType>(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    // A panic loads nothing: Redis answers RESTORE with `Bad data format`.
    guarded(ptr::null_mut(), || {
        T::load(&ModuleIo(io), encver).map_or(ptr::null_mut(), into_value)
    })
}

extern "C" fn rdb_save<T: LockType>(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || {
        // SAFETY: a value of our type, as Redis passes it.
        if let Some(lock) = unsafe { as_lock(value) } {
            T::save(&ModuleIo(io), lock);
        }
    })
}

extern "C" fn aof_rewrite<T: LockType>(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded((), || {
        // SAFETY: a value of our type and the key Redis passed, alive for the call.
        let (Some(lock), Some(key)) =
            (unsafe { as_lock(value) }, unsafe { RString::from_ptr(key) })
        else {
            return;
        };
        T::rewrite(&AofRewrite { io, key }, lock);
    })
}

extern "C" fn mem_usage<T: LockType>(value: *const c_void) -> usize {
    // SAFETY: a value of our type, as Redis passes it.
    guarded(0, || unsafe { as_lock(value) }.map_or(0, T::memory))
}

extern "C" fn digest<T: LockType>(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || {
        // SAFETY: a value of our type, as Redis passes it.
        if let Some(lock) = unsafe { as_lock(value) } {
            T::digest(&Digest(md), lock);
        }
    })
}

extern "C" fn free(value: *mut c_void) {
    // A panic while dropping leaks the value: better than an aborted server.
    // SAFETY: every value of our type was made by `into_value` (a `Box<Lock>`), and
    // Redis frees each exactly once.
    guarded((), || {
        if let Some(lock) = unsafe { take_payload::<Lock>(value) } {
            VALUES.fetch_sub(1, Ordering::Relaxed);
            drop(lock);
        }
    })
}

extern "C" fn unlink2<T: LockType>(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guarded((), || {
        let key = call!(RedisModule_GetKeyNameFromOptCtx(ctx) else ptr::null());
        let db = call!(RedisModule_GetDbIdFromOptCtx(ctx) else 0);
        // SAFETY: a value of our type and the key's name, as Redis passes them for
        // the call.
        let (lock, key) = unsafe { (as_lock(value), RString::from_ptr(key.cast_mut())) };
        if let Some(key) = key {
            T::unlinked(db, key, lock);
        }
    })
}

extern "C" fn aux_save<T: LockType>(io: *mut raw::RedisModuleIO, when: c_int) {
    guarded((), || {
        if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            ModuleIo(io).save_signed(T::aux_value());
        }
    })
}

extern "C" fn aux_load<T: LockType>(
    io: *mut raw::RedisModuleIO,
    encver: c_int,
    when: c_int,
) -> c_int {
    guarded(ERR, || {
        let ok =
            when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int && T::aux_load(&ModuleIo(io), encver);
        if ok {
            OK
        } else {
            ERR
        }
    })
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
/// to, for the length of one callback (only the callbacks above make one).
pub struct ModuleIo(*mut raw::RedisModuleIO);

impl ModuleIo {
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
        // SAFETY: Redis's key name for this load, alive for the callback.
        let name = unsafe { RString::from_ptr(name.cast_mut()) }?;
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
        (owner, token, at, limit): (&[u8], i64, i64, Option<u32>),
        mark: i64,
    ) {
        // SAFETY: reading a function pointer that Redis filled in at load time.
        let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
            return;
        };
        let owner_ptr = owner.as_ptr().cast::<c_char>();
        let (token, at, mark) = (
            token as std::ffi::c_longlong,
            at as std::ffi::c_longlong,
            mark as std::ffi::c_longlong,
        );
        // SAFETY: as in `emit_holding`; each format letter matches one argument.
        unsafe {
            match limit {
                None => emit(
                    self.io,
                    command.as_ptr(),
                    c"sblclccl".as_ptr(),
                    self.key.as_ptr(),
                    owner_ptr,
                    owner.len(),
                    token,
                    c"PXAT".as_ptr(),
                    at,
                    c"SHARED".as_ptr(),
                    c"MARK".as_ptr(),
                    mark,
                ),
                Some(limit) => emit(
                    self.io,
                    command.as_ptr(),
                    c"sblclcclcl".as_ptr(),
                    self.key.as_ptr(),
                    owner_ptr,
                    owner.len(),
                    token,
                    c"PXAT".as_ptr(),
                    at,
                    c"SHARED".as_ptr(),
                    c"LIMIT".as_ptr(),
                    std::ffi::c_longlong::from(limit),
                    c"MARK".as_ptr(),
                    mark,
                ),
            }
        };
    }
}

/// The digest `DEBUG DIGEST` builds, for the length of one callback.
pub struct Digest(*mut raw::RedisModuleDigest);

impl Digest {
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
