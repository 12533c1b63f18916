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
/// `guard`: the write was refused, the job's token no longer holds the lock
/// (EX_NOPERM): nothing was written.
pub const FENCED: i32 = 77;
/// `guard`: the server answered the command with an error, printed as redis-cli
/// prints it (as `redis-cli -e` exits).
pub const ERROR_REPLY: i32 = 1;
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

/// A redis-rs error as people read it: a server's error as Redis writes it
/// (`ERR unknown command …`), others without the `- KindName` redis-rs puts in
/// its own text.
pub fn plain(error: &redis::RedisError) -> String {
    if let Some(code) = error.code() {
        return match error.detail() {
            Some(detail) => format!("{code} {detail}"),
            None => code.to_string(),
        };
    }
    let kind = format!(" - {:?}", error.kind());
    error.to_string().replacen(&kind, "", 1)
}

/// The text of `error`, with any redis-rs error in it as [`plain`] writes it.
pub fn describe(error: &Error) -> String {
    let text = error.to_string();
    match error {
        Error::Connection(cause)
        | Error::Server(cause)
        | Error::WrongType(cause)
        | Error::ModuleNotLoaded(cause)
        | Error::ResponseTimeout(cause) => text.replacen(&cause.to_string(), &plain(cause), 1),
        _ => text,
    }
}

/// Prints the one-line cause of `error` for `key` and returns its status.
pub fn failure(error: &Error, key: &str) -> i32 {
    let (status, line) = match error {
        Error::Connection(cause) => (
            NO_SERVER,
            match SERVER.get() {
                Some(server) => format!("cannot reach the server at {server}: {}", plain(cause)),
                None => format!("cannot reach the server: {}", plain(cause)),
            },
        ),
        Error::WaitUnanswered { .. } => (NO_SERVER, describe(error)),
        Error::ModuleNotLoaded(_)
        | Error::NoBackend(_)
        | Error::LibraryTooOld { .. }
        | Error::LibraryTooNew { .. }
        | Error::LibraryWithoutGuard { .. } => (NO_MODULE, describe(error)),
        Error::Fenced { .. } => (FENCED, describe(error)),
        Error::CrossSlot { .. } => (USAGE, describe(error)),
        Error::WrongType(_) => (
            WRONG_TYPE,
            format!("{key:?} holds a value that is not a lock"),
        ),
        Error::NotARecord { .. } => (WRONG_TYPE, describe(error)),
        Error::InvalidArgument(cause) => (USAGE, cause.clone()),
        Error::Server(cause) if refused_argument(cause) => (
            USAGE,
            format!(
                "the server refused an argument: {}",
                cause.detail().unwrap_or_default()
            ),
        ),
        other => (SOFTWARE, describe(other)),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_rs_errors_lose_their_kind_names() {
        let server = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "This instance has cluster support disabled".to_string(),
        ));
        let text = describe(&Error::Server(server));
        assert!(!text.contains("ResponseError"), "{text}");
        let config = redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "Redis URL did not parse",
        ));
        assert_eq!(plain(&config), "Redis URL did not parse");
    }
}
