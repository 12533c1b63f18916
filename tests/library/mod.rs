//! The `redislock` function library as the tests call it: the same call through the
//! module's commands, `FCALL` or `EVALSHA`, and a small driver of the waiting
//! protocol of docs/PROTOCOL.md.

#![allow(dead_code)] // each test file uses part of it

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::{Cmd, Connection, RedisResult, Value};
use redis_lock_testkit::{library_script, LockInfo};

/// How a server is asked for a lock.
#[derive(Clone, Debug)]
pub enum Backend {
    /// `LOCK.ACQUIRE` and the rest of the module's commands.
    Module,
    /// `FCALL lock_acquire 1 key …`.
    Functions,
    /// `EVALSHA sha 1 key lock_acquire …`, with the sha of the library loaded by
    /// `SCRIPT LOAD`.
    Scripts(String),
}

impl Backend {
    /// Loads the library with `SCRIPT LOAD` and returns the scripts backend.
    pub fn scripts(con: &mut Connection) -> Backend {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(library_script())
            .query(con)
            .expect("SCRIPT LOAD");
        Backend::Scripts(sha)
    }

    /// The call of library function `function` on `key` (or no key) with `args`.
    pub fn cmd(&self, function: &str, key: Option<&str>, args: &[&[u8]]) -> Cmd {
        let mut cmd = match self {
            Backend::Module => {
                let name = match function {
                    "lock_acquire" => "LOCK.ACQUIRE",
                    "lock_release" => "LOCK.RELEASE",
                    "lock_extend" => "LOCK.EXTEND",
                    "lock_info" => "LOCK.INFO",
                    other => panic!("the module has no {other}"),
                };
                let mut cmd = redis::cmd(name);
                cmd.arg(key);
                cmd
            }
            Backend::Functions => {
                let mut cmd = redis::cmd(if function == "lock_info" {
                    "FCALL_RO"
                } else {
                    "FCALL"
                });
                cmd.arg(function).arg(usize::from(key.is_some())).arg(key);
                cmd
            }
            Backend::Scripts(sha) => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(sha)
                    .arg(usize::from(key.is_some()))
                    .arg(key)
                    .arg(function);
                cmd
            }
        };
        for arg in args {
            cmd.arg(*arg);
        }
        cmd
    }

    pub fn call(
        &self,
        con: &mut Connection,
        function: &str,
        key: &str,
        args: &[&str],
    ) -> RedisResult<Value> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd(function, Some(key), &args).query(con)
    }

    /// A guarded command: `LOCK.GUARD key token command…`, or `lock_guard` with the
    /// lock key and `data` (the keys the command touches) declared.
    pub fn guard(
        &self,
        con: &mut Connection,
        key: &str,
        data: &[&str],
        token: &str,
        command: &[&str],
    ) -> RedisResult<Value> {
        let mut cmd = match self {
            Backend::Module => {
                let mut cmd = redis::cmd("LOCK.GUARD");
                cmd.arg(key);
                cmd
            }
            Backend::Functions => {
                let mut cmd = redis::cmd("FCALL");
                cmd.arg("lock_guard").arg(1 + data.len()).arg(key).arg(data);
                cmd
            }
            Backend::Scripts(sha) => {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(sha)
                    .arg(1 + data.len())
                    .arg(key)
                    .arg(data)
                    .arg("lock_guard");
                cmd
            }
        };
        cmd.arg(token).arg(command).query(con)
    }

    /// An acquire without waiting: the token, or `None`.
    pub fn acquire(
        &self,
        con: &mut Connection,
        key: &str,
        owner: &str,
        ttl: i64,
        mode: &[&str],
    ) -> RedisResult<Option<i64>> {
        let ttl = ttl.to_string();
        let mut args = vec![owner, ttl.as_str()];
        args.extend_from_slice(mode);
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd("lock_acquire", Some(key), &args).query(con)
    }

    pub fn release(&self, con: &mut Connection, key: &str, owner: &str) -> i64 {
        self.cmd("lock_release", Some(key), &[owner.as_bytes()])
            .query(con)
            .expect("release")
    }

    pub fn extend(&self, con: &mut Connection, key: &str, owner: &str, ttl: i64) -> i64 {
        let ttl = ttl.to_string();
        self.cmd(
            "lock_extend",
            Some(key),
            &[owner.as_bytes(), ttl.as_bytes()],
        )
        .query(con)
        .expect("extend")
    }

    pub fn info(&self, con: &mut Connection, key: &str) -> Option<LockInfo> {
        let value: Value = self
            .cmd("lock_info", Some(key), &[])
            .query(con)
            .expect("info");
        LockInfo::from_value(value)
    }
}

/// Tokens of the module and of the library compared by their order, per key: the
/// library's tokens are per key (docs/PROTOCOL.md, "Tokens"), so two grants on two
/// keys may get equal tokens on one side and not on the other. Within a key, each
/// module token maps to one library token, in the same order.
#[derive(Default)]
pub struct TokenOrder(BTreeMap<String, Vec<(i64, i64)>>);

