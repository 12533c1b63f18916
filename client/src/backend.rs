//! Where the lock lives on the server: the redis-lock module's `LOCK.*` commands, or
//! the `redislock` function library (`lua/redislock.lua`, docs/PROTOCOL.md) called
//! with `FCALL`, or the same library sent as a script and called with `EVALSHA`.
//!
//! A [`Backend`] only turns a call into the command that carries it; the arguments
//! after the key are the same on every backend (`redis_lock_core::protocol`).

use std::sync::OnceLock;

use redis::Cmd;
use redis_lock_core::protocol::{LIBRARY_VERSION, MIN_LIBRARY_VERSION};

use crate::error::{Error, Result};

/// The library, as `FUNCTION LOAD` takes it: the repository's one copy, built in.
pub const LIBRARY_SOURCE: &str = include_str!("../../lua/redislock.lua");

/// Which form of the lock a server offers, and the client uses.
///
/// A [`LockClient`](crate::LockClient) (and the `redis-lock` CLI) finds it out by
/// itself: the module if the server has it, else the function library if it is
/// loaded, else the library as a script. Force one with
/// [`LockClient::backend`](crate::LockClient::backend).
///
/// ```
/// use redis_lock_client::Backend;
///
/// assert_eq!("functions".parse::<Backend>().unwrap(), Backend::Functions);
/// assert_eq!(Backend::Scripts.to_string(), "scripts");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Backend {
    /// The redis-lock module: `LOCK.ACQUIRE`, … with waiting done in the server.
    #[default]
    Module,
    /// The `redislock` library loaded with `FUNCTION LOAD`: `FCALL lock_acquire`, …
    /// and the waiting protocol of docs/PROTOCOL.md.
    Functions,
    /// The same library sent by the client with `SCRIPT LOAD` and called with
    /// `EVALSHA` (Redis 6.2, or an ACL without `FUNCTION`); loaded again on
    /// `NOSCRIPT`.
    Scripts,
}

impl Backend {
    /// Every backend, in the order auto-detection tries them.
    pub const ALL: [Backend; 3] = [Backend::Module, Backend::Functions, Backend::Scripts];

    /// Its name: `module`, `functions` or `scripts`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Module => "module",
            Backend::Functions => "functions",
            Backend::Scripts => "scripts",
        }
    }

    /// True for the backends whose waits are the library's protocol (a
    /// conversation of calls and `BLPOP`s) rather than one blocking command.
    pub(crate) fn is_library(self) -> bool {
        self != Backend::Module
    }

    /// The command that asks who holds `key` on this backend (`LOCK.INFO key`,
    /// `FCALL_RO lock_info 1 key`, or its `EVALSHA`), for callers that pipeline it;
    /// [`LockInfo::from_reply`](crate::LockInfo::from_reply) reads the answer. The
    /// scripts backend needs the library sent first (`SCRIPT LOAD` of
    /// [`library_script`]).
    pub fn info_command(self, key: &[u8]) -> Cmd {
        // By hand rather than through `call`: a key found by SCAN is any bytes.
        let mut cmd = match self {
            Backend::Module => redis::cmd("LOCK.INFO"),
            Backend::Functions => {
                let mut cmd = redis::cmd("FCALL_RO");
                cmd.arg("lock_info").arg(1);
                cmd
            }
            Backend::Scripts => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(script_sha()).arg(1);
                cmd
            }
        };
        cmd.arg(key);
        if self == Backend::Scripts {
            cmd.arg("lock_info");
        }
        cmd
    }

    /// The command that makes library call `function` (`lock_acquire`, …) on `key`
    /// (none for `lock_version`) with `args`, on this backend.
    pub(crate) fn call(self, function: &str, key: Option<&str>, args: &[Vec<u8>]) -> Cmd {
        let mut cmd = match self {
            Backend::Module => {
                let name = match function {
                    "lock_acquire" => "LOCK.ACQUIRE",
                    "lock_release" => "LOCK.RELEASE",
                    "lock_extend" => "LOCK.EXTEND",
                    _ => "LOCK.INFO",
                };
                let mut cmd = redis::cmd(name);
                cmd.arg(key);
                cmd
            }
            Backend::Functions => {
                let read_only = matches!(function, "lock_info" | "lock_version");
                let mut cmd = redis::cmd(if read_only { "FCALL_RO" } else { "FCALL" });
                cmd.arg(function).arg(usize::from(key.is_some())).arg(key);
                cmd
            }
            Backend::Scripts => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(script_sha())
                    .arg(usize::from(key.is_some()))
                    .arg(key)
                    .arg(function);
                cmd
            }
        };
        for arg in args {
            cmd.arg(arg.as_slice());
        }
        cmd
    }

    /// The guarded write of `command` (its name and arguments) on this backend, while
    /// `token` holds the lock at `key`: `LOCK.GUARD key token command…` (the module
    /// finds the command's keys itself), or the library's `lock_guard` with `keys`,
    /// the keys the command touches, declared after the lock key (`FCALL lock_guard
    /// n key keys… token command…`, or its `EVALSHA`).
    pub(crate) fn guard(self, key: &str, keys: &[Vec<u8>], token: i64, command: &[Vec<u8>]) -> Cmd {
        let mut cmd = match self {
            Backend::Module => {
                let mut cmd = redis::cmd("LOCK.GUARD");
                cmd.arg(key);
                cmd
            }
            Backend::Functions => {
                let mut cmd = redis::cmd("FCALL");
                cmd.arg("lock_guard").arg(1 + keys.len()).arg(key);
                cmd
            }
            Backend::Scripts => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(script_sha()).arg(1 + keys.len()).arg(key);
                cmd
            }
        };
        if self.is_library() {
            for data in keys {
                cmd.arg(data.as_slice());
            }
        }
        if self == Backend::Scripts {
            cmd.arg("lock_guard");
        }
        cmd.arg(token);
        for arg in command {
            cmd.arg(arg.as_slice());
        }
        cmd
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = Error;

    fn from_str(name: &str) -> Result<Backend> {
        Backend::ALL
            .into_iter()
            .find(|backend| backend.name() == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "backend {name:?}: expected module, functions or scripts"
                ))
            })
    }
}

