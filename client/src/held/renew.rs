//! Renewers: extend a held lock when its lease says a renewal is due (a third of the
//! TTL after the last acknowledged write, sooner after an extend to a shorter TTL),
//! each attempt bounded by the lease, and stop trying once the lease ran out.
//!
//! The loss signal does not depend on them: a [`Lock`]'s lease reports the loss at
//! its local deadline whatever the renewer is doing. A renewer moves the deadline
//! forward while renewals are acknowledged, and ends the lease at once when one
//! finds the lock gone. It follows the lease: any change to it (an extend sent or
//! answered elsewhere) wakes it to look again when the next renewal is due.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis_lock_core::protocol::RENEWAL_DIVISOR;
use tokio::task::JoinHandle;

use super::path::{LockPath, OnConnection};
use crate::drive::blocking::{drive as drive_blocking, Borrowed};
use crate::drive::tokio::{drive, timed_out};
use crate::error::{Error, Result};
use crate::lease::{Ended, LockLost};
use crate::lock::Lock;
use crate::machine::Extend;

/// The pause before another try after a failed renewal: short, so that a blip costs
/// little of the lease (a twelfth of the shortest TTL the server may count, from 10
/// to 250 ms).
fn retry_delay(lock: &Lock) -> Duration {
    (lock.lease.shortest_ttl() / RENEWAL_DIVISOR / 4)
        .clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// When the next renewal goes out: when the lease says it is due or, after a failed
/// renewal, at its retry if that is later.
fn renewal_due(lock: &Lock, retry_at: Option<Instant>) -> Instant {
    let due = lock.lease.renewal_due();
    retry_at.map_or(due, |retry| retry.max(due))
}

/// When a renewer waiting for `due` wakes at the latest: then, at the lease's
/// deadline, or a day from now (far times are looked at again daily, so no timer
/// overflows).
fn wake_at(lock: &Lock, due: Instant) -> Instant {
    due.min(lock.valid_until())
        .min(Instant::now() + Duration::from_secs(86_400))
}

/// How long one renewal (with its connect, if any) may take: what is left of the
/// lease. A renewal acknowledged later could not keep the lease anyway; and over a
/// slow path, a connect and its handshake may need more than a period.
fn attempt_limit(lock: &Lock) -> Duration {
    lock.remaining().max(Duration::from_millis(10))
}

/// How long [`Renewer::stop`] waits for its thread at most.
pub const STOP_LIMIT: Duration = Duration::from_millis(250);

/// Renews a lock in a tokio task, for async code and any lock or guard.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{AsyncLockCommands, AsyncRenewer};
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// let mut con = client.get_multiplexed_async_connection().await.unwrap();
/// if let Some(lock) = con.try_acquire("nightly-export", Duration::from_secs(10)).await? {
///     // A connection of its own, so renewals never queue behind other traffic.
///     let renewals = client.get_multiplexed_async_connection().await.unwrap();
///     let renewer = AsyncRenewer::start(renewals, &lock);
///     tokio::select! {
///         _ = renewer.signal().lost() => eprintln!("lost: stop writing"),
///         _ = async { /* long work, fenced with lock.token() */ } => {}
///     }
///     renewer.stop();
///     con.release(&lock).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncRenewer {
    task: JoinHandle<()>,
    lock: Lock,
}

impl AsyncRenewer {
    /// Starts renewing `lock` on clones of `con`, every third of its TTL. Give it a
    /// connection that nothing waits on (any connection of this crate's async API):
    /// each renewal is bounded by the lease, so a stuck connection costs the lock,
    /// never a late loss signal. Must be called inside a tokio runtime.
    pub fn start<C>(con: C, lock: &Lock) -> AsyncRenewer
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        AsyncRenewer::spawn(OnConnection(con), lock)
    }

    /// Starts renewing `lock` through `path`.
    pub(crate) fn spawn(path: impl LockPath, lock: &Lock) -> AsyncRenewer {
        let task = tokio::spawn(renew(path, lock.clone()));
        AsyncRenewer {
            task,
            lock: lock.clone(),
        }
    }

    /// The loss signal of the renewed lock.
    pub fn signal(&self) -> LockLost {
        self.lock.signal()
    }

    /// True once the lock is lost: a renewal found it gone, or the lease ran out.
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// Stops renewing, at once; returns true if the lock was lost before.
    pub fn stop(self) -> bool {
        self.task.abort();
        self.lock.is_lost()
    }
}