impl TokenOrder {
    /// Whether `module` and `library`, as a pair of tokens of `key`, keep the order
    /// of every pair seen before on that key.
    pub fn consistent(&self, key: &str, module: i64, library: i64) -> bool {
        self.0.get(key).is_none_or(|pairs| {
            pairs
                .iter()
                .all(|&(m, l)| (m == module) == (l == library) && (m < module) == (l < library))
        })
    }

    /// The last token seen on `key`, the module's (`module`) or the library's.
    pub fn last(&self, key: &str, module: bool) -> Option<i64> {
        let &(m, l) = self.0.get(key)?.last()?;
        Some(if module { m } else { l })
    }

    /// Checks the pair and remembers it.
    pub fn check(&mut self, key: &str, module: i64, library: i64, what: &str) {
        assert!(
            self.consistent(key, module, library),
            "{what}: token {module} (module) / {library} (library) out of order with {:?}",
            self.0.get(key)
        );
        self.0
            .entry(key.to_string())
            .or_default()
            .push((module, library));
    }
}

/// What a waiter asks for.
#[derive(Clone, Debug)]
pub struct WaitRequest {
    pub key: String,
    pub owner: String,
    pub ttl: i64,
    /// `[]`, `["SHARED"]` or `["LIMIT", "n"]`.
    pub mode: Vec<String>,
    /// The queue place's lease (`LEASE ms`); the library's default when `None`.
    pub lease_ms: Option<i64>,
    /// Gives up (and cancels) after this long; waits without limit when `None`.
    pub timeout: Option<Duration>,
}

impl WaitRequest {
    pub fn new(key: &str, owner: &str, ttl: i64) -> WaitRequest {
        WaitRequest {
            key: key.into(),
            owner: owner.into(),
            ttl,
            mode: Vec::new(),
            lease_ms: None,
            timeout: None,
        }
    }
}

/// The waiting protocol (docs/PROTOCOL.md) on `con`, which must have no read
/// timeout shorter than a renewal: `lock_wait` until it replies a token, blocking on
/// the grant list in between for what the server said; on `timeout`, `lock_cancel`.
/// Returns the token, or `None` after a timeout.
pub fn wait_acquire(
    con: &mut Connection,
    backend: &Backend,
    request: &WaitRequest,
) -> RedisResult<Option<i64>> {
    let deadline = request.timeout.map(|t| Instant::now() + t);
    let ttl = request.ttl.to_string();
    let lease = request.lease_ms.map(|ms| ms.to_string());
    let mut args: Vec<&[u8]> = vec![request.owner.as_bytes(), ttl.as_bytes()];
    args.extend(request.mode.iter().map(|m| m.as_bytes()));
    if let Some(lease) = &lease {
        args.extend([&b"LEASE"[..], lease.as_bytes()]);
    }
    loop {
        let (token, wake_ms, list): (i64, i64, Vec<u8>) = backend
            .cmd("lock_wait", Some(&request.key), &args)
            .query(con)?;
        if token > 0 {
            return Ok(Some(token));
        }
        let mut block = Duration::from_millis(u64::try_from(wake_ms.max(1)).unwrap_or(1));
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _: i64 = backend
                    .cmd(
                        "lock_cancel",
                        Some(&request.key),
                        &[request.owner.as_bytes()],
                    )
                    .query(con)?;
                return Ok(None);
            }
            block = block.min(left);
        }
        // A grant (a token) or a wake-up ("0"): either way, ask again.
        let seconds = format!("{:.3}", block.as_secs_f64().max(0.001));
        let _: Option<(Vec<u8>, Vec<u8>)> =
            redis::cmd("BLPOP").arg(&list).arg(seconds).query(con)?;
    }
}

/// A connection for a waiter: no read timeout (it blocks on purpose).
pub fn waiter_connection(url: &str) -> Connection {
    let con = redis::Client::open(url)
        .expect("client")
        .get_connection()
        .expect("connection");
    con.set_read_timeout(None).expect("read timeout");
    con
}

/// Loads the library on a fresh plain server and returns both.
pub fn library_server(
    config: redis_lock_testkit::Config,
) -> (redis_lock_testkit::Server, Connection) {
    let server = redis_lock_testkit::Server::with(config.without_module());
    let mut con = server.connection();
    redis_lock_testkit::load_library(&mut con);
    (server, con)
}

/// An earlier library as it was last committed: version 1 or 2
/// (tests/fixtures/redislock-v<n>.lua).
pub fn library_version(version: u32) -> String {
    let path = format!(
        "{}/tests/fixtures/redislock-v{version}.lua",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `FUNCTION LOAD REPLACE` of `source`.
pub fn load_source(con: &mut Connection, source: &str) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(source)
        .query(con)
        .expect("FUNCTION LOAD");
    assert_eq!(name, "redislock");
}
