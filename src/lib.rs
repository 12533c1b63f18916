//! redis-lock: distributed-lock commands for Redis (LOCK.ACQUIRE, LOCK.RELEASE,
//! LOCK.EXTEND, LOCK.INFO), as a native module.
//!
//! The lock itself is the crate `redis_lock_core` (holdings, rules, hand-offs,
//! tokens, queues, argument parsing), plain Rust without the Redis API. This crate
//! is the glue that applies it in Redis, in layers that import only downwards
//! (ARCHITECTURE.md lists them, and `tests/layers.rs` checks it):
//! - `entry`: the load and what each kind of callback means;
//! - `commands`: one file per command;
//! - `waiting`: queues, hand-offs, timers, marks, take-backs, the rescan;
//! - `state`, `reply`, `propagate`, `keyspace`, `observe`, `fault`: the module's
//!   state, its replies, what a write tells replicas, the data type's bytes, INFO;
//! - `ffi`: the only code that calls the Redis C API, and the only `unsafe` code.

#![deny(unsafe_code)]

pub mod commands;
pub mod entry;
pub mod fault;
#[allow(unsafe_code)]
pub mod ffi;
pub mod keyspace;
pub mod observe;
pub mod propagate;
pub mod reply;
pub mod state;
pub mod waiting;

use redis_module::{redis_module, Context, RedisString, Status};

// The Redis allocator is only there inside redis-server; unit tests and fuzz targets
// use the system's.
#[cfg(not(any(test, fuzzing)))]
use redis_module::alloc::RedisAlloc as ModuleAllocator;
#[cfg(any(test, fuzzing))]
use std::alloc::System as ModuleAllocator;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    match entry::load(ffi::Ctx::of_load(ctx), &args) {
        Ok(()) => Status::Ok,
        Err(reason) => {
            ctx.log_warning(&format!("lock module: {reason}"));
            Status::Err
        }
    }
}

redis_module! {
    name: "lock",
    version: 1,
    allocator: (ModuleAllocator, ModuleAllocator),
    // The data type and the configs are registered by `entry::load` itself, configs
    // first: the macro would create the type before the configs, and ignore the
    // result of loading them (see `ffi::config`).
    data_types: [],
    init: init,
    commands: [],
}
