//! The limits: what the server takes (the largest TTL, wait and permits, from the
//! protocol module the server uses too), and how long each thing the client sends
//! may take before it is given up, so that every wait, release and withdrawal ends
//! whatever the server or the network does.

use std::time::Duration;

use redis_lock_core::protocol;

use crate::error::{Error, Result};

/// The largest TTL or timeout the server accepts: 2^62 - 1 ms, the module's own
/// bound (`redis_lock_core::protocol`).
pub const MAX_MILLIS: u64 = protocol::MAX_MILLIS;

/// The most permits `LIMIT` takes: 2^31.
pub const MAX_PERMITS: u32 = protocol::MAX_PERMITS;

/// How long past its wait a waiting acquire may go without an answer before it is
/// given up as unanswered. The server answers a wait that runs out at its end; the
/// margin covers the round trip and a busy server, and bounds the wait when the
/// server hangs or the network drops everything.
pub const WAIT_MARGIN: Duration = Duration::from_secs(1);

/// How long opening a connection for a lock command may take; on a connection of
/// the client's own, also an acquire that does not wait, an info, a probe.
pub(crate) const CONNECT_LIMIT: Duration = Duration::from_secs(2);

/// How long a withdrawal or a release may take before it is given up (the lock then
/// lapses with its TTL).
pub(crate) const RELEASE_LIMIT: Duration = Duration::from_secs(1);

/// How long a withdrawal after an unanswered wait is given: the server hangs or the
/// path is cut, and waiting for this reply would only push the give-up past its
/// bound.
pub(crate) const WITHDRAW_SEND: Duration = Duration::from_millis(100);

/// Whole milliseconds of `d`, rounded up; an error over the server's 2^62 ms.
pub(crate) fn ceil_millis(d: Duration, what: &str) -> Result<u64> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms)
        .ok()
        .filter(|&ms| ms <= MAX_MILLIS)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{what} of {d:?} is out of range: at most {MAX_MILLIS} ms"
            ))
        })
}

/// A TTL in whole milliseconds (rounded up), checked before anything is sent.
pub(crate) fn ttl_millis(ttl: Duration) -> Result<u64> {
    if ttl.is_zero() {
        return Err(Error::InvalidArgument(
            "ttl must be positive: a lock of 0 ms would be gone before it is granted".into(),
        ));
    }
    ceil_millis(ttl, "ttl")
}
