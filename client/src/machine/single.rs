//! One call and what its reply means: who holds a lock, the library's version.

use redis::{Cmd, Value};

use super::scripted::Scripted;
use super::step::{Input, Machine, Step};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::info::{parse_info, LockInfo};

/// One call and what its reply means.
pub(crate) struct Single<T> {
    call: Option<Cmd>,
    read: fn(Value) -> Result<T>,
}

impl<T> Single<T> {
    pub(crate) fn new(call: Cmd, read: fn(Value) -> Result<T>) -> Single<T> {
        Single {
            call: Some(call),
            read,
        }
    }
}

impl<T> Machine for Single<T> {
    type Output = T;

    fn step(&mut self, input: Input) -> Step<T> {
        match input {
            Input::Start | Input::Slept => match self.call.take() {
                Some(call) => Step::Send(call.into(), None),
                None => Step::Done(Err(Error::UnexpectedReply("no call to send".into()))),
            },
            Input::Reply(reply) => Step::Done(reply.map_err(Error::from).and_then(self.read)),
        }
    }
}

/// An integer reply: 1 is yes.
pub(crate) fn read_flag(value: Value) -> Result<bool> {
    let n: i64 =
        redis::from_redis_value(value).map_err(|e| Error::UnexpectedReply(e.to_string()))?;
    Ok(n == 1)
}

/// Who holds the lock at `key`, asked through `backend`; `None` if it is free.
pub(crate) fn info(backend: Backend, key: &str) -> Scripted<Single<Option<LockInfo>>> {
    Scripted::new(Single::new(
        backend.info_command(key.as_bytes()),
        parse_info,
    ))
}
