//! A guarded write: the caller's command, run by the server only while the lock's
//! token holds it (contract.md "Fenced writes"), and what its reply means.

use redis::{Cmd, FromRedisValue, RedisError, RedisResult, Value};

use super::scripted::Scripted;
use super::step::{Input, Machine, Step};
use crate::backend::Backend;
use crate::error::{has_code, Error, Result};
use crate::lock::Lock;

/// Runs a command through `LOCK.GUARD` or the library's `lock_guard`; its reply is
/// the command's. Sent once: a reply lost to a broken connection is not asked for
/// again, as the command may have run.
///
/// - `FENCED` (the token no longer holds the lock): [`Error::Fenced`], and a
///   [`Lock`]'s lease ends at once (its loss signal fires, cause `Fenced`).
/// - `CROSSSLOT`: [`Error::CrossSlot`], which says to share the lock key's slot.
/// - `ERR Function not found` from `FCALL lock_guard`: `lock_version` tells a
///   library loaded before `lock_guard` came ([`Error::LibraryWithoutGuard`]) from
///   a library gone (a restart, `FUNCTION FLUSH`), for which the write goes through
///   the scripts path, as every other call does.
/// - Any other error reply (the command's own, `NOPERM`, `READONLY`, `WRONGTYPE` of
///   the lock key or of the command's): [`Error::Server`]; a module without
///   `LOCK.GUARD`: [`Error::ModuleNotLoaded`].
///
/// A [`Lock`] whose loss signal fired already (its lease ran out, it was released,
/// a renewal found it gone) is refused before anything is sent:
/// [`Error::LockLost`].
pub(crate) struct Guard {
    key: String,
    token: i64,
    backend: Backend,
    /// The lock whose lease a `FENCED` ends; none for a bare token.
    lock: Option<Lock>,
    keys: Vec<Vec<u8>>,
    command: Result<Vec<Vec<u8>>>,
    stage: Stage,
}

/// Where the write is.
enum Stage {
    /// Not sent yet.
    Ready,
    /// Sent on the lock's backend.
    Sent,
    /// `FCALL lock_guard` found no function: `lock_version` asked.
    AskingVersion,
    /// Sent again through the scripts path: the library is gone.
    ThroughScripts,
}

impl Guard {
    /// The guarded write of `command` under `lock`, whose data keys are `keys`.
    pub(crate) fn new<K: AsRef<[u8]>>(lock: &Lock, keys: &[K], command: &Cmd) -> Scripted<Guard> {
        let mut guard = Guard::token(lock.backend, &lock.key, lock.token, keys, command);
        guard.inner_mut().lock = Some(lock.clone());
        guard
    }

    /// The guarded write of `command` while `token` holds the lock at `key` (a lock
    /// held elsewhere: another process, `redis-lock run`), on `backend`.
    pub(crate) fn token<K: AsRef<[u8]>>(
        backend: Backend,
        key: &str,
        token: i64,
        keys: &[K],
        command: &Cmd,
    ) -> Scripted<Guard> {
        // A missing function is this machine's to tell apart (too old, or gone).
        Scripted::probing(Guard {
            key: key.to_string(),
            token,
            backend,
            lock: None,
            keys: keys.iter().map(|key| key.as_ref().to_vec()).collect(),
            command: words_of(command),
            stage: Stage::Ready,
        })
    }

    fn send(&self, backend: Backend) -> Step<Value> {
        match &self.command {
            Ok(command) => {
                let call = backend.guard(&self.key, &self.keys, self.token, command);
                Step::Send(call.into(), None)
            }
            Err(error) => Step::Done(Err(refused(error))),
        }
    }

