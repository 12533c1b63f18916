//! Exit statuses, from sysexits.h where one fits, and the error lines that go with
//! them.

use redis_lock_client::Error;

/// Bad arguments (EX_USAGE).
pub const USAGE: i32 = 64;
/// The key holds a value that is not a lock (EX_DATAERR).
pub const WRONG_TYPE: i32 = 65;
/// The server cannot be reached (EX_UNAVAILABLE).
pub const NO_SERVER: i32 = 69;
/// Any other failure (EX_SOFTWARE).
pub const SOFTWARE: i32 = 70;
/// The server has no redis-lock module (EX_CONFIG).
pub const NO_MODULE: i32 = 78;
/// The command exists but cannot be executed (as shells do).
pub const CANNOT_EXECUTE: i32 = 126;
/// The command was not found (as shells do).
pub const NOT_FOUND: i32 = 127;
/// `release` found no holding of that owner.
pub const NOT_HELD: i32 = 1;

/// Prints the one-line cause of `error` for `key` and returns its status.
pub fn failure(error: &Error, key: &str) -> i32 {
    let (status, line) = match error {
        Error::Connection(cause) => (NO_SERVER, format!("cannot reach the server: {cause}")),
        Error::ModuleNotLoaded(_) => (NO_MODULE, error.to_string()),
        Error::WrongType(_) => (
            WRONG_TYPE,
            format!("{key:?} holds a value that is not a lock"),
        ),
        Error::InvalidArgument(cause) => (USAGE, cause.clone()),
        other => (SOFTWARE, other.to_string()),
    };
    eprintln!("redis-lock: {line}");
    status
}
