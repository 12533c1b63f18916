//! Client for the redis-lock module: distributed locks as Redis commands, with
//! fencing tokens, server-side FIFO waiting, and a lease the holder can trust.
//!
//! - [`LockCommands`] (blocking) and [`AsyncLockCommands`] (tokio) add the lock
//!   commands to every redis-rs connection: plain, managed, pooled or cluster.
//! - [`BlockingLockClient`] is the blocking one: every wait bounded by its timeout
//!   plus [`WAIT_MARGIN`], also when the server hangs.
//! - Every API speaks to the redis-lock module or, where no module can be loaded, to
//!   the `redislock` function library ([`Backend`]); the clients find out which.
//! - [`LockClient`] opens connections of its own from a [`Connector`] (a
//!   [`redis::Client`], a [`Sentinel`]-managed master, a cluster): the async way to
//!   wait for a lock, since a wait holds up every other command on its connection.
//! - A [`Lock`] knows its key, its owner (`host:pid:` and 16 random hex digits, fresh
//!   per acquisition from [`fresh_owner`], unless you give one), its fencing token,
//!   and its lease: it is safe to rely on until [`Lock::valid_until`], the send
//!   time of the last acknowledged acquire, renewal or extend plus the TTL (the
//!   shortest TTL of a write that may still reach the server after it), less a
//!   [`margin`] for clock drift. Every loss signal fires at the latest there,
//!   whatever the network does; [`LockLost::check`] and [`Lock::is_lost`] read the
//!   clock when called: check right before each write.
//! - [`AsyncRenewer`] and [`Renewer`] renew any lock at a third of its TTL, each
//!   attempt bounded by the lease; `run_locked` renews, hands the work a
//!   [`LockLost`] signal, and releases afterwards, also on panic and cancellation.
//! - A wait is a [`Wait`]: `No`, `For(duration)` (rounded up to whole milliseconds)
//!   or `Forever`.
//! - Fenced writes: `guard(&lock, keys, command)` ([`LockCommands::guard`], and on
//!   every API) runs a command only while the lock's token holds the lock, checked
//!   and run by the server in one step; a refusal is [`Error::Fenced`] and loses the
//!   lock at once. The [`postgres`] module (feature `postgres`) fences a write to
//!   PostgreSQL in the caller's transaction.
//! - [`Request::durable`] waits for replicas to acknowledge a grant; [`Redlock`]
//!   holds one lock on a majority of independent servers.
//! - Leader election with terms that fence: [`Election`] (`campaign`, `leader`,
//!   `observe`, `run_while_leader`), docs/leaders.md.
//! - Acquires, renewal failures, losses and releases are logged as `tracing` events.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{LockClient, Wait};
//!
//! # async fn demo() -> redis_lock_client::Result<()> {
//! let locks = LockClient::new(redis::Client::open("redis://127.0.0.1:6390/").unwrap());
//! let outcome = locks
//!     .run_locked("report:daily", Duration::from_secs(30), Wait::No, |lock, lost| async move {
//!         tokio::select! {
//!             _ = lost.lost() => None, // stop: the lease ran out or the lock is gone
//!             token = async { /* build the report, fenced with the token */ lock.token() } => Some(token),
//!         }
//!     })
//!     .await?;
//! match outcome {
//!     Some(done) if done.held_to_end => println!("ran with token {:?}", done.value),
//!     Some(_) => println!("lost the lock while running: writes were fenced off"),
//!     None => println!("another instance is running it"),
//! }
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod async_commands;
mod backend;
mod blocking_client;
mod commands;
mod connector;
mod drive;
mod election;
mod error;
mod held;
mod info;
mod lease;
mod limits;
mod lock;
mod lock_client;
mod machine;
mod redlock;
mod request;
mod sentinel;
mod wait;

pub use async_commands::AsyncLockCommands;
pub use backend::{function_load, library_script, Backend, LIBRARY_SOURCE};
pub use blocking_client::{BlockingLockClient, BlockingLockGuard};
pub use commands::{LockCommands, LockGuard};
pub use connector::Connector;
pub use election::{Election, Leader, Leadership, Observer};
pub use error::{Error, Result};
pub use held::fence as postgres;
pub use held::guard::AsyncLockGuard;
pub use held::renew::{AsyncRenewer, Renewer, STOP_LIMIT};
pub use held::run::Locked;
pub use info::{Holder, LockInfo, Mode, Owner, Waiter};
pub use lease::{margin, LockLost, LossCause};
pub use limits::{MAX_MILLIS, MAX_PERMITS, WAIT_MARGIN};
pub use lock::Lock;
pub use lock_client::LockClient;
pub use redis_lock_core::protocol::{
    is_library_queue_key, LIBRARY_VERSION, LIBRARY_VERSIONS, MIN_LIBRARY_VERSION,
};
pub use redlock::{MultiLock, Redlock};
pub use request::{fresh_owner, Durable, Request, Retry};
pub use sentinel::Sentinel;
pub use wait::Wait;

/// The examples of docs/rust-client.md, compiled as doctests so the page cannot drift
/// from the crate.
#[cfg(doctest)]
#[doc = include_str!("../../docs/rust-client.md")]
struct RustClientPage;

/// The Rust example of docs/leaders.md, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../docs/leaders.md")]
struct LeadersPage;
