//! The module's timers: what each is for ([`TimerJob`]), and keeping them armed:
//! one per watched key (a lock with waiters, or shared holdings that lapse), one for
//! the waiters' deadlines, one for marked keys, one while writes are paused. What a
//! timer does when it fires is in `fired`.

use redis_lock_core::timers::{delay_until, expiry_due, needs_arming, Armed, MAX_TIMER_DELAY_MS};

use crate::ffi::Ctx;
use crate::state::MODULE;

/// Work for a module timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerJob {
    /// Look at the lock at this key: it may have expired, a shared holding may have
    /// lapsed, its expiry may have been changed by hand. `due` tells this timer from
    /// a later one of the same key; `frees_at` is the expiry or lapse it was armed
    /// to see (it may be due before it, to look again).
    Key {
        db: i32,
        key: Box<[u8]>,
        due: i64,
        frees_at: Option<i64>,
    },
    /// Keys marked by keyspace or flush events may have freed (`marks`).
    Marked,
    /// A granted waiter disconnected before its reply went out: take the holding
    /// with this token back (`takeback`).
    Undelivered { db: i32, key: Box<[u8]>, token: i64 },
    /// Waiters' deadlines may have passed.
    Timeouts,
    /// Scan on for locks whose holdings lapse (`rescan`).
    Rescan,
    /// Writes were paused when keys needed a look: look at them once they resume.
    Paused,
}

/// How often a hand-off or take-back that found writes paused tries again.
pub const PAUSED_RETRY_MS: i64 = 10;

/// Starts a timer for `job`; `None` when Redis refused it.
pub fn start(ctx: Ctx, delay_ms: i64, job: TimerJob) -> Option<u64> {
    ctx.start_timer(delay_ms, job)
}

/// Watches the expiry of a lock that clients wait for: due one millisecond after
/// `expires_at`, at most `EXPIRY_RECHECK_MS` ahead (`redis_lock_core::timers`).
pub fn watch_expiry(ctx: Ctx, db: i32, key: &[u8], expires_at: Option<i64>) {
    if MODULE.waiters(db, key) > 0 {
        watch(
            ctx,
            db,
            key,
            expiry_due(ctx.now_ms(), expires_at),
            expires_at,
        );
    }
}

/// Watches a shared holding that lapses (at `next_lapse`) while others live on.
pub fn watch_lapse(ctx: Ctx, db: i32, key: &[u8], next_lapse: Option<i64>) {
    if let Some(at) = next_lapse {
        watch(ctx, db, key, at.saturating_add(1), Some(at));
    }
}

/// Keeps one timer per watched key, due by `due`, to see what happens at `frees_at`.
/// A timer already due by then is kept: firing early is harmless (it looks again),
/// and keeping it spares a stop and a create on every refresh or contended acquire.
fn watch(ctx: Ctx, db: i32, key: &[u8], due: i64, frees_at: Option<i64>) {
    let now = ctx.now_ms();
    let due = due.min(now.saturating_add(MAX_TIMER_DELAY_MS));
    let current = MODULE.with(|w| w.key_timers.get(db, key)).flatten();
    if !needs_arming(current, due) {
        return;
    }
    let job = TimerJob::Key {
        db,
        key: key.into(),
        due,
        frees_at,
    };
    let Some(id) = start(ctx, delay_until(now, due), job) else {
        return;
    };
    let replaced = MODULE
        .with(|w| w.key_timers.insert(db, key, Armed { id, due }))
        .flatten();
    if let Some(old) = replaced {
        ctx.stop_timer::<TimerJob>(old.id);
    }
}

/// Keeps the one timeout timer due by the earliest deadline of any waiter.
pub fn arm_timeouts(ctx: Ctx) {
    let Some((deadline, current)) = MODULE
        .with(|w| Some((w.queues.next_deadline()?, w.timeout_timer)))
        .flatten()
    else {
        return;
    };
    let now = ctx.now_ms();
    let due = deadline.min(now.saturating_add(MAX_TIMER_DELAY_MS));
    if !needs_arming(current, due) {
        return;
    }
    let Some(id) = start(ctx, delay_until(now, due), TimerJob::Timeouts) else {
        return;
    };
    let replaced = MODULE
        .with(|w| w.timeout_timer.replace(Armed { id, due }))
        .flatten();
    if let Some(old) = replaced {
        ctx.stop_timer::<TimerJob>(old.id);
    }
}

/// Looks at `key` once writes resume: one timer, every `PAUSED_RETRY_MS` while the
/// pause lasts, for every key that waits for it (a pause may outlast the TTLs of
/// thousands of locks).
pub fn look_when_writes_resume(ctx: Ctx, db: i32, key: &[u8]) {
    let arm = MODULE.with(|w| {
        w.paused.insert((db, key.into()));
        !std::mem::replace(&mut w.paused_timer_armed, true)
    });
    if arm == Some(true) {
        start(ctx, PAUSED_RETRY_MS, TimerJob::Paused);
    }
}
