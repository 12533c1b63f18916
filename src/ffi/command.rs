//! Registers the commands with Redis: the C entry points, flags, arity and key specs.
//!
//! Commands are created with `RedisModule_CreateCommand` and described with
//! `RedisModule_SetCommandInfo` (Redis 7.0+). The crate's `#[command]` macro is not
//! used: it also calls `RedisModule_SetCommandACLCategories`, which 7.0 lacks, and the
//! module would then refuse to load there.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use redis_module::raw;

use super::{call, Args, Ctx, OK};
use crate::commands::{KeyAccess, Reply, COMMANDS, COMMAND_COUNT};

/// The C entry point of `COMMANDS[I]`: runs its handler, turning a panic into an error
/// reply instead of an aborted server, then sends the one reply.
extern "C" fn entry<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let ctx = Ctx::new(ctx);
    // SAFETY: Redis passes `argc` valid argument strings that live for the call.
    let args = unsafe { Args::new(argv, argc) };
    let reply = match COMMANDS.get(I) {
        Some(command) => catch_unwind(AssertUnwindSafe(|| (command.handler)(ctx, &args)))
            .unwrap_or_else(|_| Err(Reply::error("ERR internal error in the lock module")))
            .unwrap_or_else(|reply| reply),
        None => Reply::error("ERR unknown lock command"),
    };
    reply.send(ctx);
    OK
}

// One entry per command: a command added to COMMANDS without one here fails to
// compile instead of silently not being registered.
const ENTRIES: [raw::RedisModuleCmdFunc; COMMAND_COUNT] = [
    Some(entry::<0>),
    Some(entry::<1>),
    Some(entry::<2>),
    Some(entry::<3>),
    Some(entry::<4>),
];

const COMMAND_INFO_VERSION: raw::RedisModuleCommandInfoVersion =
    raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };

/// One key, at argv[1]: the spec of every command here.
fn key_spec(access: KeyAccess) -> raw::RedisModuleCommandKeySpec {
    let flags = match access {
        KeyAccess::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        KeyAccess::ReadWrite => {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        }
        KeyAccess::Overwrite => raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE,
    };
    // SAFETY: an all-zero key spec is valid (null pointers, zero numbers).
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.flags = flags as u64;
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = 1;
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = 0;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    spec
}

/// Creates every command in `COMMANDS`; the error names the one that failed.
pub fn register(ctx: Ctx) -> Result<(), String> {
    for (command, entry) in COMMANDS.iter().zip(ENTRIES) {
        let name = command.name.to_string_lossy();
        let created = call!(RedisModule_CreateCommand(
            ctx.raw(),
            command.name.as_ptr(),
            entry,
            command.flags.as_ptr(),
            1,
            1,
            1,
        ) else super::ERR);
        if created != OK {
            return Err(format!("could not create command {name}"));
        }
        let handle =
            call!(RedisModule_GetCommand(ctx.raw(), command.name.as_ptr()) else ptr::null_mut());
        if handle.is_null() {
            return Err(format!("could not find command {name} after creating it"));
        }
        // The key-spec array ends with an all-zero entry.
        // SAFETY: as in `key_spec`.
        let mut specs = [key_spec(command.key_access), unsafe { std::mem::zeroed() }];
        // SAFETY: all-zero means "not given" for every pointer of the info.
        let mut info: raw::RedisModuleCommandInfo = unsafe { std::mem::zeroed() };
        info.version = &COMMAND_INFO_VERSION;
        info.summary = command.summary.as_ptr();
        info.since = c"0.1.0".as_ptr();
        info.complexity = c"O(1)".as_ptr();
        info.arity = command.arity;
        info.key_specs = specs.as_mut_ptr();
        // Redis copies everything it needs from `info` before returning.
        if call!(RedisModule_SetCommandInfo(handle, &info) else super::ERR) != OK {
            return Err(format!("could not set the key spec of {name}"));
        }
        // Redis 7.0 has no way for a module to put its commands in ACL categories;
        // 7.2 and later do, and then `-@admin` also denies LOCK.APPLY.
        if unsafe { raw::RedisModule_SetCommandACLCategories }.is_some() {
            let categories = command.acl_categories.as_ptr();
            if call!(RedisModule_SetCommandACLCategories(handle, categories) else super::ERR) != OK
            {
                redis_module::raw::redis_log(
                    ctx.raw(),
                    &format!("lock module: could not set the ACL categories of {name}"),
                );
            }
        }
    }
    Ok(())
}
