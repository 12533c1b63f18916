//! [`AsyncLockGuard`]: a held lock, released when the guard is dropped, on the path
//! it was taken through.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::path::{extend_on, release_in_background, release_on, LockPath};
use crate::error::{Error, Result};
use crate::lease::LockLost;
use crate::lock::Lock;

/// A held lock, released when the guard is dropped.
///
/// Dropped inside a tokio runtime, the guard spawns the release and returns at once
/// (never blocking the runtime). A guard from a [`LockClient`](crate::LockClient)
/// dropped outside of any runtime releases on a connection and runtime of its own,
/// for at most a second. Otherwise, and when the runtime shuts down before the
/// spawned release ran (a guard dropped at the very end of `#[tokio::main]`), the
/// lock lapses with its TTL: call [`release`](AsyncLockGuard::release) and await it
/// where that matters.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{AsyncLockCommands, Wait};
///
/// # async fn demo() -> redis_lock_client::Result<()> {
/// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap()
///     .get_multiplexed_async_connection().await.unwrap();
/// if let Some(guard) = con.lock_guard("cleanup", Duration::from_secs(10), Wait::No).await? {
///     println!("token {}", guard.lock().token());
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
pub struct AsyncLockGuard {
    lock: Lock,
    path: Box<dyn GuardPath>,
    released: bool,
}

/// A [`LockPath`] whatever its type (the guard's own type names none).
trait GuardPath: Send + Sync {
    fn extend(&self, lock: Lock, ttl: Duration) -> BoxFuture<Result<bool>>;
    fn release(&self, lock: Lock) -> BoxFuture<Result<bool>>;
    fn release_in_background(&self, lock: Lock);
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<P: LockPath> GuardPath for P {
    fn extend(&self, lock: Lock, ttl: Duration) -> BoxFuture<Result<bool>> {
        let path = self.clone();
        Box::pin(async move { extend_on(&path, &lock, ttl).await })
    }

    fn release(&self, lock: Lock) -> BoxFuture<Result<bool>> {
        let path = self.clone();
        Box::pin(async move { release_on(&path, &lock).await })
    }

    fn release_in_background(&self, lock: Lock) {
        release_in_background(self.clone(), lock);
    }
}

impl AsyncLockGuard {
    pub(crate) fn new(lock: Lock, path: impl LockPath) -> AsyncLockGuard {
        AsyncLockGuard {
            lock,
            path: Box::new(path),
            released: false,
        }
    }

    /// The held lock.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The lock's loss signal.
    pub fn signal(&self) -> LockLost {
        self.lock.signal()
    }

    /// Extends the lock to `ttl` from now; [`Error::LockLost`] if it is no longer held.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        if !self.path.extend(self.lock.clone(), ttl).await? {
            return Err(Error::LockLost {
                key: self.lock.key.clone(),
            });
        }
        Ok(())
    }

    /// Releases now and waits for the answer; `false` if it was no longer held.
    pub async fn release(mut self) -> Result<bool> {
        self.released = true;
        self.path.release(self.lock.clone()).await
    }
}

impl std::fmt::Debug for AsyncLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncLockGuard")
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

impl Drop for AsyncLockGuard {
    fn drop(&mut self) {
        if !self.released {
            self.path.release_in_background(self.lock.clone());
        }
    }
}
