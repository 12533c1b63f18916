//! The module's C entry points and their registration: every function Redis calls
//! into the module, in one place. Each turns the raw pointers it gets into the safe
//! types of `ffi`, runs the glue's code with panics caught (a panic unwinding into
//! Redis's C code would abort the server), and answers Redis. This is the only part
//! of `ffi` that knows the glue; the rest are wrappers with generic payloads.
//!
//! - Commands: `RedisModule_CreateCommand` and `RedisModule_SetCommandInfo` (key
//!   specs; Redis 7.0+). The crate's `#[command]` macro is not used: it also calls
//!   `RedisModule_SetCommandACLCategories`, which 7.0 lacks, and the module would
//!   then refuse to load there.
//! - The `redislock` data type: RDB, AOF, digest, memory, free and unlink callbacks.
//! - Blocked clients (replies, `CLIENT UNBLOCK`, disconnects), timers, keyspace and
//!   server events (expirations, evictions, flushes, SWAPDB, CONFIG SET), `INFO`.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use redis_module::{native_types::RedisType, raw};

use super::block::{take_payload, BlockCallbacks, Blocked};
use super::config;
use super::datatype::{self, AofRewrite, Digest, ModuleIo};
use super::{call, guarded, Argv, Ctx, RString, ERR, OK};
use crate::blocking::{self, Outcome, TimerJob};
use crate::commands::{KeyAccess, Reply, COMMANDS, COMMAND_COUNT};
use crate::{keyspace, observe, removals, state};
use redis_lock_core::Lock;

// --- loading -------------------------------------------------------------------

/// The module's load: checks the server, loads the configs and then the load
/// arguments, and only then registers the data type and the rest. `Err` logs its
/// reason and refuses the load; Redis then unloads the module whole (a refusal after
/// the data type exists would go through Redis's post-load unload, which cannot
/// unload a module with a data type and crashes on 7.2+).
pub fn load(ctx: &redis_module::Context, args: &[&[u8]]) -> Result<(), String> {
    let missing = super::missing_required_apis();
    if !missing.is_empty() {
        return Err(format!(
            "needs Redis 7.0 or newer; this server lacks {}",
            missing.join(", ")
        ));
    }
    // SAFETY: the context Redis passed to the module's OnLoad (the crate's `Context`
    // wraps it for the call), used during it.
    let ctx = unsafe { Ctx::from_raw(ctx.ctx) };
    config::register_and_load::<LockSettings>(ctx)?;
    for (setting, value) in state::parse_load_args(args)? {
        setting
            .value
            .store(value, std::sync::atomic::Ordering::Relaxed);
    }
    super::log_panics();
    LOCK_TYPE
        .create_data_type(ctx.raw())
        .map_err(|reason| format!("could not create the data type: {reason}"))?;
    datatype::set_lock_type(
        LOCK_TYPE
            .raw_type
            .try_borrow()
            .map_or(ptr::null_mut(), |t| *t),
    );
    datatype::set_module_options(ctx);
    register_commands(ctx)?;
    let events = (raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED) as u32;
    let registered = super::init_module_ctx(ctx)
        && call!(RedisModule_RegisterInfoFunc(ctx.raw(), Some(info)) else ERR) == OK
        // Expirations and evictions only: Redis builds a context for a subscriber on
        // every event of its classes, so DEL, SET and the rest do not pay.
        && ctx.subscribe_keyspace(events, Some(keyspace_event))
        && ctx.subscribe_server_event(raw::REDISMODULE_EVENT_FLUSHDB, Some(flushed))
        && ctx.subscribe_server_event(raw::REDISMODULE_EVENT_SWAPDB, Some(swapped))
        && ctx.subscribe_server_event(raw::REDISMODULE_EVENT_LOADING, Some(loading))
        && ctx.subscribe_server_event(raw::REDISMODULE_EVENT_CONFIG, Some(config_changed))
        && super::role::subscribe(ctx);
    if !registered {
        return Err("could not register the module's callbacks".into());
    }
    warn_if_locks_can_be_evicted(ctx);
    Ok(())
}

/// The `lock.*` configs, as `ffi::config` registers them.
struct LockSettings;

impl config::Settings for LockSettings {
    const COUNT: usize = state::SETTINGS.len();

