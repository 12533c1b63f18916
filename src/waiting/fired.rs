//! What each timer does when it fires ([`TimerJob`], armed by `timers`, `marks`,
//! `takeback` and `rescan`).

use redis_lock_core::handoff::Refusal;

use super::handoff::{hand_off_from_timer, hand_off_refusing, is_free};
use super::queue::time_out_waiters;
use super::rescan;
use super::settle::{next_lapse, settle};
use super::takeback::take_back;
use super::timers::{look_when_writes_resume, start, watch_lapse, TimerJob, PAUSED_RETRY_MS};
use crate::ffi::key::OpenKey;
use crate::ffi::timer::Job;
use crate::ffi::{Arg, Ctx};
use crate::state::{Mark, MODULE};

impl Job for TimerJob {
    fn fire(self, ctx: Ctx) {
        fired(ctx, self);
    }
}

fn fired(ctx: Ctx, job: TimerJob) {
    if job == TimerJob::Timeouts {
        MODULE.with(|w| w.timeout_timer = None);
        // Waiters' deadlines pass on a replica too (one that was a master when they
        // blocked is disconnected by Redis, but a timeout costs nothing to answer).
        time_out_waiters(ctx);
        return;
    }
    if job == TimerJob::Marked {
        MODULE.with(|w| w.marked_timer_armed = false);
    }
    if job == TimerJob::Paused {
        MODULE.with(|w| w.paused_timer_armed = false);
    }
    if ctx.is_replica() {
        // Locks change on a replica only as its master decides: no hand-off, no
        // lapse, no take-back here.
        MODULE.with(|w| {
            w.marked.clear();
            w.key_timers.clear();
            w.paused.clear();
        });
        rescan::stop();
        return;
    }
    match job {
        TimerJob::Key {
            db,
            key,
            due,
            frees_at,
        } => {
            // This timer is the key's current one unless a sooner one replaced it
            // (stopped then).
            MODULE.with(|w| w.key_timers.fired(db, &key, due));
            if ctx.select_db(db) {
                // Due a millisecond after the expiry or lapse it watches, or
                // sooner to look again: what it finds free was freed at the later.
                let freed_at = frees_at.map_or(due, |at| at.max(due.saturating_sub(1)));
                look_at(ctx, db, &key, Some(freed_at));
            }
        }
        TimerJob::Undelivered { db, key, token } => {
            if ctx.select_db(db) {
                take_back(ctx, db, &key, token);
            }
        }
        TimerJob::Marked => {
            let marked = MODULE
                .with(|w| std::mem::take(&mut w.marked))
                .unwrap_or_default();
            for (db, key, mark) in marked {
                if !ctx.select_db(db) {
                    continue;
                }
                match mark {
                    Mark::Evicted if is_free(ctx, &key) => {
                        hand_off_refusing(ctx, db, &key, Some(Refusal::OutOfMemory), None);
                    }
                    Mark::Restored => look_at(ctx, db, &key, None),
                    Mark::Relocated => rescan::lock_relocated(ctx),
                    _ => hand_off_from_timer(ctx, db, &key, None),
                }
            }
        }
        TimerJob::Rescan => rescan::step(ctx),
        TimerJob::Paused => {
            if ctx.writes_paused() {
                // Still paused: the keys wait on, untouched, for the next try.
                MODULE.with(|w| w.paused_timer_armed = true);
                start(ctx, PAUSED_RETRY_MS, TimerJob::Paused);
                return;
            }
            let keys = MODULE
                .with(|w| std::mem::take(&mut w.paused))
                .unwrap_or_default();
            for (db, key) in keys {
                if ctx.select_db(db) {
                    look_at(ctx, db, &key, None);
                }
            }
        }
        TimerJob::Timeouts => {}
    }
}

/// A key timer: removes lapsed shared holdings, hands off, and keeps watching what
/// still needs it. `due` is when what it watched lapsed, if it watched one.
fn look_at(ctx: Ctx, db: i32, key: &[u8], due: Option<i64>) {
    if ctx.writes_paused() {
        look_when_writes_resume(ctx, db, key);
        return;
    }
    let mut open = OpenKey::write_bytes(ctx, key);
    if !open.holds_other_type() {
        settle(ctx, &mut open, Arg::Bytes(key));
    }
    let lapse = next_lapse(&open);
    drop(open);
    watch_lapse(ctx, db, key, lapse);
    hand_off_from_timer(ctx, db, key, due.filter(|&at| at <= ctx.now_ms()));
}
