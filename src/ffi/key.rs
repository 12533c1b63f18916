//! An open key of the keyspace, closed when dropped; the [`Store`] the lock rules
//! apply through.

use std::cell::Cell;
use std::ffi::c_void;

use redis_lock_core::store::Store;
use redis_lock_core::Lock;
use redis_module::raw;

use super::datatype::lock_type;
use super::{call, Ctx, RString, OK};

/// What a key holds.
pub enum Stored<'a> {
    Empty,
    Lock(&'a Lock),
    /// A value of another type: commands answer `WRONGTYPE`.
    OtherType,
}

/// A key opened for a command; Redis has already removed it if it was expired.
///
/// Closing it signals the key as modified (`WATCH`, client-side caching) exactly
/// when a write through it succeeded: the module asks Redis not to signal every key
/// opened for writing (`set_module_options`).
pub struct OpenKey<'c> {
    key: *mut raw::RedisModuleKey,
    ctx: Ctx<'c>,
    /// The key's name; made by `write_bytes` (and freed on drop) or borrowed.
    name: *mut raw::RedisModuleString,
    owns_name: bool,
    modified: bool,
    /// What the key holds, looked up once when it was opened and kept up to date by
    /// the writes through this `OpenKey` (nothing else writes the key meanwhile): the
    /// lock value (null when empty), or `Err` for a value of another type.
    value: Result<*mut c_void, ()>,
    /// The key's expiry once read (the outer `None`: not read yet), kept up to date
    /// by the writes through this `OpenKey` as `value` is: each read is a lookup in
    /// Redis's expires table.
    expiry: Cell<Option<Option<i64>>>,
}

impl<'c> OpenKey<'c> {
    pub fn read(ctx: Ctx<'c>, name: &RString) -> Self {
        Self::open(ctx, name.as_ptr(), false, raw::REDISMODULE_READ)
    }

    pub fn write(ctx: Ctx<'c>, name: &RString) -> Self {
        Self::open(
            ctx,
            name.as_ptr(),
            false,
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        )
    }

    /// Opens for writing a key known only by its bytes (timers, events).
    pub fn write_bytes(ctx: Ctx<'c>, name: &[u8]) -> Self {
        let name = call!(RedisModule_CreateString(ctx.raw(), name.as_ptr().cast(), name.len()) else std::ptr::null_mut());
        Self::open(
            ctx,
            name,
            true,
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        )
    }

    fn open(ctx: Ctx<'c>, name: *mut raw::RedisModuleString, owns_name: bool, mode: u32) -> Self {
        let key = if name.is_null() {
            std::ptr::null_mut()
        } else {
            call!(RedisModule_OpenKey(ctx.raw(), name, mode as _) else std::ptr::null_mut())
        };
        OpenKey {
            key,
            ctx,
            name,
            owns_name,
            modified: false,
            value: look_up(key),
            expiry: Cell::new(None),
        }
    }

    pub fn stored(&self) -> Stored<'_> {
        match self.lock_value() {
            Ok(value) => match unsafe_lock_ref(value) {
                Some(lock) => Stored::Lock(lock),
                None => Stored::Empty,
            },
            Err(()) => Stored::OtherType,
        }
    }

    /// True when the key holds a value of another type than a lock.
    pub fn holds_other_type(&self) -> bool {
        self.lock_value().is_err()
    }

    /// The key's lock value (null when the key is empty), or `Err` when it holds a
    /// value of another type.
    fn lock_value(&self) -> Result<*mut c_void, ()> {
        self.value
    }

    /// Stores `lock` as the key's value, replacing what was there; the key loses any
    /// expiry it had.
    pub fn set_lock(&mut self, lock: Lock) -> bool {
        if self.key.is_null() {
            return false;
        }
        let value = Box::into_raw(Box::new(lock));
        let status = call!(RedisModule_ModuleTypeSetValue(self.key, lock_type(), value.cast::<c_void>()) else super::ERR);
        if status != OK {
            // SAFETY: Redis did not take the value; it is still ours to free.
            drop(unsafe { Box::from_raw(value) });
            return false;
        }
        super::datatype::value_stored();
        self.value = Ok(value.cast::<c_void>());
        self.expiry.set(Some(None));
        self.modified = true;
        true
    }

    /// Sets the key's expiry to `at` (Unix ms).
    pub fn set_expires_at(&mut self, at: i64) -> bool {
        let set = !self.key.is_null()
            && call!(RedisModule_SetAbsExpire(self.key, at) else super::ERR) == OK;
        self.modified |= set;
        // Not known when it failed: read again.
        self.expiry.set(set.then_some(Some(at)));
        set
    }

    /// The key's expiry (Unix ms), `None` when it has none.
    pub fn expires_at(&self) -> Option<i64> {
        if self.key.is_null() {
            return None;
        }
        if let Some(known) = self.expiry.get() {
            return known;
        }
        let at = call!(RedisModule_GetAbsExpire(self.key) else raw::REDISMODULE_NO_EXPIRE as i64);
        let at = (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at);
        self.expiry.set(Some(at));
        at
    }

    pub fn delete(&mut self) -> bool {
        let deleted =
            !self.key.is_null() && call!(RedisModule_DeleteKey(self.key) else super::ERR) == OK;
        if deleted {
            self.value = Ok(std::ptr::null_mut());
            self.expiry.set(Some(None));
            self.modified = true;
        }
        deleted
    }
}

