//! The hand-off: when a key's holdings change, grant its waiters as many holdings
//! as fit, in order (planned by `redis_lock_core::handoff`, stored, propagated like
//! any grant, answered).

use redis_lock_core::handoff::{plan_hand_off, Answer, HandOff, Refusal};
use redis_lock_core::rules::fits;
use redis_lock_core::store::{self, Store};

use super::redirect;
use super::settle::{next_lapse, settle};
use super::timers::{look_when_writes_resume, watch_expiry, watch_lapse};
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Ctx, OwnedString};
use crate::propagate;
use crate::reply::{Outcome, Reply, OOM, WRONGTYPE};
use crate::state::{Client, GrantAt, MODULE};

/// Hands the lock at `key` to as many of its waiters as fit, in order; returns true
/// if it granted any. Must run with `db` selected in `ctx`, in the command or event
/// that made room (a release, an acquire that found holdings lapsed, a take-back).
#[inline]
pub fn hand_off(ctx: Ctx, db: i32, key: &[u8]) -> bool {
    // Inline: on a server without waiters, the common case, one load here.
    MODULE.any_waiting() && hand_off_refusing(ctx, db, key, None, None)
}

/// A hand-off whose grants are all refused with `refusal` when it is given.
/// `freed_at` is when the room it grants was made (a lapse's time, for a timer that
/// fired after it), `None` for now: each grant's delay since then goes into the
/// `handoff_ms` histogram.
pub fn hand_off_refusing(
    ctx: Ctx,
    db: i32,
    key: &[u8],
    refusal: Option<Refusal>,
    freed_at: Option<i64>,
) -> bool {
    if MODULE.waiters(db, key) == 0 {
        return false;
    }
    if ctx.writes_paused() {
        // Only timers get here during a pause (the commands that free a lock are
        // writes, held back by it): look again once it ends.
        look_when_writes_resume(ctx, db, key);
        return false;
    }
    let mut open = OpenKey::write_bytes(ctx, key);
    let refusal = if open.holds_other_type() {
        // Overwritten by a value of another type (SET, RESTORE REPLACE, RENAME onto
        // it…): the waiters' acquire meets that value now, and gets what an acquire
        // of it gets, instead of waiting on a lock that is gone.
        Some(Refusal::WrongType)
    } else {
        settle(ctx, &mut open, Arg::Bytes(key));
        refusal.or_else(|| out_of_memory_for(ctx, &open, db, key))
    };
    let now = ctx.now_ms();
    let lock = store::held(&open);
    let step = MODULE
        .with(|w| {
            plan_hand_off(
                &mut w.queues,
                db,
                key,
                lock.as_deref(),
                refusal,
                now,
                &MODULE.mint,
            )
        })
        .unwrap_or_default();
    drop(lock);
    if store::apply_hand_off(&mut open, &step, now).is_err() {
        drop(open);
        refuse_grants(step, "ERR could not store the lock");
        return false;
    }
    let (expiry, lapse) = (open.expires_at(), next_lapse(&open));
    drop(open);
    let granted = !step.grants.is_empty();
    answer(ctx, db, key, step, now, freed_at.unwrap_or(now));
    watch_expiry(ctx, db, key, expiry);
    watch_lapse(ctx, db, key, lapse);
    granted
}

/// A hand-off from a timer: the lock expired (at `freed_at`), or DEL, MIGRATE,
/// FLUSHALL… removed it (`None`: just now). In a cluster, a free lock in a slot this
/// node is migrating away sends its waiters to the target (`redirect`).
pub fn hand_off_from_timer(ctx: Ctx, db: i32, key: &[u8], freed_at: Option<i64>) {
    if ctx.in_cluster() && MODULE.waiters(db, key) > 0 && !ctx.writes_paused() && is_free(ctx, key)
    {
        if let Some(redirect) = redirect::migrating(ctx, key) {
            hand_off_refusing(ctx, db, key, Some(Refusal::Redirect(redirect)), freed_at);
            return;
        }
    }
    if MODULE.any_waiting() {
        hand_off_refusing(ctx, db, key, None, freed_at);
    }
}

