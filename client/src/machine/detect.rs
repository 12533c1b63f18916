//! Which backend a server offers: the module, the library, or the library as a
//! script.

use redis::{RedisError, Value};

use super::scripted::Scripted;
use super::step::{Input, Machine, Step};
use crate::backend::{check_version, Backend};
use crate::error::{is_connection_error, server_text, Error};

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

/// A connection failure ends the probing: the next backend would fail alike.
fn is_fatal(error: &RedisError) -> bool {
    is_connection_error(error)
}
