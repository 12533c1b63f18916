//! [`LockCommands`]: the blocking API on any [`redis::ConnectionLike`]: a plain
//! connection, a pooled one, a cluster connection, or a [`redis::Client`] (a
//! connection per command, so a wait there has a connection of its own).

use std::time::Duration;

use redis::{Cmd, ConnectionLike, FromRedisValue};

use crate::backend::Backend;
use crate::drive::blocking::{drive, Borrowed};
use crate::error::{Error, Result};
use crate::held::run::Locked;
use crate::info::LockInfo;
use crate::lock::Lock;
use crate::machine::{info, reply_as, Acquire, Detect, Extend, Guard, Release};
use crate::request::Request;
use crate::wait::Wait;

/// The lock commands, for every blocking connection. Import the trait and call them
/// on the connection, as with [`redis::Commands`].
///
/// A blocking connection is used by one thread at a time, so a wait on it holds up
/// only its caller. Its read timeout must be longer than the wait (a plain
/// connection has none unless set); otherwise the acquire fails with
/// [`Error::ResponseTimeout`] and withdraws the request. That read timeout is also
/// the only bound of the wait when the server hangs: a
/// [`BlockingLockClient`](crate::BlockingLockClient) sets it for every wait.
///
/// These methods speak to the module unless told otherwise: a [`Request::backend`],
/// [`lock_info_with`](Self::lock_info_with); [`detect_backend`](Self::detect_backend)
/// asks the server what it offers.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{LockCommands, Wait};
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// let mut con = client.get_connection().unwrap();
/// if let Some(lock) = con.acquire("report:daily", Duration::from_secs(30), Wait::For(Duration::from_secs(5)))? {
///     println!("holding {} with fencing token {}", lock.key(), lock.token());
///     con.release(&lock)?;
/// }
/// # Ok(()) }
/// ```
pub trait LockCommands: ConnectionLike + Sized {
    /// Takes the lock at `key` for `ttl` if it is free; `None` if someone else holds it.
    fn try_acquire(&mut self, key: &str, ttl: Duration) -> Result<Option<Lock>> {
        self.acquire_with(Request::new(key, ttl))
    }

    /// Takes the lock at `key`, waiting in the server's FIFO queue as `wait` says;
    /// `None` if it is still busy when the wait ends.
    fn acquire(&mut self, key: &str, ttl: Duration, wait: Wait) -> Result<Option<Lock>> {
        self.acquire_with(Request::new(key, ttl).wait(wait))
    }

    /// Acquires as `request` says. On a connection error the same request is sent
    /// again (same owner): the server then answers with the token the first try got,
    /// if it got one. A request that cannot be answered is withdrawn (its fresh
    /// owner released on the same connection, after it).
    fn acquire_with(&mut self, request: Request) -> Result<Option<Lock>> {
        drive(
            &mut Borrowed(self),
            Acquire::on_callers_connection(request)?,
        )
    }

    /// Sets the remaining TTL of `lock` to `ttl` and moves its lease; `false` if it
    /// is no longer held by this owner (it is then never re-created, and the lock
    /// reports itself lost).
    fn extend(&mut self, lock: &Lock, ttl: Duration) -> Result<bool> {
        drive(&mut Borrowed(self), Extend::new(lock, ttl))
    }

    /// Releases `lock`; `false` if it was no longer held by this owner.
    fn release(&mut self, lock: &Lock) -> Result<bool> {
        drive(&mut Borrowed(self), Release::new(lock))
    }

    /// Runs `command` only while `lock`'s token holds the lock: the server checks the
    /// token and runs the command in one step (`LOCK.GUARD` on the module,
    /// `lock_guard` on the library), so no lapse, release or grant to another holder
    /// comes between them. The reply is the command's, as `T` (`()`, `String`,
    /// `Option<String>`, `i64`, `redis::Value` …).
    ///
    /// `keys` are every key the command touches. The library declares them to the
    /// server (Cluster routing, ACL key patterns) and refuses a command that touches
    /// a key not declared; the module finds them itself, but name them on every
    /// backend, so the code runs on each. In a Cluster they share the lock key's
    /// hash slot: hash tags, `{job:1}` for the lock, `{job:1}:out` for the data
    /// ([`Error::CrossSlot`] otherwise).
    ///
    /// - The token no longer holds the lock (it lapsed, was released or deleted,
    ///   another holder has it): nothing runs, [`Error::Fenced`], and the lock is
    ///   lost at once (its loss signal fires, cause
    ///   [`LossCause::Fenced`](crate::LossCause::Fenced)): stop the work.
    /// - A lock this client knows is lost (its lease ran out, it was released) is
    ///   refused before anything is sent: [`Error::LockLost`].
    /// - The command's own error reply, and the guard's refusals (`NOPERM`, a
    ///   command a script may not run, one on the lock key): [`Error::Server`].
    /// - Sent once: after a lost connection ([`Error::Connection`]) the command may
    ///   or may not have run.
    ///
    /// It goes to the lock's backend ([`Lock::backend`]); a library loaded before
    /// guarded writes came is [`Error::LibraryWithoutGuard`].
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{Error, LockCommands};
    ///
    /// # fn main() -> redis_lock_client::Result<()> {
    /// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
    /// if let Some(lock) = con.try_acquire("{report:daily}", Duration::from_secs(30))? {
    ///     let out = "{report:daily}:out";
    ///     let () = con.guard(&lock, &[out], redis::cmd("SET").arg(out).arg("rows 1-500"))?;
    ///     let rows: i64 = con.guard(&lock, &[out], redis::cmd("STRLEN").arg(out))?;
    ///     con.release(&lock)?;
    /// }
    /// # Ok(()) }
    /// ```
    fn guard<T: FromRedisValue>(
        &mut self,
        lock: &Lock,
        keys: &[impl AsRef<[u8]>],
        command: &Cmd,
    ) -> Result<T> {
        reply_as(drive(&mut Borrowed(self), Guard::new(lock, keys, command))?)
    }