/// The library as `SCRIPT LOAD` takes it: without its `#!lua` line, which Lua 5.1
/// cannot parse (docs/PROTOCOL.md, "Loading").
pub fn library_script() -> &'static str {
    redis_lock_core::protocol::library_script(LIBRARY_SOURCE)
}

/// The SHA1 of [`library_script`], which `EVALSHA` calls it by.
pub(crate) fn script_sha() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| redis::Script::new(library_script()).get_hash().to_string())
}

/// `SCRIPT LOAD` of the library.
pub(crate) fn script_load() -> Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(library_script());
    cmd
}

/// `FUNCTION LOAD REPLACE` of the library: installs or upgrades it.
pub fn function_load() -> Cmd {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg("REPLACE").arg(LIBRARY_SOURCE);
    cmd
}

/// The version a library answered `lock_version` with, checked against the
/// versions this client accepts ([`LIBRARY_VERSIONS`](crate::LIBRARY_VERSIONS)).
pub(crate) fn check_version(found: i64) -> Result<()> {
    let (min, max) = (MIN_LIBRARY_VERSION, LIBRARY_VERSION);
    if found < min {
        return Err(Error::LibraryTooOld { found, min, max });
    }
    if found > max {
        return Err(Error::LibraryTooNew { found, min, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect()
    }

    #[test]
    fn each_backend_carries_the_same_arguments() {
        let args = vec![b"me".to_vec(), b"500".to_vec()];
        assert_eq!(
            words(&Backend::Module.call("lock_extend", Some("job"), &args)),
            ["LOCK.EXTEND", "job", "me", "500"]
        );
        assert_eq!(
            words(&Backend::Functions.call("lock_extend", Some("job"), &args)),
            ["FCALL", "lock_extend", "1", "job", "me", "500"]
        );
        assert_eq!(
            words(&Backend::Functions.call("lock_version", None, &[])),
            ["FCALL_RO", "lock_version", "0"]
        );
        let sha = script_sha().to_string();
        assert_eq!(
            words(&Backend::Scripts.call("lock_info", Some("job"), &[])),
            ["EVALSHA", sha.as_str(), "1", "job", "lock_info"]
        );
        assert_eq!(sha.len(), 40);
    }

    #[test]
    fn a_guard_declares_its_keys_on_the_library_only() {
        let keys = vec![b"{job}:out".to_vec(), b"{job}:n".to_vec()];
        let set = vec![b"SET".to_vec(), b"{job}:out".to_vec(), b"v".to_vec()];
        assert_eq!(
            words(&Backend::Module.guard("{job}", &keys, 17, &set)),
            ["LOCK.GUARD", "{job}", "17", "SET", "{job}:out", "v"]
        );
        assert_eq!(
            words(&Backend::Functions.guard("{job}", &keys, 17, &set)),
            [
                "FCALL",
                "lock_guard",
                "3",
                "{job}",
                "{job}:out",
                "{job}:n",
                "17",
                "SET",
                "{job}:out",
                "v"
            ]
        );
        let sha = script_sha().to_string();
        assert_eq!(
            words(&Backend::Scripts.guard("{job}", &[], 17, &set)),
            [
                "EVALSHA",
                sha.as_str(),
                "1",
                "{job}",
                "lock_guard",
                "17",
                "SET",
                "{job}:out",
                "v"
            ]
        );
    }

    #[test]
    fn the_info_command_is_the_info_call() {
        for backend in Backend::ALL {
            assert_eq!(
                words(&backend.info_command(b"job")),
                words(&backend.call("lock_info", Some("job"), &[])),
                "{backend}"
            );
        }
    }

    #[test]
    fn the_script_is_the_library_without_its_first_line() {
        assert!(LIBRARY_SOURCE.starts_with("#!lua name=redislock"));
        assert!(!library_script().starts_with("#!"));
        assert!(LIBRARY_SOURCE.ends_with(library_script()));
    }

    #[test]
    fn a_library_out_of_range_is_refused_naming_its_version_the_range_and_what_to_do() {
        let old = check_version(MIN_LIBRARY_VERSION - 1).unwrap_err();
        let text = old.to_string();
        assert!(matches!(old, Error::LibraryTooOld { .. }), "{old:?}");
        assert!(
            text.contains(&format!("version {}, older", MIN_LIBRARY_VERSION - 1)),
            "{text}"
        );
        assert!(text.contains("redis-lock functions load"), "{text}");
        let new = check_version(LIBRARY_VERSION + 1).unwrap_err();
        let text = new.to_string();
        assert!(matches!(new, Error::LibraryTooNew { .. }), "{new:?}");
        assert!(
            text.contains(&format!("version {}, newer", LIBRARY_VERSION + 1)),
            "{text}"
        );
        assert!(text.contains("upgrade this client"), "{text}");
        for text in [old.to_string(), new.to_string()] {
            let range = if MIN_LIBRARY_VERSION == LIBRARY_VERSION {
                format!("(version {LIBRARY_VERSION})")
            } else {
                format!("(versions {MIN_LIBRARY_VERSION} to {LIBRARY_VERSION})")
            };
            assert!(text.contains(&range), "{text}");
        }
        for version in MIN_LIBRARY_VERSION..=LIBRARY_VERSION {
            assert!(check_version(version).is_ok());
        }
    }
}
