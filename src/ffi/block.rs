//! Blocked clients, timers, databases and server events: safe wrappers with generic
//! payloads. The callbacks Redis calls for them are in `ffi::entry`; what waiting
//! means (queues, hand-offs) is in `crate::blocking`.
//!
//! A waiter is blocked with `RedisModule_BlockClient` (not `BlockClientOnKeys`: on
//! Redis 7.0 a deleted or expired key wakes no one) and answered with
//! `RedisModule_UnblockClient(bc, payload)`; the reply callback then sends it.

use std::ffi::{c_int, c_void};
use std::ptr;

use redis_module::raw;

use super::{call, Ctx, ERR, OK};
use redis_lock_core::timers::MAX_TIMER_DELAY_MS;

/// A blocked client, by the handle Redis gave it; valid until it is unblocked, times
/// out or disconnects (each of which removes it from the queues first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(usize);

impl Blocked {
    pub(super) fn from_ptr(bc: *mut raw::RedisModuleBlockedClient) -> Self {
        Blocked(bc as usize)
    }

    pub(super) fn as_ptr(self) -> *mut raw::RedisModuleBlockedClient {
        self.0 as *mut raw::RedisModuleBlockedClient
    }

    /// Wakes the client; its reply callback gets `payload` (a `Box<T>` that the free
    /// callback of its block must drop as a `T`).
    pub fn answer<T>(self, payload: T) {
        let data = Box::into_raw(Box::new(payload)).cast::<c_void>();
        if call!(RedisModule_UnblockClient(self.as_ptr(), data) else ERR) != OK {
            // SAFETY: Redis did not take the box.
            drop(unsafe { Box::from_raw(data.cast::<T>()) });
        }
    }

    /// Releases a handle Redis still holds, without a reply to send (after a
    /// disconnect or an unblock by Redis). Must not be called for a client the
    /// module already answered: Redis would free it twice.
    pub(super) fn release(self) {
        call!(RedisModule_UnblockClient(self.as_ptr(), ptr::null_mut()) else ERR);
    }
}

/// The callbacks of a blocked client, given by `ffi::entry`.
#[derive(Clone, Copy)]
pub struct BlockCallbacks {
    pub reply: raw::RedisModuleCmdFunc,
    pub timeout: raw::RedisModuleCmdFunc,
    pub free: Option<unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void)>,
    pub disconnect: raw::RedisModuleDisconnectFunc,
}

/// Takes back the `Box<T>` a payload pointer came from.
///
/// # Safety
/// `data` is null or came from `Box::<T>::into_raw` (a block's answer, a timer's
/// payload), and is taken back once.
pub(super) unsafe fn take_payload<T>(data: *mut c_void) -> Option<Box<T>> {
    // SAFETY: as the caller promises.
    (!data.is_null()).then(|| unsafe { Box::from_raw(data.cast::<T>()) })
}

impl Ctx<'_> {
    /// Blocks the calling client until the module answers it, with Redis given no
    /// timeout (the module keeps the waiter's deadline, see `crate::blocking`): only
    /// the timeout callback `CLIENT UNBLOCK` needs. `None` when Redis refuses.
    pub(super) fn block_with(self, callbacks: BlockCallbacks) -> Option<Blocked> {
        let bc = call!(RedisModule_BlockClient(
            self.raw(),
            callbacks.reply,
            callbacks.timeout,
            callbacks.free,
            0,
        ) else ptr::null_mut());
        if bc.is_null() {
            return None;
        }
        call!(RedisModule_SetDisconnectCallback(bc, callbacks.disconnect) else ());
        Some(Blocked(bc as usize))
    }

    /// The blocked client a reply or timeout callback runs for.
    pub(super) fn blocked_handle(self) -> Blocked {
        Blocked(call!(RedisModule_GetBlockedClientHandle(self.raw()) else ptr::null_mut()) as usize)
    }

    /// The payload the blocked client of a reply callback was answered with.
    ///
    /// # Safety
    /// Every answer of this block was a `T` ([`Blocked::answer`]).
    pub(super) unsafe fn blocked_payload<'p, T>(self) -> Option<&'p T> {
        let data = call!(RedisModule_GetBlockedClientPrivateData(self.raw()) else ptr::null_mut());
        // SAFETY: as the caller promises; the payload lives until the block's free
        // callback, after the reply callback.
        unsafe { data.cast::<T>().as_ref() }
    }

    pub fn selected_db(self) -> i32 {
        call!(RedisModule_GetSelectedDb(self.raw()) else 0)
    }

    /// Selects `db` for the keys this context opens next.
    pub fn select_db(self, db: i32) -> bool {
        self.selected_db() == db || call!(RedisModule_SelectDb(self.raw(), db) else ERR) == OK
    }

    /// Runs `fire` with `payload` after `delay_ms`, bounded to `0..=MAX_TIMER_DELAY_MS`
    /// (Redis 7.0 overflows a longer period into the past); returns the timer id.
    pub(super) fn start_timer_with<T>(
        self,
        delay_ms: i64,
        payload: T,
        fire: raw::RedisModuleTimerProc,
    ) -> Option<u64> {
        let delay_ms = delay_ms.clamp(0, MAX_TIMER_DELAY_MS);
        let data = Box::into_raw(Box::new(payload)).cast::<c_void>();
        let id = call!(RedisModule_CreateTimer(self.raw(), delay_ms, fire, data) else 0);
        if id == 0 {
            // SAFETY: the timer was not created; the payload is still ours.
            drop(unsafe { Box::from_raw(data.cast::<T>()) });
            return None;
        }
        Some(id)
    }

    /// Cancels a timer that has not fired yet, dropping its payload (a `T`); a fired
    /// or unknown id is ignored.
    pub(super) fn stop_timer_with<T>(self, id: u64) {
        let mut data: *mut c_void = ptr::null_mut();
        if call!(RedisModule_StopTimer(self.raw(), id, &mut data) else ERR) == OK {
            // SAFETY: Redis hands back the payload of a cancelled timer, a `Box<T>`
            // as the caller says.
            drop(unsafe { take_payload::<T>(data) });
        }
    }

    /// Subscribes `callback` to the server event `id`.
    pub(super) fn subscribe_server_event(
        self,
        id: u64,
        callback: raw::RedisModuleEventCallback,
    ) -> bool {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        call!(RedisModule_SubscribeToServerEvent(self.raw(), event, callback) else ERR) == OK
    }

    /// Subscribes `callback` to the keyspace events of the classes in `types`.
    pub(super) fn subscribe_keyspace(
        self,
        types: u32,
        callback: raw::RedisModuleNotificationFunc,
    ) -> bool {
        call!(RedisModule_SubscribeToKeyspaceEvents(self.raw(), types as c_int, callback) else ERR)
            == OK
    }
}
