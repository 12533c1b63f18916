//! The lock of redis-lock in plain Rust, apart from the module that puts it in Redis:
//! what a lock holds, the rules of acquire, release and extend, who of a queue gets
//! it on a hand-off, fencing tokens, the waiter queues, timer arithmetic, argument
//! parsing and counters. Nothing here knows about Redis (this crate does not depend
//! on the module API, so the compiler keeps it so); time comes in as an argument
//! (Unix milliseconds), and every rule is unit-tested without a server.

#![forbid(unsafe_code)]

pub mod args;
pub mod cluster;
pub mod guard;
pub mod handoff;
pub mod hashing;
pub mod holdings;
pub mod leader;
pub mod owner;
pub mod protocol;
pub mod queue;
pub mod rules;
pub mod shared;
pub mod stats;
pub mod store;
pub mod timers;
pub mod token;

pub use holdings::{Kind, Lock, Mode};
pub use rules::LockError;
pub use stats::Stats;
pub use token::TokenMint;
