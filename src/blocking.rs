//! Waiting for a lock (`LOCK.ACQUIRE … WAIT`) and the module's timers: the glue
//! that applies what `redis_lock_core::handoff` decides. Waiters queue per key in
//! FIFO order; when a key's holdings change, a hand-off step grants as many of them
//! as fit, in order, with fresh tokens, propagated like any grant.
//!
//! What frees a lock, and where the hand-off runs:
//! - LOCK.RELEASE: inline, in the releasing command.
//! - Expiry: a timer per watched key fires one millisecond after the lock's expiry
//!   (Redis alone may remove an expired key much later) and opens the key, which makes
//!   Redis delete it; the hand-off follows in that timer. LOCK.EXTEND and refreshes
//!   re-arm it when the lock now expires sooner; while the lock is held, the timer
//!   also looks every `EXPIRY_RECHECK_MS`, which catches an expiry shortened by hand
//!   (`PEXPIRE`).
//! - A shared holding that lapses while others live on: the same key timer, due one
//!   millisecond after it, removes it (and says so to replicas), then hands off.
//!   Holdings the server did not grant itself get their timers too: those of a value
//!   `RESTORE`d (marked from the RDB loader), and, after the server loaded its RDB or
//!   AOF or became a master, those of every lock, found by a scan of the keyspace a
//!   few hundred keys per timer tick (`crate::rescan`).
//! - DEL, UNLINK, RENAME, MOVE, eviction, FLUSHDB/FLUSHALL: Redis tells the module
//!   from inside its deletion, where writing is not allowed, so the key is marked and
//!   a zero-delay timer hands off.
//!
//! In between, a key with waiters is never taken by anyone else: LOCK.ACQUIRE first
//! hands off to the queue, and a newcomer never goes ahead of it.
//!
//! A hand-off is a grant, and is refused where an acquire would be: under OOM, and
//! for a lock Redis just evicted for memory, every waiter gets the `OOM` error. A key
//! overwritten by a value of another type ends its queue with `WRONGTYPE`.
//!
//! Timeouts are the module's own (one timer for the earliest deadline of all
//! waiters), not Redis's: Redis 7.0 lets a blocked client's timeout that falls in the
//! same event-loop turn as the module's answer swallow that answer. Decided in the
//! core, a waiter is either granted or timed out, never both, and a waiter past its
//! deadline is never granted.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_lock_core::cluster::migrating_target;
use redis_lock_core::handoff::{plan_hand_off, Answer, HandOff, Refusal};
use redis_lock_core::queue::{Departed, Queues, Waiter};
use redis_lock_core::rules::fits;
use redis_lock_core::store::{self, Store};
use redis_lock_core::timers::{delay_until, expiry_due, needs_arming, Armed, MAX_TIMER_DELAY_MS};
use redis_lock_core::{Kind, Lock, Mode};

use crate::commands::{Reply, OOM, WRONGTYPE};
use crate::ffi::block::Blocked;
use crate::ffi::entry;
use crate::ffi::key::OpenKey;
use crate::ffi::{Arg, Ctx, RString};
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
    /// Look at the lock at this key: it may have expired, a shared holding may have
    /// lapsed, its expiry may have been changed by hand. `due` tells this timer from
    /// a later one of the same key.
    Key { db: i32, key: Box<[u8]>, due: i64 },
    /// Keys marked by keyspace or flush events may have freed.
    Marked,
    /// A granted waiter disconnected before its reply went out: take the holding
    /// with this token back.
    Undelivered { db: i32, key: Box<[u8]>, token: i64 },
    /// Waiters' deadlines may have passed.
    Timeouts,
    /// Scan on for locks whose holdings lapse (`crate::rescan`).
    Rescan,
    /// Writes were paused when keys needed a look: look at them once they resume.
    Paused,
}

/// Why a key was marked for a look from a timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Removed from the keyspace (DEL, RENAME, MOVE, flush…), or its first waiter
    /// left without the lock: hand it off.
    Removed,
    /// Evicted for memory: its waiters get the OOM error, not the lock.
    Evicted,
    /// Written by `RESTORE` with holdings that lapse: watch them.
    Loaded,
    /// A shared lock left this key with holdings, by no expiry or eviction (RENAME,
    /// MOVE, DEL…): find where it went (`crate::rescan::lock_moved`).
    Moved,
}

