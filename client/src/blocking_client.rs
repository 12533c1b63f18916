//! [`BlockingLockClient`]: the blocking API on connections of its own, so that every
//! wait is bounded (the trait on the caller's connection cannot set its timeouts).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::{Cmd, FromRedisValue};

use crate::backend::Backend;
use crate::drive::blocking::{drive, Owned};
use crate::error::{Error, Result};
use crate::held::renew::Renewer;
use crate::held::run::Locked;
use crate::info::LockInfo;
use crate::limits::{CONNECT_LIMIT, RELEASE_LIMIT};
use crate::lock::Lock;
use crate::machine::{info, reply_as, Acquire, Detect, Extend, Guard, Release};
use crate::request::Request;
use crate::wait::Wait;

/// The blocking lock API on connections of its own, opened from a
/// [`redis::Client`]: every command has a read timeout, so a wait of
/// `Wait::For(d)` gets no answer for at most `d` plus [`WAIT_MARGIN`](crate::WAIT_MARGIN), whatever the
/// server or the network does (then [`Error::WaitUnanswered`]), and a release,
/// extend or info at most a second. It finds out the server's [`Backend`] as
/// [`LockClient`](crate::LockClient) does.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{BlockingLockClient, Wait};
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let locks = BlockingLockClient::new(redis::Client::open("redis://127.0.0.1:6390/").unwrap());
/// let done = locks.run_locked("report:daily", Duration::from_secs(30), Wait::For(Duration::from_secs(60)), |lock| {
///     // build the report, fenced with lock.token(), stopping once lock.is_lost()
///     lock.token()
/// })?;
/// if let Some(done) = done {
///     println!("ran with token {}, held to the end: {}", done.value, done.held_to_end);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct BlockingLockClient {
    client: redis::Client,
    forced: Option<Backend>,
    detected: Arc<OnceLock<Backend>>,
}

impl BlockingLockClient {
    /// Locks through `client`, on the backend the server offers.
    pub fn new(client: redis::Client) -> Self {
        BlockingLockClient {
            client,
            forced: None,
            detected: Arc::new(OnceLock::new()),
        }
    }

    /// Uses `backend` only (`None`: the one the server offers), as
    /// [`LockClient::backend`](crate::LockClient::backend).
    pub fn backend(mut self, backend: Option<Backend>) -> Self {
        self.forced = backend;
        self.detected = Arc::new(OnceLock::new());
        self
    }

    /// A connection whose reads time out after `base` unless a step says otherwise.
    fn connect(&self, base: Option<Duration>) -> Result<Owned> {
        Owned::open(&self.client, base)
    }

    /// The backend this client uses, found out on first use.
    pub fn detect_backend(&self) -> Result<Backend> {
        if let Some(backend) = self.detected.get() {
            return Ok(*backend);
        }
        let mut con = self.connect(Some(CONNECT_LIMIT))?;
        let backend = drive(&mut con, Detect::new(self.forced))?;
        Ok(*self.detected.get_or_init(|| backend))
    }

    /// Takes the lock at `key` for `ttl`, waiting in the server's FIFO queue as `wait`
    /// says; `None` if it is still busy when the wait ends.
    pub fn acquire(&self, key: &str, ttl: Duration, wait: Wait) -> Result<Option<Lock>> {
        self.acquire_with(Request::new(key, ttl).wait(wait))
    }

    /// Acquires as `request` says, on a connection of its own, closed when this
    /// returns (which takes a module wait out of the server's queue).
    pub fn acquire_with(&self, request: Request) -> Result<Option<Lock>> {
        request.check()?;
        let request = request.backend(self.detect_backend()?);
        let wait = request.wait;
        let mut con = self.connect(wait.response_timeout())?;
        wait.unanswered(drive(&mut con, Acquire::new(request)?))
    }

    /// Extends `lock` to `ttl` on a fresh connection; `false` if it is no longer held.
    pub fn extend(&self, lock: &Lock, ttl: Duration) -> Result<bool> {
        drive(
            &mut self.connect(Some(RELEASE_LIMIT))?,
            Extend::new(lock, ttl),
        )
    }

    /// Releases `lock` on a fresh connection; `false` if it was no longer held.
    pub fn release(&self, lock: &Lock) -> Result<bool> {
        drive(&mut self.connect(Some(RELEASE_LIMIT))?, Release::new(lock))
    }

    /// Ends `owner`'s holding of the lock at `key`; `false` if it held none.
    pub fn release_owner(&self, key: &str, owner: &str) -> Result<bool> {
        let release = Release::owner(self.detect_backend()?, key, owner);
        drive(&mut self.connect(Some(RELEASE_LIMIT))?, release)
    }

