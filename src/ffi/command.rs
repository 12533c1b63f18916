//! Commands: their registration (`RedisModule_CreateCommand`, and
//! `RedisModule_SetCommandInfo` for the key spec, Redis 7.0+) and their C entry
//! points, monomorphised over the caller's table ([`Commands`]).
//!
//! The crate's `#[command]` macro is not used: it also calls
//! `RedisModule_SetCommandACLCategories`, which 7.0 lacks, and the module would then
//! refuse to load there.

use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use redis_module::raw;

use super::{call, log_warning, Argv, Ctx, ERR, OK};

/// How a command uses its key, for the key spec (cluster routing, ACL key patterns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAccess {
    /// Reads the key.
    Read,
    /// Reads the key and may update or delete it.
    ReadWrite,
    /// Replaces whatever is at the key.
    Overwrite,
}

/// A command as Redis sees it; its one key is at `argv[1]`.
pub struct Spec {
    pub name: &'static CStr,
    pub flags: &'static CStr,
    /// Redis arity: exact count, or negative for "at least".
    pub arity: i32,
    pub key_access: KeyAccess,
    /// ACL categories, set where Redis lets modules set them (7.2 and later).
    pub acl_categories: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// Its arguments after the command name, for `COMMAND DOCS` (and redis-cli's
    /// hints), as built-in commands declare theirs.
    pub params: &'static [Param],
    /// `(version, what changed)`, oldest first.
    pub history: &'static [(&'static CStr, &'static CStr)],
    /// Where a command this one runs starts (`LOCK.GUARD`'s inner command), whose
    /// keys are this command's keys too: declared by a second key spec, and found
    /// per call by Redis's own lookup (the flags must include `getkeys-api`).
    pub runs_command_at: Option<usize>,
}

/// One argument of a command, as `COMMAND DOCS` shows it.
pub struct Param {
    pub name: &'static CStr,
    pub kind: ParamKind,
    /// The word that introduces it (`WAIT` of `WAIT timeout`), if any.
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// It may repeat.
    pub multiple: bool,
    /// Its parts, for `OneOf` and `Block`.
    pub parts: &'static [Param],
}

/// What an argument is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    Key,
    String,
    Integer,
    UnixTime,
    /// A word alone (`SHARED`).
    PureToken,
    /// One of its parts.
    OneOf,
    /// Its parts together.
    Block,
}

impl Param {
    /// A required argument without a token.
    pub const fn new(name: &'static CStr, kind: ParamKind) -> Param {
        Param {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
            parts: &[],
        }
    }
}

/// The C form of `params`, with the arrays it points into kept in `arena` until
/// Redis copied them (at `SetCommandInfo`). Each array ends with an all-zero entry.
fn c_params(
    params: &[Param],
    arena: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    if params.is_empty() {
        return ptr::null_mut();
    }
    let mut out = Vec::with_capacity(params.len() + 1);
    for (index, param) in params.iter().enumerate() {
        let subargs = c_params(param.parts, arena);
        let kind = match param.kind {
            ParamKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
            ParamKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            ParamKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            ParamKind::UnixTime => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_UNIX_TIME,
            ParamKind::PureToken => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            ParamKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
            ParamKind::Block => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
        };
        let mut flags = 0;
        if param.optional {
            flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
        }
        if param.multiple {
            flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
        }
        // SAFETY: all-zero means "not given" for every pointer of an argument.
        let mut arg: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
        arg.name = param.name.as_ptr();
        arg.type_ = kind;
        // The one key is the command's first key spec; other arguments name none.
        arg.key_spec_index = if param.kind == ParamKind::Key && index == 0 {
            0
        } else {
            -1
        };
        arg.token = param.token.map_or(ptr::null(), CStr::as_ptr);
        arg.flags = flags as c_int;
        arg.subargs = subargs;
        out.push(arg);
    }
    // SAFETY: as above; the all-zero entry ends the array.
    out.push(unsafe { std::mem::zeroed() });
    let pointer = out.as_mut_ptr();
    // Moving the vector into the arena leaves its buffer where it is.
    arena.push(out);
    pointer
}

/// A table of commands: the caller's, run by index.
pub trait Commands: 'static {
    /// What a command answers; sent after it returns.
    type Reply;
    /// The commands, registered in this order (at most [`MAX_COMMANDS`]).
    const SPECS: &'static [Spec];
    /// Runs command `index`.
    fn run(index: usize, ctx: Ctx, args: &Argv) -> Self::Reply;
    /// The reply of a command that panicked.
    fn panicked() -> Self::Reply;
    /// Sends `reply`, the one reply of the call.
    fn send(ctx: Ctx, reply: Self::Reply);
}

/// Room for this many commands: one entry point each.
pub const MAX_COMMANDS: usize = 8;

/// The C entry point of command `I` of `C`: runs it, turning a panic into the
/// table's error reply instead of an aborted server, then sends the one reply.
extern "C" fn command<C: Commands, const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: the context Redis passed to this call, used during it.
    let ctx = unsafe { Ctx::from_raw(ctx) };
    // SAFETY: Redis passes `argc` valid argument strings that live for the call.
    let args = unsafe { Argv::new(argv, argc) };
    if let Some(from) = C::SPECS.get(I).and_then(|spec| spec.runs_command_at) {
        if call!(RedisModule_IsKeysPositionRequest(ctx.raw()) else 0) != 0 {
            let declared = catch_unwind(AssertUnwindSafe(|| declare_keys(ctx, &args, from)));
            return if declared.is_ok() { OK } else { ERR };
        }
    }
    let reply =
        catch_unwind(AssertUnwindSafe(|| C::run(I, ctx, &args))).unwrap_or_else(|_| C::panicked());
    if catch_unwind(AssertUnwindSafe(|| C::send(ctx, reply))).is_err() {
        ctx.reply_error("ERR internal error while replying");
    }
    OK
}

