//! What each operation says on the wire, without doing any I/O: a machine is told
//! what happened ([`Input`]) and answers what to do next ([`Step`]): send a command
//! (with how long its reply may take), sleep, or stop with a result. The blocking
//! API (`sync.rs`) and the async one (`aio.rs`) each drive the same machines with
//! their own I/O, so the two cannot drift apart, and every backend's acquire (the
//! module's one blocking command, the library's wait protocol) is one machine.
//!
//! [`Scripted`] wraps any machine for the library backends: a `NOSCRIPT` reply (a
//! restart, `SCRIPT FLUSH`, a failover) loads the library and sends the same call
//! once more; the call did not run. An `FCALL` that finds the library gone (`ERR
//! Function not found`: a restart without persistence, `FUNCTION FLUSH`) is made
//! through the scripts path instead, which answers for what the server holds now.

use std::time::{Duration, Instant};

use redis::{Cmd, RedisError, RedisResult, Value};
use redis_lock_core::holdings::Kind;
use redis_lock_core::protocol;

use crate::backend::{check_version, script_load, script_sha, Backend};
use crate::connector::WAIT_MARGIN;
use crate::error::{server_text, Error, Result};
use crate::lease::margin;
use crate::lock::Lock;
use crate::request::{Durable, Next, Request, Wait};

/// How long a withdrawal or a release may take before it is given up (the lock then
/// lapses with its TTL): [`protocol::RELEASE_LIMIT_MS`].
pub(crate) const RELEASE_LIMIT: Duration = Duration::from_millis(protocol::RELEASE_LIMIT_MS);

