//! The holder's side of a lock: a lease with a local deadline, and the loss signal.
//!
//! The server counts a lock's TTL from the moment it runs the acquire or extend, which
//! is after the client sent it. So the client knows the lock is the server's to keep
//! until at least *send time + TTL*, whatever happened to the reply. The lease ends a
//! margin earlier, for the two clocks' drift and for the wake-up of whoever waits on
//! the signal: [`margin`] is 10% of the TTL, at least 50 ms. Every loss signal (the
//! async [`LockLost::lost`], [`LockLost::is_lost`], [`Lock::is_lost`](crate::Lock::is_lost),
//! the renewers') is computed from that deadline, so it fires at the latest there
//! even if no reply ever comes back: a partition, a hung server, a reconnecting
//! connection manager.
//!
//! What the deadline cannot cover: a holder whose own process stops (GC pause, swap,
//! SIGSTOP, a suspended VM) between checking the signal and writing; a local clock
//! that runs more than 10% slow against the server's. Fencing tokens cover those.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis_lock_core::protocol::{LEASE_MARGIN_MIN_MS, LEASE_MARGIN_PERCENT};
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

/// The shared state of one holding, seen by every clone of its [`Lock`](crate::Lock).
#[derive(Debug)]
pub(crate) struct Lease {
    state: Mutex<State>,
    /// Bumped on every change, to wake async waiters for the loss.
    changed: watch::Sender<()>,
}

#[derive(Debug, Clone)]
struct State {
    /// When the last acknowledged acquire or extend was sent.
    sent: Instant,
    ttl: Duration,
    valid_until: Instant,
    /// Set once the server said the lock is gone, or it was released, or the
    /// renewer saw the lease run out: why it ended.
    ended: Option<Ended>,
    /// The last renewal's error, cleared by an acknowledged renewal.
    last_error: Option<String>,
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
        }
    }
}

impl Lease {
    pub(crate) fn new(sent: Instant, ttl: Duration) -> Arc<Lease> {
        Arc::new(Lease {
            state: Mutex::new(State {
                sent,
                ttl,
                valid_until: deadline(sent, ttl),
                ended: None,
                last_error: None,
            }),
            changed: watch::Sender::new(()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain data, always consistent: a panic elsewhere cannot
        // leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An acquire or extend sent at `sent` with `ttl` was acknowledged. A reply to an
    /// older request than the one the lease is already counted from changes nothing,
    /// and neither does one that comes after the lease ran out: once lost, a lock
    /// stays lost, so the work that stopped for it was right to.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        {
            let mut state = self.state();
            if state.ended.is_some() || sent < state.sent || Instant::now() >= state.valid_until {
                return;
            }
            state.last_error = None;
            state.sent = sent;
            state.ttl = ttl;
            state.valid_until = deadline(sent, ttl);
        }
        self.changed.send_replace(());
    }

    /// The server no longer holds the lock for this owner, it was released, or the
    /// renewer saw it run out: the first cause given stays.
    pub(crate) fn end(&self, why: Ended) {
        self.state().ended.get_or_insert(why);
        self.changed.send_replace(());
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
            Some(Ended::RanOut) => Some(LossCause::LeaseRanOut {
                last_error: state.last_error.clone(),
            }),
            None if Instant::now() >= state.valid_until => Some(LossCause::LeaseRanOut {
                last_error: state.last_error.clone(),
            }),
            None => None,
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.state().ttl
    }

    pub(crate) fn last_sent(&self) -> Instant {
        self.state().sent
    }

    /// The local deadline; in the past once the lock ended.
    pub(crate) fn valid_until(&self) -> Instant {
        let state = self.state();
        if state.ended.is_some() {
            state.sent.min(Instant::now())
        } else {
            state.valid_until
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        let state = self.state();
        state.ended.is_some() || Instant::now() >= state.valid_until
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }
}

/// `sent + ttl - margin`, saturating far in the future for TTLs of centuries.
fn deadline(sent: Instant, ttl: Duration) -> Instant {
    let lease = ttl - margin(ttl);
    sent.checked_add(lease)
        .or_else(|| sent.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(sent)
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
    /// True once the lock is lost (or its lease ran out, or it was released).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// `Err(`[`Error::LockLost`]`)` once the lock is lost: `lost.check()?` between
    /// steps of the work stops it before it does harm.
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

    #[test]
    fn the_margin_is_a_tenth_of_the_ttl_and_at_least_50_ms() {
        assert_eq!(margin(Duration::from_secs(10)), Duration::from_secs(1));
        assert_eq!(
            margin(Duration::from_millis(300)),
            Duration::from_millis(50)
        );
        assert_eq!(margin(Duration::from_millis(20)), Duration::from_millis(20));
    }

    #[test]
    fn a_lease_counts_from_the_send_time_of_the_last_acknowledged_renewal() {
        let start = Instant::now();
        let lease = Lease::new(start, Duration::from_secs(10));
        assert_eq!(lease.valid_until(), start + Duration::from_secs(9));
        let later = start + Duration::from_secs(3);
        lease.renewed(later, Duration::from_secs(10));
        assert_eq!(lease.valid_until(), later + Duration::from_secs(9));
        // A late reply to an older extend does not move the deadline back.
        lease.renewed(start + Duration::from_secs(1), Duration::from_secs(10));
        assert_eq!(lease.valid_until(), later + Duration::from_secs(9));
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
        lease.renewed(Instant::now(), Duration::from_secs(60));
        assert!(lease.is_lost(), "an ended lease stays ended");
        let lapsed = Lease::new(past, Duration::from_secs(1));
        lapsed.renewed(Instant::now(), Duration::from_secs(60));
        assert!(
            lapsed.is_lost(),
            "a late reply does not revive a lapsed lease"
        );
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
        renewed.renewed(Instant::now(), Duration::from_secs(60));
        renewed.end(Ended::RanOut);
        assert_eq!(
            renewed.cause(),
            Some(LossCause::LeaseRanOut { last_error: None }),
            "an acknowledged renewal clears the error"
        );
    }

    #[test]
    fn a_ttl_of_centuries_does_not_overflow() {
        let lease = Lease::new(Instant::now(), Duration::from_millis(1 << 62));
        assert!(!lease.is_lost());
    }

    #[tokio::test]
    async fn the_async_signal_fires_at_the_deadline_without_any_reply() {
        let start = Instant::now();
        let lost = LockLost {
            lease: Lease::new(start, Duration::from_millis(200)),
            key: "job".into(),
        };
        lost.lost().await;
        assert!(start.elapsed() >= Duration::from_millis(150));
        assert!(lost.check().is_err());
    }
}
