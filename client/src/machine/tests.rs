//! The machines driven by replies given in the test: the commands each sends, with
//! their bounds, and what it makes of the answers. No server, no I/O.

use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};
use redis_lock_core::protocol;

use super::guard::reply_as;
use super::single::read_flag;
use super::*;
use crate::backend::{script_sha, Backend};
use crate::error::{Error, Result};
use crate::limits::WAIT_MARGIN;
use crate::lock::Lock;
use crate::request::Request;
use crate::wait::Wait;
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
fn converse<M: Machine>(machine: M, replies: Vec<RedisResult<Value>>) -> (Sent, Result<M::Output>) {
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
    // The BLPOP's own bound (its second and the margin) ran out long before the
    // wait's: the path is dead, and the timed wait unanswered, as its whole bound
    // would have made it.
    assert!(
        matches!(&result, Err(Error::WaitUnanswered { wait, .. }) if *wait == Duration::from_secs(10)),
        "{result:?}"
    );
    assert_eq!(sent[1].1, Some(Duration::from_secs(1) + WAIT_MARGIN));
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
fn every_step_of_a_library_wait_without_a_limit_has_a_bound() {
    let forever = request().backend(Backend::Functions).wait(Wait::Forever);
    let replies = vec![
        wait_reply(0, 2000),
        Ok(Value::Nil),
        wait_reply(0, 1 << 40), // more than a place's lease: a server gone wrong
        Ok(Value::Nil),
        wait_reply(9, 0),
    ];
    let (sent, lock) = converse(Acquire::new(forever.clone()).unwrap(), replies);
    assert_eq!(lock.unwrap().unwrap().token(), 9);
    let control = Duration::from_millis(protocol::CONTROL_LIMIT_MS);
    let bounds: Vec<Option<Duration>> = sent.iter().map(|(_, bound)| *bound).collect();
    let lease = Duration::from_millis(protocol::MAX_PLACE_LEASE_MS);
    assert_eq!(
        bounds,
        [
            Some(control),
            Some(Duration::from_secs(2) + WAIT_MARGIN),
            Some(control),
            Some(lease + WAIT_MARGIN),
            Some(control),
        ]
    );
    // A step without a reply within its bound ends the wait, and its place is given
    // up (without waiting on a dead path).
    for unanswered in [1, 2] {
        let mut replies = vec![wait_reply(0, 2000), Ok(Value::Nil)];
        replies.truncate(unanswered - 1);
        replies.extend([Err(timeout()), Ok(Value::Int(1))]);
        let (sent, result) = converse(Acquire::new(forever.clone()).unwrap(), replies);
        assert!(
            matches!(&result, Err(Error::Connection(e)) if e.to_string().contains("no reply within")),
            "{result:?}"
        );
        let (last, bound) = sent.last().unwrap();
        assert_eq!(last[1], "lock_cancel");
        assert_eq!(*bound, Some(crate::limits::WITHDRAW_SEND));
    }
    // On a caller's connection its read timeout, not the step's bound, ran out.
    let replies = vec![wait_reply(0, 2000), Err(timeout()), Ok(Value::Int(1))];
    let callers = Acquire::on_callers_connection(forever).unwrap();
    let (_, result) = converse(callers, replies);
    assert!(
        matches!(result, Err(Error::ResponseTimeout(_))),
        "{result:?}"
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
    let request = Request::new("job", Duration::from_secs(5)).durable(1, Duration::from_micros(10));
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

fn held(backend: Backend, ttl: Duration) -> Lock {
    Lock::new("job", "me", 7, Instant::now(), ttl).on(backend)
}

#[test]
fn an_acknowledged_extend_moves_the_lease_and_a_refused_one_ends_it() {
    let lock = held(Backend::Functions, Duration::from_secs(1));
    let (sent, extended) = converse(
        Extend::new(&lock, Duration::from_secs(60)),
        vec![Ok(Value::Int(1))],
    );
    assert_eq!(
        sent[0].0,
        ["FCALL", "lock_extend", "1", "job", "me", "60000"]
    );
    assert!(extended.unwrap());
    assert_eq!(lock.ttl(), Duration::from_secs(60));
    assert!(lock.remaining() > Duration::from_secs(50), "{lock:?}");
    let (_, failed) = converse(
        Extend::new(&lock, Duration::from_secs(60)),
        vec![Err(timeout())],
    );
    assert!(matches!(failed, Err(Error::Connection(_))), "{failed:?}");
    assert!(!lock.is_lost(), "a failed extend loses nothing");
    let (_, refused) = converse(
        Extend::new(&lock, Duration::from_secs(60)),
        vec![Ok(Value::Int(0))],
    );
    assert!(!refused.unwrap());
    assert_eq!(lock.cause(), Some(crate::lease::LossCause::Refused));
    let zero = converse(Extend::new(&lock, Duration::ZERO), vec![]);
    assert!(zero.0.is_empty(), "a refused argument is not sent");
    assert!(matches!(zero.1, Err(Error::InvalidArgument(_))));
}

#[test]
fn a_release_ends_the_lease_and_an_owner_is_released_without_a_lock() {
    let lock = held(Backend::Module, Duration::from_secs(60));
    let (sent, released) = converse(Release::new(&lock), vec![Ok(Value::Int(1))]);
    assert_eq!(sent[0].0, ["LOCK.RELEASE", "job", "me"]);
    assert!(released.unwrap());
    assert_eq!(lock.cause(), Some(crate::lease::LossCause::Released));
    let (sent, released) = converse(
        Release::owner(Backend::Scripts, "job", "them"),
        vec![Ok(Value::Int(0))],
    );
    assert_eq!(
        sent[0].0,
        ["EVALSHA", script_sha(), "1", "job", "lock_release", "them"]
    );
    assert!(!released.unwrap());
}

#[test]
fn a_lock_of_another_process_is_neither_extended_nor_released() {
    let mut lock = held(Backend::Module, Duration::from_secs(60));
    lock.pid = lock.pid.wrapping_add(1);
    let (sent, extended) = converse(Extend::new(&lock, Duration::from_secs(60)), vec![]);
    assert!(sent.is_empty());
    assert!(!extended.unwrap());
    let (sent, released) = converse(Release::new(&lock), vec![]);
    assert!(sent.is_empty());
    assert!(!released.unwrap());
    assert!(
        !lock.is_lost(),
        "the holding is the parent's, which keeps it"
    );
}

#[test]
fn a_dropped_acquire_is_withdrawn_call_by_call_until_one_fails() {
    let fresh = Request::new("job", Duration::from_secs(5)).backend(Backend::Functions);
    let (sent, done) = converse(
        Withdraw::new(&fresh),
        vec![Ok(Value::Int(1)), Ok(Value::Int(0))],
    );
    let calls: Vec<&str> = sent.iter().map(|(w, _)| w[1].as_str()).collect();
    assert_eq!(calls, ["lock_cancel", "lock_release"]);
    assert!(done.is_ok());
    let (sent, done) = converse(Withdraw::new(&fresh), vec![Err(timeout())]);
    assert_eq!(sent.len(), 1, "a cut connection is not tried again");
    assert!(done.is_err());
    let module = Request::new("job", Duration::from_secs(5));
    let (sent, _) = converse(Withdraw::new(&module), vec![Ok(Value::Int(1))]);
    assert_eq!(names(&sent), ["LOCK.RELEASE"]);
    let (sent, _) = converse(Withdraw::new(&request()), vec![]);
    assert!(sent.is_empty(), "a given owner's holding is never released");
}

fn set(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg("v");
    cmd
}

#[test]
fn a_guarded_write_is_sent_once_and_its_reply_is_the_commands() {
    for (backend, words) in [
        (
            Backend::Module,
            vec!["LOCK.GUARD", "job", "7", "SET", "out", "v"],
        ),
        (
            Backend::Functions,
            vec![
                "FCALL",
                "lock_guard",
                "2",
                "job",
                "out",
                "7",
                "SET",
                "out",
                "v",
            ],
        ),
    ] {
        let lock = held(backend, Duration::from_secs(60));
        let (sent, reply) = converse(
            Guard::new(&lock, &["out"], &set("out")),
            vec![Ok(Value::Okay)],
        );
        assert_eq!(
            sent,
            [(words.iter().map(|w| w.to_string()).collect(), None)]
        );
        assert_eq!(reply.unwrap(), Value::Okay);
        let () = reply_as(Value::Okay).unwrap();
        let mismatch = reply_as::<i64>(Value::Okay).unwrap_err();
        assert!(
            mismatch.to_string().contains("type asked for"),
            "{mismatch}"
        );
        let (sent, reply) = converse(
            Guard::new(&lock, &["out"], &set("out")),
            vec![Err(timeout())],
        );
        assert_eq!(
            sent.len(),
            1,
            "a lost reply is not sent again: the write may have run"
        );
        assert!(matches!(reply, Err(Error::Connection(_))), "{reply:?}");
        assert!(!lock.is_lost());
    }
}

#[test]
fn fenced_is_its_own_error_and_ends_the_lease_at_once() {
    let lock = held(Backend::Module, Duration::from_secs(60));
    let refused = server_error("FENCED token 7 does not hold job: it is held with token 9");
    let (_, reply) = converse(Guard::new(&lock, &["out"], &set("out")), vec![Err(refused)]);
    let error = reply.unwrap_err();
    assert!(
        matches!(&error, Error::Fenced { key, token: 7, reason } if key == "job"
            && reason == "token 7 does not hold job: it is held with token 9"),
        "{error:?}"
    );
    assert!(error.to_string().contains("stop the work"), "{error}");
    assert!(lock.is_lost());
    assert_eq!(lock.cause(), Some(crate::lease::LossCause::Fenced));
    let (sent, reply) = converse(Guard::new(&lock, &["out"], &set("out")), vec![]);
    assert!(sent.is_empty(), "a lock known lost is not sent");
    assert!(matches!(reply, Err(Error::LockLost { .. })), "{reply:?}");
}

#[test]
fn a_guards_error_replies_say_what_they_are() {
    let lock = held(Backend::Module, Duration::from_secs(60));
    let guard = || Guard::new(&lock, &["{a}:out"], &set("{a}:out"));
    let cross = server_error("CROSSSLOT Keys in request don't hash to the same slot");
    let error = converse(guard(), vec![Err(cross)]).1.unwrap_err();
    assert!(matches!(error, Error::CrossSlot { .. }), "{error:?}");
    assert!(error.to_string().contains("hash tag"), "{error}");
    let wrongtype =
        server_error("WRONGTYPE Operation against a key holding the wrong kind of value");
    let error = converse(guard(), vec![Err(wrongtype)]).1.unwrap_err();
    assert!(
        matches!(error, Error::Server(_)),
        "the command's own: {error:?}"
    );
    assert!(!lock.is_lost(), "only FENCED loses the lock");
    for empty in [redis::Cmd::new(), {
        let mut c = redis::cmd("SCAN");
        c.cursor_arg(0);
        c
    }] {
        let (sent, reply) = converse(Guard::new(&lock, &["out"], &empty), vec![]);
        assert!(sent.is_empty());
        assert!(matches!(reply, Err(Error::InvalidArgument(_))), "{reply:?}");
    }
    let (sent, reply) = converse(
        Guard::token(Backend::Module, "job", 0, &["out"], &set("out")),
        vec![],
    );
    assert!(sent.is_empty());
    assert!(matches!(reply, Err(Error::InvalidArgument(_))), "{reply:?}");
}

#[test]
fn a_library_without_lock_guard_is_named_and_a_library_gone_goes_through_scripts() {
    let lock = held(Backend::Functions, Duration::from_secs(60));
    let missing = || Err(server_error("ERR Function not found"));
    let (sent, reply) = converse(
        Guard::new(&lock, &["out"], &set("out")),
        vec![missing(), Ok(Value::Int(3))],
    );
    assert_eq!(sent[1].0, ["FCALL_RO", "lock_version", "0"]);
    let error = reply.unwrap_err();
    assert!(
        matches!(error, Error::LibraryWithoutGuard { found: Some(3) }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("redis-lock functions load") && text.contains("(version 3)"),
        "{text}"
    );
    let (sent, reply) = converse(
        Guard::new(&lock, &["out"], &set("out")),
        vec![
            missing(),
            missing(),
            Err(server_error("NOSCRIPT No matching script")),
            Ok(Value::SimpleString("sha".into())),
            Ok(Value::Okay),
        ],
    );
    assert_eq!(
        names(&sent),
        ["FCALL", "FCALL_RO", "EVALSHA", "SCRIPT", "EVALSHA"]
    );
    assert_eq!(
        sent[2].0,
        [
            "EVALSHA",
            script_sha(),
            "2",
            "job",
            "out",
            "lock_guard",
            "7",
            "SET",
            "out",
            "v"
        ]
    );
    assert_eq!(reply.unwrap(), Value::Okay);
    let old_script = server_error("ERR unknown function 'lock_guard': expected lock_acquire");
    let scripts = held(Backend::Scripts, Duration::from_secs(60));
    let reply = converse(
        Guard::new(&scripts, &["out"], &set("out")),
        vec![Err(old_script)],
    )
    .1;
    assert!(
        matches!(reply, Err(Error::LibraryWithoutGuard { found: None })),
        "{reply:?}"
    );
}
