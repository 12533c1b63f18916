//! Joining the queue (a blocked `LOCK.ACQUIRE … WAIT`), and leaving it: by its
//! deadline, by a disconnect or `CLIENT UNBLOCK` (`takeback`), or by a hand-off.

use redis_lock_core::queue::Waiter;
use redis_lock_core::Kind;

use super::marks::hand_off_behind;
use super::settle::Deadlines;
use super::takeback;
use super::timers::{arm_timeouts, watch_expiry, watch_lapse};
use crate::ffi::block::Answer;
use crate::ffi::Ctx;
use crate::reply::{Outcome, Reply};
use crate::state::{Client, MODULE};

/// What a blocked acquire asks for.
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub ttl: i64,
    pub kind: Kind,
    /// `None`: without limit.
    pub timeout_ms: Option<i64>,
}

/// Blocks the caller at the back of `key`'s queue. The lock is held now; its expiry
/// and its next lapse (`deadlines`, as the caller read them) are watched so the
/// queue moves the moment either frees a place.
pub fn enqueue(ctx: Ctx, key: &[u8], request: Request<'_>, deadlines: Deadlines) -> Reply {
    let Some(handle) = ctx.block::<Outcome>() else {
        return Reply::error("ERR this client cannot be blocked");
    };
    let db = ctx.selected_db();
    let now = ctx.now_ms();
    let waiter = Waiter {
        handle,
        owner: request.owner.into(),
        ttl: request.ttl,
        kind: request.kind,
        deadline: request.timeout_ms.map(|ms| now.saturating_add(ms)),
        queued_at: now,
    };
    if MODULE.with(|w| w.queues.push(db, key, waiter)).is_none() {
        // Never answered otherwise: a client left blocked for good.
        handle.answer(Outcome::Error(
            "ERR internal error in the lock module".into(),
        ));
        return Reply::Blocked;
    }
    MODULE.stats.waiters.incr();
    watch_expiry(ctx, db, key, deadlines.expiry);
    watch_lapse(ctx, db, key, deadlines.lapse);
    arm_timeouts(ctx);
    Reply::Blocked
}

/// Answers every waiter whose deadline has passed with the null reply.
pub fn time_out_waiters(ctx: Ctx) {
    let now = ctx.now_ms();
    while let Some(departed) = MODULE.with(|w| w.queues.pop_timed_out(now)).flatten() {
        MODULE.stats.waiters.decr();
        MODULE.stats.wait_timeouts.incr();
        departed.waiter.handle.answer(Outcome::TimedOut);
        hand_off_behind(&departed);
    }
    arm_timeouts(ctx);
}

/// What Redis tells about a blocked waiter.
impl Answer for Outcome {
    fn reply(ctx: Ctx, answer: Option<&Outcome>) {
        Outcome::send(ctx, answer);
    }

    fn delivered(handle: Client) {
        takeback::delivered(handle);
    }

    fn left(ctx: Ctx, handle: Client) -> bool {
        takeback::left(ctx, handle)
    }
}