    fn name(index: usize) -> &'static str {
        state::SETTINGS.get(index).map_or("", |s| s.name)
    }

    fn show(index: usize) -> String {
        state::SETTINGS.get(index).map_or(String::new(), |s| {
            s.value
                .load(std::sync::atomic::Ordering::Relaxed)
                .to_string()
        })
    }

    fn set(index: usize, value: &[u8]) -> Result<(), String> {
        state::SETTINGS
            .get(index)
            .ok_or_else(|| "unknown config".to_string())?
            .set(value)
    }
}

// --- commands ------------------------------------------------------------------

/// The C entry point of `COMMANDS[I]`: runs its handler, turning a panic into an error
/// reply instead of an aborted server, then sends the one reply.
extern "C" fn command<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    // SAFETY: Redis passes `argc` valid argument strings that live for the call.
    let args = unsafe { Argv::new(argv, argc) };
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
const COMMAND_ENTRIES: [raw::RedisModuleCmdFunc; COMMAND_COUNT] = [
    Some(command::<0>),
    Some(command::<1>),
    Some(command::<2>),
    Some(command::<3>),
    Some(command::<4>),
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
fn register_commands(ctx: Ctx) -> Result<(), String> {
    for (command, entry) in COMMANDS.iter().zip(COMMAND_ENTRIES) {
        let name = command.name.to_string_lossy();
        let created = call!(RedisModule_CreateCommand(
            ctx.raw(),
            command.name.as_ptr(),
            entry,
            command.flags.as_ptr(),
            1,
            1,
            1,
        ) else ERR);
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
        if call!(RedisModule_SetCommandInfo(handle, &info) else ERR) != OK {
            return Err(format!("could not set the key spec of {name}"));
        }
        // Redis 7.0 has no way for a module to put its commands in ACL categories;
        // 7.2 and later do, and then `-@admin` also denies LOCK.APPLY.
        // SAFETY: reading a function pointer that Redis filled in at load time.
        if unsafe { raw::RedisModule_SetCommandACLCategories }.is_some() {
            let categories = command.acl_categories.as_ptr();
            if call!(RedisModule_SetCommandACLCategories(handle, categories) else ERR) != OK {
                super::log_warning(&format!(
                    "lock module: could not set the ACL categories of {name}"
                ));
            }
        }
    }
    Ok(())
}

// --- the data type ---------------------------------------------------------------

/// The registered type; `TYPE key` answers its 9-character name.
pub static LOCK_TYPE: RedisType = RedisType::new(
    keyspace::TYPE_NAME,
    keyspace::ENCODING_VERSION,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: Some(aux_load),
        aux_save: Some(aux_save),
        aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as c_int,
        free_effort: None,
        unlink: None,
        // No copy callback: COPY of a lock is refused ("not supported for this module
        // key"). A copy would be a second live holding of the same owner and token,
        // at a key whose earlier holders may have had greater tokens.
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
        aux_save2: None,
    },
);

/// # Safety
/// `value` is null or a value of our type, which is always a `Box<Lock>`.
unsafe fn as_lock<'a>(value: *const c_void) -> Option<&'a Lock> {
    // SAFETY: as the caller promises.
    unsafe { value.cast::<Lock>().as_ref() }
}

extern "C" fn rdb_load(io: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    // A panic loads nothing: Redis answers RESTORE with `Bad data format`.
    guarded(ptr::null_mut(), || {
        // SAFETY: the stream Redis passed to this callback.
        let io = unsafe { ModuleIo::from_raw(io) };
        keyspace::load(&io, encver).map_or(ptr::null_mut(), |lock| {
            if lock.next_lapse().is_some() {
                if let Some((db, key)) = io.key() {
                    blocking::loaded(db, key);
                }
            }
            Box::into_raw(Box::new(lock)).cast::<c_void>()
        })
    })
}

extern "C" fn rdb_save(io: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || {
        // SAFETY: the stream and a value of our type, as Redis passes them.
        let (io, lock) = unsafe { (ModuleIo::from_raw(io), as_lock(value)) };
        if let Some(lock) = lock {
            keyspace::save(&io, lock);
        }
    })
}

extern "C" fn aof_rewrite(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guarded((), || {
        // SAFETY: a value of our type, as Redis passes it.
        let (Some(lock), Some(key)) = (unsafe { as_lock(value) }, RString::from_ptr(key)) else {
            return;
        };
        // SAFETY: the AOF and key Redis passed to this callback.
        let aof = unsafe { AofRewrite::from_raw(io, key) };
        keyspace::rewrite(&aof, lock);
    })
}

extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: a value of our type, as Redis passes it.
    guarded(0, || unsafe { as_lock(value) }.map_or(0, keyspace::memory))
}

extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || {
        // SAFETY: the digest and a value of our type, as Redis passes them.
        let (md, lock) = unsafe { (Digest::from_raw(md), as_lock(value)) };
        if let Some(lock) = lock {
            keyspace::digest(&md, lock);
        }
    })
}

extern "C" fn free(value: *mut c_void) {
    // A panic while dropping leaks the value: better than an aborted server.
    // SAFETY: every value of our type was made by `Box::into_raw(Box<Lock>)`, and
    // Redis frees each exactly once.
    guarded((), || drop(unsafe { take_payload::<Lock>(value) }))
}

/// Redis is removing a lock from the keyspace: DEL, UNLINK, RENAME, MOVE, expiry,
/// eviction, an overwrite, or a release (not FLUSHALL, which has its own event).
extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, value: *const c_void) {
    guarded((), || {
        let key = call!(RedisModule_GetKeyNameFromOptCtx(ctx) else ptr::null());
        let db = call!(RedisModule_GetDbIdFromOptCtx(ctx) else 0);
        // SAFETY: a value of our type, as Redis passes it.
        let lock = unsafe { as_lock(value) };
        if let Some(key) = RString::from_ptr(key.cast_mut()) {
            keyspace::unlinked(db, key, lock);
        }
    })
}

extern "C" fn aux_save(io: *mut raw::RedisModuleIO, when: c_int) {
    guarded((), || {
        if when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            // SAFETY: the stream Redis passed to this callback.
            unsafe { ModuleIo::from_raw(io) }.save_signed(keyspace::aux_value());
        }
    })
}

extern "C" fn aux_load(io: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    guarded(ERR, || {
        // SAFETY: the stream Redis passed to this callback.
        let io = unsafe { ModuleIo::from_raw(io) };
        let ok =
            when == raw::REDISMODULE_AUX_BEFORE_RDB as c_int && keyspace::aux_load(&io, encver);
        if ok {
            OK
        } else {
            ERR
        }
    })
}

// --- blocked clients and timers ---------------------------------------------------

/// What every waiter is blocked with: its answers are `Outcome`s.
const WAITER: BlockCallbacks = BlockCallbacks {
    reply: Some(reply),
    timeout: Some(timeout),
    free: Some(free_outcome),
    disconnect: Some(disconnected),
};

/// Blocks the calling client as a waiter (see `crate::blocking`).
pub fn block(ctx: Ctx) -> Option<Blocked> {
    ctx.block_with(WAITER)
}

/// Runs `job` after `delay_ms` (see `crate::blocking`); returns the timer id.
pub fn start_timer(ctx: Ctx, delay_ms: i64, job: TimerJob) -> Option<u64> {
    ctx.start_timer_with(delay_ms, job, Some(timer_fired))
}

/// Cancels a timer that has not fired yet.
pub fn stop_timer(ctx: Ctx, id: u64) {
    ctx.stop_timer_with::<TimerJob>(id);
}

extern "C" fn reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || blocking::delivered(ctx.blocked_handle()));
    // SAFETY: every waiter's answer is an `Outcome` (`Blocked::answer` in blocking).
    match unsafe { ctx.blocked_payload::<Outcome>() } {
        Some(Outcome::Token(token)) => ctx.reply_integer(*token),
        Some(Outcome::Error(text)) => ctx.reply_error(text),
        Some(Outcome::TimedOut) | None => ctx.reply_null(),
    }
    OK
}

/// Redis times out no waiter itself (they block without a Redis timeout; the module
/// keeps their deadlines): this runs for `CLIENT UNBLOCK … TIMEOUT`, whose reply is
/// null. A waiter the module had already answered with a grant may get here on
/// Redis 7.2 and later, which then drop the grant's reply: the grant is taken back.
extern "C" fn timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    let handle = ctx.blocked_handle();
    let was_waiting = guarded(false, || blocking::left(ctx, handle));
    ctx.reply_null();
    // Redis frees the handle only once the module unblocks it, also after a timeout;
    // the client is detached by then, so no second reply is sent. One already
    // answered was unblocked then: a second unblock would free it twice.
    if was_waiting {
        handle.release();
    }
    OK
}

extern "C" fn disconnected(ctx: *mut raw::RedisModuleCtx, bc: *mut raw::RedisModuleBlockedClient) {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    let handle = Blocked::from_ptr(bc);
    // On a panic, leaking the handle is better than freeing it twice.
    if guarded(false, || blocking::left(ctx, handle)) {
        // Redis frees a handle blocked with RedisModule_BlockClient only when the
        // module unblocks it, also after a disconnect; without a reply to send.
        handle.release();
    }
}

