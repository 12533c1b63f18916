//! Redlock: one lock across N independent Redis masters, each with the module.
//!
//! A lock is held when a majority (N/2 + 1) of the servers granted it within its
//! validity: the TTL minus the time the acquire took and an allowance for clock
//! drift. The servers are asked in parallel, each with a short timeout, so one stuck
//! server cannot stall the acquire. No majority because servers hold the lock for
//! someone else is "busy" (`Ok(None)`); no majority because servers failed (down,
//! refusing, without the module) is [`Error::NoQuorum`], with each server's cause.
//!
//! What it does and does not guarantee (see Martin Kleppmann's "How to do distributed
//! locking" and the Redis documentation's reply):
//! - It survives the loss of a minority of servers, where one Redis (even with a
//!   replica and failover) can lose a grant in a failover.
//! - Its safety rests on timing: bounded process pauses, network delays and clock
//!   drift. A holder paused past the validity still believes it holds the lock.
//!   Nothing in Redlock stops that holder's writes.
//! - Fencing across N servers: each server mints its own tokens, which increase per
//!   server, not across servers. [`MultiLock::fence`] is the highest token of the
//!   quorum. With this module's tokens (a server-wide counter with the clock as a
//!   floor) a later grant's fence is greater as long as the servers' clocks agree
//!   better than the time between the two grants; the same timing assumption as
//!   Redlock itself, not a guarantee. Where correctness matters, fence with a single
//!   server's token (a single Redis with replicas and `Request::durable`), or a
//!   consensus system.

use std::time::{Duration, Instant};

use redis::{Client, Connection};

use crate::commands::LockCommands;
use crate::error::{Error, Result};
use crate::limits::ttl_millis;
use crate::lock::Lock;
use crate::request::{fresh_owner, Request, Retry};

/// A lock held on a majority of the Redlock servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiLock {
    key: String,
    owner: String,
    ttl: Duration,
    /// The holding on each server, `None` where it refused or did not answer.
    locks: Vec<Option<Lock>>,
    /// When the lock stops being safe to rely on.
    valid_until: Instant,
}

impl MultiLock {
    /// The key locked on every server.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner id used on every server.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The token each server granted (`None`: not granted there), in server order.
    pub fn tokens(&self) -> Vec<Option<i64>> {
        self.locks
            .iter()
            .map(|l| l.as_ref().map(Lock::token))
            .collect()
    }

    /// The highest token of the quorum: a fence only under the timing assumptions
    /// described in the module docs.
    pub fn fence(&self) -> i64 {
        self.tokens().into_iter().flatten().max().unwrap_or(0)
    }

    /// Time left before the lock must be considered lost.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// The holding on `server`, or a stand-in with token 0 where none was granted
    /// (a release there still takes back a grant whose reply was lost).
    fn on(&self, server: usize) -> Lock {
        match self.locks.get(server) {
            Some(Some(lock)) => lock.clone(),
            _ => Lock::new(&self.key, &self.owner, 0, Instant::now(), self.ttl),
        }
    }
}

struct Server {
    client: Client,
    con: Option<Connection>,
}

impl Server {
    /// Runs `f` on this server's connection, connecting first if needed; a failure
    /// drops the connection so the next call reconnects.
    fn run<T>(
        &mut self,
        timeout: Duration,
        f: impl FnOnce(&mut Connection) -> Result<T>,
    ) -> Result<T> {
        if self.con.is_none() {
            let con = self.client.get_connection_with_timeout(timeout)?;
            con.set_read_timeout(Some(timeout))?;
            con.set_write_timeout(Some(timeout))?;
            self.con = Some(con);
        }
        let Some(con) = self.con.as_mut() else {
            return Err(Error::UnexpectedReply("no connection".into()));
        };
        let result = f(con);
        if result.is_err() {
            self.con = None;
        }
        result
    }

    fn address(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }
}

/// A lock manager over independent Redis masters (3 or 5, usually).
pub struct Redlock {
    servers: Vec<Server>,
    timeout: Duration,
    retry: Retry,
    /// Clock drift allowance: this fraction of the TTL, plus 2 ms.
    drift_factor: f64,
}

