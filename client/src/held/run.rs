//! The work under a held lock (`run_locked`), and what it reports: [`Locked`].

use std::future::Future;

use super::path::{release_in_background, release_on, LockPath};
use super::renew::AsyncRenewer;
use crate::drive::tokio::timed_out;
use crate::error::{Error, Result};
use crate::lease::LockLost;
use crate::limits::RELEASE_LIMIT;
use crate::lock::Lock;

/// What `run_locked` (blocking and async) reports after the work ran: its result,
/// whether the lock held to the end, and how the release went. The work's result is
/// there whatever happened to the lock, so an exactly-once job knows it ran.
///
/// ```
/// # fn report(done: redis_lock_client::Locked<u32>) {
/// if !done.held_to_end {
///     eprintln!("the lock was lost mid-way: writes were fenced off");
/// }
/// match done.released {
///     Ok(_) => {}
///     Err(error) => eprintln!("release failed, the lock lapses with its TTL: {error}"),
/// }
/// println!("result {}", done.value);
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Locked<T> {
    /// What the work returned.
    pub value: T,
    /// True if the lease was still valid when the work ended and the release did not
    /// find the lock gone; false if it was lost under the work (its writes must have
    /// been fenced off).
    pub held_to_end: bool,
    /// The release's answer: `Ok(true)` released, `Ok(false)` it was already gone,
    /// `Err` it could not be sent or answered (the lock then lapses with its TTL).
    pub released: Result<bool>,
}

impl<T> Locked<T> {
    pub(crate) fn new(value: T, held: bool, released: Result<bool>) -> Locked<T> {
        let held_to_end = held && !matches!(released, Ok(false));
        Locked {
            value,
            held_to_end,
            released,
        }
    }
}

/// The work under a held lock, renewed by `renewer`, released through `path` when
/// it ends or when this future is dropped (cancellation, a panic in the work).
pub(crate) async fn run_under<P, T, F, Fut>(
    lock: Lock,
    renewer: AsyncRenewer,
    path: P,
    work: F,
) -> Locked<T>
where
    P: LockPath,
    F: FnOnce(Lock, LockLost) -> Fut + Send,
    Fut: Future<Output = T> + Send,
{
    let mut on_drop = ReleaseOnDrop {
        path: path.clone(),
        lock: Some(lock.clone()),
    };
    let value = work(lock.clone(), lock.signal()).await;
    let held = !lock.is_lost();
    renewer.stop();
    let released = match tokio::time::timeout(RELEASE_LIMIT, release_on(&path, &lock)).await {
        Ok(released) => released,
        Err(elapsed) => Err(Error::Connection(timed_out(elapsed))),
    };
    on_drop.lock = None;
    Locked::new(value, held, released)
}

/// Releases its lock when dropped while still armed.
struct ReleaseOnDrop<P: LockPath> {
    path: P,
    lock: Option<Lock>,
}

impl<P: LockPath> Drop for ReleaseOnDrop<P> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            release_in_background(self.path.clone(), lock);
        }
    }
}
