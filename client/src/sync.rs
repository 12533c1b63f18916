//! The blocking API, on any [`redis::ConnectionLike`]: a plain connection, a pooled
//! one, a cluster connection, or a [`redis::Client`] (a connection per command).

use std::time::Duration;

use redis::ConnectionLike;

use crate::error::{Error, Result};
use crate::lock::{
    extend_command, info_command, parse_info, release_command, wait_replicas_command, Lock,
    LockInfo, Next, Request,
};

/// The lock commands, for every blocking connection. Import the trait and call them
/// on the connection, as with [`redis::Commands`].
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::LockCommands;
///
/// # fn main() -> redis_lock_client::Result<()> {
/// let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// let mut con = client.get_connection().unwrap();
/// if let Some(lock) = con.try_acquire("report:daily", Duration::from_secs(30))? {
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

    /// Takes the lock at `key`, waiting in the server (FIFO) up to `wait` for it to free
    /// (`Duration::ZERO`: no limit); `None` if the wait ran out.
    ///
    /// The wait holds up the connection: Redis answers nothing else sent on it until
    /// the wait ends. Wait on a connection of its own.
    fn acquire(&mut self, key: &str, ttl: Duration, wait: Duration) -> Result<Option<Lock>> {
        self.acquire_with(Request::new(key, ttl).wait(wait))
    }

    /// Acquires as `request` says. On a connection error the same request is sent
    /// again (same owner): the server then answers with the token the first try got,
    /// if it got one.
    fn acquire_with(&mut self, request: Request) -> Result<Option<Lock>> {
        let command = request.command();
        let mut attempt = 0;
        loop {
            match command.query::<Option<i64>>(self) {
                Ok(token) => {
                    let granted = request.granted(token);
                    let (Some(lock), Some(durable)) = (granted.clone(), request.durable) else {
                        return Ok(granted);
                    };
                    let acked: i64 = wait_replicas_command(&durable).query(self)?;
                    if acked >= i64::from(durable.replicas) {
                        return Ok(Some(lock));
                    }
                    self.release(&lock)?;
                    return Ok(None);
                }
                Err(error) => match request.after_failure(error, attempt) {
                    Next::Retry(delay) => {
                        std::thread::sleep(delay);
                        attempt += 1;
                    }
                    Next::Fail(error, withdraw) => {
                        if let Some(withdraw) = withdraw {
                            let _ = withdraw.query::<i64>(self);
                        }
                        return Err(error);
                    }
                },
            }
        }
    }

    /// Sets the remaining TTL of `lock` to `ttl`; `false` if it is no longer held by
    /// this owner (it is then never re-created).
    fn extend(&mut self, lock: &Lock, ttl: Duration) -> Result<bool> {
        let extended: i64 = extend_command(lock, ttl).query(self)?;
        Ok(extended == 1)
    }

    /// Releases `lock`; `false` if it was no longer held by this owner.
    fn release(&mut self, lock: &Lock) -> Result<bool> {
        let released: i64 = release_command(lock).query(self)?;
        Ok(released == 1)
    }

    /// Who holds the lock at `key`, its TTL, token and waiters; `None` if it is free.
    fn lock_info(&mut self, key: &str) -> Result<Option<LockInfo>> {
        parse_info(info_command(key).query(self)?)
    }

    /// Takes the lock at `key` (waiting up to `wait` if given) and returns a guard that
    /// releases it when dropped.
    fn lock_guard(
        &mut self,
        key: &str,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard<'_, Self>>> {
        let mut request = Request::new(key, ttl);
        if let Some(wait) = wait {
            request = request.wait(wait);
        }
        Ok(self.acquire_with(request)?.map(|lock| LockGuard {
            con: self,
            lock,
            released: false,
        }))
    }

    /// Runs `work` only if the lock at `key` is won, and always releases it
    /// afterwards (also if `work` panics). `None` when the lock was busy.
    ///
    /// `work` gets the lock (stamp its writes with [`Lock::token`]) and the connection.
    fn run_locked<T>(
        &mut self,
        key: &str,
        ttl: Duration,
        work: impl FnOnce(&Lock, &mut Self) -> T,
    ) -> Result<Option<Locked<T>>> {
        let Some(guard) = self.lock_guard(key, ttl, None)? else {
            return Ok(None);
        };
        let value = work(&guard.lock, guard.con);
        let held_to_end = guard.release()?;
        Ok(Some(Locked { value, held_to_end }))
    }
}

impl<C: ConnectionLike> LockCommands for C {}

/// What [`LockCommands::run_locked`] (and its async twin) report after the work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locked<T> {
    /// What the work returned.
    pub value: T,
    /// True if the lock was still held by this owner when the work ended; false if it
    /// expired or was deleted under it (its writes must have been fenced off).
    pub held_to_end: bool,
}

/// A held lock that is released when the guard is dropped.
///
/// ```no_run
/// # use std::time::Duration;
/// use redis_lock_client::LockCommands;
/// # fn main() -> redis_lock_client::Result<()> {
/// # let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
/// # let mut con = client.get_connection().unwrap();
/// if let Some(guard) = con.lock_guard("cleanup", Duration::from_secs(10), None)? {
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
        self.lock.ttl = ttl;
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
