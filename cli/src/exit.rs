//! Exit statuses, from sysexits.h where one fits, and the error lines that go with
//! them.

use redis_lock_client::Error;

use crate::events;

/// Bad arguments (EX_USAGE).
pub const USAGE: i32 = 64;
/// The key holds a value that is not a lock (EX_DATAERR).
pub const WRONG_TYPE: i32 = 65;
/// The server cannot be reached (EX_UNAVAILABLE).
pub const NO_SERVER: i32 = 69;
/// Any other failure (EX_SOFTWARE).
pub const SOFTWARE: i32 = 70;
/// Output could not be written (EX_IOERR): `info`'s stdout was closed.
pub const OUTPUT: i32 = 74;
/// The server has neither the redis-lock module nor its library, or a library older
/// than this tool (EX_CONFIG).
pub const NO_MODULE: i32 = 78;
/// The command exists but cannot be executed (as shells do).
pub const CANNOT_EXECUTE: i32 = 126;
/// The command was not found (as shells do).
pub const NOT_FOUND: i32 = 127;
/// `release` found no holding of that owner.
pub const NOT_HELD: i32 = 1;

/// Where the locks are looked for, as error lines name it (`set_server`).
static SERVER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Names the server for the error lines that follow: its URL or sentinels, and
/// the options that choose another.
pub fn set_server(described: String) {
    let _ = SERVER.set(described);
}

/// Prints the one-line cause of `error` for `key` and returns its status.
pub fn failure(error: &Error, key: &str) -> i32 {
    let (status, line) = match error {
        Error::Connection(cause) => (
            NO_SERVER,
            match SERVER.get() {
                Some(server) => format!("cannot reach the server at {server}: {cause}"),
                None => format!("cannot reach the server: {cause}"),
            },
        ),
        Error::WaitUnanswered { .. } => (NO_SERVER, error.to_string()),
        Error::ModuleNotLoaded(_) | Error::NoBackend(_) | Error::LibraryTooOld { .. } => {
            (NO_MODULE, error.to_string())
        }
        Error::WrongType(_) => (
            WRONG_TYPE,
            format!("{key:?} holds a value that is not a lock"),
        ),
        Error::InvalidArgument(cause) => (USAGE, cause.clone()),
        Error::Server(cause) if refused_argument(cause) => (
            USAGE,
            format!(
                "the server refused an argument: {}",
                cause.detail().unwrap_or_default()
            ),
        ),
        other => (SOFTWARE, other.to_string()),
    };
    events::line(line);
    status
}

/// `ERR invalid owner: …`, `ERR invalid ttl: …`: the module names the argument it
/// refused (an owner over the server's `lock.max-owner-len`, a TTL over its
/// `lock.max-ttl`), which only the server knows.
fn refused_argument(error: &redis::RedisError) -> bool {
    error.code() == Some("ERR") && error.detail().is_some_and(|d| d.starts_with("invalid "))
}