extern "C" fn free_outcome(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: the only payload a waiter is answered with is an `Outcome`.
    guarded((), || drop(unsafe { take_payload::<Outcome>(data) }));
}

extern "C" fn timer_fired(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: every timer's payload is a `TimerJob` (`start_timer`); Redis hands it
    // back exactly once, here or to `stop_timer`.
    let Some(job) = (unsafe { take_payload::<TimerJob>(data) }) else {
        return;
    };
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || blocking::timer_fired(ctx, *job));
}

// --- events ----------------------------------------------------------------------

extern "C" fn keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    if event.is_null() {
        return OK;
    }
    // SAFETY: Redis passes the event name as a NUL-terminated string.
    let event = unsafe { CStr::from_ptr(event) }.to_bytes();
    let Some(key) = RString::from_ptr(key) else {
        return OK;
    };
    // SAFETY: the context Redis passed to this call, used during it. Redis selects
    // the event's database in it.
    let db = unsafe { Ctx::from_raw(ctx) }.selected_db();
    guarded((), || removals::keyspace_event(db, event, key));
    OK
}

extern "C" fn flushed(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: the flush event passes a RedisModuleFlushInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }) else {
        return;
    };
    // dbnum is -1 for FLUSHALL.
    let db = (info.dbnum >= 0).then_some(info.dbnum);
    guarded((), || blocking::flushed(db));
}

extern "C" fn swapped(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    _subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: the swapdb event passes a RedisModuleSwapDbInfo.
    let Some(info) = (unsafe { data.cast::<raw::RedisModuleSwapDbInfo>().as_ref() }) else {
        return;
    };
    let (first, second) = (info.dbnum_first, info.dbnum_second);
    // SAFETY: the context Redis passed to this callback, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || {
        blocking::flushed(Some(first));
        blocking::flushed(Some(second));
        // The lapse timers watch keys by database: the swapped ones look anew.
        if !ctx.is_replica() {
            crate::rescan::start(ctx);
        }
    });
}

/// The end of loading the RDB or AOF (at start or `DEBUG RELOAD`; a replica's full
/// synchronisation too, which leaves lapses to its master): watch the lapses of
/// the loaded locks.
extern "C" fn loading(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_LOADING_ENDED {
        return;
    }
    // SAFETY: the context Redis passed to this callback, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    guarded((), || {
        if !ctx.is_replica() {
            crate::rescan::start(ctx);
        }
    });
}

/// Logs the eviction warning if the server's `maxmemory-policy` can evict locks.
fn warn_if_locks_can_be_evicted(ctx: Ctx) {
    if let Some(warning) = ctx
        .config_get(c"maxmemory-policy")
        .and_then(|policy| observe::eviction_warning(&policy))
    {
        super::log_warning(&warning);
    }
}

extern "C" fn config_changed(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_CONFIG_CHANGE {
        return;
    }
    // SAFETY: the config event passes a RedisModuleConfigChange.
    let Some(change) = (unsafe { data.cast::<raw::RedisModuleConfigChange>().as_ref() }) else {
        return;
    };
    if change.config_names.is_null() {
        return;
    }
    // SAFETY: Redis passes `num_changes` NUL-terminated names.
    let names =
        unsafe { std::slice::from_raw_parts(change.config_names, change.num_changes as usize) };
    let policy_changed = names.iter().any(|&name| {
        // SAFETY: as above.
        !name.is_null() && unsafe { CStr::from_ptr(name) }.to_bytes() == b"maxmemory-policy"
    });
    if policy_changed {
        // SAFETY: the context Redis passed to this call, used during it.
        let ctx = unsafe { Ctx::from_raw(ctx) };
        guarded((), || warn_if_locks_can_be_evicted(ctx));
    }
}

/// The `INFO lock` section (and `INFO everything`).
extern "C" fn info(info_ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    guarded((), || {
        crate::fault::check_info();
        // A null name makes the section's name the module's: `# lock`, shown by
        // `INFO lock`.
        call!(RedisModule_InfoAddSection(info_ctx, ptr::null()) else ERR);
        for (name, value) in observe::info_fields() {
            // Fields are prefixed with the module name by Redis: `lock_<name>`.
            call!(RedisModule_InfoAddFieldLongLong(info_ctx, name.as_ptr(), value) else ERR);
        }
    })
}