/// How long a withdrawal after an unanswered wait is given: the server hangs or the
/// path is cut, and waiting for this reply would only push the give-up past its
/// bound ([`protocol::WITHDRAW_AFTER_TIMEOUT_MS`]).
const WITHDRAW_SEND: Duration = Duration::from_millis(protocol::WITHDRAW_AFTER_TIMEOUT_MS);

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

    /// As [`Scripted::new`], with a missing function an answer of its own.
    fn probing(inner: M) -> Scripted<M> {
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

/// Which backend a server has: the module when `COMMAND INFO LOCK.ACQUIRE` names
/// it; else the library when `FCALL_RO lock_version 0` answers (no `FUNCTION
/// LIST` needed, which restrictive ACLs refuse); else the library as a script,
/// when `EVALSHA` (after a `SCRIPT LOAD`) answers `lock_version`. `forced` tries
/// only that one. A library older than this client is an error naming both
/// versions; a server with none of them, one line saying what to do.
pub(crate) struct Detect {
    candidates: Vec<Backend>,
    current: Option<Backend>,
    why: Vec<String>,
}

impl Detect {
    pub(crate) fn new(forced: Option<Backend>) -> Scripted<Detect> {
        let candidates = match forced {
            Some(backend) => vec![backend],
            None => Backend::ALL.to_vec(),
        };
        Scripted::probing(Detect {
            candidates,
            current: None,
            why: Vec::new(),
        })
    }

    fn probe(&mut self) -> Step<Backend> {
        if self.candidates.is_empty() {
            let why = std::mem::take(&mut self.why).join("; ");
            return Step::Done(Err(Error::NoBackend(why)));
        }
        let backend = self.candidates.remove(0);
        self.current = Some(backend);
        let probe = match backend {
            Backend::Module => {
                let mut cmd = redis::cmd("COMMAND");
                cmd.arg("INFO").arg("LOCK.ACQUIRE");
                cmd
            }
            library => library.call("lock_version", None, &[]),
        };
        Step::Send(probe.into(), None)
    }
}

fn names_a_command(value: &Value) -> bool {
    match value {
        Value::Array(entries) => entries.iter().any(|e| !matches!(e, Value::Nil)),
        Value::Map(entries) => !entries.is_empty(),
        _ => false,
    }
}

impl Machine for Detect {
    type Output = Backend;

    fn step(&mut self, input: Input) -> Step<Backend> {
        let Input::Reply(reply) = input else {
            return self.probe();
        };
        let Some(backend) = self.current else {
            return self.probe();
        };
        match (backend, reply) {
            (Backend::Module, Ok(value)) if names_a_command(&value) => {
                return Step::Done(Ok(Backend::Module))
            }
            (Backend::Module, Ok(_)) => self.why.push("no module (no LOCK.ACQUIRE command)".into()),
            (Backend::Module, Err(error)) if is_fatal(&error) => {
                return Step::Done(Err(error.into()))
            }
            (Backend::Module, Err(error)) => {
                self.why.push(format!("COMMAND INFO refused: {error}"))
            }
            (library, Ok(value)) => {
                let version = redis::from_redis_value::<i64>(value)
                    .map_err(|e| Error::UnexpectedReply(format!("lock_version: {e}")));
                return Step::Done(version.and_then(check_version).map(|()| library));
            }
            (_, Err(error)) if is_fatal(&error) => return Step::Done(Err(error.into())),
            (library, Err(error)) => self.why.push(format!(
                "{}: {}",
                if library == Backend::Functions {
                    "no redislock library"
                } else {
                    "scripts refused"
                },
                server_text(&error)
            )),
        }
        self.probe()
    }
}

/// A server's error as it sent it: code and text.
/// A connection failure ends the probing: the next backend would fail alike.
fn is_fatal(error: &RedisError) -> bool {
    crate::error::is_connection_error(error)
}

/// An acquire, on any backend: attempt, wait, claim, give up.
///
/// - The module: `LOCK.ACQUIRE … [WAIT ms]`, one command that blocks in the server.
/// - The library without a wait: `lock_acquire`, answered at once.
/// - The library with a wait, the protocol of docs/PROTOCOL.md: `lock_wait` (a
///   place in the queue, or the lock), `BLPOP` on the waiter's grant list until the
///   `wake_ms` it named, again, until granted or the deadline, when `lock_cancel`
///   gives the place up.
///
/// A lost reply of an attempt that does not wait is retried as the same owner (who
/// gets the same token back if the lost try won); one that cannot be answered is
/// withdrawn. After the grant: `WAIT replicas` for a durable request, and, after a
/// long wait in the module, an extend that brings the lease up to date.
pub(crate) struct Acquire {
    request: Request,
    backend: Backend,
    /// The end of the wait (library waits; `None`: none, or without limit).
    deadline: Option<Instant>,
    attempt: u32,
    /// When the last attempt (acquire, `lock_wait`) was sent.
    sent: Instant,
    state: State,
}

enum State {
    /// Nothing sent yet, or a retry's pause is over.
    Attempt,
    /// An acquire or `lock_wait` is out.
    Asked,
    /// A `BLPOP` on the grant list is out.
    Blocked,
    /// `WAIT replicas` after the grant is out.
    Replicating(Lock),
    /// The release of a grant too few replicas acknowledged is out.
    Unreplicated(Lock, i64),
    /// The extend after a long wait is out.
    Refreshing(Lock, Instant),
    /// The calls that take back what a cut-short acquire may have left, then its
    /// result.
    Withdrawing(Vec<(Cmd, Duration)>, Option<Error>),
    Finished,
}

impl Acquire {
    pub(crate) fn new(request: Request) -> Result<Scripted<Acquire>> {
        request.check()?;
        let backend = request.backend;
        Ok(Scripted::new(Acquire {
            request,
            backend,
            deadline: None,
            attempt: 0,
            sent: Instant::now(),
            state: State::Attempt,
        }))
    }

    fn waits_by_protocol(&self) -> bool {
        self.backend.is_library() && self.request.wait.waits()
    }

    /// How long a step of a wait may take: until the wait's end and the margin for
    /// the reply's way back, so a server that hangs cannot stretch it.
    fn bound(&self) -> Option<Duration> {
        let deadline = self.deadline?;
        let left = (deadline + WAIT_MARGIN).saturating_duration_since(Instant::now());
        Some(left.max(Duration::from_millis(10)))
    }

    fn attempt(&mut self) -> Step<Option<Lock>> {
        self.sent = Instant::now();
        self.state = State::Asked;
        let request = &self.request;
        let (call, bound) = if self.waits_by_protocol() {
            let args = protocol::wait_args(
                request.owner.as_bytes(),
                request.ttl_ms(),
                request.kind(),
                None,
            );
            (args.map(|a| ("lock_wait", a)), self.bound())
        } else {
            let wait = if self.backend.is_library() {
                Ok(None)
            } else {
                request.wait.millis()
            };
            let args = wait.and_then(|wait| {
                protocol::acquire_args(
                    request.owner.as_bytes(),
                    request.ttl_ms(),
                    request.kind(),
                    wait,
                )
                .map_err(|e| Error::InvalidArgument(e.to_string()))
            });
            let bound = match request.wait {
                Wait::For(wait) if request.wait.waits() => Some(wait.saturating_add(WAIT_MARGIN)),
                _ => None,
            };
            return match args {
                Ok(args) => {
                    let acquire = self.backend.call("lock_acquire", Some(&request.key), &args);
                    Step::Send(with_replicas(acquire, request.durable), bound)
                }
                Err(error) => self.finish(Err(error)),
            };
        };
        match call {
            Ok((function, args)) => Step::Send(
                self.backend
                    .call(function, Some(&request.key), &args)
                    .into(),
                bound,
            ),
            Err(error) => self.finish(Err(Error::InvalidArgument(error.to_string()))),
        }
    }

    fn finish(&mut self, result: Result<Option<Lock>>) -> Step<Option<Lock>> {
        self.state = State::Finished;
        match result {
            Ok(Some(lock)) => {
                lock.acquired();
                Step::Done(Ok(Some(lock)))
            }
            other => Step::Done(other),
        }
    }

    /// The request's owner holds the lock with `token`, since the attempt sent at
    /// `self.sent`.
    /// `acked`: what the `WAIT replicas` sent with the acquire answered, if it was.
    fn granted(&mut self, token: i64, acked: Option<i64>) -> Step<Option<Lock>> {
        let lock = self.request.granted(token, self.sent);
        match (self.request.durable, acked) {
            (Some(_), Some(acked)) => self.replicated(lock, Ok(Value::Int(acked))),
            (Some(durable), None) => {
                self.state = State::Replicating(lock);
                Step::Send(replicas_wait(durable).into(), None)
            }
            (None, _) => self.refresh(lock),
        }
    }

    /// The answer of `WAIT replicas` after the grant of `lock`.
    fn replicated(&mut self, lock: Lock, reply: RedisResult<Value>) -> Step<Option<Lock>> {
        let wanted = self.request.durable.map_or(0, |d| d.replicas);
        match reply.map(redis::from_redis_value::<i64>) {
            Ok(Ok(acked)) if acked >= i64::from(wanted) => self.refresh(lock),
            Ok(Ok(acked)) => {
                let key = Some(lock.key.as_str());
                let owner = protocol::owner_args(lock.owner.as_bytes()).unwrap_or_default();
                let call = self.backend.call("lock_release", key, &owner);
                self.state = State::Unreplicated(lock, acked);
                Step::Send(call.into(), Some(RELEASE_LIMIT))
            }
            Ok(Err(e)) => self.finish(Err(Error::UnexpectedReply(e.to_string()))),
            Err(error) => {
                let calls = self.withdrawals(RELEASE_LIMIT);
                self.withdraw(calls, Some(error.into()))
            }
        }
    }

    fn refresh(&mut self, lock: Lock) -> Step<Option<Lock>> {
        // Granted after a wait in the module: the server counts the TTL from the
        // grant, the lease from the send. A prompt extend brings the lease up to
        // date; if it fails, the shorter lease stays. (A library grant is collected
        // by the last `lock_wait`, which sets the full TTL from that call.)
        if !self.backend.is_library() && self.sent.elapsed() > margin(lock.ttl()) {
            if let Ok(args) = protocol::extend_args(lock.owner.as_bytes(), self.request.ttl_ms()) {
                let again = Instant::now();
                let call = self.backend.call("lock_extend", Some(&lock.key), &args);
                self.state = State::Refreshing(lock, again);
                return Step::Send(call.into(), Some(RELEASE_LIMIT));
            }
        }
        self.finish(Ok(Some(lock)))
    }

    /// What takes back what an unanswered request may have left: its queue place
    /// and a grant not collected (`lock_cancel`), and, for a fresh owner nobody else
    /// knows, a grant already made (a release, which runs after it).
    fn withdrawals(&self, bound: Duration) -> Vec<(Cmd, Duration)> {
        let key = Some(self.request.key.as_str());
        let Ok(owner) = protocol::owner_args(self.request.owner.as_bytes()) else {
            return Vec::new();
        };
        let mut calls = Vec::new();
        if self.waits_by_protocol() {
            calls.push((self.backend.call("lock_cancel", key, &owner), bound));
        }
        if !self.request.owner_given {
            calls.push((self.backend.call("lock_release", key, &owner), bound));
        }
        calls
    }

    fn withdraw(
        &mut self,
        mut calls: Vec<(Cmd, Duration)>,
        result: Option<Error>,
    ) -> Step<Option<Lock>> {
        if calls.is_empty() {
            return self.finish(match result {
                Some(error) => Err(error),
                None => Ok(None),
            });
        }
        let (call, bound) = calls.remove(0);
        self.state = State::Withdrawing(calls, result);
        Step::Send(call.into(), Some(bound))
    }

    fn failed(&mut self, error: RedisError) -> Step<Option<Lock>> {
        if self.waits_by_protocol() {
            // No automatic retry inside the wait protocol: a driver that silently
            // tries again hides a lapsed place (docs/PROTOCOL.md).
            let timed_out = error.is_timeout();
            let error = if timed_out {
                Error::ResponseTimeout(error)
            } else {
                Error::from(error)
            };
            let bound = if timed_out {
                WITHDRAW_SEND
            } else {
                RELEASE_LIMIT
            };
            let calls = self.withdrawals(bound);
            return self.withdraw(calls, Some(error));
        }
        match self.request.after_failure(error, self.attempt) {
            Next::Retry(delay) => {
                self.attempt += 1;
                self.state = State::Attempt;
                Step::Sleep(delay)
            }
            Next::Fail(error, withdraw) => {
                let bound = if matches!(error, Error::ResponseTimeout(_)) {
                    WITHDRAW_SEND
                } else {
                    RELEASE_LIMIT
                };
                let calls = if withdraw {
                    self.withdrawals(bound)
                } else {
                    Vec::new()
                };
                self.withdraw(calls, Some(error))
            }
        }
    }

    fn answered(&mut self, value: Value) -> Step<Option<Lock>> {
        if !self.waits_by_protocol() {
            let answer = if self.request.durable.is_some() {
                redis::from_redis_value::<(Option<i64>, i64)>(value)
                    .map(|(token, acked)| (token, Some(acked)))
            } else {
                redis::from_redis_value::<Option<i64>>(value).map(|token| (token, None))
            };
            return match answer {
                Ok((Some(token), acked)) => self.granted(token, acked),
                Ok((None, _)) => self.finish(Ok(None)),
                Err(e) => self.finish(Err(Error::UnexpectedReply(e.to_string()))),
            };
        }
        let (token, wake_ms, list) = match redis::from_redis_value::<(i64, u64, Vec<u8>)>(value) {
            Ok(reply) => reply,
            Err(e) => {
                let error = Error::UnexpectedReply(format!("lock_wait: {e}"));
                let calls = self.withdrawals(RELEASE_LIMIT);
                return self.withdraw(calls, Some(error));
            }
        };
        if token > 0 {
            return self.granted(token, None);
        }
        let mut block = Duration::from_millis(wake_ms.max(1));
        if let Some(deadline) = self.deadline {
            let now = Instant::now();
            if now >= deadline {
                // Leaves the queue, and ends a grant pushed but not collected.
                let calls = self.withdrawals(RELEASE_LIMIT);
                return self.withdraw(calls.into_iter().take(1).collect(), None);
            }
            block = block.min(deadline - now);
        }
        // Whatever BLPOP returns (a token, a wake-up, nothing), the next lock_wait
        // says whether the owner holds: the popped value is not trusted alone.
        // Redis 6.2 reads "0.001" as 0.999 ms, truncated to 0: BLPOP's "forever".
        let ms = block.as_millis().max(2);
        let seconds = format!("{}.{:03}", ms / 1000, ms % 1000);
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(list).arg(seconds);
        self.state = State::Blocked;
        Step::Send(cmd.into(), self.bound())
    }
}

impl Machine for Acquire {
    type Output = Option<Lock>;

    fn step(&mut self, input: Input) -> Step<Option<Lock>> {
        if matches!(input, Input::Start) {
            self.deadline = match self.request.wait {
                Wait::For(wait) if self.waits_by_protocol() => Instant::now().checked_add(wait),
                _ => None,
            };
        }
        let state = std::mem::replace(&mut self.state, State::Finished);
        match (state, input) {
            (State::Attempt, Input::Start | Input::Slept) => self.attempt(),
            (State::Asked, Input::Reply(Ok(value))) => self.answered(value),
            (State::Asked, Input::Reply(Err(error))) => self.failed(error),
            (State::Blocked, Input::Reply(Ok(_))) => self.attempt(),
            (State::Blocked, Input::Reply(Err(error))) => self.failed(error),
            (State::Replicating(lock), Input::Reply(reply)) => self.replicated(lock, reply),
            (State::Unreplicated(lock, acked), Input::Reply(reply)) => {
                let released = matches!(reply.map(read_flag), Ok(Ok(true)));
                lock.released(released);
                self.finish(Err(Error::NotReplicated {
                    key: lock.key.clone(),
                    wanted: self.request.durable.map_or(0, |d| d.replicas),
                    acked,
                    released,
                }))
            }
            (State::Refreshing(lock, again), Input::Reply(reply)) => {
                // A lease counted from the send of the acquire may have run out
                // during the wait already; the extend's starts afresh.
                let lock = match reply.map(read_flag) {
                    Ok(Ok(true)) => self.request.granted(lock.token, again),
                    _ => lock,
                };
                self.finish(Ok(Some(lock)))
            }
            (State::Withdrawing(calls, result), Input::Reply(_)) => self.withdraw(calls, result),
            (_, _) => Step::Done(Err(Error::UnexpectedReply(
                "the acquire was driven out of order".into(),
            ))),
        }
    }
}

/// `WAIT replicas timeout` for a durable request.
fn replicas_wait(durable: Durable) -> Cmd {
    let mut cmd = redis::cmd("WAIT");
    let timeout = crate::request::ceil_millis(durable.timeout, "replica timeout").unwrap_or(1);
    cmd.arg(durable.replicas).arg(timeout);
    cmd
}

/// The acquire, followed on the same connection by `WAIT replicas timeout` if the
/// request is durable (a connection per command, as `redis::Client`'s, still sends
/// the two on one).
fn with_replicas(acquire: Cmd, durable: Option<Durable>) -> Call {
    match durable {
        Some(durable) => {
            let mut pipe = redis::pipe();
            pipe.add_command(acquire)
                .add_command(replicas_wait(durable));
            Call::Pipe(pipe)
        }
        None => Call::One(acquire),
    }
}

/// A holding's kind as the protocol names it.
pub(crate) fn kind(shared: bool, limit: Option<u32>) -> Kind {
    match (shared, limit) {
        (_, Some(limit)) => Kind::Shared { limit: Some(limit) },
        (true, None) => Kind::Shared { limit: None },
        (false, None) => Kind::Exclusive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words of a command, for comparing.
    fn words(call: &Call) -> Vec<String> {
        let cmd = match call {
            Call::One(cmd) => cmd,
            Call::Pipe(pipe) => pipe.cmd_iter().next().expect("a command"),
        };
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    /// The commands a machine sent, as words, with their bounds.
    type Sent = Vec<(Vec<String>, Option<Duration>)>;

    /// Drives `machine` with `replies` (one per command it sends; pauses are
    /// skipped); the commands it sent, with their bounds, and its result.
    fn converse<M: Machine>(
        machine: M,
        replies: Vec<RedisResult<Value>>,
    ) -> (Sent, Result<M::Output>) {
        let mut replies = replies.into_iter();
        converse_with(machine, |_| {
            replies.next().expect("a reply for each command")
        })
    }

    /// Drives `machine`, each command answered by `reply`.
    fn converse_with<M: Machine>(
        mut machine: M,
        mut reply: impl FnMut(&[String]) -> RedisResult<Value>,
    ) -> (Sent, Result<M::Output>) {
        let mut sent = Vec::new();
        let mut input = Input::Start;
        loop {
            match machine.step(input) {
                Step::Send(cmd, bound) => {
                    let words = words(&cmd);
                    input = Input::Reply(reply(&words));
                    sent.push((words, bound));
                }
                Step::Sleep(_) => input = Input::Slept,
                Step::Done(result) => return (sent, result),
            }
        }
    }

    fn names(sent: &Sent) -> Vec<&str> {
        sent.iter().map(|(w, _)| w[0].as_str()).collect()
    }

    fn server_error(text: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap() {
            Value::ServerError(e) => e.into(),
            other => panic!("{other:?}"),
        }
    }

    fn timeout() -> RedisError {
        std::io::Error::from(std::io::ErrorKind::TimedOut).into()
    }

    fn wait_reply(token: i64, wake: i64) -> RedisResult<Value> {
        Ok(Value::Array(vec![
            Value::Int(token),
            Value::Int(wake),
            Value::BulkString(b"job{job}:lockg:me".to_vec()),
        ]))
    }

    fn request() -> Request {
        Request::new("job", Duration::from_secs(5)).owner("me")
    }

    #[test]
    fn the_module_waits_in_one_command_bounded_by_the_wait_and_margin() {
        let waiting = request().wait(Duration::from_millis(250));
        let (sent, lock) = converse(Acquire::new(waiting).unwrap(), vec![Ok(Value::Int(7))]);
        assert_eq!(
            sent[0].0,
            ["LOCK.ACQUIRE", "job", "me", "5000", "WAIT", "250"]
        );
        assert_eq!(sent[0].1, Some(Duration::from_millis(250) + WAIT_MARGIN));
        assert_eq!(lock.unwrap().unwrap().token(), 7);
        let (sent, busy) = converse(
            Acquire::new(request().limit(3)).unwrap(),
            vec![Ok(Value::Nil)],
        );
        assert_eq!(
            sent[0].0,
            ["LOCK.ACQUIRE", "job", "me", "5000", "LIMIT", "3"]
        );
        assert!(busy.unwrap().is_none());
    }

    #[test]
    fn the_library_waits_by_lock_wait_and_blpop_until_granted() {
        let asked = request()
            .backend(Backend::Functions)
            .shared()
            .wait(Duration::from_secs(10));
        let replies = vec![
            wait_reply(0, 1000),
            Ok(Value::Nil), // BLPOP timed out: ask again
            wait_reply(0, 40),
            Ok(Value::Array(vec![])), // popped: ask again
            wait_reply(42, 0),
        ];
        let (sent, lock) = converse(Acquire::new(asked).unwrap(), replies);
        assert_eq!(names(&sent), ["FCALL", "BLPOP", "FCALL", "BLPOP", "FCALL"]);
        assert_eq!(
            sent[0].0,
            ["FCALL", "lock_wait", "1", "job", "me", "5000", "SHARED"]
        );
        assert_eq!(sent[1].0, ["BLPOP", "job{job}:lockg:me", "1.000"]);
        assert_eq!(
            sent[3].0[2], "0.040",
            "wake_ms is followed, not a rhythm of its own"
        );
        for (_, bound) in &sent {
            let bound = bound.expect("every step of a timed wait is bounded");
            assert!(bound <= Duration::from_secs(10) + WAIT_MARGIN);
        }
        let lock = lock.unwrap().unwrap();
        assert_eq!((lock.token(), lock.backend()), (42, Backend::Functions));
    }

    #[test]
    fn a_blpop_never_asks_for_a_timeout_that_redis_6_2_reads_as_forever() {
        let asked = request()
            .backend(Backend::Scripts)
            .wait(Duration::from_secs(10));
        let replies = vec![wait_reply(0, 1), Ok(Value::Nil), wait_reply(7, 0)];
        let (sent, lock) = converse(Acquire::new(asked).unwrap(), replies);
        assert_eq!(sent[1].0, ["BLPOP", "job{job}:lockg:me", "0.002"]);
        assert!(lock.unwrap().is_some());
    }

    #[test]
    fn a_library_wait_that_runs_out_cancels_its_place() {
        let request = request()
            .backend(Backend::Scripts)
            .wait(Duration::from_millis(1));
        let (sent, result) = converse_with(Acquire::new(request).unwrap(), |words| {
            match words.get(4).map(String::as_str) {
                Some("lock_wait") => wait_reply(0, 1000),
                Some(_) => Ok(Value::Int(1)),
                None => {
                    std::thread::sleep(Duration::from_millis(2)); // BLPOP
                    Ok(Value::Nil)
                }
            }
        });
        // The deadline is taken when the machine starts, then passes during the BLPOP.
        assert!(result.unwrap().is_none());
        let last = &sent.last().unwrap().0;
        assert_eq!(last[0], "EVALSHA");
        assert_eq!(last[4], "lock_cancel", "{last:?}");
        assert!(
            sent.iter()
                .all(|(w, _)| w[0] != "EVALSHA" || w[4] != "lock_release"),
            "a given owner's holding is never released by a give-up"
        );
    }

    #[test]
    fn a_cut_library_wait_is_withdrawn_not_retried() {
        // A fresh owner: its grant, if any, is released too.
        let request = Request::new("job", Duration::from_secs(5))
            .backend(Backend::Functions)
            .wait(Duration::from_secs(10));
        let replies = vec![
            wait_reply(0, 1000),
            Err(timeout()),
            Ok(Value::Int(1)),
            Ok(Value::Int(0)),
        ];
        let (sent, result) = converse(Acquire::new(request).unwrap(), replies);
        assert!(
            matches!(result, Err(Error::ResponseTimeout(_))),
            "{result:?}"
        );
        let calls: Vec<&str> = sent
            .iter()
            .map(|(w, _)| w.get(1).map_or("", String::as_str))
            .collect();
        assert_eq!(
            calls,
            [
                "lock_wait",
                "job{job}:lockg:me",
                "lock_cancel",
                "lock_release"
            ]
        );
    }

    #[test]
    fn a_lost_reply_of_a_try_is_retried_as_the_same_owner() {
        let request = request().backend(Backend::Functions);
        let replies = vec![Err(timeout()), Ok(Value::Int(9))];
        let (sent, lock) = converse(Acquire::new(request).unwrap(), replies);
        assert_eq!(sent[0].0, sent[1].0);
        assert_eq!(
            sent[0].0,
            ["FCALL", "lock_acquire", "1", "job", "me", "5000"]
        );
        assert_eq!(lock.unwrap().unwrap().token(), 9);
    }

    #[test]
    fn noscript_loads_the_library_and_sends_the_call_again_once() {
        let request = request().backend(Backend::Scripts);
        let noscript = || Err(server_error("NOSCRIPT No matching script."));
        let replies = vec![
            noscript(),
            Ok(Value::SimpleString("sha".into())),
            Ok(Value::Int(3)),
        ];
        let (sent, lock) = converse(Acquire::new(request.clone()).unwrap(), replies);
        assert_eq!(names(&sent), ["EVALSHA", "SCRIPT", "EVALSHA"]);
        assert_eq!(sent[0], sent[2]);
        assert_eq!(lock.unwrap().unwrap().token(), 3);
        let replies = vec![
            noscript(),
            Ok(Value::SimpleString("sha".into())),
            noscript(),
        ];
        let (sent, result) = converse(Acquire::new(request).unwrap(), replies);
        assert_eq!(names(&sent), ["EVALSHA", "SCRIPT", "EVALSHA"]);
        assert!(result.is_err());
    }

    #[test]
    fn a_wrongtype_from_a_library_this_client_does_not_accept_says_so() {
        let extend =
            Backend::Functions.call("lock_extend", Some("k"), &[b"me".to_vec(), b"900".to_vec()]);
        let wrongtype = || {
            Err(server_error(
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ))
        };
        // An older library loaded over the one detected: it cannot read the lock.
        let replies = vec![wrongtype(), Ok(Value::Int(1))];
        let machine = Scripted::new(Single::new(extend.clone(), read_flag));
        let (sent, result) = converse(machine, replies);
        assert_eq!(sent[1].0, ["FCALL_RO", "lock_version", "0"]);
        assert!(
            matches!(result, Err(Error::LibraryTooOld { found: 1, .. })),
            "{result:?}"
        );
        // The library is one this client accepts: the key is someone else's.
        let replies = vec![wrongtype(), Ok(Value::Int(protocol::LIBRARY_VERSION))];
        let machine = Scripted::new(Single::new(extend.clone(), read_flag));
        let (sent, result) = converse(machine, replies);
        assert_eq!(sent.len(), 2);
        assert!(matches!(result, Err(Error::WrongType(_))), "{result:?}");
        // The scripts path carries this client's own library: nothing to ask.
        let script = Backend::Scripts.call("lock_extend", Some("k"), &[b"me".to_vec()]);
        let (sent, result) = converse(
            Scripted::new(Single::new(script, read_flag)),
            vec![wrongtype()],
        );
        assert_eq!(sent.len(), 1);
        assert!(matches!(result, Err(Error::WrongType(_))), "{result:?}");
    }

    #[test]
    fn a_call_that_finds_the_library_gone_is_made_through_the_scripts_path() {
        let extend =
            Backend::Functions.call("lock_extend", Some("k"), &[b"me".to_vec(), b"900".to_vec()]);
        let replies = vec![
            Err(server_error("ERR Function not found")),
            Err(server_error("NOSCRIPT No matching script.")),
            Ok(Value::SimpleString("sha".into())),
            Ok(Value::Int(0)),
        ];
        let (sent, gone) = converse(Scripted::new(Single::new(extend, read_flag)), replies);
        assert_eq!(names(&sent), ["FCALL", "EVALSHA", "SCRIPT", "EVALSHA"]);
        assert_eq!(
            sent[1].0,
            [
                "EVALSHA",
                script_sha(),
                "1",
                "k",
                "lock_extend",
                "me",
                "900"
            ]
        );
        assert_eq!(sent[1], sent[3]);
        assert!(
            !gone.unwrap(),
            "the scripts path's answer: the holding is gone"
        );
        // A wait's calls too, each through the scripts path while the library is gone.
        let request = request().backend(Backend::Functions);
        let replies = vec![
            Err(server_error("ERR Function not found")),
            Ok(Value::Array(vec![
                Value::Int(5),
                Value::Int(0),
                Value::BulkString(b"g".to_vec()),
            ])),
        ];
        let (sent, lock) = converse(
            Acquire::new(request.wait(Wait::For(Duration::from_secs(1)))).unwrap(),
            replies,
        );
        assert_eq!(names(&sent), ["FCALL", "EVALSHA"]);
        assert_eq!(lock.unwrap().unwrap().token(), 5);
    }

    #[test]
    fn a_durable_grant_waits_for_replicas_and_is_released_without_them() {
        let request =
            Request::new("job", Duration::from_secs(5)).durable(1, Duration::from_micros(10));
        let both = Ok(Value::Array(vec![Value::Int(5), Value::Int(0)]));
        let (sent, result) = converse(
            Acquire::new(request.clone()).unwrap(),
            vec![both, Ok(Value::Int(1))],
        );
        assert_eq!(names(&sent), ["LOCK.ACQUIRE", "LOCK.RELEASE"]);
        assert!(matches!(
            result,
            Err(Error::NotReplicated {
                released: true,
                acked: 0,
                ..
            })
        ));
        // After a library wait, WAIT follows the grant on the waiting connection.
        let waited = request
            .backend(Backend::Functions)
            .wait(Duration::from_secs(1));
        let replies = vec![wait_reply(5, 0), Ok(Value::Int(0)), Ok(Value::Int(1))];
        let (sent, result) = converse(Acquire::new(waited).unwrap(), replies);
        assert_eq!(names(&sent), ["FCALL", "WAIT", "FCALL"]);
        assert_eq!(sent[1].0, ["WAIT", "1", "1"]);
        assert!(matches!(
            result,
            Err(Error::NotReplicated {
                released: true,
                acked: 0,
                ..
            })
        ));
    }

    #[test]
    fn detection_prefers_the_module_then_functions_then_scripts() {
        let command = Ok(Value::Array(vec![Value::Array(vec![Value::Int(1)])]));
        let (sent, found) = converse(Detect::new(None), vec![command]);
        assert_eq!(sent.len(), 1);
        assert_eq!(found.unwrap(), Backend::Module);
        let none = Ok(Value::Array(vec![Value::Nil]));
        let current = Ok(Value::Int(protocol::LIBRARY_VERSION));
        let (sent, found) = converse(Detect::new(None), vec![none.clone(), current.clone()]);
        assert_eq!(sent[1].0, ["FCALL_RO", "lock_version", "0"]);
        assert_eq!(found.unwrap(), Backend::Functions);
        let replies = vec![
            none.clone(),
            Err(server_error("ERR Function not found")),
            Err(server_error("NOSCRIPT No matching script.")),
            Ok(Value::SimpleString("sha".into())),
            current,
        ];
        let (sent, found) = converse(Detect::new(None), replies);
        assert_eq!(
            names(&sent),
            ["COMMAND", "FCALL_RO", "EVALSHA", "SCRIPT", "EVALSHA"]
        );
        assert_eq!(found.unwrap(), Backend::Scripts);
        let old = converse(
            Detect::new(Some(Backend::Functions)),
            vec![Ok(Value::Int(0))],
        )
        .1;
        assert!(
            matches!(old, Err(Error::LibraryTooOld { found: 0, .. })),
            "{old:?}"
        );
        let newer = Ok(Value::Int(protocol::LIBRARY_VERSION + 1));
        let new = converse(Detect::new(Some(Backend::Functions)), vec![newer]).1;
        assert!(
            matches!(new, Err(Error::LibraryTooNew { found, .. }) if found == protocol::LIBRARY_VERSION + 1),
            "{new:?}"
        );
        let replies = vec![
            none,
            Err(server_error("ERR unknown command 'FCALL_RO'")),
            Err(server_error(
                "NOPERM this user has no permissions to run the 'evalsha' command",
            )),
        ];
        let error = converse(Detect::new(None), replies).1.unwrap_err();
        let text = error.to_string();
        assert!(text.contains("redis-lock functions load"), "{text}");
        assert!(text.contains("NOPERM"), "{text}");
    }
}
