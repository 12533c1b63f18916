//! The extend of a held lock: its lease moves when the server acknowledges it, and
//! ends when the server answers that the holding is gone.

use std::time::Duration;

use redis::Cmd;
use redis_lock_core::protocol;

use super::scripted::Scripted;
use super::single::read_flag;
use super::step::{Input, Machine, Step};
use crate::error::{Error, Result};
use crate::lease::Pending;
use crate::limits::ttl_millis;
use crate::lock::Lock;

/// Sets the remaining TTL of a held lock; `false` if it is no longer held by its
/// owner (its lease then ends). In a process forked from the holder it sends nothing
/// and answers `false`: the holding is the parent's (contract.md "One process
/// holds"). The write is in the lease's account from its send to its answer
/// (abandoned if none comes: it may still reach the server).
pub(crate) struct Extend {
    lock: Lock,
    /// The TTL to set; `None`: a renewal, which asks for the TTL the holder asked
    /// for last, read when it is sent.
    ttl: Option<Duration>,
    /// The write on its way.
    pending: Option<Pending>,
}

impl Extend {
    /// The holder's extend to `ttl`: renewals ask for it from its send on.
    pub(crate) fn new(lock: &Lock, ttl: Duration) -> Scripted<Extend> {
        Scripted::new(Extend {
            lock: lock.clone(),
            ttl: Some(ttl),
            pending: None,
        })
    }

    /// A renewal: an extend to the TTL the holder asked for last.
    pub(crate) fn renewal(lock: &Lock) -> Scripted<Extend> {
        Scripted::new(Extend {
            lock: lock.clone(),
            ttl: None,
            pending: None,
        })
    }
}

/// `LOCK.EXTEND key owner ttl` or the library's `lock_extend`, and the TTL as sent.
fn extend_of(lock: &Lock, ttl: Duration) -> Result<(Cmd, Duration)> {
    let ms = ttl_millis(ttl)?;
    let args = protocol::extend_args(lock.owner.as_bytes(), ms)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let call = lock.backend.call("lock_extend", Some(&lock.key), &args);
    Ok((call, Duration::from_millis(ms)))
}

impl Machine for Extend {
    type Output = bool;

    fn step(&mut self, input: Input) -> Step<bool> {
        match input {
            Input::Start | Input::Slept => {
                if self.lock.in_another_process() {
                    return Step::Done(Ok(false));
                }
                let ttl = self.ttl.unwrap_or_else(|| self.lock.ttl());
                match extend_of(&self.lock, ttl) {
                    Ok((call, sent_ttl)) => {
                        self.pending = Some(self.lock.writing(sent_ttl, self.ttl.is_some()));
                        Step::Send(call.into(), None)
                    }
                    Err(error) => Step::Done(Err(error)),
                }
            }
            Input::Reply(reply) => {
                let extended = reply.map_err(Error::from).and_then(read_flag);
                // No answer, or one that says nothing: the write is abandoned (dropped).
                if let (Ok(extended), Some(pending)) = (&extended, self.pending.take()) {
                    self.lock.extended(pending, *extended);
                }
                Step::Done(extended)
            }
        }
    }
}
