//! The errors of the client.

use redis::RedisError;

/// Everything that can go wrong when using a lock. A busy lock is not an error: the
/// acquires answer `Ok(None)` for it.
///
/// ```no_run
/// use std::time::Duration;
/// use redis_lock_client::{Error, LockCommands};
///
/// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
/// match con.try_acquire("report:daily", Duration::from_secs(30)) {
///     Ok(Some(lock)) => println!("token {}", lock.token()),
///     Ok(None) => println!("busy"),
///     Err(Error::ModuleNotLoaded(_)) => eprintln!("load the module first"),
///     Err(error) => eprintln!("{error}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server does not know the `LOCK.*` commands.
    #[error(
        "the redis-lock module is not loaded on this server: add \
         `loadmodule /path/to/libredis_lock.so` to redis.conf, or run \
         `MODULE LOAD /path/to/libredis_lock.so` ({})",
        server_text(.0)
    )]
    ModuleNotLoaded(RedisError),
    /// The server has neither the module nor the `redislock` library, and refuses
    /// scripts (or the backend asked for is missing); says why for each.
    #[error(
        "no lock backend on this server: load the library with `redis-lock functions \
         load --url URL` (or FUNCTION LOAD of lua/redislock.lua), or load the \
         redis-lock module ({0})"
    )]
    NoBackend(String),
    /// The `redislock` library on the server is older than this client accepts
    /// ([`LIBRARY_VERSIONS`](crate::LIBRARY_VERSIONS)): it may misread what this
    /// client's library writes.
    #[error(
        "the redislock library on the server is version {found}, older than this \
         client accepts ({}): upgrade it with `redis-lock functions load --url URL`",
        accepted(*min, *max)
    )]
    LibraryTooOld {
        /// The version the server's library answered.
        found: i64,
        /// The oldest version this client accepts.
        min: i64,
        /// The newest version this client accepts (the one it carries).
        max: i64,
    },
    /// The `redislock` library on the server is newer than this client accepts: its
    /// stored format or its replies may be what this client does not know.
    #[error(
        "the redislock library on the server is version {found}, newer than this \
         client accepts ({}): upgrade this client to one made for library version \
         {found}",
        accepted(*min, *max)
    )]
    LibraryTooNew {
        /// The version the server's library answered.
        found: i64,
        /// The oldest version this client accepts.
        min: i64,
        /// The newest version this client accepts (the one it carries).
        max: i64,
    },
    /// The key holds a value that is not a lock (a string, a list…).
    #[error("the key holds a value that is not a lock ({})", server_text(.0))]
    WrongType(RedisError),
    /// The server refused the command (a bad argument, NOPERM, READONLY, OOM…).
    #[error("the server refused the command: {}", server_text(.0))]
    Server(RedisError),
    /// The connection failed or timed out, and retrying did not help.
    #[error("connection to the server failed: {0}")]
    Connection(RedisError),
    /// A blocking connection's read timeout ran out while the acquire waited in the
    /// server (`WAIT`). The request was withdrawn: no lock is left to its owner id.
    #[error(
        "no reply within the connection's read timeout while the acquire waited in \
         the server: wait on a connection whose read timeout is longer than the wait \
         (or has none); the request was withdrawn ({0})"
    )]
    ResponseTimeout(RedisError),
    /// A wait of a [`LockClient`](crate::LockClient) got no answer within the wait
    /// plus [`WAIT_MARGIN`](crate::WAIT_MARGIN): a server answers a wait that ran
    /// out with "busy" at its end, so the server hangs (stopped, a long script) or
    /// the network drops everything. A fresh owner's request was withdrawn.
    #[error(
        "no answer from the server within the wait of {wait:?} plus {margin:?}: the \
         server hangs or the network drops everything; gave up (a fresh owner's request \
         was withdrawn)"
    )]
    WaitUnanswered {
        /// The wait asked for.
        wait: std::time::Duration,
        /// What was allowed beyond it.
        margin: std::time::Duration,
    },
    /// The lock is no longer held by this owner (it expired, its lease ran out, or an
    /// administrator deleted it): work guarded by it must stop.
    #[error("the lock {key:?} is no longer held by this owner")]
    LockLost {
        /// The key of the lost lock.
        key: String,
    },
    /// A durable acquire got the lock, but fewer replicas than asked acknowledged
    /// it in time; the grant was released.
    #[error(
        "the lock {key:?} was granted but only {acked} of the {wanted} replicas asked \
         for acknowledged it in time, so it was released{}",
        if *released { "" } else { " (the release failed: it lapses with its TTL)" }
    )]
    NotReplicated {
        /// The key asked for.
        key: String,
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that acknowledged.
        acked: i64,
        /// True if the release went through.
        released: bool,
    },
    /// An argument the server would refuse (a TTL of zero, a wait over 2^62 ms); not
    /// sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Redlock did not get a majority, for reasons other than the lock being busy
    /// (servers down, refusing, or too slow for the TTL).
    #[error(
        "no quorum for {key:?}: {granted} of the {needed} servers needed granted it; {}",
        causes(errors)
    )]
    NoQuorum {
        /// The key asked for.
        key: String,
        /// Servers that granted it.
        granted: usize,
        /// Servers that must grant it.
        needed: usize,
        /// What went wrong on each server that failed, by its address.
        errors: Vec<(String, Error)>,
    },
    /// The server answered with something the lock commands never send.
    #[error("unexpected reply from the server: {0}")]
    UnexpectedReply(String),
    /// A fenced write was refused, and nothing was written: in Redis, the lock's
    /// token no longer holds it (`LOCK.GUARD` or `lock_guard` answered `FENCED`: it
    /// lapsed, was released or deleted, or another holder has it now); in
    /// PostgreSQL, a holder with a greater token has written to the resource (the
    /// caller rolls its transaction back). A [`Lock`](crate::Lock) that gets it is
    /// lost at once: its loss signal fires, with cause
    /// [`LossCause::Fenced`](crate::LossCause::Fenced).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use redis_lock_client::{Error, LockCommands};
    ///
    /// # fn main() -> redis_lock_client::Result<()> {
    /// let mut con = redis::Client::open("redis://127.0.0.1:6390/").unwrap().get_connection().unwrap();
    /// if let Some(lock) = con.try_acquire("{report:daily}", Duration::from_secs(30))? {
    ///     let out = "{report:daily}:out";
    ///     match con.guard::<()>(&lock, &[out], redis::cmd("SET").arg(out).arg("rows 1-500")) {
    ///         Ok(()) => println!("written"),
    ///         Err(Error::Fenced { .. }) => eprintln!("another holder took over: stop"),
    ///         Err(error) => return Err(error),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    #[error(
        "the fenced write was refused ({reason}): nothing was written; stop the work under \
         {key:?}, whose next holder may be writing, and roll back what it started"
    )]
    Fenced {
        /// The lock's key (for a bare token fenced in PostgreSQL, the resource).
        key: String,
        /// The token that was refused.
        token: i64,
        /// Why, as the store said it (`token 17 does not hold jobs:1: it is held
        /// with token 19`).
        reason: String,
    },
    /// A guarded write's keys are not all in the hash slot of its lock key: a Redis
    /// Cluster answered `CROSSSLOT`, and nothing ran.
    #[error(
        "the guarded command's keys are not all in the hash slot of the lock {key:?}: in a \
         Cluster, give the data keys the lock key's hash tag (lock `{{job:1}}`, data \
         `{{job:1}}:out`); nothing ran ({})",
        server_text(.error)
    )]
    CrossSlot {
        /// The lock's key.
        key: String,
        /// The server's answer.
        error: RedisError,
    },
    /// The `redislock` library on the server has no `lock_guard`: it was loaded
    /// before guarded writes came (within library version 3). Nothing ran.
    #[error(
        "the redislock library on the server{} has no lock_guard: it was loaded before \
         guarded writes came; load the library of this release with `redis-lock functions \
         load --url URL` (FUNCTION LOAD REPLACE of lua/redislock.lua)",
        match found { Some(found) => format!(" (version {found})"), None => String::new() }
    )]
    LibraryWithoutGuard {
        /// The version the server's library answered, if it did.
        found: Option<i64>,
    },
    /// The record of an election (the stream beside its key) holds a value of
    /// another type: someone wrote there. Nothing was changed.
    #[error(
        "the election's record {record:?} holds a value that is not a stream: it is the \
         election's own key (DEL it, and the next leader writes it anew)"
    )]
    NotARecord {
        /// The record's key.
        record: String,
    },
    /// PostgreSQL refused the fence's statement (no fence table, a connection
    /// lost, a transaction aborted before it): the caller rolls back. With the
    /// `postgres` feature.
    #[cfg(feature = "postgres")]
    #[error("PostgreSQL refused the fence: {}", postgres_text(.0))]
    Postgres(tokio_postgres::Error),
}

