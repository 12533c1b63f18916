//! The two drivers: each runs a machine (`machine/`) to its result with I/O of its
//! own, blocking (`blocking.rs`, any `redis::ConnectionLike`) or on tokio
//! (`tokio.rs`, any `redis::aio::ConnectionLike`). A driver sends what a step says,
//! within the bound it names, sleeps when told, and hands the machine the reply; it
//! decides nothing about locks.

pub(crate) mod blocking;
pub(crate) mod tokio;
