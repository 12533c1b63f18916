//! The holder's side of a lock: a lease with a local deadline, and the loss signal.
//!
//! The server counts a lock's TTL from the moment it runs the acquire, renewal or
//! extend, which is after the client sent it, and the write it applied **last**
//! sets the expiry. So the lease is computed from the writes (the one place the
//! rule lives, [`Writes`]): let V be the acknowledged write with the latest send
//! time. Any other write W whose reply had not arrived when V was sent (in flight
//! then, sent later and not answered yet, or never answered: timed out, failed,
//! dropped, whose bytes may still reach the server) may have been applied after V,
//! and then after V's send time and its own. The server keeps the lock at least
//! until the earliest of *max(send of V, send of W) + TTL of W* over V and every
//! such W, and the lease ends a margin before that. Writes with the same TTL change
//! nothing; only a TTL change can shorten the lease (a renewal with the old TTL
//! that reaches the server after an extend to a longer one). The next renewal is
//! due a third of the TTL after the same start.
//!
//! The margin is for the two clocks' drift and for the wake-up of whoever waits on
//! the signal: [`margin`] is 10% of the TTL, at least 50 ms. Every loss signal (the
//! async [`LockLost::lost`], [`LockLost::is_lost`], [`Lock::is_lost`](crate::Lock::is_lost),
//! the renewers') is computed from that deadline and reads the clock when asked, so
//! it fires at the latest there even if no reply ever comes back: a partition, a hung
//! server, a reconnecting connection manager, a holder stopped and continued.
//!
//! What the deadline cannot cover: a holder whose own process stops (GC pause, swap,
//! SIGSTOP, a suspended VM) between checking the signal and writing; a local clock
//! that runs more than 10% slow against the server's. Fencing tokens cover those.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis_lock_core::protocol::{LEASE_MARGIN_MIN_MS, LEASE_MARGIN_PERCENT, RENEWAL_DIVISOR};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// How much earlier than *send time + TTL* a lease ends: 10% of the TTL, at least 50 ms
/// (and never more than the TTL: a lock of 50 ms or less has no lease time at all).
///
/// ```
/// use std::time::Duration;
/// use redis_lock_client::margin;
///
/// assert_eq!(margin(Duration::from_secs(30)), Duration::from_secs(3));
/// assert_eq!(margin(Duration::from_millis(200)), Duration::from_millis(50));
/// ```
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 100 * LEASE_MARGIN_PERCENT)
        .max(Duration::from_millis(LEASE_MARGIN_MIN_MS))
        .min(ttl)
}

/// How long after its start a write of `ttl` is renewed: a third of the TTL, at
/// least a millisecond.
fn period(ttl: Duration) -> Duration {
    (ttl / RENEWAL_DIVISOR).max(Duration::from_millis(1))
}

/// `at + span`, saturating a century out for TTLs the clock cannot add.
fn after(at: Instant, span: Duration) -> Instant {
    at.checked_add(span)
        .or_else(|| at.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(at)
}

/// One write of a holding's expiry: when it was sent, with which TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Write {
    sent: Instant,
    ttl: Duration,
}

/// A write that may have been applied after the latest acknowledged one.
#[derive(Debug, Clone, Copy)]
struct Open {
    id: u64,
    write: Write,
    /// `None` while in flight; when its acknowledgement came, for one sent before the
    /// latest acknowledged write and answered after that was sent.
    answered: Option<Instant>,
}

/// The writes that set a holding's expiry (its acquire, renewals, extends), and
/// what the server promises from them: the lease rule of the module doc, with the
/// time passed in, so it is tested without a clock.
#[derive(Debug, Clone)]
struct Writes {
    /// V: the acknowledged write with the latest send time.
    latest: Write,
    /// When V's acknowledgement came.
    latest_answered: Instant,
    /// Writes that may have been applied after V: in flight, or acknowledged after V
    /// was sent. One acknowledged before V was sent was applied before V: dropped.
    open: Vec<Open>,
    /// Writes never answered, which may still reach the server: per TTL, the
    /// earliest send. They stay for the life of the holding.
    abandoned: Vec<Write>,
    next_id: u64,
}