/// A PostgreSQL error with the server's own words (`ERROR 42P01: relation
/// "redis_lock_fence" does not exist`), which tokio-postgres shows as `db error`.
#[cfg(feature = "postgres")]
fn postgres_text(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => match std::error::Error::source(error) {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        },
    }
}

/// A range of library versions in words: "version 2", "versions 2 to 3".
fn accepted(min: i64, max: i64) -> String {
    if min == max {
        format!("version {min}")
    } else {
        format!("versions {min} to {max}")
    }
}

fn causes(errors: &[(String, Error)]) -> String {
    if errors.is_empty() {
        return "the acquire took longer than the lock's validity".into();
    }
    let each: Vec<String> = errors
        .iter()
        .map(|(server, error)| format!("{server}: {error}"))
        .collect();
    each.join("; ")
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<RedisError> for Error {
    fn from(error: RedisError) -> Self {
        let error = first_of_pipeline(error);
        if is_connection_error(&error) {
            return Error::Connection(error);
        }
        if is_unknown_lock_command(&error) {
            Error::ModuleNotLoaded(error)
        } else if is_missing_library(&error) {
            Error::NoBackend(server_text(&error))
        } else if error.code() == Some("WRONGTYPE") {
            Error::WrongType(error)
        } else if error.kind() == redis::ErrorKind::Parse {
            Error::UnexpectedReply(error.to_string())
        } else {
            Error::Server(error)
        }
    }
}

/// A server's error as the server wrote it (`READONLY You can't write against a
/// read only replica.`), not as redis-rs shows it (`ReadOnly: You can't …`);
/// other errors as redis-rs writes them.
pub(crate) fn server_text(error: &RedisError) -> String {
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => format!("{code} {}", detail.trim()),
        (Some(code), None) => code.to_string(),
        _ => error.to_string(),
    }
}

