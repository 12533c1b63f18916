//! What the module answers: a command's [`Reply`] (sent by the command's entry point
//! after the command returns), a woken waiter's [`Outcome`], and the error texts
//! both share.

use std::borrow::Cow;

use redis_lock_core::args;
use redis_lock_core::holdings::Kind;
use redis_lock_core::store::{Failure, StoreError};
use redis_lock_core::{LockError, Mode};

use crate::ffi::inner::Called;
use crate::ffi::Ctx;

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
    /// What a command run inside this one replied (`LOCK.GUARD`), sent as it is.
    Called(Called),
}

/// The fields of LOCK.INFO.
#[derive(Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub mode: Mode,
    /// Oldest first.
    pub holders: Vec<HolderInfo>,
    pub waiters: i64,
    /// The first [`QUEUE_SHOWN`] waiters, longest-waiting first.
    pub queue: Vec<WaiterInfo>,
}

/// How many waiters LOCK.INFO describes one by one; `waiters` counts them all.
pub const QUEUE_SHOWN: usize = 10;

/// One waiter in LOCK.INFO.
#[derive(Debug, PartialEq, Eq)]
pub struct WaiterInfo {
    pub owner: Box<[u8]>,
    pub kind: Kind,
    /// Milliseconds since it joined the queue.
    pub waited: i64,
}

/// One holding in LOCK.INFO.
#[derive(Debug, PartialEq, Eq)]
pub struct HolderInfo {
    pub owner: Box<[u8]>,
    /// Milliseconds left, -1 when the key has no expiry.
    pub ttl: i64,
    pub token: i64,
    /// The `LIMIT` it was granted with, if any.
    pub limit: Option<u32>,
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
            Reply::Called(called) => {
                if !ctx.reply_called(called) {
                    ctx.reply_error("ERR the guarded command's reply could not be sent");
                }
            }
        }
    }
}

impl HolderInfo {
    /// A map of `owner`, `ttl`, `token`, and `limit` for a holding granted with one.
    fn send(&self, ctx: Ctx) {
        ctx.reply_map(if self.limit.is_some() { 4 } else { 3 });
        ctx.reply_bulk(b"owner");
        ctx.reply_bulk(&self.owner);
        ctx.reply_bulk(b"ttl");
        ctx.reply_integer(self.ttl);
        ctx.reply_bulk(b"token");
        ctx.reply_integer(self.token);
        if let Some(limit) = self.limit {
            ctx.reply_bulk(b"limit");
            ctx.reply_integer(i64::from(limit));
        }
    }
}

impl WaiterInfo {
    /// A map of `owner`, `mode`, `limit` (only with LIMIT) and `waited`.
    fn send(&self, ctx: Ctx) {
        let limit = match self.kind {
            Kind::Shared { limit } => limit,
            Kind::Exclusive => None,
        };
        ctx.reply_map(if limit.is_some() { 4 } else { 3 });
        ctx.reply_bulk(b"owner");
        ctx.reply_bulk(&self.owner);
        ctx.reply_bulk(b"mode");
        ctx.reply_bulk(self.kind.mode().name().as_bytes());
        if let Some(limit) = limit {
            ctx.reply_bulk(b"limit");
            ctx.reply_integer(i64::from(limit));
        }
        ctx.reply_bulk(b"waited");
        ctx.reply_integer(self.waited);
    }
}

impl LockInfo {
    /// A map (RESP3) or flat field/value array (RESP2): `mode`, `holders` (each a
    /// map of `owner`, `ttl`, `token`), `waiters` (how many) and `queue` (the first
    /// of them, each a map of `owner`, `mode`, `limit` with LIMIT, and `waited` in
    /// ms, longest-waiting first); an exclusive lock starts with
    /// its holding's `owner`, `ttl` and `token` as version 1 of the reply had them.
    fn send(&self, ctx: Ctx) {
        let single = match (self.mode, self.holders.as_slice()) {
            (Mode::Exclusive, [holder]) => Some(holder),
            _ => None,
        };
        ctx.reply_map(if single.is_some() { 7 } else { 4 });
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
        ctx.reply_bulk(b"queue");
        ctx.reply_array(self.queue.len());
        for waiter in &self.queue {
            waiter.send(ctx);
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

/// What a woken waiter is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It holds the lock, with this token.
    Token(i64),
    /// Its WAIT timed out (or CLIENT UNBLOCK ended it): the null reply.
    TimedOut,
    /// The lock could not be granted here (an error reply, or a redirect).
    Error(Cow<'static, str>),
}

impl Outcome {
    /// Sends it; `None` (woken without an answer) is the null reply.
    pub fn send(ctx: Ctx, outcome: Option<&Outcome>) {
        match outcome {
            Some(Outcome::Token(token)) => ctx.reply_integer(*token),
            Some(Outcome::Error(text)) => ctx.reply_error(text),
            Some(Outcome::TimedOut) | None => ctx.reply_null(),
        }
    }
}