impl Writes {
    /// The holding's first write (its acquire), sent at `sent` and answered at `now`.
    fn new(sent: Instant, ttl: Duration, now: Instant) -> Writes {
        Writes {
            latest: Write { sent, ttl },
            latest_answered: now,
            open: Vec::new(),
            abandoned: Vec::new(),
            next_id: 0,
        }
    }

    /// A write of `ttl` goes out at `sent`; its id.
    fn send(&mut self, sent: Instant, ttl: Duration) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.open.push(Open {
            id,
            write: Write { sent, ttl },
            answered: None,
        });
        id
    }

    /// Takes write `id` out of those in flight.
    fn take(&mut self, id: u64) -> Option<Write> {
        let at = self
            .open
            .iter()
            .position(|open| open.id == id && open.answered.is_none())?;
        Some(self.open.remove(at).write)
    }

    /// Write `id` was acknowledged at `now`.
    fn acknowledged(&mut self, id: u64, now: Instant) {
        let Some(write) = self.take(id) else {
            return;
        };
        if write.sent <= self.latest.sent {
            // Sent before V and answered after V was sent: it may have come last.
            self.open.push(Open {
                id,
                write,
                answered: Some(now),
            });
            return;
        }
        let (before, before_answered) = (self.latest, self.latest_answered);
        self.latest = write;
        self.latest_answered = now;
        if before_answered > write.sent {
            self.open.push(Open {
                id: u64::MAX,
                write: before,
                answered: Some(before_answered),
            });
        }
        let sent = write.sent;
        self.open
            .retain(|open| open.answered.is_none_or(|answered| answered > sent));
    }

    /// Write `id` got no answer (a timeout, a lost connection, an error, a dropped
    /// call): it may still reach the server.
    fn abandoned(&mut self, id: u64) {
        let Some(write) = self.take(id) else {
            return;
        };
        match self.abandoned.iter_mut().find(|a| a.ttl == write.ttl) {
            Some(same) => same.sent = same.sent.min(write.sent),
            None => self.abandoned.push(write),
        }
    }

    /// V and every write that may have been applied after it, each with the earliest
    /// time the server may have applied it last: not before V's send, nor its own.
    fn candidates(&self) -> impl Iterator<Item = Write> + '_ {
        let from = self.latest.sent;
        let others = self.open.iter().map(|open| open.write);
        std::iter::once(self.latest)
            .chain(others)
            .chain(self.abandoned.iter().copied())
            .map(move |write| Write {
                sent: write.sent.max(from),
                ttl: write.ttl,
            })
    }

    /// Until when the server keeps the holding at least, less the margin: the lease's
    /// local deadline.
    fn deadline(&self) -> Instant {
        self.candidates()
            .map(|w| after(w.sent, w.ttl - margin(w.ttl)))
            .min()
            .unwrap_or(self.latest.sent)
    }

    /// When the next renewal is due: a third of the TTL after the same start.
    fn renewal_due(&self) -> Instant {
        self.candidates()
            .map(|w| after(w.sent, period(w.ttl)))
            .min()
            .unwrap_or(self.latest.sent)
    }

    /// The shortest TTL the server may be counting now.
    fn shortest_ttl(&self) -> Duration {
        self.candidates()
            .map(|w| w.ttl)
            .min()
            .unwrap_or(self.latest.ttl)
    }
}

/// The shared state of one holding, seen by every clone of its [`Lock`](crate::Lock).
#[derive(Debug)]
pub(crate) struct Lease {
    state: Mutex<State>,
    /// Bumped on every change, to wake async waiters for the loss.
    changed: watch::Sender<()>,
    /// Notified on every change, to wake blocking renewers.
    wakes: Condvar,
}

#[derive(Debug, Clone)]
struct State {
    writes: Writes,
    /// The TTL the holder asked for last (its acquire or extend): what renewals ask.
    ttl: Duration,
    /// The deadline of [`Writes`], kept once it passed: a reply that comes after
    /// the lease ran out never revives it.
    valid_until: Instant,
    /// Set once the server said the lock is gone, or it was released, or the
    /// renewer saw the lease run out: why it ended.
    ended: Option<Ended>,
    /// The last renewal's error, cleared by an acknowledged renewal.
    last_error: Option<String>,
    /// Counts the changes (for [`Lease::wait_for_change`]).
    version: u64,
}

