//! What every command does first: split its arguments, and read the lock at its
//! open key (or answer WRONGTYPE).

use crate::ffi::key::{OpenKey, Stored};
use crate::ffi::{Argv, RString};
use crate::reply::{Reply, WRONGTYPE};
use redis_lock_core::Lock;

/// The work of a command: `Err` is a reply too (an error, mostly), so handlers can
/// use `?`.
pub type Handler = fn(crate::ffi::Ctx, &Argv) -> Result<Reply, Reply>;

/// Most arguments any command takes; more is a wrong number of arguments.
pub const MAX_ARGS: usize = 16;

/// Splits `argv` into the key and the remaining arguments as bytes, after checking
/// that there are at least `min_argc` (command name included).
#[inline]
pub fn key_and_rest<'a, 'o>(
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
pub fn lock_in<'k>(open: &'k OpenKey<'_>) -> Result<Option<&'k Lock>, Reply> {
    match open.stored() {
        Stored::Empty => Ok(None),
        Stored::Lock(lock) => Ok(Some(lock)),
        Stored::OtherType => Err(Reply::error(WRONGTYPE)),
    }
}
