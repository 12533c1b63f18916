//! Blocked clients, timers, databases and the flush event: the C side of waiting.
//! What waiting means (queues, hand-offs) is in `crate::blocking`.
//!
//! A waiter is blocked with `RedisModule_BlockClient` (not `BlockClientOnKeys`: on
//! Redis 7.0 a deleted or expired key wakes no one) and answered with
//! `RedisModule_UnblockClient(bc, outcome)`; the reply callback then sends the outcome.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use redis_module::raw;

use super::{call, Ctx, ERR, OK};
use crate::blocking::{self, Outcome, TimerJob};
use redis_lock_core::timers::MAX_TIMER_DELAY_MS;

/// A blocked client, by the handle Redis gave it; valid until it is unblocked, times
/// out or disconnects (each of which removes it from the queues first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Blocked(usize);

impl Blocked {
    fn as_ptr(self) -> *mut raw::RedisModuleBlockedClient {
        self.0 as *mut raw::RedisModuleBlockedClient
    }

    /// Wakes the client with `outcome` as its reply.
    pub fn answer(self, outcome: Outcome) {
        let data = Box::into_raw(Box::new(outcome)).cast::<c_void>();
        if call!(RedisModule_UnblockClient(self.as_ptr(), data) else ERR) != OK {
            // SAFETY: Redis did not take the box.
            drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
        }
    }
}

/// The blocked client a reply or timeout callback runs for.
fn handle_of(ctx: Ctx) -> Blocked {
    Blocked(call!(RedisModule_GetBlockedClientHandle(ctx.raw()) else ptr::null_mut()) as usize)
}

extern "C" fn reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx::new(ctx);
    let _ = catch_unwind(AssertUnwindSafe(|| blocking::delivered(handle_of(ctx))));
    let data = call!(RedisModule_GetBlockedClientPrivateData(ctx.raw()) else ptr::null_mut());
    // SAFETY: the private data is the `Box<Outcome>` given to `answer`, freed by
    // `free_outcome` after this callback.
    match unsafe { data.cast::<Outcome>().as_ref() } {
        Some(Outcome::Token(token)) => ctx.reply_integer(*token),
        Some(Outcome::Error(text)) => ctx.reply_error(text),
        Some(Outcome::TimedOut) | None => ctx.reply_null(),
    }
    OK
}

/// Redis times out no waiter itself (they block without a Redis timeout; the module
/// keeps their deadlines): this runs for `CLIENT UNBLOCK … TIMEOUT`, whose reply is
/// null. A waiter the module had already answered with a grant may get here on
/// Redis 7.2 and later, which then drop the grant's reply: the grant is taken back.
extern "C" fn timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx::new(ctx);
    let handle = handle_of(ctx);
    let was_waiting = catch_unwind(AssertUnwindSafe(|| blocking::left(ctx, handle)));
    ctx.reply_null();
    // Redis frees the handle only once the module unblocks it, also after a timeout;
    // the client is detached by then, so no second reply is sent. One already
    // answered was unblocked then: a second unblock would free it twice.
    if was_waiting.unwrap_or(false) {
        call!(RedisModule_UnblockClient(handle.as_ptr(), ptr::null_mut()) else ERR);
    }
    OK
}

extern "C" fn disconnected(ctx: *mut raw::RedisModuleCtx, bc: *mut raw::RedisModuleBlockedClient) {
    let handle = Blocked(bc as usize);
    let was_waiting = catch_unwind(AssertUnwindSafe(|| blocking::left(Ctx::new(ctx), handle)));
    // On a panic, leaking the handle is better than freeing it twice.
    if was_waiting.unwrap_or(false) {
        // Redis frees a handle blocked with RedisModule_BlockClient only when the
        // module unblocks it, also after a disconnect; without a reply to send.
        call!(RedisModule_UnblockClient(bc, ptr::null_mut()) else ERR);
    }
}

extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        super::guarded((), || {
            // SAFETY: the only private data ever set is a `Box<Outcome>` from `answer`.
            drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
        })
    }
}

extern "C" fn timer_fired(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: timer data is always a `Box<TimerJob>` from `start_timer`; Redis hands
    // it back exactly once, here or to `stop_timer`.
    let job = unsafe { Box::from_raw(data.cast::<TimerJob>()) };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        blocking::timer_fired(Ctx::new(ctx), *job)
    }));
}

extern "C" fn flushed(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: the flush event passes a RedisModuleFlushInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
        return;
    };
    // dbnum is -1 for FLUSHALL.
    let db = (info.dbnum >= 0).then_some(info.dbnum);
    let _ = catch_unwind(AssertUnwindSafe(|| blocking::flushed(db)));
}

impl Ctx {
    /// Blocks the calling client until the module answers it: Redis is given no
    /// timeout (the module keeps the waiter's deadline, see `crate::blocking`), only
    /// the callback that `CLIENT UNBLOCK` needs. `None` when Redis refuses.
    pub fn block(self) -> Option<Blocked> {
        let bc = call!(RedisModule_BlockClient(
            self.raw(),
            Some(reply),
            Some(timeout),
            Some(free_outcome),
            0,
        ) else ptr::null_mut());
        if bc.is_null() {
            return None;
        }
        call!(RedisModule_SetDisconnectCallback(bc, Some(disconnected)) else ());
        Some(Blocked(bc as usize))
    }

    pub fn selected_db(self) -> i32 {
        call!(RedisModule_GetSelectedDb(self.raw()) else 0)
    }

    /// Selects `db` for the keys this context opens next.
    pub fn select_db(self, db: i32) -> bool {
        self.selected_db() == db || call!(RedisModule_SelectDb(self.raw(), db) else ERR) == OK
    }

    /// Runs `job` after `delay_ms`, bounded to `0..=MAX_TIMER_DELAY_MS` (Redis 7.0
    /// overflows a longer period into the past); returns the timer id.
    pub fn start_timer(self, delay_ms: i64, job: TimerJob) -> Option<u64> {
        let delay_ms = delay_ms.clamp(0, MAX_TIMER_DELAY_MS);
        let data = Box::into_raw(Box::new(job)).cast::<c_void>();
        let id =
            call!(RedisModule_CreateTimer(self.raw(), delay_ms, Some(timer_fired), data) else 0);
        if id == 0 {
            // SAFETY: the timer was not created; the job is still ours.
            drop(unsafe { Box::from_raw(data.cast::<TimerJob>()) });
            return None;
        }
        Some(id)
    }

    /// Cancels a timer that has not fired yet; a fired or unknown id is ignored.
    pub fn stop_timer(self, id: u64) {
        let mut data: *mut c_void = ptr::null_mut();
        if call!(RedisModule_StopTimer(self.raw(), id, &mut data) else ERR) == OK && !data.is_null()
        {
            // SAFETY: Redis hands back the `Box<TimerJob>` of a cancelled timer.
            drop(unsafe { Box::from_raw(data.cast::<TimerJob>()) });
        }
    }
}

extern "C" fn swapped(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: the swapdb event passes a RedisModuleSwapDbInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    let (first, second) = (info.dbnum_first, info.dbnum_second);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        blocking::flushed(Some(first));
        blocking::flushed(Some(second));
    }));
}

/// Subscribes to FLUSHDB/FLUSHALL and SWAPDB, which change keys without per-key
/// events: waiters of those databases then look at their keys again.
pub fn subscribe_flush(ctx: Ctx) -> bool {
    let subscribe = |id, callback: raw::RedisModuleEventCallback| {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        call!(RedisModule_SubscribeToServerEvent(ctx.raw(), event, callback) else ERR) == OK
    };
    subscribe(raw::REDISMODULE_EVENT_FLUSHDB, Some(flushed))
        && subscribe(raw::REDISMODULE_EVENT_SWAPDB, Some(swapped))
}
