//! The errors of the client.

use redis::RedisError;

/// Everything that can go wrong when using a lock.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server does not know the lock commands.
    #[error(
        "the redis-lock module is not loaded on this server: add \
         `loadmodule /path/to/libredis_lock.so` to redis.conf, or run \
         `MODULE LOAD /path/to/libredis_lock.so` ({0})"
    )]
    ModuleNotLoaded(RedisError),
    /// The server answered with an error reply (a bad argument, WRONGTYPE, NOPERM, READONLY…).
    #[error("the server refused the command: {0}")]
    Server(RedisError),
    /// The connection failed or timed out, and retrying did not help.
    #[error("connection to the server lost: {0}")]
    Connection(RedisError),
    /// No reply came within the connection's own response timeout while the
    /// acquire waited in the server (`WAIT`). redis-rs async connections time out
    /// after 500 ms by default: a longer wait needs a connection without that limit
    /// (`AsyncConnectionConfig::set_response_timeout(None)`). Any lock the request
    /// still got was released.
    #[error(
        "no reply within the connection's response timeout while waiting in the \
         server; redis-rs async connections time out after 500 ms by default, so a \
         longer wait needs AsyncConnectionConfig::set_response_timeout(None); any lock \
         the request still got was released ({0})"
    )]
    ResponseTimeout(RedisError),
    /// The lock is no longer held by this owner (it expired, or an administrator
    /// deleted it): work guarded by it must stop.
    #[error("the lock {key:?} is no longer held by this owner")]
    LockLost {
        /// The key of the lost lock.
        key: String,
    },
    /// The server answered with something the lock commands never send.
    #[error("unexpected reply from the server: {0}")]
    UnexpectedReply(String),
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<RedisError> for Error {
    fn from(error: RedisError) -> Self {
        if is_connection_error(&error) {
            return Error::Connection(error);
        }
        let unknown_command = error.code() == Some("ERR")
            && error
                .detail()
                .is_some_and(|detail| detail.starts_with("unknown command"));
        if unknown_command {
            Error::ModuleNotLoaded(error)
        } else if error.kind() == redis::ErrorKind::Parse {
            Error::UnexpectedReply(error.to_string())
        } else {
            Error::Server(error)
        }
    }
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
