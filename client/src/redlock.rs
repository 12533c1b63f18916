//! Redlock: one lock across N independent Redis masters, each with the module.
//!
//! A lock is held when a majority (N/2 + 1) of the servers granted it within its
//! validity: the TTL minus the time the acquire took and an allowance for clock
//! drift. Servers that are down or slow only count as refusals; each is given a short
//! timeout, so one stuck server cannot stall the acquire.
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

use crate::error::Result;
use crate::lock::Retry;
use crate::sync::LockCommands;
use crate::Lock;

/// A lock held on a majority of the Redlock servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiLock {
    key: String,
    owner: String,
    ttl: Duration,
    /// The token each server granted, `None` where it refused or did not answer.
    tokens: Vec<Option<i64>>,
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
    pub fn tokens(&self) -> &[Option<i64>] {
        &self.tokens
    }

    /// The highest token of the quorum: a fence only under the timing assumptions
    /// described in the module docs.
    pub fn fence(&self) -> i64 {
        self.tokens.iter().flatten().copied().max().unwrap_or(0)
    }

    /// Time left before the lock must be considered lost.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    fn on(&self, server: usize) -> Option<Lock> {
        let token = (*self.tokens.get(server)?)?;
        Some(Lock {
            key: self.key.clone(),
            owner: self.owner.clone(),
            token,
            ttl: self.ttl,
        })
    }
}

struct Server {
    client: Client,
    con: Option<Connection>,
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

    /// How long one server may take to answer before it counts as a refusal.
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

    /// Runs `f` on server `i`'s connection, connecting first if needed; a failure
    /// drops the connection so the next call reconnects.
    fn on_server<T>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut Connection) -> Result<T>,
    ) -> Option<T> {
        let timeout = self.timeout;
        let server = self.servers.get_mut(i)?;
        if server.con.is_none() {
            let con = server.client.get_connection_with_timeout(timeout).ok()?;
            con.set_read_timeout(Some(timeout)).ok()?;
            con.set_write_timeout(Some(timeout)).ok()?;
            server.con = Some(con);
        }
        let result = f(server.con.as_mut()?);
        if result.is_err() {
            server.con = None;
        }
        result.ok()
    }

    /// Tries once: the lock on a majority within its validity, or `None` (and
    /// whatever was granted is released).
    pub fn try_acquire(&mut self, key: &str, ttl: Duration) -> Result<Option<MultiLock>> {
        let owner = uuid::Uuid::new_v4().to_string();
        let started = Instant::now();
        let mut tokens = Vec::with_capacity(self.servers.len());
        for i in 0..self.servers.len() {
            let token = self.on_server(i, |con| {
                let request = crate::Request::new(key, ttl)
                    .owner(owner.clone())
                    .retry(Retry::NONE);
                con.acquire_with(request)
            });
            tokens.push(token.flatten().map(|lock| lock.token));
        }
        let drift = ttl.mul_f64(self.drift_factor) + Duration::from_millis(2);
        let used = started.elapsed() + drift;
        let lock = MultiLock {
            key: key.into(),
            owner,
            ttl,
            tokens,
            valid_until: started + ttl.saturating_sub(drift),
        };
        let granted = lock.tokens.iter().flatten().count();
        if granted >= self.quorum() && used < ttl {
            return Ok(Some(lock));
        }
        self.release(&lock);
        Ok(None)
    }

    /// Tries, and on failure tries again after a jittered pause, as often as the
    /// retry policy says.
    pub fn acquire(&mut self, key: &str, ttl: Duration) -> Result<Option<MultiLock>> {
        for attempt in 0..=self.retry.attempts {
            if let Some(lock) = self.try_acquire(key, ttl)? {
                return Ok(Some(lock));
            }
            if attempt < self.retry.attempts {
                // Jittered, so competing clients stop colliding.
                std::thread::sleep(self.retry.delay(attempt));
            }
        }
        Ok(None)
    }

    /// Releases the lock on every server that may hold it (also those that did not
    /// answer: their grant may have happened). Returns how many released it.
    pub fn release(&mut self, lock: &MultiLock) -> usize {
        (0..self.servers.len())
            .filter(|&i| {
                let mine = lock.on(i).unwrap_or_else(|| Lock {
                    key: lock.key.clone(),
                    owner: lock.owner.clone(),
                    token: 0,
                    ttl: lock.ttl,
                });
                self.on_server(i, |con| con.release(&mine)) == Some(true)
            })
            .count()
    }

    /// Extends the lock to `ttl` on the servers that hold it; true if a majority
    /// still did, within the new validity.
    pub fn extend(&mut self, lock: &mut MultiLock, ttl: Duration) -> bool {
        let started = Instant::now();
        let mut held = 0;
        for i in 0..self.servers.len() {
            let Some(mine) = lock.on(i) else { continue };
            if self.on_server(i, |con| con.extend(&mine, ttl)) == Some(true) {
                held += 1;
            } else if let Some(token) = lock.tokens.get_mut(i) {
                *token = None;
            }
        }
        let drift = ttl.mul_f64(self.drift_factor) + Duration::from_millis(2);
        lock.ttl = ttl;
        lock.valid_until = started + ttl.saturating_sub(drift);
        held >= self.quorum() && started.elapsed() + drift < ttl
    }
}