#[derive(Default)]
struct Waiting {
    queues: Queues<Blocked>,
    /// Keys to look at from the next zero-delay timer.
    marked: Vec<(i32, Box<[u8]>, Mark)>,
    marked_timer_armed: bool,
    /// Keys to look at once writes resume (`CLIENT PAUSE WRITE`, `FAILOVER`): one
    /// timer retries for all of them, not one per key.
    paused: HashSet<(i32, Box<[u8]>)>,
    paused_timer_armed: bool,
    /// Waiters woken with a holding whose reply Redis has not sent yet.
    in_flight: HashMap<Blocked, (i32, Box<[u8]>, i64)>,
    /// The one timer that times waiters out.
    timeout_timer: Option<Armed>,
    /// The timer of each watched key (waiters, or shared holdings that lapse).
    key_timers: KeyTimers,
}

/// Timers by database, then key: looked up by a borrowed key, with no allocation on
/// the refresh or release that finds its key's timer already due soon enough.
#[derive(Default)]
struct KeyTimers(HashMap<i32, HashMap<Box<[u8]>, Armed>>);

impl KeyTimers {
    fn get(&self, db: i32, key: &[u8]) -> Option<Armed> {
        self.0.get(&db)?.get(key).copied()
    }

    fn insert(&mut self, db: i32, key: &[u8], armed: Armed) -> Option<Armed> {
        self.0.entry(db).or_default().insert(key.into(), armed)
    }

    /// Forgets the timer of `key` if it is the one due at `due`.
    fn fired(&mut self, db: i32, key: &[u8], due: i64) {
        if let Some(timers) = self.0.get_mut(&db) {
            if timers.get(key).is_some_and(|t| t.due == due) {
                timers.remove(key);
            }
            if timers.is_empty() {
                self.0.remove(&db);
            }
        }
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

thread_local! {
    // Redis calls module code from its main thread only.
    static WAITING: RefCell<Waiting> = RefCell::new(Waiting::default());
    // True while the module deletes a key it hands off right after itself.
    static DELETING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `delete`, a deletion by the module that its caller follows with a hand-off
/// of the key (LOCK.RELEASE, a take-back): Redis's unlink callback then does not
/// mark the key for a second hand-off from a timer, which would find it held and
/// cost a timer per release.
pub fn deleting_here<T>(delete: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DELETING_HERE.with(|flag| flag.set(false));
        }
    }
    DELETING_HERE.with(|flag| flag.set(true));
    let _reset = Reset;
    delete()
}

/// True while the module deletes a key itself ([`deleting_here`]).
pub fn is_deleting_here() -> bool {
    DELETING_HERE.with(std::cell::Cell::get)
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

/// What a blocked acquire asks for.
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub ttl: i64,
    pub kind: Kind,
    /// `None`: without limit.
    pub timeout_ms: Option<i64>,
}

/// When the lock the caller read expires, and when its first shared holding lapses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deadlines {
    pub expiry: Option<i64>,
    pub lapse: Option<i64>,
}

impl Deadlines {
    pub fn of(open: &OpenKey) -> Deadlines {
        Deadlines {
            expiry: open.expires_at(),
            lapse: next_lapse(open),
        }
    }
}

/// Blocks the caller at the back of `key`'s queue. The lock is held now; its expiry
/// and its next lapse (`deadlines`, as the caller read them) are watched so the
/// queue moves the moment either frees a place.
pub fn enqueue(ctx: Ctx, key: &[u8], request: Request<'_>, deadlines: Deadlines) -> Reply {
    let Some(handle) = entry::block(ctx) else {
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
    };
    with(|w| w.queues.push(db, key, waiter));
    STATS.waiters.incr();
    watch_expiry(ctx, db, key, deadlines.expiry);
    watch_lapse(ctx, db, key, deadlines.lapse);
    arm_timeouts(ctx);
    Reply::Blocked
}

/// How often a hand-off or take-back that found writes paused tries again.
const PAUSED_RETRY_MS: i64 = 10;

/// Removes the shared holdings of the open `key` whose expiry has passed, and tells
/// replicas and the AOF (`LOCK.APPLY key owner token LAPSED` each): the master
/// judges time, its replicas follow. Every write to a shared lock does this first.
#[inline]
pub fn settle(ctx: Ctx, open: &mut OpenKey, key: Arg<'_>) {
    // Inline: an exclusive lock, the common case, costs one comparison here.
    if matches!(open.lock(), Some(Lock::Shared(_))) {
        settle_shared(ctx, open, key);
    }
}

fn settle_shared(ctx: Ctx, open: &mut OpenKey, key: Arg<'_>) {
    let Ok(lapsed) = store::settle(open, ctx.now_ms()) else {
        return;
    };
    for (owner, token) in &lapsed {
        propagate::lapsed(ctx, key, Arg::Bytes(owner), *token);
        STATS.expirations.incr();
    }
}

