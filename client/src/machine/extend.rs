//! The extend of a held lock: its lease moves when the server acknowledges it, and
//! ends when the server answers that the holding is gone.

use std::time::{Duration, Instant};

use redis::Cmd;
use redis_lock_core::protocol;

use super::scripted::Scripted;
use super::single::read_flag;
use super::step::{Input, Machine, Step};
use crate::error::{Error, Result};
use crate::limits::ttl_millis;
use crate::lock::Lock;

/// Sets the remaining TTL of a held lock; `false` if it is no longer held by its
/// owner (its lease then ends). In a process forked from the holder it sends nothing
/// and answers `false`: the holding is the parent's (contract.md "One process
/// holds").
pub(crate) struct Extend {
    lock: Lock,
    ttl: Duration,
    /// When the extend was first sent: an acknowledged one counts the lease from there.
    sent: Option<Instant>,
}

impl Extend {
    pub(crate) fn new(lock: &Lock, ttl: Duration) -> Scripted<Extend> {
        Scripted::new(Extend {
            lock: lock.clone(),
            ttl,
            sent: None,
        })
    }
}

/// `LOCK.EXTEND key owner ttl` or the library's `lock_extend`.
fn extend_of(lock: &Lock, ttl: Duration) -> Result<Cmd> {
    let args = protocol::extend_args(lock.owner.as_bytes(), ttl_millis(ttl)?)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    Ok(lock.backend.call("lock_extend", Some(&lock.key), &args))
}

impl Machine for Extend {
    type Output = bool;

    fn step(&mut self, input: Input) -> Step<bool> {
        match input {
            Input::Start | Input::Slept => {
                if self.lock.in_another_process() {
                    return Step::Done(Ok(false));
                }
                match extend_of(&self.lock, self.ttl) {
                    Ok(call) => {
                        self.sent = Some(Instant::now());
                        Step::Send(call.into(), None)
                    }
                    Err(error) => Step::Done(Err(error)),
                }
            }
            Input::Reply(reply) => {
                let extended = reply.map_err(Error::from).and_then(read_flag);
                if let (Ok(extended), Some(sent)) = (&extended, self.sent) {
                    self.lock.extended(*extended, sent, self.ttl);
                }
                Step::Done(extended)
            }
        }
    }
}
