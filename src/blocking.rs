//! Waiting for a lock: `LOCK.ACQUIRE … WAIT`. Waiters queue per key in FIFO order
//! (`lock::queue`); when the lock frees, the oldest live waiter gets it in the same
//! step, with a fresh token, propagated like any grant.
//!
//! What frees a lock, and where the hand-off runs:
//! - LOCK.RELEASE: inline, in the releasing command.
//! - Expiry: a timer per queued key fires one millisecond after the lock's expiry
//!   (Redis alone may remove an expired key much later) and opens the key, which makes
//!   Redis delete it; the hand-off follows in that timer. LOCK.EXTEND and refreshes
//!   re-arm it when the lock now expires sooner; while the lock is held, the timer
//!   also looks every `EXPIRY_RECHECK_MS`, which catches an expiry shortened by hand
//!   (`PEXPIRE`).
//! - DEL, UNLINK, RENAME, MOVE, eviction, FLUSHDB/FLUSHALL: Redis tells the module
//!   from inside its deletion, where writing is not allowed, so the key is marked and
//!   a zero-delay timer hands off.
//!
//! In between, a free key with waiters is never free for anyone else: LOCK.ACQUIRE
//! first hands off to the queue, and only then looks at the lock.
//!
//! A hand-off is a grant, and is refused where an acquire would be: under OOM, and
//! for a lock Redis just evicted for memory, every waiter gets the `OOM` error. A key
//! overwritten by a value of another type ends its queue with `WRONGTYPE`.
//!
//! Timeouts are the module's own (one timer for the earliest deadline of all
//! waiters), not Redis's: Redis 7.0 lets a blocked client's timeout that falls in the
//! same event-loop turn as the module's answer swallow that answer, so a client
//! granted the lock after a stall would never hear of it. Decided here, a waiter is
//! either granted or timed out, never both, and a waiter past its deadline is never
//! granted.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cluster::migrating_target;
use crate::commands::{Reply, OOM, WRONGTYPE};
use crate::ffi::block::Blocked;
use crate::ffi::key::{OpenKey, Slot};
use crate::ffi::{Arg, Ctx};
use crate::lock::queue::{Queues, Waiter};
use crate::lock::timers::{delay_until, expiry_due, needs_arming, Armed, MAX_TIMER_DELAY_MS};
use crate::lock::{expires_at, Lock};
use crate::propagate;
use crate::state::{MINT, STATS};

/// What a woken waiter is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It holds the lock, with this token.
    Token(i64),
    /// Its WAIT timed out (or CLIENT UNBLOCK ended it): the null reply.
    TimedOut,
    /// The lock could not be granted here (an error reply, or a redirect).
    Error(Cow<'static, str>),
}

/// Work for a module timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerJob {
    /// The lock at this key may have just expired; `due` tells this timer from a
    /// later one of the same key.
    Expiry { db: i32, key: Box<[u8]>, due: i64 },
    /// Keys marked by keyspace or flush events may have freed.
    Marked,
    /// A granted waiter disconnected before its reply went out: take the lock back.
    Undelivered { db: i32, key: Box<[u8]>, token: i64 },
    /// Waiters' deadlines may have passed.
    Timeouts,
}

/// Why a key was marked for a look from a timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Removed from the keyspace (DEL, RENAME, MOVE, flush…): hand it off.
    Removed,
    /// Evicted for memory: its waiters get the OOM error, not the lock.
    Evicted,
}

#[derive(Default)]
struct Waiting {
    queues: Queues<Blocked>,
    /// Keys to look at from the next zero-delay timer.
    marked: Vec<(i32, Box<[u8]>, Mark)>,
    marked_timer_armed: bool,
    /// Waiters woken with a lock whose reply Redis has not sent yet.
    in_flight: HashMap<Blocked, (i32, Box<[u8]>, i64)>,
    /// The one timer that times waiters out.
    timeout_timer: Option<Armed>,
}

thread_local! {
    // Redis calls module code from its main thread only.
    static WAITING: RefCell<Waiting> = RefCell::new(Waiting::default());
}

/// Runs `f` on the waiting state. Callers never call into Redis inside `f`: Redis may
/// call back (keyspace events) and would find the state borrowed.
fn with<T>(f: impl FnOnce(&mut Waiting) -> T) -> Option<T> {
    WAITING.with(|cell| {
        cell.try_borrow_mut().ok().map(|mut w| {
            let out = f(&mut w);
            ANY_WAITING.store(!w.queues.is_empty(), Ordering::Relaxed);
            out
        })
    })
}

/// Whether any queue has a waiter, kept by [`with`] after every change: lets the
/// commands on a key without waiters (nearly all of them) skip the queues.
static ANY_WAITING: AtomicBool = AtomicBool::new(false);