/// True when nothing holds the lock at `key` (and no other type is there).
pub fn is_free(ctx: Ctx, key: &[u8]) -> bool {
    let open = OpenKey::write_bytes(ctx, key);
    !open.holds_other_type() && open.lock().is_none()
}

/// `OutOfMemory` when memory is over `maxmemory` now (an acquire would be refused,
/// deny-oom) and the queue's head would be granted: a queue that could not move
/// anyway keeps waiting.
fn out_of_memory_for(ctx: Ctx, open: &OpenKey, db: i32, key: &[u8]) -> Option<Refusal> {
    if !ctx.out_of_memory() {
        return None;
    }
    let now = ctx.now_ms();
    let head_fits = MODULE.with(|w| {
        w.queues
            .front(db, key)
            .is_some_and(|front| fits(store::held(open).as_deref(), front.kind, now))
    });
    head_fits.unwrap_or(false).then_some(Refusal::OutOfMemory)
}

/// Tells replicas, subscribers and INFO about a planned and stored hand-off step,
/// and answers its waiters. The lock stood free since `freed_at`.
fn answer(ctx: Ctx, db: i32, key: &[u8], step: HandOff<Client>, now: i64, freed_at: i64) {
    // The key as a string, made once for every grant's propagation and event.
    let key_string = (!step.grants.is_empty())
        .then(|| OwnedString::new(key))
        .flatten();
    let key_arg = key_string
        .as_ref()
        .map_or(Arg::Bytes(key), |s| Arg::Str(s.as_rstring()));
    let answered = step.answers.len() + step.grants.iter().map(|g| g.waiters.len()).sum::<usize>();
    let stats = &MODULE.stats;
    stats.waiters.sub(answered);
    for grant in step.grants {
        let owner = Arg::Bytes(&grant.owner);
        let (token, at, kind) = (grant.token, grant.expires_at, grant.kind);
        if grant.fresh {
            propagate::grant(ctx, key_arg, owner, token, at, kind);
            stats.acquisitions.incr();
            stats.hand_offs.incr();
            stats.handoff_ms.observe(now.saturating_sub(freed_at));
        } else {
            propagate::expiry(ctx, key_arg, owner, token, at, at, kind);
        }
        let granted: GrantAt = (db, key.into(), token);
        // A fresh grant to one waiter, the common case, needs no count: it is taken
        // back if that waiter vanishes unanswered (see `takeback`).
        if grant.waiters.len() > 1 || !grant.fresh {
            MODULE.with(|w| {
                let flight = w.grants_in_flight.entry(granted.clone()).or_default();
                flight.unsent = flight.unsent.saturating_add(grant.waiters.len());
                flight.heard |= !grant.fresh;
            });
        }
        for woken in grant.waiters {
            stats.wait_ms.observe(now.saturating_sub(woken.queued_at));
            MODULE.with(|w| w.in_flight.insert(woken.handle, granted.clone()));
            woken.handle.answer(Outcome::Token(token));
        }
    }
    for (waiter, answer) in step.answers {
        let outcome = match answer {
            Answer::TimedOut => {
                stats.wait_timeouts.incr();
                Outcome::TimedOut
            }
            Answer::Refused(error) => match Reply::from(error) {
                Reply::Error(text) => Outcome::Error(text),
                _ => Outcome::Error("ERR the lock could not be granted".into()),
            },
            Answer::Blocked(Refusal::WrongType) => Outcome::Error(WRONGTYPE.into()),
            Answer::Blocked(Refusal::OutOfMemory) => Outcome::Error(OOM.into()),
            Answer::Blocked(Refusal::Redirect(to)) => Outcome::Error(to.into()),
        };
        waiter.handle.answer(outcome);
    }
}

/// A step whose grants could not be stored: every waiter of it gets `error`.
fn refuse_grants(step: HandOff<Client>, error: &'static str) {
    let waiters = step
        .grants
        .into_iter()
        .flat_map(|g| g.waiters)
        .chain(step.answers.into_iter().map(|(w, _)| w));
    let mut count = 0;
    for waiter in waiters {
        waiter.handle.answer(Outcome::Error(error.into()));
        count += 1;
    }
    MODULE.stats.waiters.sub(count);
}