/// Why a lease ended before its deadline said so on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// A renewal (an extend) was answered 0.
    Refused,
    /// The renewer saw the deadline pass without an acknowledged renewal.
    RanOut,
    /// The holder released it.
    Released,
    /// A guarded write was refused: the server no longer held it with its token.
    Fenced,
}

/// Why a lock was lost, as its holder's client saw it ([`LockLost::cause`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// A renewal was answered 0: the server no longer holds it for this owner (it
    /// expired there, was deleted, or another owner has it now).
    Refused,
    /// No renewal was acknowledged before the lease's local deadline, with the last
    /// renewal's error if one failed (a lost connection, a timeout, an error reply).
    LeaseRanOut {
        /// The last renewal's error, if the last renewal failed.
        last_error: Option<String>,
    },
    /// The holder released it.
    Released,
    /// A fenced write was refused (`FENCED` from `LOCK.GUARD` or `lock_guard`, or
    /// the PostgreSQL fence found a greater token): the server no longer holds it
    /// with this token, or a newer holder has written.
    Fenced,
}

impl std::fmt::Display for LossCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossCause::Refused => {
                f.write_str("a renewal was answered 0: the server no longer holds it for this owner")
            }
            LossCause::LeaseRanOut { last_error: None } => {
                f.write_str("no renewal was acknowledged before the lease ran out")
            }
            LossCause::LeaseRanOut {
                last_error: Some(error),
            } => write!(
                f,
                "no renewal was acknowledged before the lease ran out; the last renewal failed: {error}"
            ),
            LossCause::Released => f.write_str("it was released"),
            LossCause::Fenced => f.write_str(
                "a fenced write was refused: the lock is no longer held with its token",
            ),
        }
    }
}

/// A write of a holding's expiry on its way (a renewal or an extend), from
/// [`Lease::write`]: [`acknowledged`](Pending::acknowledged) or
/// [`refused`](Pending::refused) by its reply, and abandoned when dropped without
/// one (it may still reach the server).
#[derive(Debug)]
pub(crate) struct Pending {
    lease: Arc<Lease>,
    id: Option<u64>,
}

impl Pending {
    /// The server answered 1: it holds the lock with this write's TTL.
    pub(crate) fn acknowledged(mut self) {
        if let Some(id) = self.id.take() {
            self.lease.change(|state, now| {
                if state.ended.is_none() && now < state.valid_until {
                    state.last_error = None;
                }
                state.writes.acknowledged(id, now);
            });
        }
    }

    /// The server answered 0: it no longer holds the lock for this owner.
    pub(crate) fn refused(mut self) {
        if let Some(id) = self.id.take() {
            self.lease.change(|state, _| state.writes.abandoned(id));
        }
        self.lease.end(Ended::Refused);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.lease.change(|state, _| state.writes.abandoned(id));
        }
    }
}