/// Clients waiting on `key` now.
pub fn waiters(db: i32, key: &[u8]) -> usize {
    if !ANY_WAITING.load(Ordering::Relaxed) {
        return 0;
    }
    with(|w| w.queues.waiting(db, key)).unwrap_or(0)
}

/// Blocks the caller at the back of `key`'s queue, for `timeout_ms` (`None`: without
/// limit). The lock is held now; its expiry (`expiry`, as the caller read it) is
/// watched so the queue moves the moment it lapses.
pub fn enqueue(
    ctx: Ctx,
    key: &[u8],
    owner: &[u8],
    ttl: i64,
    timeout_ms: Option<i64>,
    expiry: Option<i64>,
) -> Reply {
    let Some(handle) = ctx.block() else {
        return Reply::error("ERR this client cannot be blocked");
    };
    let db = ctx.selected_db();
    let now = ctx.now_ms();
    let waiter = Waiter {
        handle,
        owner: owner.into(),
        ttl,
        deadline: timeout_ms.map(|ms| now.saturating_add(ms)),
    };
    with(|w| w.queues.push(db, key, waiter));
    STATS.waiters.incr();
    watch_expiry(ctx, db, key, expiry);
    arm_timeouts(ctx);
    Reply::Blocked
}

/// How often a hand-off or take-back that found writes paused tries again.
const PAUSED_RETRY_MS: i64 = 10;

/// Hands the free lock at `key` to the oldest waiter; returns true if it did.
/// Must run with `db` selected in `ctx`.
pub fn hand_off(ctx: Ctx, db: i32, key: &[u8]) -> bool {
    if waiters(db, key) == 0 {
        return false;
    }
    if ctx.writes_paused() {
        // Only timers get here during a pause (the commands that free a lock are
        // writes, held back by it): look again shortly, until the pause ends.
        watch_expiry(
            ctx,
            db,
            key,
            Some(ctx.now_ms().saturating_add(PAUSED_RETRY_MS - 1)),
        );
        return false;
    }
    let mut open = OpenKey::write_bytes(ctx, key);
    match open.slot() {
        Slot::Empty => {}
        Slot::Lock(_) => {
            // Still held: watch the expiry it has now.
            let expiry = open.expires_at();
            drop(open);
            watch_expiry(ctx, db, key, expiry);
            return false;
        }
        Slot::OtherType => {
            // Overwritten by a value of another type (SET, RESTORE REPLACE, RENAME
            // onto it…): the waiters' acquire meets that value now, and gets what
            // an acquire of it gets, instead of waiting on a lock that is gone.
            drop(open);
            answer_all(ctx, db, key, &Outcome::Error(WRONGTYPE.into()));
            return false;
        }
    }
    if ctx.out_of_memory() {
        // An acquire would be refused now (deny-oom): so is the hand-off.
        drop(open);
        answer_all(ctx, db, key, &Outcome::Error(OOM.into()));
        return false;
    }
    let now = ctx.now_ms();
    // The oldest waiter that can be granted. One past its deadline times out (the
    // timeout timer may not have run yet, after a stall); one whose grant cannot be
    // made (tokens exhausted, expiry out of range) is answered with an error. A loop,
    // not recursion: a queue may be long.
    let (waiter, token, at) = loop {
        let Some(waiter) = with(|w| w.queues.pop_front(db, key)).flatten() else {
            return false;
        };
        STATS.waiters.decr();
        if waiter.has_timed_out(now) {
            STATS.wait_timeouts.incr();
            waiter.handle.answer(Outcome::TimedOut);
            continue;
        }
        let grant = expires_at(now, waiter.ttl)
            .ok()
            .and_then(|at| Some((MINT.mint(now)?, at)));
        match grant {
            Some((token, at)) => break (waiter, token, at),
            None => waiter
                .handle
                .answer(Outcome::Error("ERR the lock could not be granted".into())),
        }
    };
    if !(open.set_lock(Lock::new(&waiter.owner, token)) && open.set_expires_at(at)) {
        waiter
            .handle
            .answer(Outcome::Error("ERR could not store the lock".into()));
        return false;
    }
    drop(open);
    propagate::grant(ctx, Arg::Bytes(key), Arg::Bytes(&waiter.owner), token, at);
    STATS.acquisitions.incr();
    STATS.hand_offs.incr();
    // Other waiters with the same owner (a client retrying its WAIT) hold it too.
    let same_owner = with(|w| w.queues.take_owner(db, key, &waiter.owner)).unwrap_or_default();
    STATS.waiters.sub(same_owner.len());
    for woken in std::iter::once(waiter).chain(same_owner) {
        with(|w| w.in_flight.insert(woken.handle, (db, key.into(), token)));
        woken.handle.answer(Outcome::Token(token));
    }
    watch_expiry(ctx, db, key, Some(at));
    true
}

