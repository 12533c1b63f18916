//! The acquire, on any backend: attempt, wait, claim, give up.

use std::time::{Duration, Instant};

use redis::{Cmd, RedisError, RedisResult, Value};
use redis_lock_core::protocol;

use super::release::release_of;
use super::scripted::Scripted;
use super::single::read_flag;
use super::step::{Call, Input, Machine, Step};
use super::withdraw::withdrawals;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::lease::margin;
use crate::limits::{ceil_millis, CONNECT_LIMIT, RELEASE_LIMIT, WAIT_MARGIN, WITHDRAW_SEND};
use crate::lock::Lock;
use crate::request::{Durable, Next, Request};
use crate::wait::Wait;

/// An acquire, on any backend: attempt, wait, claim, give up.
///
/// - The module: `LOCK.ACQUIRE … [WAIT ms]`, one command that blocks in the server.
/// - The library without a wait: `lock_acquire`, answered at once.
/// - The library with a wait, the protocol of docs/PROTOCOL.md: `lock_wait` (a
///   place in the queue, or the lock), `BLPOP` on the waiter's grant list until the
///   `wake_ms` it named, again, until granted or the deadline, when `lock_cancel`
///   gives the place up. Each step has a bound of its own (a `lock_wait` the
///   control limit, a `BLPOP` its block and the wait margin), also in a wait
///   without a limit: a dead path ends the wait with an error instead of hanging
///   while the place lapses in the server.
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
    /// When its answer is due at the latest: the end of the wait and the margin.
    due: Option<Instant>,
    attempt: u32,
    /// When the last attempt (acquire, `lock_wait`) was sent.
    sent: Instant,
    /// The bound of the library wait's step out, when it is the step's own (not the
    /// end of the wait and the margin): a timeout there is a dead path, not a wait
    /// unanswered. Never on a caller's connection, whose own read timeout answers
    /// for the steps (the bound cannot be set there).
    step_bound: Option<Duration>,
    /// Sent on a connection whose read timeout is the caller's.
    on_callers_connection: bool,
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
            due: None,
            attempt: 0,
            sent: Instant::now(),
            step_bound: None,
            on_callers_connection: false,
            state: State::Attempt,
        }))
    }

    /// As [`Acquire::new`], on the caller's blocking connection: its read timeout,
    /// which this cannot set, bounds each step (a timeout is
    /// [`Error::ResponseTimeout`], the caller's to fix).
    pub(crate) fn on_callers_connection(request: Request) -> Result<Scripted<Acquire>> {
        let mut acquire = Acquire::new(request)?;
        acquire.inner_mut().on_callers_connection = true;
        Ok(acquire)
    }

    fn waits_by_protocol(&self) -> bool {
        self.backend.is_library() && self.request.wait.waits()
    }

    /// How long a step of a library wait may take: `step` at most, and never past the
    /// wait's end and the margin, so a server that hangs cannot stretch either.
    fn bound(&mut self, step: Duration) -> Option<Duration> {
        let left = self.due.map(|due| {
            due.saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10))
        });
        match left {
            Some(left) if left <= step => {
                self.step_bound = None;
                Some(left)
            }
            _ => {
                self.step_bound = (!self.on_callers_connection).then_some(step);
                Some(step)
            }
        }
    }

    fn attempt(&mut self) -> Step<Option<Lock>> {
        self.sent = Instant::now();
        self.state = State::Asked;
        let step_bound = self.waits_by_protocol().then(|| self.bound(CONNECT_LIMIT));
        let request = &self.request;
        let (call, bound) = if let Some(bound) = step_bound {
            let args = protocol::wait_args(
                request.owner.as_bytes(),
                request.ttl_ms(),
                request.kind(),
                None,
            );
            (args.map(|a| ("lock_wait", a)), bound)
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
            let bound = request.wait.answer_within();
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
            Ok(Ok(acked)) => match release_of(self.backend, &lock.key, &lock.owner) {
                Ok(call) => {
                    self.state = State::Unreplicated(lock, acked);
                    Step::Send(call.into(), Some(RELEASE_LIMIT))
                }
                Err(error) => self.finish(Err(error)),
            },
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

    /// The calls that take back what this request may have left, each given
    /// `bound`: its place in the library's queue if it waits there.
    fn withdrawals(&self, bound: Duration) -> Vec<(Cmd, Duration)> {
        withdrawals(&self.request, self.waits_by_protocol())
            .into_iter()
            .map(|call| (call, bound))
            .collect()
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
            // A timed wait whose step got no reply is a wait unanswered, as the
            // whole wait's bound would make it (`Wait::unanswered`); one without a
            // limit has no wait to name, and says which step went unanswered.
            let error = match (timed_out, self.step_bound, self.request.wait) {
                (true, Some(_), Wait::For(wait)) => Error::WaitUnanswered {
                    wait,
                    margin: WAIT_MARGIN,
                },
                (true, Some(step), _) => Error::Connection(step_unanswered(step)),
                (true, None, _) => Error::ResponseTimeout(error),
                (false, _, _) => Error::from(error),
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
        // At most one place lease (the library's own bound on `wake_ms`), so a step's
        // bound stays one the client knows whatever the reply says.
        let mut block = Duration::from_millis(wake_ms.clamp(1, protocol::MAX_PLACE_LEASE_MS));
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
        let bound = self.bound(
            block
                .max(Duration::from_millis(2))
                .saturating_add(WAIT_MARGIN),
        );
        Step::Send(cmd.into(), bound)
    }
}

impl Machine for Acquire {
    type Output = Option<Lock>;

    fn step(&mut self, input: Input) -> Step<Option<Lock>> {
        if matches!(input, Input::Start) && self.waits_by_protocol() {
            let now = Instant::now();
            if let Wait::For(wait) = self.request.wait {
                self.deadline = now.checked_add(wait);
            }
            self.due = self
                .request
                .wait
                .answer_within()
                .and_then(|within| now.checked_add(within));
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

/// The error of a library wait's step that got no reply within its own bound.
fn step_unanswered(step: Duration) -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no reply within {step:?} to a step of the library's wait (lock_wait, BLPOP): \
             the server hangs or the network drops everything; the wait was given up"
        ),
    )
    .into()
}

/// `WAIT replicas timeout` for a durable request.
fn replicas_wait(durable: Durable) -> Cmd {
    let mut cmd = redis::cmd("WAIT");
    let timeout = ceil_millis(durable.timeout, "replica timeout").unwrap_or(1);
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
