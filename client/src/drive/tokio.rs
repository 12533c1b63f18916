//! The tokio driver: machines run on any async connection, each reply within the
//! bound its step names.

use redis::aio::ConnectionLike;
use redis::{Cmd, Value};

use crate::error::Result;
use crate::machine::{Call, Input, Machine, Scripted, Single, Step};

/// Drives `machine` to its result on `con`, each reply within the bound its step
/// names.
pub(crate) async fn drive<C, M>(con: &mut C, mut machine: M) -> Result<M::Output>
where
    C: ConnectionLike + Send,
    M: Machine + Send,
{
    let mut input = Input::Start;
    loop {
        match machine.step(input) {
            Step::Send(call, bound) => {
                let reply = async {
                    match call {
                        Call::One(cmd) => cmd.query_async::<Value>(con).await,
                        Call::Pipe(pipe) => pipe.query_async::<Value>(con).await,
                    }
                };
                let reply = match bound {
                    Some(bound) => match tokio::time::timeout(bound, reply).await {
                        Ok(reply) => reply,
                        Err(elapsed) => Err(timed_out(elapsed)),
                    },
                    None => reply.await,
                };
                input = Input::Reply(reply);
            }
            Step::Sleep(pause) => {
                tokio::time::sleep(pause).await;
                input = Input::Slept;
            }
            Step::Done(result) => return result,
        }
    }
}

/// One call on `con`, its reply read by `read`.
pub(crate) async fn call<C, T>(con: &mut C, cmd: Cmd, read: fn(Value) -> Result<T>) -> Result<T>
where
    C: ConnectionLike + Send,
    T: Send,
{
    drive(con, Scripted::new(Single::new(cmd, read))).await
}

/// A tokio timeout as the I/O error redis-rs gives for one, so that it is retried,
/// withdrawn and reported as any other lost reply.
pub(crate) fn timed_out(_: tokio::time::error::Elapsed) -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time").into()
}