    /// Runs `command` only while `lock`'s token holds the lock, checked and run by
    /// the server in one step, on a connection of its own (answered within 2 s): the
    /// command's reply as `T`, or [`Error::Fenced`] (and the lock lost at once). The
    /// keys, replies and errors of [`LockCommands::guard`](crate::LockCommands::guard).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{BlockingLockClient, Wait};
    ///
    /// # fn main() -> redis_lock_client::Result<()> {
    /// let locks = BlockingLockClient::new(redis::Client::open("redis://127.0.0.1:6390/").unwrap());
    /// if let Some(lock) = locks.acquire("{report:daily}", Duration::from_secs(30), Wait::No)? {
    ///     let out = "{report:daily}:out";
    ///     let () = locks.guard(&lock, &[out], redis::cmd("SET").arg(out).arg("rows 1-500"))?;
    ///     locks.release(&lock)?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn guard<T: FromRedisValue>(
        &self,
        lock: &Lock,
        keys: &[impl AsRef<[u8]>],
        command: &Cmd,
    ) -> Result<T> {
        let guard = Guard::new(lock, keys, command);
        reply_as(drive(&mut self.connect(Some(CONNECT_LIMIT))?, guard)?)
    }

    /// [`guard`](Self::guard) for a token of a lock held elsewhere, as
    /// [`LockClient::guard_token`](crate::LockClient::guard_token).
    pub fn guard_token<T: FromRedisValue>(
        &self,
        key: &str,
        token: i64,
        keys: &[impl AsRef<[u8]>],
        command: &Cmd,
    ) -> Result<T> {
        let guard = Guard::token(self.detect_backend()?, key, token, keys, command);
        reply_as(drive(&mut self.connect(Some(CONNECT_LIMIT))?, guard)?)
    }

    /// Who holds the lock at `key`; `None` if it is free.
    pub fn lock_info(&self, key: &str) -> Result<Option<LockInfo>> {
        let info = info(self.detect_backend()?, key);
        drive(&mut self.connect(Some(CONNECT_LIMIT))?, info)
    }

    /// Starts renewing `lock` from a thread with a connection of its own.
    pub fn renewer(&self, lock: &Lock) -> Renewer {
        Renewer::start(self.client.clone(), lock)
    }

    /// Takes the lock at `key` for `ttl`, waiting as `wait` says, and returns a
    /// guard that releases it when dropped. `None` if it is still busy when the wait
    /// ends.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{BlockingLockClient, Wait};
    ///
    /// # fn main() -> redis_lock_client::Result<()> {
    /// let locks = BlockingLockClient::new(redis::Client::open("redis://127.0.0.1:6390/").unwrap());
    /// if let Some(guard) = locks.lock_guard("cleanup", Duration::from_secs(10), Wait::No)? {
    ///     println!("token {}", guard.lock().token());
    /// } // released here
    /// # Ok(()) }
    /// ```
    pub fn lock_guard(
        &self,
        key: &str,
        ttl: Duration,
        wait: Wait,
    ) -> Result<Option<BlockingLockGuard>> {
        self.lock_guard_with(Request::new(key, ttl).wait(wait))
    }

    /// [`lock_guard`](Self::lock_guard) for any [`Request`].
    pub fn lock_guard_with(&self, request: Request) -> Result<Option<BlockingLockGuard>> {
        let lock = self.acquire_with(request)?;
        Ok(lock.map(|lock| BlockingLockGuard {
            locks: self.clone(),
            lock,
            released: false,
        }))
    }

    /// Runs `work` only if the lock at `key` is won within `wait`, renewing it
    /// from a thread while it runs, and releases it afterwards (also if `work`
    /// panics). `None` when it was still busy. `work` gets the lock: stamp writes
    /// with [`Lock::token`] and stop once [`Lock::is_lost`].
    pub fn run_locked<T>(
        &self,
        key: &str,
        ttl: Duration,
        wait: Wait,
        work: impl FnOnce(&Lock) -> T,
    ) -> Result<Option<Locked<T>>> {
        self.run_locked_with(Request::new(key, ttl).wait(wait), work)
    }

    /// [`run_locked`](Self::run_locked) for any [`Request`].
    pub fn run_locked_with<T>(
        &self,
        request: Request,
        work: impl FnOnce(&Lock) -> T,
    ) -> Result<Option<Locked<T>>> {
        let Some(lock) = self.acquire_with(request)? else {
            return Ok(None);
        };
        let renewer = self.renewer(&lock);
        let release = ReleaseOnUnwind {
            locks: self,
            lock: Some(lock.clone()),
        };
        let value = work(&lock);
        let held = !renewer.stop();
        release.disarm();
        let released = self.release(&lock);
        Ok(Some(Locked::new(value, held, released)))
    }
}

/// Releases a lock when the work panics.
struct ReleaseOnUnwind<'a> {
    locks: &'a BlockingLockClient,
    lock: Option<Lock>,
}

impl ReleaseOnUnwind<'_> {
    fn disarm(mut self) {
        self.lock = None;
    }
}

impl Drop for ReleaseOnUnwind<'_> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            let _ = self.locks.release(&lock);
        }
    }
}

/// A lock held through a [`BlockingLockClient`], released (on a connection of its
/// own, for at most a second) when the guard is dropped. A failed release leaves the
/// lock to its TTL.
#[derive(Debug)]
pub struct BlockingLockGuard {
    locks: BlockingLockClient,
    lock: Lock,
    released: bool,
}

impl BlockingLockGuard {
    /// The held lock.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Extends the lock to `ttl` from now; [`Error::LockLost`] if it is no longer held.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        if !self.locks.extend(&self.lock, ttl)? {
            return Err(Error::LockLost {
                key: self.lock.key.clone(),
            });
        }
        Ok(())
    }

    /// Releases now; `false` if the lock was no longer held by this owner.
    pub fn release(mut self) -> Result<bool> {
        self.released = true;
        self.locks.release(&self.lock)
    }
}

impl Drop for BlockingLockGuard {
    fn drop(&mut self) {
        if !self.released {
            // A failed release leaves the lock to its TTL, which is the safety net.
            let _ = self.locks.release(&self.lock);
        }
    }
}