impl Lease {
    /// The lease of a holding acquired by a request sent at `sent` with `ttl`, whose
    /// answer came now.
    pub(crate) fn new(sent: Instant, ttl: Duration) -> Arc<Lease> {
        let writes = Writes::new(sent, ttl, Instant::now());
        Arc::new(Lease {
            state: Mutex::new(State {
                valid_until: writes.deadline(),
                writes,
                ttl,
                ended: None,
                last_error: None,
                version: 0,
            }),
            changed: watch::Sender::new(()),
            wakes: Condvar::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain data, always consistent: a panic elsewhere cannot
        // leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `change` and computes the deadline again, unless the lease ran out
    /// or ended already: once lost, a lock stays lost, so the work that stopped for
    /// it was right to. Wakes whoever waits on the lease.
    fn change(&self, change: impl FnOnce(&mut State, Instant)) {
        {
            let mut state = self.state();
            let now = Instant::now();
            let live = state.ended.is_none() && now < state.valid_until;
            change(&mut state, now);
            if live {
                state.valid_until = state.writes.deadline();
            }
            state.version = state.version.wrapping_add(1);
        }
        self.wakes.notify_all();
        self.changed.send_replace(());
    }

    /// A renewal or extend of `ttl` (whole milliseconds, as sent) is sent now;
    /// `asked`: an extend the holder asked for, whose TTL renewals ask from now on.
    pub(crate) fn write(self: &Arc<Self>, ttl: Duration, asked: bool) -> Pending {
        let mut id = 0;
        self.change(|state, now| {
            id = state.writes.send(now, ttl);
            if asked {
                state.ttl = ttl;
            }
        });
        Pending {
            lease: Arc::clone(self),
            id: Some(id),
        }
    }

    /// The server no longer holds the lock for this owner, it was released, a fenced
    /// write was refused, or the renewer saw it run out: the first cause given stays.
    pub(crate) fn end(&self, why: Ended) {
        self.change(|state, _| {
            state.ended.get_or_insert(why);
        });
    }

    /// True once [`end`](Lease::end) was called (not merely run out).
    pub(crate) fn ended(&self) -> bool {
        self.state().ended.is_some()
    }

    /// A renewal failed with `error` (the lease may still hold).
    pub(crate) fn renewal_failed(&self, error: String) {
        self.state().last_error = Some(error);
    }

    /// Why the lease is lost; `None` while it holds.
    pub(crate) fn cause(&self) -> Option<LossCause> {
        let state = self.state();
        match state.ended {
            Some(Ended::Refused) => Some(LossCause::Refused),
            Some(Ended::Released) => Some(LossCause::Released),
            Some(Ended::Fenced) => Some(LossCause::Fenced),
            Some(Ended::RanOut) => Some(LossCause::LeaseRanOut {
                last_error: state.last_error.clone(),
            }),
            None if Instant::now() >= state.valid_until => Some(LossCause::LeaseRanOut {
                last_error: state.last_error.clone(),
            }),
            None => None,
        }
    }

    /// The TTL the holder asked for last: what a renewal asks for.
    pub(crate) fn ttl(&self) -> Duration {
        self.state().ttl
    }

    /// The shortest TTL the server may be counting now.
    pub(crate) fn shortest_ttl(&self) -> Duration {
        self.state().writes.shortest_ttl()
    }

    /// When the next renewal is due.
    pub(crate) fn renewal_due(&self) -> Instant {
        self.state().writes.renewal_due()
    }

    /// The local deadline; in the past once the lock ended.
    pub(crate) fn valid_until(&self) -> Instant {
        let state = self.state();
        if state.ended.is_some() {
            state.writes.latest.sent.min(Instant::now())
        } else {
            state.valid_until
        }
    }

    /// Reads the clock: lost once ended or past the deadline.
    pub(crate) fn is_lost(&self) -> bool {
        let state = self.state();
        state.ended.is_some() || Instant::now() >= state.valid_until
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// The count of changes so far, for [`Lease::wait_for_change`].
    pub(crate) fn version(&self) -> u64 {
        self.state().version
    }

    /// Blocks until the lease changes after `seen`, `until` passes, or `stop` is set
    /// (by one who then calls [`Lease::wake`]).
    pub(crate) fn wait_for_change(&self, seen: u64, until: Instant, stop: &AtomicBool) {
        let mut state = self.state();
        while state.version == seen && !stop.load(Ordering::SeqCst) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = match self.wakes.wait_timeout(state, left) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Wakes the blocking waiters (one that set its `stop` flag).
    pub(crate) fn wake(&self) {
        let _state = self.state();
        self.wakes.notify_all();
    }
}

/// Tells the work under a lock whether the lock is still held. Cheap to clone; every
/// clone sees the same lease.
///
/// It reports the lock lost once a renewal found it gone, or once the lease's local
/// deadline passed without an acknowledged renewal, whichever comes first: at the
/// latest [`margin`] before the server could hand the lock to anyone else.
///
/// ```no_run
/// # async fn demo(lost: redis_lock_client::LockLost) {
/// tokio::select! {
///     _ = lost.lost() => println!("stop: the lock is gone, or soon may be"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => println!("work done"),
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockLost {
    pub(crate) lease: Arc<Lease>,
    pub(crate) key: String,
}

impl LockLost {
    /// True once the lock is lost (or its lease ran out, or it was released). Reads
    /// the clock when called, so it is right also in a process that was stopped and
    /// continued, whatever ran first since.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// `Err(`[`Error::LockLost`]`)` once the lock is lost: `lost.check()?` right
    /// before each write the lock guards stops the work before it does harm. Reads
    /// the clock when called, as [`is_lost`](LockLost::is_lost) does.
    ///
    /// ```no_run
    /// # fn write(_step: u32, _token: i64) {}
    /// # fn demo(lock: redis_lock_client::Lock) -> redis_lock_client::Result<()> {
    /// let lost = lock.signal();
    /// for step in 0..10 {
    ///     lost.check()?; // the lease, now: Err once it ran out or the lock is gone
    ///     write(step, lock.token()); // and fenced with the token
    /// }
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            return Err(Error::LockLost {
                key: self.key.clone(),
            });
        }
        Ok(())
    }

    /// The local deadline of the lease: the lock is safe to rely on until then.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Why the lock is lost, as this client saw it; `None` while it holds.
    pub fn cause(&self) -> Option<LossCause> {
        self.lease.cause()
    }

    /// Completes when the lock is lost: at the latest at the lease's deadline, however
    /// long the renewals take to answer. Borrows nothing, so it can outlive the
    /// signal. Needs a tokio runtime with its time driver.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let lease = Arc::clone(&self.lease);
        async move {
            let mut changed = lease.subscribe();
            loop {
                if lease.is_lost() {
                    return;
                }
                // Far deadlines are re-checked daily, so the timer never overflows.
                let wake = lease
                    .valid_until()
                    .min(Instant::now() + Duration::from_secs(86_400));
                tokio::select! {
                    _ = tokio::time::sleep_until(wake.into()) => {}
                    _ = changed.changed() => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A lease of `ttl` less its margin.
    fn lease(ttl: Duration) -> Duration {
        ttl - margin(ttl)
    }

    #[test]
    fn the_margin_is_a_tenth_of_the_ttl_and_at_least_50_ms() {
        assert_eq!(margin(Duration::from_secs(10)), Duration::from_secs(1));
        assert_eq!(margin(ms(300)), ms(50));
        assert_eq!(margin(ms(20)), ms(20));
    }

    #[test]
    fn equal_ttls_count_from_the_latest_acknowledged_send() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(3);
        let mut writes = Writes::new(t0, ttl, t0 + ms(1));
        assert_eq!(writes.deadline(), t0 + ms(2_700));
        assert_eq!(writes.renewal_due(), t0 + ms(1_000));
        let renewal = writes.send(t0 + ms(1_000), ttl);
        assert_eq!(
            writes.deadline(),
            t0 + ms(2_700),
            "a renewal of the same TTL in flight changes nothing"
        );
        writes.acknowledged(renewal, t0 + ms(1_002));
        assert_eq!(writes.deadline(), t0 + ms(3_700));
        assert_eq!(writes.renewal_due(), t0 + ms(2_000));
        // Two in flight at once (an extend of the same TTL beside a renewal),
        // answered in the other order: the same as one after the other.
        let renewal = writes.send(t0 + ms(2_000), ttl);
        let extend = writes.send(t0 + ms(2_100), ttl);
        writes.acknowledged(extend, t0 + ms(2_200));
        writes.acknowledged(renewal, t0 + ms(2_300));
        assert_eq!(writes.deadline(), t0 + ms(2_100) + lease(ttl));
        assert_eq!(writes.renewal_due(), t0 + ms(3_100));
        assert_eq!(writes.shortest_ttl(), ttl);
    }

    #[test]
    fn a_shorter_write_in_flight_bounds_the_lease_from_its_send() {
        let t0 = Instant::now();
        let long = Duration::from_secs(30);
        let short = ms(1_200);
        let mut writes = Writes::new(t0, long, t0 + ms(1));
        // An extend to 1.2 s sent 9 s into a 30 s holding: the server may apply it
        // last, but not before it was sent.
        let extend = writes.send(t0 + ms(9_000), short);
        assert_eq!(writes.deadline(), t0 + ms(9_000) + lease(short));
        assert_eq!(writes.renewal_due(), t0 + ms(9_400));
        assert_eq!(writes.shortest_ttl(), short);
        writes.acknowledged(extend, t0 + ms(9_001));
        assert_eq!(writes.deadline(), t0 + ms(9_000) + lease(short));
        assert_eq!(
            writes.renewal_due(),
            t0 + ms(9_400),
            "renewed at a third of 1.2 s"
        );
    }

    #[test]
    fn a_shorter_renewal_answered_after_a_longer_extend_bounds_the_lease() {
        let t0 = Instant::now();
        let short = Duration::from_secs(3);
        let long = Duration::from_secs(30);
        // Either reply first: the renewal of 3 s sent at 2.0 s, the extend to 30 s
        // at 2.2 s; the renewal may have reached the server last.
        for renewal_first in [false, true] {
            let mut writes = Writes::new(t0, short, t0 + ms(1));
            let renewal = writes.send(t0 + ms(2_000), short);
            let extend = writes.send(t0 + ms(2_200), long);
            if renewal_first {
                writes.acknowledged(renewal, t0 + ms(2_250));
                writes.acknowledged(extend, t0 + ms(2_300));
            } else {
                writes.acknowledged(extend, t0 + ms(2_300));
                writes.acknowledged(renewal, t0 + ms(2_400));
            }
            assert_eq!(
                writes.deadline(),
                t0 + ms(2_200) + lease(short),
                "renewal first: {renewal_first}"
            );
            assert_eq!(writes.renewal_due(), t0 + ms(3_200));
            // The next renewal (30 s), sent after both replies came: the server
            // applied both before it.
            let next = writes.send(t0 + ms(3_200), long);
            writes.acknowledged(next, t0 + ms(3_210));
            assert_eq!(writes.deadline(), t0 + ms(3_200) + lease(long));
            assert_eq!(writes.renewal_due(), t0 + ms(13_200));
        }
    }

    #[test]
    fn a_longer_extend_beside_a_shorter_renewal_in_flight_keeps_the_shorter_bound() {
        let t0 = Instant::now();
        let short = Duration::from_secs(3);
        let long = Duration::from_secs(30);
        let mut writes = Writes::new(t0, short, t0 + ms(1));
        let renewal = writes.send(t0 + ms(1_000), short);
        let extend = writes.send(t0 + ms(1_100), long);
        writes.acknowledged(extend, t0 + ms(1_150));
        assert_eq!(
            writes.deadline(),
            t0 + ms(1_100) + lease(short),
            "the renewal still in flight may come last"
        );
        writes.acknowledged(renewal, t0 + ms(1_200));
        assert_eq!(writes.deadline(), t0 + ms(1_100) + lease(short));
    }

    #[test]
    fn an_abandoned_write_bounds_the_lease_for_good() {
        let t0 = Instant::now();
        let short = Duration::from_secs(3);
        let long = Duration::from_secs(30);
        let mut writes = Writes::new(t0, short, t0 + ms(1));
        let timed_out = writes.send(t0 + ms(1_000), short);
        writes.abandoned(timed_out);
        assert_eq!(
            writes.deadline(),
            t0 + lease(short),
            "same TTL: nothing changes"
        );
        let extend = writes.send(t0 + ms(1_500), long);
        writes.acknowledged(extend, t0 + ms(1_510));
        assert_eq!(writes.deadline(), t0 + ms(1_500) + lease(short));
        for n in 1..=5u64 {
            let renewal = writes.send(t0 + ms(1_500 + n * 1_000), long);
            writes.acknowledged(renewal, t0 + ms(1_510 + n * 1_000));
            assert_eq!(
                writes.deadline(),
                t0 + ms(1_500 + n * 1_000) + lease(short),
                "the 3 s write may still arrive"
            );
            assert_eq!(writes.renewal_due(), t0 + ms(2_500 + n * 1_000));
        }
        // Abandoned writes of one TTL are kept once, from the earliest send.
        for n in 0..100u64 {
            let lost = writes.send(t0 + ms(7_000 + n), short);
            writes.abandoned(lost);
        }
        assert_eq!(writes.abandoned.len(), 1);
        // A reply to a write no longer in flight changes nothing.
        writes.acknowledged(timed_out, t0 + ms(8_000));
        writes.abandoned(extend);
        assert_eq!(writes.open.len(), 0);
    }

    #[test]
    fn replies_that_came_before_the_latest_send_are_forgotten() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(3);
        let mut writes = Writes::new(t0, ttl, t0 + ms(1));
        for n in 1..=100u64 {
            let a = writes.send(t0 + ms(n * 10), ttl);
            let b = writes.send(t0 + ms(n * 10 + 1), ttl);
            writes.acknowledged(b, t0 + ms(n * 10 + 2));
            writes.acknowledged(a, t0 + ms(n * 10 + 3));
        }
        assert!(writes.open.len() <= 1, "{:?}", writes.open);
    }

    #[test]
    fn the_largest_ttl_neither_overflows_nor_runs_out() {
        let t0 = Instant::now();
        let huge = ms((1 << 62) - 1);
        let mut writes = Writes::new(t0, huge, t0);
        assert!(writes.deadline() > t0 + Duration::from_secs(50 * 365 * 86_400));
        assert!(writes.renewal_due() > t0 + Duration::from_secs(50 * 365 * 86_400));
        let extend = writes.send(t0 + ms(5), ms(1));
        assert_eq!(writes.deadline(), t0 + ms(5), "1 ms: no lease time at all");
        writes.acknowledged(extend, t0 + ms(6));
        let lease = Lease::new(Instant::now(), huge);
        assert!(!lease.is_lost());
        assert!(lease.renewal_due() > Instant::now() + Duration::from_secs(86_400));
        lease.write(huge, true).acknowledged();
        assert!(!lease.is_lost());
    }

    #[test]
    fn a_lease_is_lost_at_its_deadline_or_when_ended() {
        let past = Instant::now() - Duration::from_secs(5);
        assert!(Lease::new(past, Duration::from_secs(5)).is_lost());
        let lease = Lease::new(Instant::now(), Duration::from_secs(60));
        assert!(!lease.is_lost());
        lease.end(Ended::Refused);
        assert!(lease.is_lost());
        assert_eq!(lease.cause(), Some(LossCause::Refused));
        assert!(lease.valid_until() <= Instant::now());
        lease.write(Duration::from_secs(60), true).acknowledged();
        assert!(lease.is_lost(), "an ended lease stays ended");
        let lapsed = Lease::new(past, Duration::from_secs(1));
        lapsed.write(Duration::from_secs(60), true).acknowledged();
        assert!(
            lapsed.is_lost(),
            "a late reply does not revive a lapsed lease"
        );
    }

    #[test]
    fn an_extend_moves_the_ttl_renewals_ask_for_and_a_refusal_ends_the_lease() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(30));
        let renewal = lease.write(lease.ttl(), false);
        assert_eq!(lease.ttl(), Duration::from_secs(30));
        let extend = lease.write(ms(1_200), true);
        assert_eq!(lease.ttl(), ms(1_200), "asked for when sent");
        assert!(lease.remaining_for_test() <= ms(1_200));
        extend.acknowledged();
        renewal.acknowledged();
        assert!(!lease.is_lost());
        assert!(lease.renewal_due() <= Instant::now() + ms(400));
        lease.write(ms(1_200), false).refused();
        assert_eq!(lease.cause(), Some(LossCause::Refused));
    }

    #[test]
    fn a_lease_says_why_it_was_lost() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(60));
        assert_eq!(lease.cause(), None);
        lease.renewal_failed("no reply in time".into());
        assert_eq!(lease.cause(), None, "a failed renewal alone loses nothing");
        lease.end(Ended::RanOut);
        lease.end(Ended::Released);
        assert_eq!(
            lease.cause(),
            Some(LossCause::LeaseRanOut {
                last_error: Some("no reply in time".into())
            }),
            "the first cause stays"
        );
        let past = Instant::now() - Duration::from_secs(5);
        let lapsed = Lease::new(past, Duration::from_secs(1));
        assert_eq!(
            lapsed.cause(),
            Some(LossCause::LeaseRanOut { last_error: None })
        );
        let renewed = Lease::new(Instant::now(), Duration::from_secs(60));
        renewed.renewal_failed("connection refused".into());
        renewed.write(Duration::from_secs(60), false).acknowledged();
        renewed.end(Ended::RanOut);
        assert_eq!(
            renewed.cause(),
            Some(LossCause::LeaseRanOut { last_error: None }),
            "an acknowledged renewal clears the error"
        );
    }

