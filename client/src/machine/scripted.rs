//! The library's calls kept working when the server's library changed: loaded again
//! after `NOSCRIPT`, sent through the scripts path when the function is gone, and a
//! library this client does not accept named when it answers `WRONGTYPE`.

use std::time::Duration;

use redis::{RedisResult, Value};

use super::step::{Call, Input, Machine, Step};
use crate::backend::{check_version, script_load, script_sha, Backend};
use crate::error::Error;

/// Runs `inner` with `NOSCRIPT` handled: the library is loaded (`SCRIPT LOAD`) and
/// the call that got it sent once more. Harmless on the module, which never gets
/// `NOSCRIPT`.
///
/// And with the library found gone: an `FCALL` answered `ERR Function not found`
/// is sent again as the same call through the scripts path (`EVALSHA` of the
/// library this client carries). So a renewal after a restart that lost both the
/// library and the holding learns at once that the holding is gone (0), instead of
/// retrying the missing function until its lease runs out while a rival, which
/// found no library and took the scripts path, already holds the lock.
///
/// And with the library found changed: an `FCALL` answered `WRONGTYPE` asks
/// `lock_version` once; a library this client does not accept (an older one loaded
/// over the one it detected, which cannot read what that one wrote) turns the
/// operation's `WRONGTYPE` into the clear "library too old/new" error.
pub(crate) struct Scripted<M> {
    inner: M,
    /// The last call sent, and its bound, to send again after a load.
    last: Option<(Call, Option<Duration>)>,
    /// A load is under way for `last`.
    loading: bool,
    /// `last` was sent again already: a second `NOSCRIPT` is an answer.
    resent: bool,
    /// Whether a missing function is carried by the scripts path (not while
    /// probing for the library, whose absence is the answer).
    carry_missing: bool,
    /// Where the check of the library's version after a `WRONGTYPE` is.
    version: VersionCheck,
}

/// The `lock_version` asked after an `FCALL` got `WRONGTYPE`.
enum VersionCheck {
    /// Not asked (yet).
    Idle,
    /// Asked; the reply it was asked for waits for the answer.
    Asking(RedisResult<Value>),
    /// Answered: the version, when this client does not accept it.
    Refused(i64),
    /// Answered with a version this client accepts, or not answered.
    Accepted,
}

impl<M: Machine> Scripted<M> {
    pub(crate) fn new(inner: M) -> Scripted<M> {
        Scripted {
            inner,
            last: None,
            loading: false,
            resent: false,
            carry_missing: true,
            version: VersionCheck::Idle,
        }
    }

    /// The machine it runs, before it starts.
    pub(super) fn inner_mut(&mut self) -> &mut M {
        &mut self.inner
    }

    /// As [`Scripted::new`], with a missing function an answer of its own.
    pub(super) fn probing(inner: M) -> Scripted<M> {
        Scripted {
            carry_missing: false,
            ..Scripted::new(inner)
        }
    }
}

/// `NOSCRIPT`, also as a pipeline's failure (a durable acquire): redis-rs gives a
/// pipeline's error the code of its first failed command.
fn is_noscript(reply: &RedisResult<Value>) -> bool {
    matches!(reply, Err(error) if error.code() == Some("NOSCRIPT"))
}

/// `ERR Function not found`: the library is not loaded (any more).
fn is_missing_function(reply: &RedisResult<Value>) -> bool {
    matches!(reply, Err(error) if error.code() == Some("ERR")
        && error.detail().is_some_and(|detail| detail.starts_with("Function not found")))
}

/// Whether `call` is an `FCALL` of a library function other than `lock_version`.
fn is_fcall(call: &Call) -> bool {
    let Call::One(cmd) = call else {
        return false;
    };
    let mut words = cmd.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => bytes,
        _ => b"",
    });
    let name = words.next().unwrap_or_default();
    (name.eq_ignore_ascii_case(b"FCALL") || name.eq_ignore_ascii_case(b"FCALL_RO"))
        && words.next() != Some(b"lock_version")
}

