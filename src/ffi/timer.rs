//! Module timers: [`Ctx::start_timer`] runs a [`Job`] after a delay. The callback is
//! monomorphised over the job's type, so a timer's payload is always the type its
//! callback takes back, and what a job does is the caller's, in the layer above.

use std::ffi::c_void;
use std::ptr;

use redis_lock_core::timers::MAX_TIMER_DELAY_MS;
use redis_module::raw;

use super::block::take_payload;
use super::{call, guarded, Ctx, OK};

/// Work for a timer, run when it fires (with panics caught).
pub trait Job: Sized + 'static {
    fn fire(self, ctx: Ctx);
}

impl Ctx<'_> {
    /// Runs `job` after `delay_ms`, bounded to `0..=MAX_TIMER_DELAY_MS` (Redis 7.0
    /// overflows a longer period into the past); returns the timer id.
    pub fn start_timer<J: Job>(self, delay_ms: i64, job: J) -> Option<u64> {
        let delay_ms = delay_ms.clamp(0, MAX_TIMER_DELAY_MS);
        let data = Box::into_raw(Box::new(job)).cast::<c_void>();
        let id =
            call!(RedisModule_CreateTimer(self.raw(), delay_ms, Some(fired::<J>), data) else 0);
        if id == 0 {
            // SAFETY: the timer was not created; the job is still ours.
            drop(unsafe { Box::from_raw(data.cast::<J>()) });
            return None;
        }
        Some(id)
    }

    /// Cancels a timer of `J`s that has not fired yet, dropping its job; a fired or
    /// unknown id is ignored.
    pub fn stop_timer<J: Job>(self, id: u64) {
        let mut data: *mut c_void = ptr::null_mut();
        if call!(RedisModule_StopTimer(self.raw(), id, &mut data) else super::ERR) == OK {
            // SAFETY: Redis hands back the payload of a cancelled timer: a `Box<J>`,
            // as every timer started by `start_timer::<J>` has.
            drop(unsafe { take_payload::<J>(data) });
        }
    }
}

extern "C" fn fired<J: Job>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: the payload of a timer started by `start_timer::<J>` is a `Box<J>`;
    // Redis hands it back exactly once, here or to `stop_timer`.
    let Some(job) = (unsafe { take_payload::<J>(data) }) else {
        return;
    };
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || job.fire(ctx));
}