impl Drop for OpenKey<'_> {
    fn drop(&mut self) {
        if !self.key.is_null() {
            call!(RedisModule_CloseKey(self.key) else ());
        }
        if self.modified {
            call!(RedisModule_SignalModifiedKey(self.ctx.raw(), self.name) else super::ERR);
        }
        if self.owns_name && !self.name.is_null() {
            call!(RedisModule_FreeString(self.ctx.raw(), self.name) else ());
        }
    }
}

/// What an open key holds: its lock value (null when empty), or `Err` for a value of
/// another type.
fn look_up(key: *mut raw::RedisModuleKey) -> Result<*mut c_void, ()> {
    if key.is_null() {
        return Ok(std::ptr::null_mut());
    }
    let key_type = call!(RedisModule_KeyType(key) else raw::REDISMODULE_KEYTYPE_EMPTY as _);
    if key_type == raw::REDISMODULE_KEYTYPE_EMPTY as i32 {
        return Ok(std::ptr::null_mut());
    }
    let ours = lock_type();
    if key_type != raw::REDISMODULE_KEYTYPE_MODULE as i32
        || ours.is_null()
        || call!(RedisModule_ModuleTypeGetType(key) else std::ptr::null_mut()) != ours
    {
        return Err(());
    }
    Ok(call!(RedisModule_ModuleTypeGetValue(key) else std::ptr::null_mut()))
}

/// The lock at a key Redis opened for a callback (a scan's), for the length of the
/// callback; `None` for an empty key or one of another type.
pub(super) fn lock_of<'a>(key: *mut raw::RedisModuleKey) -> Option<&'a Lock> {
    look_up(key).ok().and_then(unsafe_lock_ref)
}

/// The lock a value pointer of our type points to.
fn unsafe_lock_ref<'a>(value: *mut c_void) -> Option<&'a Lock> {
    // SAFETY: a value of our type is always a `Box<Lock>` stored by `set_lock` or by
    // the RDB loader; it lives until the key is next written, which needs the
    // `&mut OpenKey` the returned borrow is tied to by its callers.
    unsafe { value.cast::<Lock>().as_ref() }
}

/// A lock key, written through Redis. A key that holds another type reads as free:
/// callers answer WRONGTYPE first (`OpenKey::holds_other_type`).
impl Store for OpenKey<'_> {
    fn lock(&self) -> Option<&Lock> {
        match self.stored() {
            Stored::Lock(lock) => Some(lock),
            _ => None,
        }
    }

    fn lock_mut(&mut self) -> Option<&mut Lock> {
        let value = self.lock_value().ok()?;
        // SAFETY: as in `unsafe_lock_ref`; the borrow is tied to `&mut self`, and
        // changing the value in place is a write to the key.
        let lock = unsafe { value.cast::<Lock>().as_mut() }?;
        self.modified = true;
        Some(lock)
    }

    fn put(&mut self, lock: Lock) -> bool {
        self.set_lock(lock)
    }

    fn delete(&mut self) -> bool {
        OpenKey::delete(self)
    }

    fn key_expiry(&self) -> Option<i64> {
        self.expires_at()
    }

    fn set_key_expiry(&mut self, at: i64) -> bool {
        self.set_expires_at(at)
    }
}