    #[test]
    fn a_refused_fenced_write_ends_the_lease_with_its_own_cause() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(60));
        lease.end(Ended::Fenced);
        assert!(lease.is_lost());
        assert_eq!(lease.cause(), Some(LossCause::Fenced));
        assert!(LossCause::Fenced
            .to_string()
            .contains("fenced write was refused"));
        let released = Lease::new(Instant::now(), Duration::from_secs(60));
        released.end(Ended::Released);
        released.end(Ended::Fenced);
        assert_eq!(
            released.cause(),
            Some(LossCause::Released),
            "a guard after a release: the release stays the cause"
        );
    }

    #[test]
    fn a_dropped_write_is_abandoned() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(60));
        drop(lease.write(ms(900), true));
        assert!(lease.remaining_for_test() <= ms(900));
        assert_eq!(lease.shortest_ttl(), ms(900));
        lease.write(Duration::from_secs(60), true).acknowledged();
        assert!(
            lease.remaining_for_test() <= ms(900),
            "the dropped write may still reach the server"
        );
    }

    #[test]
    fn a_blocking_waiter_wakes_on_a_change_or_a_stop() {
        let lease = Lease::new(Instant::now(), Duration::from_secs(60));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = lease.version();
        let waiter = {
            let (lease, stop) = (Arc::clone(&lease), Arc::clone(&stop));
            std::thread::spawn(move || {
                let started = Instant::now();
                lease.wait_for_change(seen, started + Duration::from_secs(30), &stop);
                started.elapsed()
            })
        };
        std::thread::sleep(ms(50));
        lease.write(Duration::from_secs(60), false).acknowledged();
        assert!(waiter.join().unwrap() < Duration::from_secs(5));
        let seen = lease.version();
        let waiter = {
            let (lease, stop) = (Arc::clone(&lease), Arc::clone(&stop));
            std::thread::spawn(move || {
                let started = Instant::now();
                lease.wait_for_change(seen, started + Duration::from_secs(30), &stop);
                started.elapsed()
            })
        };
        std::thread::sleep(ms(50));
        stop.store(true, Ordering::SeqCst);
        lease.wake();
        assert!(waiter.join().unwrap() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn the_async_signal_fires_at_the_deadline_without_any_reply() {
        let start = Instant::now();
        let lost = LockLost {
            lease: Lease::new(start, ms(200)),
            key: "job".into(),
        };
        lost.lost().await;
        assert!(start.elapsed() >= ms(150));
        assert!(lost.check().is_err());
    }

    #[tokio::test]
    async fn the_async_signal_follows_a_shorter_lease() {
        let start = Instant::now();
        let lease = Lease::new(start, Duration::from_secs(60));
        let lost = LockLost {
            lease: Arc::clone(&lease),
            key: "job".into(),
        };
        let waiting = tokio::spawn(lost.lost());
        tokio::time::sleep(ms(20)).await;
        drop(lease.write(ms(200), true)); // abandoned: it may still arrive
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the shorter lease")
            .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    impl Lease {
        fn remaining_for_test(&self) -> Duration {
            self.valid_until().saturating_duration_since(Instant::now())
        }
    }
}