/// Answers Redis's question for the keys of a call (`getkeys-api`): the command's
/// own key at argv[1], then the keys of the command it runs from `from` on, with
/// the flags Redis gives them (`COMMAND GETKEYS`, Cluster routing and ACL key
/// patterns then see what the inner command sent alone would show).
fn declare_keys(ctx: Ctx, args: &Argv, from: usize) {
    let at = |position: usize, flags: i32| {
        if let Ok(position) = c_int::try_from(position) {
            call!(RedisModule_KeyAtPosWithFlags(ctx.raw(), position, flags) else ());
        }
    };
    if args.len() > 1 {
        let read = (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as i32;
        at(1, read);
    }
    for (position, flags) in ctx.command_keys(args, from).positions {
        if let Some(position) = position.checked_add(from) {
            at(position, flags);
        }
    }
}

fn entry_points<C: Commands>() -> [raw::RedisModuleCmdFunc; MAX_COMMANDS] {
    [
        Some(command::<C, 0>),
        Some(command::<C, 1>),
        Some(command::<C, 2>),
        Some(command::<C, 3>),
        Some(command::<C, 4>),
        Some(command::<C, 5>),
        Some(command::<C, 6>),
        Some(command::<C, 7>),
    ]
}

const COMMAND_INFO_VERSION: raw::RedisModuleCommandInfoVersion =
    raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };

/// One key, at argv[1].
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

/// The keys of a command run from argument `from` on: anywhere after its name, with
/// flags that vary per call (so Redis asks the module's key callback, which asks
/// Redis's own lookup for the inner command).
fn inner_key_spec(from: usize) -> raw::RedisModuleCommandKeySpec {
    // SAFETY: as in `key_spec`.
    let mut spec: raw::RedisModuleCommandKeySpec = unsafe { std::mem::zeroed() };
    spec.flags = (raw::REDISMODULE_CMD_KEY_RW
        | raw::REDISMODULE_CMD_KEY_ACCESS
        | raw::REDISMODULE_CMD_KEY_UPDATE
        | raw::REDISMODULE_CMD_KEY_INCOMPLETE
        | raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS) as u64;
    spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    spec.bs.index.pos = c_int::try_from(from + 1).unwrap_or(c_int::MAX);
    spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    spec.fk.range.lastkey = -1;
    spec.fk.range.keystep = 1;
    spec.fk.range.limit = 0;
    spec
}

/// Creates every command of `C`; the error names the one that failed.
pub fn register<C: Commands>(ctx: Ctx) -> Result<(), String> {
    if C::SPECS.len() > MAX_COMMANDS {
        return Err(format!("more than {MAX_COMMANDS} commands"));
    }
    for (command, entry) in C::SPECS.iter().zip(entry_points::<C>()) {
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
        let mut specs = [
            key_spec(command.key_access),
            unsafe { std::mem::zeroed() },
            unsafe { std::mem::zeroed() },
        ];
        if let (Some(from), Some(slot)) = (command.runs_command_at, specs.get_mut(1)) {
            *slot = inner_key_spec(from);
        }
        // SAFETY: all-zero means "not given" for every pointer of the info.
        let mut info: raw::RedisModuleCommandInfo = unsafe { std::mem::zeroed() };
        info.version = &COMMAND_INFO_VERSION;
        info.summary = command.summary.as_ptr();
        info.since = c"0.1.0".as_ptr();
        info.complexity = command.complexity.as_ptr();
        info.arity = command.arity;
        info.key_specs = specs.as_mut_ptr();
        let mut arena = Vec::new();
        info.args = c_params(command.params, &mut arena);
        let mut history: Vec<raw::RedisModuleCommandHistoryEntry> = command
            .history
            .iter()
            .map(|(since, changes)| raw::RedisModuleCommandHistoryEntry {
                since: since.as_ptr(),
                changes: changes.as_ptr(),
            })
            .collect();
        if !history.is_empty() {
            history.push(raw::RedisModuleCommandHistoryEntry {
                since: ptr::null(),
                changes: ptr::null(),
            });
            info.history = history.as_mut_ptr();
        }
        // Redis copies everything it needs from `info` before returning.
        if call!(RedisModule_SetCommandInfo(handle, &info) else ERR) != OK {
            return Err(format!("could not set the command info of {name}"));
        }
        // Redis 7.0 has no way for a module to put its commands in ACL categories;
        // 7.2 and later do.
        // SAFETY: reading a function pointer that Redis filled in at load time.
        if unsafe { raw::RedisModule_SetCommandACLCategories }.is_some() {
            let categories = command.acl_categories.as_ptr();
            if call!(RedisModule_SetCommandACLCategories(handle, categories) else ERR) != OK {
                log_warning(&format!(
                    "lock module: could not set the ACL categories of {name}"
                ));
            }
        }
    }
    Ok(())
}
