//! The blocking driver: machines run on a blocking connection, the caller's
//! ([`Borrowed`]) or one of the client's own ([`Owned`]), whose read timeout each
//! step sets.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult, Value};

use crate::error::Result;
use crate::limits::CONNECT_LIMIT;
use crate::machine::{Call, Input, Machine, Step};

/// Sends one command on a blocking connection and reads its reply, within a bound
/// where the connection can be given one.
pub(crate) trait Transport {
    fn send(&mut self, call: &Call, bound: Option<Duration>) -> RedisResult<Value>;
}

/// The caller's own connection, with the timeouts the caller gave it.
pub(crate) struct Borrowed<'c, C>(pub(crate) &'c mut C);

impl<C: ConnectionLike> Transport for Borrowed<'_, C> {
    fn send(&mut self, call: &Call, _bound: Option<Duration>) -> RedisResult<Value> {
        match call {
            Call::One(cmd) => cmd.query(self.0),
            Call::Pipe(pipe) => pipe.query(self.0),
        }
    }
}

/// A connection of the client's own, its read timeout set per command.
pub(crate) struct Owned {
    con: redis::Connection,
    /// The read timeout of a command whose step names none.
    base: Option<Duration>,
}

impl Owned {
    /// A connection from `client` whose reads time out after `base` unless a step
    /// says otherwise; its connect and writes within [`CONNECT_LIMIT`].
    pub(crate) fn open(client: &redis::Client, base: Option<Duration>) -> Result<Owned> {
        let con = client.get_connection_with_timeout(CONNECT_LIMIT)?;
        con.set_write_timeout(Some(CONNECT_LIMIT))?;
        Ok(Owned { con, base })
    }
}

impl Transport for Owned {
    fn send(&mut self, call: &Call, bound: Option<Duration>) -> RedisResult<Value> {
        let timeout = bound.or(self.base).map(|t| t.max(Duration::from_millis(1)));
        self.con.set_read_timeout(timeout)?;
        match call {
            Call::One(cmd) => cmd.query(&mut self.con),
            Call::Pipe(pipe) => pipe.query(&mut self.con),
        }
    }
}

/// Drives `machine` to its result with blocking I/O on `io`.
pub(crate) fn drive<M: Machine>(io: &mut impl Transport, mut machine: M) -> Result<M::Output> {
    let mut input = Input::Start;
    loop {
        match machine.step(input) {
            Step::Send(cmd, bound) => input = Input::Reply(io.send(&cmd, bound)),
            Step::Sleep(pause) => {
                std::thread::sleep(pause);
                input = Input::Slept;
            }
            Step::Done(result) => return result,
        }
    }
}