/// The lock at `key` got a new expiry from the module (a refresh, LOCK.EXTEND):
/// its waiters' timer fires sooner if the lock now expires sooner.
pub fn expiry_changed(ctx: Ctx, db: i32, key: &[u8], expires_at: i64) {
    watch_expiry(ctx, db, key, Some(expires_at));
}

/// Keeps one timer per queued key, due one millisecond after `expires_at`, at most
/// `EXPIRY_RECHECK_MS` ahead (`lock::timers`). A timer already due by then is kept.
fn watch_expiry(ctx: Ctx, db: i32, key: &[u8], expires_at: Option<i64>) {
    if waiters(db, key) == 0 {
        return;
    }
    let now = ctx.now_ms();
    let due = expiry_due(now, expires_at);
    let current = with(|w| w.queues.expiry_timer(db, key)).flatten();
    if !needs_arming(current, due) {
        return;
    }
    let job = TimerJob::Expiry {
        db,
        key: key.into(),
        due,
    };
    let Some(id) = ctx.start_timer(delay_until(now, due), job) else {
        return;
    };
    let replaced = with(|w| w.queues.set_expiry_timer(db, key, Some(Armed { id, due }))).flatten();
    if let Some(old) = replaced {
        ctx.stop_timer(old.id);
    }
}

/// Keeps the one timeout timer due by the earliest deadline of any waiter.
fn arm_timeouts(ctx: Ctx) {
    let Some((deadline, current)) =
        with(|w| Some((w.queues.next_deadline()?, w.timeout_timer))).flatten()
    else {
        return;
    };
    let now = ctx.now_ms();
    let due = deadline.min(now.saturating_add(MAX_TIMER_DELAY_MS));
    if !needs_arming(current, due) {
        return;
    }
    let Some(id) = ctx.start_timer(delay_until(now, due), TimerJob::Timeouts) else {
        return;
    };
    let replaced = with(|w| w.timeout_timer.replace(Armed { id, due })).flatten();
    if let Some(old) = replaced {
        ctx.stop_timer(old.id);
    }
}

/// Answers every waiter whose deadline has passed with the null reply.
fn time_out_waiters(ctx: Ctx) {
    let now = ctx.now_ms();
    while let Some((_, _, waiter)) = with(|w| w.queues.pop_timed_out(now)).flatten() {
        STATS.waiters.decr();
        STATS.wait_timeouts.incr();
        waiter.handle.answer(Outcome::TimedOut);
    }
    arm_timeouts(ctx);
}

/// A module timer fired.
pub fn timer_fired(ctx: Ctx, job: TimerJob) {
    if job == TimerJob::Timeouts {
        with(|w| w.timeout_timer = None);
        // Waiters' deadlines pass on a replica too (one that was a master when they
        // blocked is disconnected by Redis, but a timeout costs nothing to answer).
        time_out_waiters(ctx);
        return;
    }
    if job == TimerJob::Marked {
        with(|w| w.marked_timer_armed = false);
    }
    if ctx.is_replica() {
        // Locks change on a replica only as its master decides: no hand-off, no
        // take-back here. (Marked keys are dropped below.)
        with(|w| w.marked.clear());
        return;
    }
    match job {
        TimerJob::Expiry { db, key, due } => {
            // This timer is the queue's current one unless a sooner one replaced it
            // (stopped then) or the queue was dropped and made again since.
            with(|w| {
                if w.queues
                    .expiry_timer(db, &key)
                    .is_some_and(|t| t.due == due)
                {
                    w.queues.set_expiry_timer(db, &key, None);
                }
            });
            if ctx.select_db(db) {
                hand_off_from_timer(ctx, db, &key);
            }
        }
        TimerJob::Undelivered { db, key, token } => {
            if ctx.select_db(db) {
                take_back(ctx, db, &key, token);
            }
        }
        TimerJob::Marked => {
            let marked = with(|w| std::mem::take(&mut w.marked)).unwrap_or_default();
            for (db, key, mark) in marked {
                if !ctx.select_db(db) {
                    continue;
                }
                if mark == Mark::Evicted && is_free(ctx, &key) {
                    answer_all(ctx, db, &key, &Outcome::Error(OOM.into()));
                } else {
                    hand_off_from_timer(ctx, db, &key);
                }
            }
        }
        TimerJob::Timeouts => {}
    }
}

fn is_free(ctx: Ctx, key: &[u8]) -> bool {
    matches!(OpenKey::write_bytes(ctx, key).slot(), Slot::Empty)
}

