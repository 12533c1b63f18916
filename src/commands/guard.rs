//! `LOCK.GUARD key token command [arg ...]`: runs the command only while the
//! holding of `key` with fencing token `token` lives, in the same step as the check.

use super::common::lock_in;
use crate::ffi::command::{KeyAccess, Param, ParamKind, Spec};
use crate::ffi::inner::Outcome;
use crate::ffi::key::OpenKey;
use crate::ffi::{Argv, Ctx};
use crate::reply::Reply;
use redis_lock_core::guard::{self, Fenced, Found};

/// Where the inner command starts: `LOCK.GUARD key token command …`.
const COMMAND_AT: usize = 3;

pub const SPEC: Spec = Spec {
    name: c"lock.guard",
    // Not `write` nor `deny-oom`: what the inner command may do decides, as it is
    // run (a read runs on a replica and under OOM, a write does not). `may-replicate`:
    // its effects go to replicas and the AOF (and CLIENT PAUSE WRITE holds it).
    // `deny-script`: a script checks the lock itself, before its own writes.
    flags: c"may-replicate deny-script getkeys-api",
    arity: -4,
    acl_categories: c"slow",
    key_access: KeyAccess::Read,
    summary: c"Runs command only while the holding of the lock at key with fencing token token lives, in the same step as the check; replies what command replies, or a FENCED error.",
    complexity: c"O(1) for an exclusive lock (O(n) for n shared holdings), plus the command's own",
    params: &[
        Param::new(c"key", ParamKind::Key),
        Param::new(c"token", ParamKind::Integer),
        Param::new(c"command", ParamKind::String),
        Param {
            optional: true,
            multiple: true,
            ..Param::new(c"arg", ParamKind::String)
        },
    ],
    history: &[],
    runs_command_at: Some(COMMAND_AT),
};

pub fn guard(ctx: Ctx, args: &Argv) -> Result<Reply, Reply> {
    let (Some(key), Some(token), Some(name)) =
        (args.string(1), args.string(2), args.string(COMMAND_AT))
    else {
        return Err(Reply::WrongArity);
    };
    let token = guard::parse_token(token.as_bytes())?;
    if guard::is_lock_command(name.as_bytes()) {
        return Err(Reply::error(
            "ERR LOCK.GUARD does not run lock commands: guard a command on your data",
        ));
    }
    // Redis's key lookup only when an argument is the lock key's name (as a key or
    // as a value, which only the lookup tells apart): it costs more than the rest
    // of the check.
    let named = (COMMAND_AT + 1..args.len()).any(|at| {
        args.string(at)
            .is_some_and(|arg| arg.as_bytes() == key.as_bytes())
    });
    let touches_lock = named
        && ctx
            .command_keys(args, COMMAND_AT)
            .positions
            .iter()
            .any(|(position, _)| {
                position
                    .checked_add(COMMAND_AT)
                    .and_then(|at| args.string(at))
                    .is_some_and(|inner| inner.as_bytes() == key.as_bytes())
            });
    if touches_lock {
        return Err(Reply::error(
            "ERR LOCK.GUARD does not run a command on its lock key: the lock changes only through lock commands",
        ));
    }
    // Closed before the inner command runs; nothing can come between (one thread).
    {
        let open = OpenKey::read(ctx, key);
        let lock = lock_in(&open)?;
        let found = guard::check(lock, token, ctx.now_ms());
        if found != Found::Holds {
            let fenced = Fenced {
                key: key.as_bytes(),
                token,
                found,
            };
            return Err(Reply::error(fenced.to_string()));
        }
    }
    match ctx.call_command(args, COMMAND_AT) {
        Outcome::Replied(called) => Ok(Reply::Called(called)),
        Outcome::Denied(reason) => Err(Reply::error(denied(&reason, name.as_bytes()))),
        Outcome::Nothing => Err(Reply::error(
            "ERR unknown command: LOCK.GUARD could not run it",
        )),
    }
}

/// The `NOPERM` error of an inner command the caller's ACL denies, worded as Redis
/// words it for a command sent alone (Redis 7.0 gives a module only the reason).
fn denied(reason: &str, name: &[u8]) -> String {
    if reason.starts_with("NOPERM") {
        return reason.to_string();
    }
    let name = name.get(..64).unwrap_or(name).escape_ascii().to_string();
    if reason.contains("keys") || reason.contains("key") {
        "NOPERM this user has no permissions to access one of the keys used as arguments".into()
    } else if reason.contains("channel") {
        "NOPERM this user has no permissions to access one of the channels used as arguments".into()
    } else {
        format!(
            "NOPERM this user has no permissions to run the '{}' command",
            name.to_ascii_lowercase()
        )
    }
}
