//! Client for the redis-lock module: distributed locks as Redis commands, with
//! fencing tokens and server-side FIFO waiting.
//!
//! - [`LockCommands`] (blocking) and [`AsyncLockCommands`] (tokio) add the lock
//!   commands to every redis-rs connection: plain, managed, pooled or cluster.
//! - A [`Lock`] knows its key, its owner (a fresh UUID v4 per acquisition unless you
//!   give one) and its fencing token. Stamp the guarded writes with the token.
//! - Guards release on drop; `run_locked` runs work only if the lock is won and
//!   always releases it; the async one renews the lock while the work runs and
//!   signals [`LockLost`] the moment it is gone. [`Renewer`] does the same for threads.
//! - A retried acquire is safe: the same owner gets the same token back, so the
//!   client retries on connection errors instead of giving up; when it does give
//!   up, it releases its fresh owner id, so no lock is left with an unknown owner.
//! - [`Request::durable`] waits for replicas to acknowledge a grant; [`Redlock`]
//!   holds one lock on a majority of independent servers.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::AsyncLockCommands;
//!
//! # async fn demo() -> redis_lock_client::Result<()> {
//! let client = redis::Client::open("redis://127.0.0.1:6390/").unwrap();
//! let mut con = client.get_connection_manager().await.unwrap();
//! let outcome = con
//!     .run_locked("report:daily", Duration::from_secs(30), |lock, lost| async move {
//!         // … build the report; write it only with `lock.token()` as fence,
//!         // and stop early if `lost.is_lost()` …
//!         lock.token()
//!     })
//!     .await?;
//! match outcome {
//!     Some(done) if done.held_to_end => println!("ran with token {}", done.value),
//!     Some(_) => println!("lost the lock while running: writes were fenced off"),
//!     None => println!("another instance is running it"),
//! }
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

mod aio;
mod error;
mod lock;
mod redlock;
mod renew;
mod sync;

pub use aio::{AsyncClientLockExt, AsyncLockCommands, AsyncLockGuard};
pub use error::{Error, Result};
pub use lock::{Durable, Lock, LockInfo, Request, Retry};
pub use redlock::{MultiLock, Redlock};
pub use renew::{LockLost, Renewer};
pub use sync::{LockCommands, LockGuard, Locked};