    /// Who holds the lock at `key`, its TTL, token and waiters; `None` if it is free.
    /// Asks the module; [`lock_info_with`](Self::lock_info_with) asks a backend.
    fn lock_info(&mut self, key: &str) -> Result<Option<LockInfo>> {
        self.lock_info_with(key, Backend::Module)
    }

    /// [`lock_info`](Self::lock_info) through `backend`.
    fn lock_info_with(&mut self, key: &str, backend: Backend) -> Result<Option<LockInfo>> {
        drive(&mut Borrowed(self), info(backend, key))
    }

    /// Which backend the server offers (`forced`: that one, checked): the module if
    /// loaded, else the `redislock` library, else the library as a script. Give it
    /// to [`Request::backend`] and [`lock_info_with`](Self::lock_info_with).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{LockCommands, Request};
    ///
    /// # fn main() -> redis_lock_client::Result<()> {
    /// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
    /// let backend = con.detect_backend(None)?;
    /// let lock = con.acquire_with(Request::new("job", Duration::from_secs(30)).backend(backend))?;
    /// # Ok(()) }
    /// ```
    fn detect_backend(&mut self, forced: Option<Backend>) -> Result<Backend> {
        drive(&mut Borrowed(self), Detect::new(forced))
    }

    /// Takes the lock at `key` (waiting as `wait` says) and returns a guard that
    /// releases it when dropped.
    fn lock_guard(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
    ) -> Result<Option<LockGuard<'_, Self>>> {
        self.lock_guard_with(Request::new(key, ttl).wait(wait))
    }

    /// [`lock_guard`](Self::lock_guard) for any [`Request`]: a backend, a mode, a
    /// given owner.
    fn lock_guard_with(&mut self, request: Request) -> Result<Option<LockGuard<'_, Self>>> {
        let lock = self.acquire_with(request)?;
        Ok(lock.map(|lock| LockGuard {
            con: self,
            lock,
            released: false,
        }))
    }

    /// Runs `work` only if the lock at `key` is won within `wait`, and releases it
    /// afterwards (also if `work` panics). `None` when the lock was still busy. A
    /// wait is bounded only by this connection's read timeout (see
    /// [`acquire`](Self::acquire)).
    ///
    /// `work` gets the lock (stamp its writes with [`Lock::token`], and stop once
    /// [`Lock::is_lost`]) and the connection. The lock is not renewed: pick a TTL
    /// longer than the work, or start a [`Renewer`](crate::Renewer).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{LockCommands, Wait};
    ///
    /// # fn main() -> redis_lock_client::Result<()> {
    /// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
    /// if let Some(done) = con.run_locked("cleanup", Duration::from_secs(60), Wait::No, |lock, _con| lock.token())? {
    ///     if done.released.is_err() {
    ///         eprintln!("the work ran, but the lock stays until its TTL");
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    fn run_locked<T>(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Wait,
        work: impl FnOnce(&Lock, &mut Self) -> T,
    ) -> Result<Option<Locked<T>>> {
        self.run_locked_with(Request::new(key, ttl).wait(wait), work)
    }

    /// [`run_locked`](Self::run_locked) for any [`Request`].
    fn run_locked_with<T>(
        &mut self,
        request: Request,
        work: impl FnOnce(&Lock, &mut Self) -> T,
    ) -> Result<Option<Locked<T>>> {
        let Some(guard) = self.lock_guard_with(request)? else {
            return Ok(None);
        };
        let value = work(&guard.lock, guard.con);
        let held = !guard.lock.is_lost();
        let released = guard.release();
        Ok(Some(Locked::new(value, held, released)))
    }
}

impl<C: ConnectionLike> LockCommands for C {}

/// A held lock that is released when the guard is dropped.
///
/// ```no_run
/// # use std::time::Duration;
/// use redis_lock_client::{LockCommands, Wait};
/// # fn main() -> redis_lock_client::Result<()> {
/// # let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// # let mut con = client.get_connection().unwrap();
/// if let Some(guard) = con.lock_guard("cleanup", Duration::from_secs(10), Wait::No)? {
///     println!("token {}", guard.lock().token());
/// } // released here
/// # Ok(()) }
/// ```
pub struct LockGuard<'a, C: ConnectionLike> {
    con: &'a mut C,
    lock: Lock,
    released: bool,
}

impl<C: ConnectionLike> LockGuard<'_, C> {
    /// The held lock.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// The connection, for the work done under the lock.
    pub fn connection(&mut self) -> &mut C {
        self.con
    }

    /// Extends the lock to `ttl` from now; [`Error::LockLost`] if it is no longer held.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        if !self.con.extend(&self.lock, ttl)? {
            return Err(Error::LockLost {
                key: self.lock.key.clone(),
            });
        }
        Ok(())
    }

    /// Releases now; `false` if the lock was no longer held by this owner.
    pub fn release(mut self) -> Result<bool> {
        self.released = true;
        self.con.release(&self.lock)
    }
}

impl<C: ConnectionLike> Drop for LockGuard<'_, C> {
    fn drop(&mut self) {
        if !self.released {
            // A failed release leaves the lock to its TTL, which is the safety net.
            let _ = self.con.release(&self.lock);
        }
    }
}
