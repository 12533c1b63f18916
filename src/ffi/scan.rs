//! Walking a database's keys a few at a time (`RedisModule_Scan`), for the look the
//! module takes at every lock after a load or a promotion (the rescan of the layer
//! above).

use std::ffi::c_void;

use redis_lock_core::Lock;
use redis_module::raw;

use super::key::lock_of;
use super::{call, guarded, Ctx, RString};

/// A cursor over the keys of the selected database, destroyed when dropped.
pub struct KeyScan(*mut raw::RedisModuleScanCursor);

/// What one step of a scan met.
pub struct Step {
    /// Keys visited (of every type).
    pub visited: usize,
    /// False once the whole database has been scanned.
    pub more: bool,
}

impl KeyScan {
    pub fn new() -> Option<KeyScan> {
        let cursor = call!(RedisModule_ScanCursorCreate() else std::ptr::null_mut());
        (!cursor.is_null()).then_some(KeyScan(cursor))
    }

    /// Scans on from where the cursor is, in the database selected in `ctx`, until
    /// at least `keys` keys were visited or the database ends; calls `found` with the
    /// name and the lock of each lock key. `found` must not write to the keyspace.
    pub fn step(&mut self, ctx: Ctx, keys: usize, found: &mut dyn FnMut(&[u8], &Lock)) -> Step {
        let mut state = Visit { visited: 0, found };
        let mut more = true;
        while more && state.visited < keys {
            let before = state.visited;
            more = call!(RedisModule_Scan(
                ctx.raw(),
                self.0,
                Some(scanned),
                (&mut state as *mut Visit).cast::<c_void>()
            ) else 0)
                != 0;
            // An empty bucket visits nothing: count it, so a sparse table ends too.
            if state.visited == before {
                state.visited += 1;
            }
        }
        Step {
            visited: state.visited,
            more,
        }
    }
}

impl Drop for KeyScan {
    fn drop(&mut self) {
        call!(RedisModule_ScanCursorDestroy(self.0) else ());
    }
}

struct Visit<'f> {
    visited: usize,
    found: &'f mut dyn FnMut(&[u8], &Lock),
}

extern "C" fn scanned(
    _ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    data: *mut c_void,
) {
    guarded((), || {
        // SAFETY: `data` is the `Visit` that `step` passed to this scan call.
        let Some(visit) = (unsafe { data.cast::<Visit>().as_mut() }) else {
            return;
        };
        visit.visited += 1;
        // SAFETY: the key name Redis passed, alive for the callback.
        let (Some(name), Some(lock)) = (unsafe { RString::from_ptr(name) }, lock_of(key)) else {
            return;
        };
        (visit.found)(name.as_bytes(), lock);
    });
}
