//! What a machine and its driver say to each other: the driver tells what happened
//! ([`Input`]), the machine answers what to do next ([`Step`]).

use std::time::Duration;

use redis::{Cmd, RedisResult, Value};

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
