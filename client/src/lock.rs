//! The lock value: a holding this process has, with its token and its lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::info::Mode;
use crate::lease::{Ended, Lease, LockLost, LossCause, Pending};

/// A lock this process holds: its key, the owner id it was taken with, its fencing
/// token, and its lease.
///
/// Send the token with every write the lock guards, and have the resource reject
/// tokens lower than the highest it has seen. Rely on the lock only until
/// [`valid_until`](Lock::valid_until): the server keeps it at least until then.
/// Clones share the lease, so a renewal through any of them moves it for all.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::LockCommands;
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
/// if let Some(lock) = con.try_acquire("report:daily", Duration::from_secs(30))? {
///     // Safe for about 27 s (30 s less the 10% margin), unless extended.
///     println!("token {}, {:?} left", lock.token(), lock.remaining());
///     con.release(&lock)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) key: String,
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) lease: Arc<Lease>,
    pub(crate) backend: Backend,
    /// Exclusive, or one of several shared holdings (whose tokens do not fence a
    /// resource beyond Redis).
    pub(crate) mode: Mode,
    /// The process that acquired it: a holding belongs to it alone (see
    /// [`Lock::in_another_process`]).
    pub(crate) pid: u32,
}

/// The holding as a user reads it: key, owner, token, backend, and the lease's state
/// (not its internals).
impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.key)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("backend", &self.backend)
            .field("mode", &self.mode)
            .field("remaining", &self.remaining())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl PartialEq for Lock {
    /// Two locks are the same holding: same key, owner and token.
    fn eq(&self, other: &Lock) -> bool {
        (&self.key, &self.owner, self.token) == (&other.key, &other.owner, other.token)
    }
}

impl Eq for Lock {}

impl Lock {
    pub(crate) fn new(key: &str, owner: &str, token: i64, sent: Instant, ttl: Duration) -> Lock {
        Lock {
            key: key.into(),
            owner: owner.into(),
            token,
            lease: Lease::new(sent, ttl),
            backend: Backend::Module,
            mode: Mode::Exclusive,
            pid: std::process::id(),
        }
    }

    /// True in a process forked from the one that acquired the lock: there, a
    /// release or an extend sends nothing and answers `false` (the holding is the
    /// parent's, which goes on holding and renewing it), and a guard dropped there
    /// leaves it alone.
    pub(crate) fn in_another_process(&self) -> bool {
        self.pid != std::process::id()
    }

    /// The same lock, held through `backend`.
    pub(crate) fn on(mut self, backend: Backend) -> Lock {
        self.backend = backend;
        self
    }

    /// The same lock, as a holding of `mode`.
    pub(crate) fn in_mode(mut self, mode: Mode) -> Lock {
        self.mode = mode;
        self
    }

    /// The backend the lock was taken through, which its release, extend and
    /// guarded writes use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Whether this is an exclusive holding or one of several shared ones (a read
    /// lock, a semaphore's permit). Only an exclusive holding's token fences a
    /// resource beyond Redis: shared holdings' tokens do not order writers.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Logs the grant.
    pub(crate) fn acquired(&self) {
        tracing::debug!(key = %self.key, owner = %self.owner, token = self.token, ttl_ms = self.ttl().as_millis() as u64, "lock acquired");
    }

    /// A renewal or extend of `ttl` (whole milliseconds, as sent) goes out now;
    /// `asked`: an extend the holder asked for, whose TTL renewals ask from now on.
    pub(crate) fn writing(&self, ttl: Duration, asked: bool) -> Pending {
        self.lease.write(ttl, asked)
    }

    /// The renewal or extend `pending` was answered `extended`.
    pub(crate) fn extended(&self, pending: Pending, extended: bool) {
        if extended {
            pending.acknowledged();
        } else {
            pending.refused();
            tracing::warn!(key = %self.key, owner = %self.owner, token = self.token, "lock lost: the server no longer holds it for this owner");
        }
    }

    /// A fenced write with this lock's token was refused: the lock is lost at once.
    pub(crate) fn fenced(&self, why: &str) {
        self.lease.end(Ended::Fenced);
        tracing::warn!(key = %self.key, owner = %self.owner, token = self.token, reason = why, "lock lost: a fenced write was refused");
    }

    /// A release answered `released`.
    pub(crate) fn released(&self, released: bool) {
        self.lease.end(Ended::Released);
        if released {
            tracing::debug!(key = %self.key, owner = %self.owner, token = self.token, "lock released");
        } else {
            tracing::warn!(key = %self.key, owner = %self.owner, token = self.token, "lock released, but the server no longer held it for this owner");
        }
    }

    /// The key the lock lives at.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id the lock was taken with: `host:pid:` and 16 random hex digits,
    /// fresh per acquisition ([`fresh_owner`](crate::fresh_owner)), unless given.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The fencing token of this holding: greater than any token the server handed
    /// out for this key before.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The TTL the lock was taken (or last extended) with, in whole milliseconds as
    /// sent to the server: what its renewals ask for. An extend sets it when sent.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// Until when the lock is safe to rely on: the time the last acknowledged acquire,
    /// renewal or extend was sent, plus its TTL, less the [`margin`](crate::margin)
    /// for clock drift; sooner while a write with a shorter TTL may still reach the
    /// server after it (the crate's `lease` module has the rule). In the past once the
    /// lock was lost or released.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until()
    }

    /// Time left until [`valid_until`](Lock::valid_until); zero once lost.
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// True once the lease ran out, an extend found the lock gone, a fenced write was
    /// refused, or it was released.
    /// Reads the clock when called: check it right before each write the lock guards
    /// (or [`LockLost::check`] on its [`signal`](Lock::signal)).
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Why the lock is lost, as this client saw it; `None` while it holds.
    pub fn cause(&self) -> Option<LossCause> {
        self.lease.cause()
    }

    /// The loss signal of this lock, to hand to the work it guards.
    pub fn signal(&self) -> LockLost {
        LockLost {
            lease: Arc::clone(&self.lease),
            key: self.key.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_of_a_lock_share_its_lease() {
        let lock = Lock::new("job", "me", 1, Instant::now(), Duration::from_secs(60));
        let clone = lock.clone();
        assert_eq!(lock, clone);
        lock.lease.end(Ended::Refused);
        assert!(clone.is_lost());
        assert_eq!(clone.remaining(), Duration::ZERO);
    }
}