impl Drop for AsyncRenewer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn renew<P: LockPath>(path: P, lock: Lock) {
    // The connection of the last renewal, kept while renewals are answered and
    // opened anew after any failure: one that timed out may be black-holed for good.
    let mut con: Option<P::Connection> = None;
    let mut changed = lock.lease.subscribe();
    let mut retry_at = None;
    loop {
        if lock.is_lost() {
            return lapsed(&lock);
        }
        let due = renewal_due(&lock, retry_at);
        if Instant::now() < due {
            tokio::select! {
                () = tokio::time::sleep_until(wake_at(&lock, due).into()) => {}
                Ok(()) = changed.changed() => {}
            }
            continue;
        }
        let limit = attempt_limit(&lock);
        let attempt = async {
            let con = match &mut con {
                Some(con) => con,
                None => con.insert(path.open(limit).await?),
            };
            drive(con, Extend::renewal(&lock)).await
        };
        let answer = match tokio::time::timeout(limit, attempt).await {
            Ok(answer) => answer,
            Err(elapsed) => Err(Error::Connection(timed_out(elapsed))),
        };
        match answer {
            Ok(true) => retry_at = None,
            Ok(false) => return, // logged as lost by the extend
            Err(error) => {
                con = None;
                renewal_failed(&lock, &error);
                retry_at = Some(Instant::now() + retry_delay(&lock));
            }
        }
    }
}

fn renewal_failed(lock: &Lock, error: &Error) {
    lock.lease.renewal_failed(error.to_string());
    tracing::warn!(
        key = %lock.key, owner = %lock.owner, token = lock.token,
        remaining_ms = lock.remaining().as_millis() as u64, %error,
        "lock renewal failed"
    );
}

fn lapsed(lock: &Lock) {
    if !lock.lease.ended() {
        lock.lease.end(Ended::RanOut);
        tracing::warn!(
            key = %lock.key, owner = %lock.owner, token = lock.token,
            "lock lost: no renewal was acknowledged before the lease's deadline"
        );
    }
}

/// Renews a lock from a thread of its own, for blocking code and any lock or guard.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{LockCommands, Renewer};
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// let mut con = client.get_connection().unwrap();
/// if let Some(lock) = con.try_acquire("nightly-export", Duration::from_secs(10))? {
///     let renewer = Renewer::start(client.clone(), &lock);
///     while !renewer.is_lost() {
///         // … one step of long work, stamped with lock.token() …
///         # break;
///     }
///     renewer.stop();
///     con.release(&lock)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Renewer {
    lock: Lock,
    /// Set to stop the thread, which the lease then wakes.
    stop: Arc<AtomicBool>,
    done: mpsc::Receiver<()>,
}

impl Renewer {
    /// Starts extending `lock` when its lease says a renewal is due (every third of
    /// its TTL), on a connection of its own from `client` (opened again after any
    /// failure), each attempt's connect, write and read bounded by what is left of
    /// the lease.
    pub fn start(client: redis::Client, lock: &Lock) -> Renewer {
        let stop = Arc::new(AtomicBool::new(false));
        let (finished, done) = mpsc::channel::<()>();
        let renewed = lock.clone();
        let stopped = Arc::clone(&stop);
        thread::spawn(move || {
            renew_blocking(&client, &renewed, &stopped);
            let _ = finished.send(());
        });
        Renewer {
            lock: lock.clone(),
            stop,
            done,
        }
    }

    /// The loss signal of the renewed lock.
    pub fn signal(&self) -> LockLost {
        self.lock.signal()
    }

    /// True once the lock is lost: a renewal found it gone, or the lease ran out
    /// (whatever the renewal thread is doing then).
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// Stops renewing; returns true if the lock was lost before. Waits for the
    /// thread at most [`STOP_LIMIT`]: a renewal still under way then finishes on
    /// its own, within its bound, and renews nothing after it.
    pub fn stop(mut self) -> bool {
        self.shut_down();
        self.is_lost()
    }

    fn shut_down(&mut self) {
        if !self.stop.swap(true, Ordering::SeqCst) {
            self.lock.lease.wake(); // the thread's wait returns at once
            let _ = self.done.recv_timeout(STOP_LIMIT);
        }
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn renew_blocking(client: &redis::Client, lock: &Lock, stop: &AtomicBool) {
    let mut con: Option<redis::Connection> = None;
    let mut retry_at = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if lock.is_lost() {
            return lapsed(lock);
        }
        // Read before the due time: a change after it wakes the wait below at once.
        let seen = lock.lease.version();
        let due = renewal_due(lock, retry_at);
        if Instant::now() < due {
            lock.lease.wait_for_change(seen, wake_at(lock, due), stop);
            continue;
        }
        let limit = attempt_limit(lock);
        let attempt = connected(client, &mut con, limit)
            .and_then(|c| drive_blocking(&mut Borrowed(c), Extend::renewal(lock)));
        match attempt {
            Ok(true) => retry_at = None,
            Ok(false) => return,
            Err(error) => {
                con = None;
                renewal_failed(lock, &error);
                retry_at = Some(Instant::now() + retry_delay(lock));
            }
        }
    }
}

/// The renewal connection, opened if needed, with its timeouts set to `limit`.
fn connected<'c>(
    client: &redis::Client,
    con: &'c mut Option<redis::Connection>,
    limit: Duration,
) -> Result<&'c mut redis::Connection> {
    if con.is_none() {
        *con = Some(client.get_connection_with_timeout(limit)?);
    }
    let Some(c) = con.as_mut() else {
        return Err(Error::UnexpectedReply("no connection".into()));
    };
    c.set_read_timeout(Some(limit))?;
    c.set_write_timeout(Some(limit))?;
    Ok(c)
}