    /// What a reply to the guarded write means.
    fn answer(&mut self, reply: RedisResult<Value>) -> Step<Value> {
        let error = match reply {
            Ok(value) => return Step::Done(Ok(value)),
            Err(error) => error,
        };
        if has_code(&error, "FENCED") {
            let reason = error.detail().unwrap_or_default().trim().to_string();
            if let Some(lock) = &self.lock {
                lock.fenced(&reason);
            }
            return Step::Done(Err(Error::Fenced {
                key: self.key.clone(),
                token: self.token,
                reason,
            }));
        }
        if has_code(&error, "CROSSSLOT") {
            return Step::Done(Err(Error::CrossSlot {
                key: self.key.clone(),
                error,
            }));
        }
        if is_missing_function(&error) && matches!(self.stage, Stage::Sent) {
            self.stage = Stage::AskingVersion;
            let version = Backend::Functions.call("lock_version", None, &[]);
            return Step::Send(version.into(), None);
        }
        if is_unknown_guard_function(&error) {
            return Step::Done(Err(Error::LibraryWithoutGuard { found: None }));
        }
        Step::Done(Err(reply_error(error)))
    }
}

impl Machine for Guard {
    type Output = Value;

    fn step(&mut self, input: Input) -> Step<Value> {
        match (&self.stage, input) {
            (Stage::Ready, Input::Start | Input::Slept) => {
                if let Some(lock) = self.lock.as_ref().filter(|lock| lock.is_lost()) {
                    return Step::Done(Err(Error::LockLost {
                        key: lock.key.clone(),
                    }));
                }
                if self.token <= 0 {
                    return Step::Done(Err(Error::InvalidArgument(format!(
                        "fencing token {}: a token is a positive integer",
                        self.token
                    ))));
                }
                self.stage = Stage::Sent;
                self.send(self.backend)
            }
            (Stage::AskingVersion, Input::Reply(reply)) => match reply {
                // The library answers: it is loaded, without lock_guard.
                Ok(value) => Step::Done(Err(Error::LibraryWithoutGuard {
                    found: redis::from_redis_value::<i64>(value).ok(),
                })),
                Err(error) if is_missing_function(&error) => {
                    tracing::debug!("the redislock library is not loaded: the guarded write goes through the scripts path");
                    self.stage = Stage::ThroughScripts;
                    self.send(Backend::Scripts)
                }
                Err(error) => Step::Done(Err(Error::from(error))),
            },
            (_, Input::Reply(reply)) => self.answer(reply),
            (_, _) => Step::Done(Err(Error::UnexpectedReply("no call to send".into()))),
        }
    }
}

/// The guarded command's reply as the caller asked for it (`redis::Value`, `()`,
/// `String`, `i64` …).
pub(crate) fn reply_as<T: FromRedisValue>(value: Value) -> Result<T> {
    redis::from_redis_value(value).map_err(|e| {
        Error::UnexpectedReply(format!(
            "the guarded command's reply is not of the type asked for: {e}"
        ))
    })
}

/// The words of the caller's command; refused when it has none, or a cursor.
fn words_of(command: &Cmd) -> Result<Vec<Vec<u8>>> {
    let words = command
        .args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => Ok(bytes.to_vec()),
            _ => Err(Error::InvalidArgument(
                "a guarded command takes plain arguments (no cursor)".into(),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    if words.is_empty() {
        return Err(Error::InvalidArgument(
            "a guarded write needs a command: its name and arguments".into(),
        ));
    }
    Ok(words)
}

/// A refusal of the caller's command, again (errors are not `Clone`).
fn refused(error: &Error) -> Error {
    match error {
        Error::InvalidArgument(text) => Error::InvalidArgument(text.clone()),
        other => Error::InvalidArgument(other.to_string()),
    }
}

/// An error reply of the guarded write (the command's own, or the guard's refusal)
/// as the client's error. `WRONGTYPE` may be the command's (an `INCR` of a list)
/// as well as the lock key's: a server error, not "not a lock".
fn reply_error(error: RedisError) -> Error {
    match Error::from(error) {
        Error::WrongType(error) => Error::Server(error),
        other => other,
    }
}

/// `ERR Function not found`: `FCALL` of a function the server does not have.
fn is_missing_function(error: &RedisError) -> bool {
    has_code(error, "ERR")
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("Function not found"))
}

/// `ERR unknown function 'lock_guard' …`: the scripts path of a library loaded
/// before `lock_guard` came.
fn is_unknown_guard_function(error: &RedisError) -> bool {
    has_code(error, "ERR")
        && error
            .detail()
            .is_some_and(|detail| detail.starts_with("unknown function 'lock_guard'"))
}