/// When the earliest shared holding of the open key lapses (see
/// [`Lock::next_lapse`]): the key timer must then look.
#[inline]
pub fn next_lapse(open: &OpenKey) -> Option<i64> {
    open.lock().and_then(Lock::next_lapse)
}

/// Hands the lock at `key` to as many of its waiters as fit, in order; returns true
/// if it granted any. Must run with `db` selected in `ctx`.
#[inline]
pub fn hand_off(ctx: Ctx, db: i32, key: &[u8]) -> bool {
    // Inline: on a server without waiters, the common case, one load here.
    ANY_WAITING.load(Ordering::Relaxed) && hand_off_refusing(ctx, db, key, None)
}

fn hand_off_refusing(ctx: Ctx, db: i32, key: &[u8], refusal: Option<Refusal>) -> bool {
    if waiters(db, key) == 0 {
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
    let step =
        with(|w| plan_hand_off(&mut w.queues, db, key, lock.as_deref(), refusal, now, &MINT))
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
    answer(ctx, db, key, step);
    watch_expiry(ctx, db, key, expiry);
    watch_lapse(ctx, db, key, lapse);
    granted
}

/// `OutOfMemory` when memory is over `maxmemory` now (an acquire would be refused,
/// deny-oom) and the queue's head would be granted: a queue that could not move
/// anyway keeps waiting.
fn out_of_memory_for(ctx: Ctx, open: &OpenKey, db: i32, key: &[u8]) -> Option<Refusal> {
    if !ctx.out_of_memory() {
        return None;
    }
    let now = ctx.now_ms();
    let head_fits = with(|w| {
        w.queues
            .front(db, key)
            .is_some_and(|front| fits(store::held(open).as_deref(), front.kind, now))
    });
    head_fits.unwrap_or(false).then_some(Refusal::OutOfMemory)
}

/// Tells replicas, subscribers and INFO about a planned and stored hand-off step,
/// and answers its waiters.
fn answer(ctx: Ctx, db: i32, key: &[u8], step: HandOff<Blocked>) {
    let answered = step.answers.len() + step.grants.iter().map(|g| g.waiters.len()).sum::<usize>();
    STATS.waiters.sub(answered);
    for grant in step.grants {
        if grant.fresh {
            let owner = Arg::Bytes(&grant.owner);
            let (token, at) = (grant.token, grant.expires_at);
            propagate::grant(ctx, Arg::Bytes(key), owner, token, at, grant.kind.mode());
            STATS.acquisitions.incr();
            STATS.hand_offs.incr();
        } else {
            let mode = grant.kind.mode();
            let key_at = grant.expires_at;
            let owner = Arg::Bytes(&grant.owner);
            propagate::expiry(
                ctx,
                Arg::Bytes(key),
                owner,
                grant.token,
                grant.expires_at,
                key_at,
                mode,
            );
        }
        for woken in grant.waiters {
            with(|w| {
                w.in_flight
                    .insert(woken.handle, (db, key.into(), grant.token))
            });
            woken.handle.answer(Outcome::Token(grant.token));
        }
    }
    for (waiter, answer) in step.answers {
        let outcome = match answer {
            Answer::TimedOut => {
                STATS.wait_timeouts.incr();
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
fn refuse_grants(step: HandOff<Blocked>, error: &'static str) {
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
    STATS.waiters.sub(count);
}

/// A holding of the open `key` got a new expiry from the module (a refresh,
/// LOCK.EXTEND): tells replicas and subscribers, and watches what moved (the
/// waiters' timer fires sooner if the lock now expires sooner; a shared holding may
/// now lapse first).
pub fn holding_moved(
    ctx: Ctx,
    open: OpenKey,
    key: &RString,
    owner: Arg<'_>,
    token: i64,
    moved: Moved,
) {
    let next_lapse = next_lapse(&open);
    drop(open);
    let (at, key_at) = (moved.expires_at, moved.key_expires_at);
    propagate::expiry(ctx, Arg::Str(key), owner, token, at, key_at, moved.mode);
    // Nothing to watch on a key without waiters or lapses: the common case.
    if next_lapse.is_some() || ANY_WAITING.load(Ordering::Relaxed) {
        let (db, key) = (ctx.selected_db(), key.as_bytes());
        watch_expiry(ctx, db, key, Some(key_at));
        watch_lapse(ctx, db, key, next_lapse);
    }
}

/// Where a holding's expiry moved to.
pub struct Moved {
    pub mode: Mode,
    pub expires_at: i64,
    pub key_expires_at: i64,
}

/// Watches the expiry of a lock that clients wait for: due one millisecond after
/// `expires_at`, at most `EXPIRY_RECHECK_MS` ahead (`redis_lock_core::timers`).
fn watch_expiry(ctx: Ctx, db: i32, key: &[u8], expires_at: Option<i64>) {
    if waiters(db, key) > 0 {
        watch(ctx, db, key, expiry_due(ctx.now_ms(), expires_at));
    }
}

/// Watches a shared holding that lapses (at `next_lapse`) while others live on.
pub fn watch_lapse(ctx: Ctx, db: i32, key: &[u8], next_lapse: Option<i64>) {
    if let Some(at) = next_lapse {
        watch(ctx, db, key, at.saturating_add(1));
    }
}

/// Keeps one timer per watched key, due by `due`. A timer already due by then is
/// kept: firing early is harmless (it looks again), and keeping it spares a stop and
/// a create on every refresh or contended acquire.
fn watch(ctx: Ctx, db: i32, key: &[u8], due: i64) {
    let now = ctx.now_ms();
    let due = due.min(now.saturating_add(MAX_TIMER_DELAY_MS));
    let current = with(|w| w.key_timers.get(db, key)).flatten();
    if !needs_arming(current, due) {
        return;
    }
    let job = TimerJob::Key {
        db,
        key: key.into(),
        due,
    };
    let Some(id) = entry::start_timer(ctx, delay_until(now, due), job) else {
        return;
    };
    let replaced = with(|w| w.key_timers.insert(db, key, Armed { id, due })).flatten();
    if let Some(old) = replaced {
        entry::stop_timer(ctx, old.id);
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
    let Some(id) = entry::start_timer(ctx, delay_until(now, due), TimerJob::Timeouts) else {
        return;
    };
    let replaced = with(|w| w.timeout_timer.replace(Armed { id, due })).flatten();
    if let Some(old) = replaced {
        entry::stop_timer(ctx, old.id);
    }
}

/// Answers every waiter whose deadline has passed with the null reply.
fn time_out_waiters(ctx: Ctx) {
    let now = ctx.now_ms();
    while let Some(departed) = with(|w| w.queues.pop_timed_out(now)).flatten() {
        STATS.waiters.decr();
        STATS.wait_timeouts.incr();
        departed.waiter.handle.answer(Outcome::TimedOut);
        hand_off_behind(&departed);
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
    if job == TimerJob::Paused {
        with(|w| w.paused_timer_armed = false);
    }
    if ctx.is_replica() {
        // Locks change on a replica only as its master decides: no hand-off, no
        // lapse, no take-back here.
        with(|w| {
            w.marked.clear();
            w.key_timers.clear();
            w.paused.clear();
        });
        crate::rescan::stop();
        return;
    }
    match job {
        TimerJob::Key { db, key, due } => {
            // This timer is the key's current one unless a sooner one replaced it
            // (stopped then).
            with(|w| w.key_timers.fired(db, &key, due));
            if ctx.select_db(db) {
                look_at(ctx, db, &key);
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
                match mark {
                    Mark::Evicted if is_free(ctx, &key) => {
                        hand_off_refusing(ctx, db, &key, Some(Refusal::OutOfMemory));
                    }
                    Mark::Loaded => look_at(ctx, db, &key),
                    Mark::Moved => crate::rescan::lock_moved(ctx),
                    _ => hand_off_from_timer(ctx, db, &key),
                }
            }
        }
        TimerJob::Rescan => crate::rescan::step(ctx),
        TimerJob::Paused => {
            if ctx.writes_paused() {
                // Still paused: the keys wait on, untouched, for the next try.
                with(|w| w.paused_timer_armed = true);
                entry::start_timer(ctx, PAUSED_RETRY_MS, TimerJob::Paused);
                return;
            }
            let keys = with(|w| std::mem::take(&mut w.paused)).unwrap_or_default();
            for (db, key) in keys {
                if ctx.select_db(db) {
                    look_at(ctx, db, &key);
                }
            }
        }
        TimerJob::Timeouts => {}
    }
}

/// The RDB loader made a lock at `key` whose holdings lapse. A `RESTORE` on a master
/// marks it for a look, which watches them; the scan after a load sees to loaded keys.
pub fn loaded(db: i32, key: Vec<u8>) {
    let ctx = Ctx::module();
    if !ctx.is_loading() && !ctx.is_replica() {
        mark([(db, key.into_boxed_slice(), Mark::Loaded)]);
    }
}

/// A key timer: removes lapsed shared holdings, hands off, and keeps watching what
/// still needs it.
fn look_at(ctx: Ctx, db: i32, key: &[u8]) {
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
    hand_off_from_timer(ctx, db, key);
}

/// Looks at `key` once writes resume: one timer, every `PAUSED_RETRY_MS` while the
/// pause lasts, for every key that waits for it (a pause may outlast the TTLs of
/// thousands of locks).
fn look_when_writes_resume(ctx: Ctx, db: i32, key: &[u8]) {
    let arm = with(|w| {
        w.paused.insert((db, key.into()));
        !std::mem::replace(&mut w.paused_timer_armed, true)
    });
    if arm == Some(true) {
        entry::start_timer(ctx, PAUSED_RETRY_MS, TimerJob::Paused);
    }
}

fn is_free(ctx: Ctx, key: &[u8]) -> bool {
    let open = OpenKey::write_bytes(ctx, key);
    !open.holds_other_type() && open.lock().is_none()
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
            hand_off_refusing(ctx, db, key, Some(Refusal::Redirect(redirect)));
            return;
        }
    }
    hand_off(ctx, db, key);
}

/// Removes the holding with `token` at `key`, if it is still there, then hands on.
fn take_back(ctx: Ctx, db: i32, key: &[u8], token: i64) {
    if ctx.writes_paused() {
        let key = key.into();
        entry::start_timer(
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
    let Ok(plan) = deleting_here(|| store::release(&mut open, &owner, now)) else {
        return;
    };
    let lapse = next_lapse(&open);
    drop(open);
    let key_gone = plan == store_plan_delete();
    match (mode, key_gone) {
        (Mode::Exclusive, _) => propagate::release(ctx, Arg::Bytes(key)),
        (Mode::Shared, gone) => {
            propagate::release_holding(ctx, Arg::Bytes(key), Arg::Bytes(&owner), gone)
        }
    }
    watch_lapse(ctx, db, key, lapse);
    hand_off(ctx, db, key);
}

fn store_plan_delete() -> redis_lock_core::rules::ReleasePlan {
    redis_lock_core::rules::ReleasePlan::DeleteKey
}

/// Marks a key for a look from the zero-delay timer, which is armed once.
fn mark(keys: impl IntoIterator<Item = (i32, Box<[u8]>, Mark)>) {
    let arm = with(|w| {
        let before = w.marked.len();
        w.marked.extend(keys);
        w.marked.len() > before && !std::mem::replace(&mut w.marked_timer_armed, true)
    });
    if arm == Some(true) {
        entry::start_timer(Ctx::module(), 0, TimerJob::Marked);
    }
}

/// Redis is removing the lock at `key` (DEL, UNLINK, RENAME, expiry, eviction…),
/// `shared` with holdings. Called from inside Redis's deletion, where writes are not
/// allowed: a timer hands off right after, and looks for where a shared lock went
/// unless the removal was its expiry or eviction ([`key_expired`]).
pub fn key_removed(db: i32, key: &[u8], shared: bool) {
    if is_deleting_here() {
        return;
    }
    if waiters(db, key) > 0 {
        mark([(db, key.into(), Mark::Removed)]);
    }
    if shared {
        mark([(db, key.into(), Mark::Moved)]);
    }
}

/// The lock just removed at `key` expired or was evicted: it went nowhere.
pub fn key_expired(db: i32, key: &[u8]) {
    with(|w| {
        w.marked
            .retain(|(d, k, mark)| !(*mark == Mark::Moved && *d == db && **k == *key))
    });
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
/// a holding but never got the reply, the grant is taken back, so no holding is left
/// with a client that never learned it has it. Returns true if it was still
/// waiting (Redis then needs its handle released; an answered one was released).
pub fn left(ctx: Ctx, handle: Blocked) -> bool {
    let departed = with(|w| w.queues.depart(handle)).flatten();
    let was_waiting = departed.is_some();
    if let Some(departed) = departed {
        STATS.waiters.decr();
        hand_off_behind(&departed);
    }
    if let Some((db, key, token)) = with(|w| w.in_flight.remove(&handle)).flatten() {
        entry::start_timer(ctx, 0, TimerJob::Undelivered { db, key, token });
    }
    was_waiting
}

/// A waiter left the head of its queue without the lock: the waiters behind it may
/// fit now, and are granted from the zero-delay timer (a disconnect or an unblock
/// callback may not write), not at the key's next look.
fn hand_off_behind(departed: &Departed<Blocked>) {
    if departed.new_head {
        mark([(departed.db, departed.key.clone(), Mark::Removed)]);
    }
}

/// The reply of a woken waiter is being sent.
pub fn delivered(handle: Blocked) {
    with(|w| w.in_flight.remove(&handle));
}
