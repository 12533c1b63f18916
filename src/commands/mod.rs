//! One file per command: parse the arguments, call the lock core, say what to reply.
//! Handlers never write a reply themselves; they return a [`Reply`], which the FFI
//! entry point sends after the handler returns (so a bug that panics mid-way still
//! yields exactly one well-formed error reply).

pub mod acquire;
pub mod apply;
pub mod extend;
pub mod info;
pub mod release;

use std::borrow::Cow;

use crate::ffi::key::{OpenKey, Stored};
use crate::ffi::{Argv, Ctx, RString};
use redis_lock_core::store::{Failure, StoreError};
use redis_lock_core::{Lock, LockError, Mode};

pub use redis_lock_core::args;

/// A command as Redis sees it: name, flags, arity, key spec, handler.
pub struct Command {
    pub name: &'static std::ffi::CStr,
    pub flags: &'static std::ffi::CStr,
    /// Redis arity: exact count, or negative for "at least".
    pub arity: i32,
    pub key_access: KeyAccess,
    /// ACL categories, set where Redis lets modules set them (7.2 and later).
    pub acl_categories: &'static std::ffi::CStr,
    pub summary: &'static std::ffi::CStr,
    /// The work: `Err` is a reply too (an error, mostly), so handlers can use `?`.
    pub handler: fn(Ctx, &Argv) -> Result<Reply, Reply>,
}

/// How a command uses its key, for the key spec (cluster routing, ACL key patterns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAccess {
    /// Reads the lock.
    Read,
    /// Reads the lock and may update or delete it.
    ReadWrite,
    /// Replaces whatever is at the key.
    Overwrite,
}

/// How many commands the module has (the FFI layer has one entry point each).
pub const COMMAND_COUNT: usize = 5;

/// Every command of the module. The FFI layer registers them in this order.
pub static COMMANDS: [Command; COMMAND_COUNT] = [
    acquire::COMMAND,
    release::COMMAND,
    extend::COMMAND,
    info::COMMAND,
    apply::COMMAND,
];

/// What a command answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Integer(i64),
    Null,
    Ok,
    Error(Cow<'static, str>),
    WrongArity,
    /// Boxed: the other replies stay small, and are moved on every call.
    Info(Box<LockInfo>),
    /// The client is blocked; its reply comes when it is woken.
    Blocked,
}

/// The fields of LOCK.INFO.
#[derive(Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub mode: Mode,
    /// Oldest first.
    pub holders: Vec<HolderInfo>,
    pub waiters: i64,
}

/// One holding in LOCK.INFO.
#[derive(Debug, PartialEq, Eq)]
pub struct HolderInfo {
    pub owner: Box<[u8]>,
    /// Milliseconds left, -1 when the key has no expiry.
    pub ttl: i64,
    pub token: i64,
}

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// Redis's own reply to a `deny-oom` command under OOM.
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

impl Reply {
    pub fn error(text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Error(text.into())
    }

    pub fn send(&self, ctx: Ctx) {
        match self {
            Reply::Integer(n) => ctx.reply_integer(*n),
            Reply::Null => ctx.reply_null(),
            Reply::Ok => ctx.reply_simple_ok(),
            Reply::Error(text) => ctx.reply_error(text),
            Reply::WrongArity => ctx.reply_wrong_arity(),
            Reply::Blocked => {}
            Reply::Info(info) => info.send(ctx),
        }
    }
}

impl HolderInfo {
    fn send(&self, ctx: Ctx) {
        ctx.reply_map(3);
        ctx.reply_bulk(b"owner");
        ctx.reply_bulk(&self.owner);
        ctx.reply_bulk(b"ttl");
        ctx.reply_integer(self.ttl);
        ctx.reply_bulk(b"token");
        ctx.reply_integer(self.token);
    }
}

impl LockInfo {
    /// A map (RESP3) or flat field/value array (RESP2): `mode`, `holders` (each a
    /// map of `owner`, `ttl`, `token`) and `waiters`; an exclusive lock starts with
    /// its holding's `owner`, `ttl` and `token` as version 1 of the reply had them.
    fn send(&self, ctx: Ctx) {
        let single = match (self.mode, self.holders.as_slice()) {
            (Mode::Exclusive, [holder]) => Some(holder),
            _ => None,
        };
        ctx.reply_map(if single.is_some() { 6 } else { 3 });
        if let Some(holder) = single {
            ctx.reply_bulk(b"owner");
            ctx.reply_bulk(&holder.owner);
            ctx.reply_bulk(b"ttl");
            ctx.reply_integer(holder.ttl);
            ctx.reply_bulk(b"token");
            ctx.reply_integer(holder.token);
        }
        ctx.reply_bulk(b"waiters");
        ctx.reply_integer(self.waiters);
        ctx.reply_bulk(b"mode");
        ctx.reply_bulk(self.mode.name().as_bytes());
        ctx.reply_bulk(b"holders");
        ctx.reply_array(self.holders.len());
        for holder in &self.holders {
            holder.send(ctx);
        }
    }
}

impl From<LockError> for Reply {
    fn from(error: LockError) -> Reply {
        match error {
            LockError::ExpiryOutOfRange => {
                Reply::error("ERR invalid ttl: the expiry time would overflow")
            }
            LockError::TokensExhausted => {
                Reply::error("ERR fencing tokens are exhausted on this server")
            }
            LockError::OwnerTooLong { len, max } => Reply::error(format!(
                "ERR invalid owner: {len} bytes is longer than lock.max-owner-len ({max})"
            )),
            LockError::ModeConflict { held } => Reply::error(format!(
                "ERR mode conflict: owner holds this lock {}; release it first (no upgrade or downgrade)",
                held.name()
            )),
        }
    }
}

impl From<StoreError> for Reply {
    fn from(_: StoreError) -> Reply {
        Reply::error("ERR could not store the lock")
    }
}

impl From<Failure> for Reply {
    fn from(failure: Failure) -> Reply {
        match failure {
            Failure::Rule(error) => error.into(),
            Failure::Store(error) => error.into(),
        }
    }
}

impl From<args::ArgError> for Reply {
    fn from(error: args::ArgError) -> Reply {
        Reply::error(error.to_string())
    }
}

/// Most arguments any command takes; more is a wrong number of arguments.
const MAX_ARGS: usize = 16;

/// Splits `argv` into the key and the remaining arguments as bytes, after checking
/// that there are at least `min_argc` (command name included).
#[inline]
fn key_and_rest<'a, 'o>(
    args: &Argv<'a>,
    min_argc: usize,
    buf: &'o mut [&'a [u8]; MAX_ARGS],
) -> Result<(&'a RString, &'o [&'a [u8]]), Reply> {
    if args.len() < min_argc {
        return Err(Reply::WrongArity);
    }
    // Not `ok_or(Reply…)`: that would build and drop a reply on every call.
    match (args.string(1), args.bytes_from(2, buf)) {
        (Some(key), Some(rest)) => Ok((key, rest)),
        _ => Err(Reply::WrongArity),
    }
}

/// The lock at an open key, or the WRONGTYPE reply.
fn lock_in<'k>(open: &'k OpenKey<'_>) -> Result<Option<&'k Lock>, Reply> {
    match open.stored() {
        Stored::Empty => Ok(None),
        Stored::Lock(lock) => Ok(Some(lock)),
        Stored::OtherType => Err(Reply::error(WRONGTYPE)),
    }
}