impl Redlock {
    /// A Redlock over `servers`, with a 50 ms timeout per server and three
    /// jittered retries.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::Redlock;
    ///
    /// # fn main() -> redis_lock_client::Result<()> {
    /// let servers = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"]
    ///     .map(|url| redis::Client::open(url).unwrap());
    /// let mut redlock = Redlock::new(servers.to_vec());
    /// if let Some(lock) = redlock.acquire("report:daily", Duration::from_secs(30))? {
    ///     // … work for less than lock.validity() …
    ///     redlock.release(&lock);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn new(servers: Vec<Client>) -> Self {
        Redlock {
            servers: servers
                .into_iter()
                .map(|client| Server { client, con: None })
                .collect(),
            timeout: Duration::from_millis(50),
            retry: Retry {
                attempts: 3,
                base_delay: Duration::from_millis(100),
            },
            drift_factor: 0.01,
        }
    }

    /// How long one server may take to answer before it counts as failed.
    pub fn server_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How often to try again when no majority was reached.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// How many servers must grant the lock.
    pub fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    /// Runs `f` on every server at once, one thread each; the answers in server order.
    fn on_every_server<T: Send>(
        &mut self,
        f: impl Fn(usize, &mut Connection) -> Result<T> + Sync,
    ) -> Vec<Result<T>> {
        let timeout = self.timeout;
        let f = &f;
        std::thread::scope(|scope| {
            let asks: Vec<_> = self
                .servers
                .iter_mut()
                .enumerate()
                .map(|(i, server)| scope.spawn(move || server.run(timeout, |con| f(i, con))))
                .collect();
            asks.into_iter()
                .map(|ask| {
                    ask.join().unwrap_or_else(|_| {
                        Err(Error::UnexpectedReply("a server's thread panicked".into()))
                    })
                })
                .collect()
        })
    }

    /// Tries once: the lock on a majority within its validity; `None` if servers
    /// hold it for someone else; [`Error::NoQuorum`] if too many servers failed or
    /// the acquire took longer than the TTL. Whatever was granted is released
    /// unless the lock is held.
    pub fn try_acquire(&mut self, key: &str, ttl: Duration) -> Result<Option<MultiLock>> {
        ttl_millis(ttl)?;
        let owner = fresh_owner();
        let started = Instant::now();
        let answers = self.on_every_server(|_, con| {
            let request = Request::new(key, ttl)
                .owner(owner.clone())
                .retry(Retry::NONE);
            con.acquire_with(request)
        });
        let drift = ttl.mul_f64(self.drift_factor) + Duration::from_millis(2);
        let mut locks = Vec::with_capacity(answers.len());
        let mut errors = Vec::new();
        for (server, answer) in self.servers.iter().zip(answers) {
            match answer {
                Ok(lock) => locks.push(lock),
                Err(error) => {
                    errors.push((server.address(), error));
                    locks.push(None);
                }
            }
        }
        let lock = MultiLock {
            key: key.into(),
            owner,
            ttl,
            locks,
            valid_until: started + ttl.saturating_sub(drift),
        };
        let granted = lock.locks.iter().flatten().count();
        if granted >= self.quorum() && Instant::now() < lock.valid_until {
            return Ok(Some(lock));
        }
        self.release(&lock);
        let failed_past_a_majority = errors.len() > self.servers.len() - self.quorum();
        if failed_past_a_majority || granted >= self.quorum() {
            return Err(Error::NoQuorum {
                key: key.into(),
                granted,
                needed: self.quorum(),
                errors,
            });
        }
        Ok(None)
    }

    /// Tries, and on failure (busy or no quorum) tries again after a jittered pause,
    /// as often as the retry policy says; the last try's answer.
    pub fn acquire(&mut self, key: &str, ttl: Duration) -> Result<Option<MultiLock>> {
        let mut attempt = 0;
        loop {
            let answer = self.try_acquire(key, ttl);
            let retryable = matches!(answer, Ok(None) | Err(Error::NoQuorum { .. }));
            if !retryable || attempt >= self.retry.attempts {
                return answer;
            }
            // Jittered, so competing clients stop colliding.
            std::thread::sleep(self.retry.delay(attempt));
            attempt += 1;
        }
    }

    /// Releases the lock on every server that may hold it (also those that did not
    /// answer: their grant may have happened). Returns how many released it.
    pub fn release(&mut self, lock: &MultiLock) -> usize {
        let released = self.on_every_server(|i, con| con.release(&lock.on(i)));
        released
            .into_iter()
            .filter(|r| matches!(r, Ok(true)))
            .count()
    }

    /// Extends the lock to `ttl` on the servers that hold it; true if a majority
    /// still did, within the new validity.
    pub fn extend(&mut self, lock: &mut MultiLock, ttl: Duration) -> bool {
        let started = Instant::now();
        let held = {
            let lock = &*lock;
            self.on_every_server(|i, con| match lock.locks.get(i) {
                Some(Some(mine)) => con.extend(mine, ttl),
                _ => Ok(false),
            })
        };
        for (slot, extended) in lock.locks.iter_mut().zip(&held) {
            if !matches!(extended, Ok(true)) {
                *slot = None;
            }
        }
        let drift = ttl.mul_f64(self.drift_factor) + Duration::from_millis(2);
        lock.ttl = ttl;
        lock.valid_until = started + ttl.saturating_sub(drift);
        let granted = lock.locks.iter().flatten().count();
        granted >= self.quorum() && Instant::now() < lock.valid_until
    }
}