fn is_wrongtype(reply: &RedisResult<Value>) -> bool {
    matches!(reply, Err(error) if error.code() == Some("WRONGTYPE"))
}

/// `FCALL[_RO] function n keys… args…` as the scripts path says it, `EVALSHA sha n
/// keys… function args…`; `None` for any other call.
fn through_scripts(call: &Call) -> Option<Call> {
    let Call::One(cmd) = call else {
        return None;
    };
    let words: Vec<&[u8]> = cmd
        .args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (name, rest) = words.split_first()?;
    if !name.eq_ignore_ascii_case(b"FCALL") && !name.eq_ignore_ascii_case(b"FCALL_RO") {
        return None;
    }
    let (function, rest) = rest.split_first()?;
    let (count, rest) = rest.split_first()?;
    let count: usize = std::str::from_utf8(count).ok()?.parse().ok()?;
    let (keys, args) = rest.split_at_checked(count)?;
    let mut script = redis::cmd("EVALSHA");
    script.arg(script_sha()).arg(count);
    for key in keys {
        script.arg(*key);
    }
    script.arg(*function);
    for arg in args {
        script.arg(*arg);
    }
    Some(script.into())
}

impl<M: Machine> Machine for Scripted<M> {
    type Output = M::Output;

    fn step(&mut self, input: Input) -> Step<M::Output> {
        let input = match input {
            Input::Reply(reply) if self.loading => {
                self.loading = false;
                match (reply, self.last.clone()) {
                    (Ok(_), Some((call, bound))) => {
                        self.resent = true;
                        return Step::Send(call, bound);
                    }
                    (reply, _) => Input::Reply(reply.map(|_| Value::Nil)),
                }
            }
            Input::Reply(reply) if is_noscript(&reply) && !self.resent => {
                let bound = self.last.as_ref().and_then(|(_, bound)| *bound);
                self.loading = true;
                return Step::Send(script_load().into(), bound);
            }
            Input::Reply(answer) if matches!(self.version, VersionCheck::Asking(_)) => {
                let asked = std::mem::replace(&mut self.version, VersionCheck::Accepted);
                let found = answer
                    .ok()
                    .and_then(|value| redis::from_redis_value::<i64>(value).ok());
                if let Some(found) = found.filter(|&found| check_version(found).is_err()) {
                    self.version = VersionCheck::Refused(found);
                }
                match asked {
                    VersionCheck::Asking(reply) => Input::Reply(reply),
                    _ => Input::Reply(Ok(Value::Nil)),
                }
            }
            Input::Reply(reply)
                if matches!(self.version, VersionCheck::Idle)
                    && is_wrongtype(&reply)
                    && self.last.as_ref().is_some_and(|(call, _)| is_fcall(call)) =>
            {
                let bound = self.last.as_ref().and_then(|(_, bound)| *bound);
                self.version = VersionCheck::Asking(reply);
                let version = Backend::Functions.call("lock_version", None, &[]);
                return Step::Send(version.into(), bound);
            }
            Input::Reply(reply) if self.carry_missing && is_missing_function(&reply) => {
                match self
                    .last
                    .as_ref()
                    .and_then(|(call, bound)| Some((through_scripts(call)?, *bound)))
                {
                    Some((call, bound)) => {
                        tracing::debug!("the redislock library is not loaded: the call goes through the scripts path");
                        self.last = Some((call.clone(), bound));
                        self.resent = false;
                        return Step::Send(call, bound);
                    }
                    None => Input::Reply(reply),
                }
            }
            input => input,
        };
        let step = self.inner.step(input);
        if let Step::Send(call, bound) = &step {
            self.last = Some((call.clone(), *bound));
            self.resent = false;
        }
        if let (Step::Done(Err(Error::WrongType(_))), VersionCheck::Refused(found)) =
            (&step, &self.version)
        {
            if let Err(error) = check_version(*found) {
                return Step::Done(Err(error));
            }
        }
        step
    }
}
