//! The release of a held lock, which ends its lease, or of an owner's holding an
//! operator names.

use redis::Cmd;
use redis_lock_core::protocol;

use super::scripted::Scripted;
use super::single::read_flag;
use super::step::{Input, Machine, Step};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::lock::Lock;

/// Ends a holding; `false` if it was no longer held by its owner. The release of a
/// [`Lock`] ends its lease when answered; in a process forked from the holder it
/// sends nothing and answers `false`: the holding is the parent's (contract.md "One
/// process holds").
pub(crate) struct Release {
    call: Option<Result<Cmd>>,
    lock: Option<Lock>,
}

impl Release {
    /// The release of `lock`.
    pub(crate) fn new(lock: &Lock) -> Scripted<Release> {
        Scripted::new(Release {
            call: Some(release_of(lock.backend, &lock.key, &lock.owner)),
            lock: Some(lock.clone()),
        })
    }

    /// The release of `owner`'s holding of the lock at `key`, on `backend` (an
    /// operator's release of a holder it knows by its id).
    pub(crate) fn owner(backend: Backend, key: &str, owner: &str) -> Scripted<Release> {
        Scripted::new(Release {
            call: Some(release_of(backend, key, owner)),
            lock: None,
        })
    }
}

/// `LOCK.RELEASE key owner` or the library's `lock_release`.
pub(super) fn release_of(backend: Backend, key: &str, owner: &str) -> Result<Cmd> {
    let args = protocol::owner_args(owner.as_bytes())
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    Ok(backend.call("lock_release", Some(key), &args))
}

impl Machine for Release {
    type Output = bool;

    fn step(&mut self, input: Input) -> Step<bool> {
        match input {
            Input::Start | Input::Slept => {
                if self.lock.as_ref().is_some_and(Lock::in_another_process) {
                    return Step::Done(Ok(false));
                }
                match self.call.take() {
                    Some(Ok(call)) => Step::Send(call.into(), None),
                    Some(Err(error)) => Step::Done(Err(error)),
                    None => Step::Done(Err(Error::UnexpectedReply("no call to send".into()))),
                }
            }
            Input::Reply(reply) => {
                let released = reply.map_err(Error::from).and_then(read_flag);
                if let (Ok(released), Some(lock)) = (&released, &self.lock) {
                    lock.released(*released);
                }
                Step::Done(released)
            }
        }
    }
}
