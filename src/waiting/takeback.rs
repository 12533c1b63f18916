//! Take-backs: a waiter granted a holding whose reply never went out (it
//! disconnected, or `CLIENT UNBLOCK` dropped the reply) has the holding taken back,
//! so no holding is left with a client that never learned it has it. A grant that
//! one of its waiters heard of (a client that retried its WAIT has two waiters of
//! one owner, answered with one grant), or that refreshed a holding its owner had
//! before, is not taken back: someone was told it holds.

use redis_lock_core::rules::ReleasePlan;
use redis_lock_core::store::{self, Store};
use redis_lock_core::Mode;

use super::handoff::hand_off;
use super::marks::hand_off_behind;
use super::settle::next_lapse;
use super::timers::{start, watch_lapse, TimerJob, PAUSED_RETRY_MS};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Ctx};
use crate::propagate;
use crate::state::{Client, GrantAt, Live, MODULE};

/// A waiter disconnected, or Redis unblocked it without a timeout (CLIENT UNBLOCK
/// ERROR, a master turned replica): it leaves the queue. If it had just been granted
/// a holding but never got the reply, the grant is taken back (unless another
/// waiter heard of it, see above). Returns true if it was still waiting (Redis then
/// needs its handle released; an answered one was released).
pub fn left(ctx: Ctx, handle: Client) -> bool {
    let departed = MODULE.with(|w| w.queues.depart(handle)).flatten();
    let was_waiting = departed.is_some();
    if let Some(departed) = departed {
        MODULE.stats.waiters.decr();
        hand_off_behind(&departed);
    }
    let unheard = MODULE.with(|w| {
        let grant = w.in_flight.remove(&handle)?;
        waiter_done(w, &grant, false).then_some(grant)
    });
    if let Some((db, key, token)) = unheard.flatten() {
        start(ctx, 0, TimerJob::Undelivered { db, key, token });
    }
    was_waiting
}

/// The reply of a woken waiter is being sent.
pub fn delivered(handle: Client) {
    MODULE.with(|w| {
        if let Some(grant) = w.in_flight.remove(&handle) {
            waiter_done(w, &grant, true);
        }
    });
}

/// One waiter of `grant` is done with: its reply went out (`heard`) or it vanished.
/// True when it was the last, and no waiter heard of the grant: take it back. A
/// grant without a count is a fresh one to this waiter alone.
fn waiter_done(live: &mut Live, grant: &GrantAt, heard: bool) -> bool {
    let Some(flight) = live.grants_in_flight.get_mut(grant) else {
        return !heard;
    };
    flight.heard |= heard;
    flight.unsent = flight.unsent.saturating_sub(1);
    if flight.unsent > 0 {
        return false;
    }
    let unheard = !flight.heard;
    live.grants_in_flight.remove(grant);
    unheard
}

/// Removes the holding with `token` at `key`, if it is still there, then hands on.
pub fn take_back(ctx: Ctx, db: i32, key: &[u8], token: i64) {
    if ctx.writes_paused() {
        let key = key.into();
        start(
            ctx,
            PAUSED_RETRY_MS,
            TimerJob::Undelivered { db, key, token },
        );
        return;
    }
    let mut open = OpenKey::write_bytes(ctx, key);
    let owner: Option<(Box<[u8]>, Mode)> = open.lock().and_then(|lock| {
        let holder = lock.holders(None).find(|h| h.token == token)?;
        Some((holder.owner.into(), lock.mode()))
    });
    let Some((owner, mode)) = owner else {
        return;
    };
    let now = || Some(ctx.now_ms());
    let Ok(plan) = MODULE.deleting_here(|| store::release(&mut open, &owner, now)) else {
        return;
    };
    let lapse = next_lapse(&open);
    drop(open);
    // The key gone, the take-back is a `DEL` (as for an exclusive grant): no holder
    // released anything, so no `lock.release`.
    let key_gone = plan == ReleasePlan::DeleteKey;
    match mode {
        Mode::Shared if !key_gone => {
            propagate::release_holding(ctx, Arg::Bytes(key), Arg::Bytes(&owner))
        }
        _ => propagate::release(ctx, Arg::Bytes(key)),
    }
    watch_lapse(ctx, db, key, lapse);
    hand_off(ctx, db, key);
}