/// The server error inside a pipeline's failure (a durable acquire is a pipeline),
/// so that it is recognised as itself.
fn first_of_pipeline(error: RedisError) -> RedisError {
    match error.clone().into_server_errors() {
        Some(errors) if errors.len() == 1 => RedisError::from(errors[0].1.clone()),
        _ => error,
    }
}

/// `ERR unknown command 'LOCK.ACQUIRE', …`: any other unknown command is not ours
/// to explain.
fn is_unknown_lock_command(error: &RedisError) -> bool {
    let Some(detail) = error.detail() else {
        return false;
    };
    error.code() == Some("ERR")
        && detail.starts_with("unknown command")
        && detail.to_ascii_lowercase().contains("'lock.")
}

/// `ERR Function not found`: the library was deleted after the backend was
/// detected.
fn is_missing_library(error: &RedisError) -> bool {
    error.code() == Some("ERR")
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// Whether `error` is a reply whose first word is `code` (`FENCED`, `CROSSSLOT`).
pub(crate) fn has_code(error: &RedisError, code: &str) -> bool {
    error.code() == Some(code)
}

/// True for errors after which the same command may succeed on retry: the request
/// or its reply was lost, not refused.
pub(crate) fn is_connection_error(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: &str, detail: &str) -> RedisError {
        let text = format!("{code} {detail}");
        let parsed = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
        match parsed {
            redis::Value::ServerError(e) => e.into(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_an_unknown_lock_command_means_the_module_is_missing() {
        let ours = reply(
            "ERR",
            "unknown command 'LOCK.ACQUIRE', with args beginning with:",
        );
        assert!(matches!(Error::from(ours), Error::ModuleNotLoaded(_)));
        let theirs = reply("ERR", "unknown command 'FOO', with args beginning with:");
        assert!(matches!(Error::from(theirs), Error::Server(_)));
    }

    #[test]
    fn wrongtype_has_its_own_variant() {
        let error = reply(
            "WRONGTYPE",
            "Operation against a key holding the wrong kind of value",
        );
        let error = Error::from(error);
        assert!(matches!(error, Error::WrongType(_)));
        assert!(error.to_string().contains("not a lock"));
    }
}
