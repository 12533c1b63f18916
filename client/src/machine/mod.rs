//! What each operation says on the wire, without doing any I/O: a machine is told
//! what happened ([`Input`]) and answers what to do next ([`Step`]): send a command
//! (with how long its reply may take), sleep, or stop with a result. The blocking
//! driver (`drive/blocking.rs`) and the tokio one (`drive/tokio.rs`) each run the
//! same machines with their own I/O, so the blocking and the async APIs cannot drift
//! apart, and every backend's acquire (the module's one blocking command, the
//! library's wait protocol) is one machine.
//!
//! - [`Acquire`]: take a lock, waiting as asked, retrying a lost reply, withdrawing
//!   what an unanswered request may have left.
//! - [`Extend`] and [`Release`]: a held lock's extend and release, which move or end
//!   its lease; nothing is sent for a lock of another process.
//! - [`Withdraw`]: take back what a request abandoned mid-way may have left.
//! - [`Detect`]: which backend a server offers.
//! - [`Single`]: one call and what its reply means; [`info`], who holds a lock.
//!
//! [`Scripted`] wraps any machine for the library backends: a `NOSCRIPT` reply (a
//! restart, `SCRIPT FLUSH`, a failover) loads the library and sends the same call
//! once more; the call did not run. An `FCALL` that finds the library gone (`ERR
//! Function not found`: a restart without persistence, `FUNCTION FLUSH`) is made
//! through the scripts path instead, which answers for what the server holds now.

mod acquire;
mod detect;
mod extend;
mod release;
mod scripted;
mod single;
mod withdraw;

use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

pub(crate) use acquire::Acquire;
pub(crate) use detect::Detect;
pub(crate) use extend::Extend;
pub(crate) use release::Release;
pub(crate) use scripted::Scripted;
pub(crate) use single::{info, read_flag, Single};
pub(crate) use withdraw::Withdraw;

use crate::error::Result;

/// A command, or commands sent together on one connection (a durable acquire and
/// its `WAIT replicas`, which must follow it on the same connection).
#[derive(Clone)]
pub(crate) enum Call {
    One(Cmd),
    Pipe(redis::Pipeline),
}

impl From<Cmd> for Call {
    fn from(cmd: Cmd) -> Call {
        Call::One(cmd)
    }
}

/// What the driver did last.
pub(crate) enum Input {
    /// Nothing yet: the first step.
    Start,
    /// The reply to the command sent (or why none came).
    Reply(RedisResult<Value>),
    /// The pause asked for is over.
    Slept,
}

/// What the driver does next.
pub(crate) enum Step<T> {
    /// Send this command; its reply may take at most this long (`None`: as long as
    /// the connection allows).
    Send(Call, Option<Duration>),
    /// Pause this long.
    Sleep(Duration),
    /// The operation's result.
    Done(Result<T>),
}

/// An operation as a conversation with the server.
pub(crate) trait Machine {
    type Output;
    fn step(&mut self, input: Input) -> Step<Self::Output>;
}

#[cfg(test)]
mod tests;
