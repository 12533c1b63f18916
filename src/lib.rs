//! redis-lock: distributed-lock commands for Redis (LOCK.ACQUIRE, LOCK.RELEASE,
//! LOCK.EXTEND, LOCK.INFO), as a native module.
//!
//! Layout: the lock itself is the crate `redis_lock_core` (holdings, rules,
//! hand-offs, tokens, queues, argument parsing), plain Rust without the Redis API.
//! This crate is the glue that applies it in Redis: `commands` (one file per
//! command), `blocking` (waiters and timers), `keyspace` (the data type's meaning),
//! `propagate` (replication and keyspace events), `events` (locks leaving the
//! keyspace), `observe` (INFO and warnings), `state` (settings and counters); `ffi`
//! is the only code that calls the Redis C API.

pub mod blocking;
pub mod commands;
pub mod fault;
pub mod ffi;
pub mod keyspace;
pub mod observe;
pub mod propagate;
pub mod removals;
pub mod rescan;
pub mod state;

use redis_module::{redis_module, Context, RedisString, Status};

// The Redis allocator is only there inside redis-server; unit tests and fuzz targets
// use the system's.
#[cfg(not(any(test, fuzzing)))]
use redis_module::alloc::RedisAlloc as ModuleAllocator;
#[cfg(any(test, fuzzing))]
use std::alloc::System as ModuleAllocator;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
    match ffi::entry::load(ctx, &args) {
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
    // The data type and the configs are registered by `init` itself, configs first:
    // the macro would create the type before the configs, and ignore the result of
    // loading them (see `ffi::config`).
    data_types: [],
    init: init,
    commands: [],
}