/// A hand-off from a timer: the lock expired, or DEL, MIGRATE, FLUSHALL… removed it.
///
/// In a cluster, a free lock in a slot this node is migrating away is not granted
/// here: MIGRATE may just have carried it, held, to the target, and Redis sends a
/// client that writes a missing key of such a slot to the target. The waiters are
/// sent there too, with the same `-ASK` redirect, and queue again behind its holder.
fn hand_off_from_timer(ctx: Ctx, db: i32, key: &[u8]) {
    if ctx.in_cluster() && waiters(db, key) > 0 && !ctx.writes_paused() && is_free(ctx, key) {
        let redirect = ctx.cluster_key_slot(key).and_then(|slot| {
            let nodes = ctx.cluster_nodes()?;
            let target = migrating_target(&nodes, slot)?;
            Some(format!("ASK {slot} {target}"))
        });
        if let Some(redirect) = redirect {
            answer_all(ctx, db, key, &Outcome::Error(redirect.into()));
            return;
        }
    }
    hand_off(ctx, db, key);
}

/// Answers every waiter on `key` with `outcome`: its queue is gone, with its timer.
fn answer_all(ctx: Ctx, db: i32, key: &[u8], outcome: &Outcome) {
    if let Some(timer) = with(|w| w.queues.set_expiry_timer(db, key, None)).flatten() {
        ctx.stop_timer(timer.id);
    }
    let mut sent = 0;
    while let Some(waiter) = with(|w| w.queues.pop_front(db, key)).flatten() {
        waiter.handle.answer(outcome.clone());
        sent += 1;
    }
    STATS.waiters.sub(sent);
}

/// Deletes the lock at `key` if it is still the grant with `token`, then hands it on.
fn take_back(ctx: Ctx, db: i32, key: &[u8], token: i64) {
    if ctx.writes_paused() {
        let key = key.into();
        ctx.start_timer(PAUSED_RETRY_MS, TimerJob::Undelivered { db, key, token });
        return;
    }
    let mut open = OpenKey::write_bytes(ctx, key);
    let ours = matches!(open.slot(), Slot::Lock(lock) if lock.token() == token);
    if ours && open.delete() {
        drop(open);
        propagate::release(ctx, Arg::Bytes(key));
        hand_off(ctx, db, key);
    }
}

/// Marks a key for a look from the zero-delay timer, which is armed once.
fn mark(keys: impl IntoIterator<Item = (i32, Box<[u8]>, Mark)>) {
    let arm = with(|w| {
        let before = w.marked.len();
        w.marked.extend(keys);
        w.marked.len() > before && !std::mem::replace(&mut w.marked_timer_armed, true)
    });
    if arm == Some(true) {
        Ctx::module().start_timer(0, TimerJob::Marked);
    }
}

/// Redis is removing the lock at `key` (DEL, UNLINK, RENAME, expiry, eviction…).
/// Called from inside Redis's deletion, where writes are not allowed: a timer hands
/// off right after.
pub fn key_removed(db: i32, key: &[u8]) {
    if waiters(db, key) > 0 {
        mark([(db, key.into(), Mark::Removed)]);
    }
}

/// Redis evicted the lock at `key` for memory (right after its removal).
pub fn key_evicted(db: i32, key: &[u8]) {
    if waiters(db, key) > 0 {
        with(|w| {
            for (d, k, mark) in w.marked.iter_mut() {
                if *d == db && **k == *key {
                    *mark = Mark::Evicted;
                }
            }
        });
        mark([(db, key.into(), Mark::Evicted)]);
    }
}

/// FLUSHDB (`Some(db)`) or FLUSHALL (`None`) emptied databases, or SWAPDB swapped
/// one (`Some(db)`).
pub fn flushed(db: Option<i32>) {
    let keys = with(|w| w.queues.keys(db)).unwrap_or_default();
    mark(keys.into_iter().map(|(db, key)| (db, key, Mark::Removed)));
}

/// A waiter disconnected, or Redis unblocked it without a timeout (CLIENT UNBLOCK
/// ERROR, a master turned replica): it leaves the queue. If it had just been granted
/// the lock but never got the reply, the grant is taken back, so no lock is left
/// with a client that never learned it holds it. Returns true if it was still
/// waiting (Redis then needs its handle released; an answered one was released).
pub fn left(ctx: Ctx, handle: Blocked) -> bool {
    let was_waiting = with(|w| w.queues.remove(handle)).flatten().is_some();
    if was_waiting {
        STATS.waiters.decr();
    }
    if let Some((db, key, token)) = with(|w| w.in_flight.remove(&handle)).flatten() {
        ctx.start_timer(0, TimerJob::Undelivered { db, key, token });
    }
    was_waiting
}

/// The reply of a woken waiter is being sent.
pub fn delivered(handle: Blocked) {
    with(|w| w.in_flight.remove(&handle));
}
