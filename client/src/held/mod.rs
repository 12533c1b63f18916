//! A lock once it is held: where its extends and releases go, its renewal, its
//! guard, and the work run under it. Written once, on the drivers and the
//! machines, for every API above.
//!
//! - `path.rs`: [`LockPath`](path::LockPath), the one idea of where a held lock's
//!   extends and releases go on tokio: clones of the connection it was taken on, or
//!   connections of their own from a [`Connector`](crate::Connector).
//! - `renew.rs`: the renewers, [`AsyncRenewer`](renew::AsyncRenewer) on a path and
//!   the blocking [`Renewer`](renew::Renewer) on a thread of its own.
//! - `guard.rs`: [`AsyncLockGuard`](guard::AsyncLockGuard), released when dropped.
//! - `run.rs`: the work under a held lock (`run_locked`), and what it reports,
//!   [`Locked`](run::Locked).
//! - `fence.rs`: a held lock's fenced writes beyond Redis, in PostgreSQL (the
//!   crate's `postgres` module).

pub mod fence;
pub(crate) mod guard;
pub(crate) mod path;
pub(crate) mod renew;
pub(crate) mod run;
