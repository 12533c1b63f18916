//! The one redis-server launcher of the project's tests, torture run, benchmarks and
//! demo: a real redis-server with the freshly built module, on a free loopback port,
//! in its own directory, stopped when the guard drops (also when a test fails).
//! A server counts as started when it answers `PING` and its `INFO server` names the
//! process this launcher spawned, so a port taken by someone else is never mistaken
//! for ours.
//!
//! With the `tls` feature, [`Config::tls`] makes a server that also listens for TLS on
//! a second port, with a CA and a server certificate made for it at start (the plain
//! port stays, for the readiness check and for tests that look on).
//!
//! `REDIS_SERVER` picks another server binary (a Redis 7.2, 8.x or Valkey build);
//! `REDIS_LOCK_MODULE` another module file.

pub mod postgres;
pub mod proxy;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult, Value};
use tempfile::TempDir;

/// The module file under test. Unless `REDIS_LOCK_MODULE` names one, the debug build
/// is brought up to date first: `cargo test` alone does not rebuild a `cdylib`.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("REDIS_LOCK_MODULE") {
        return PathBuf::from(path);
    }
    let root = workspace_root();
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "--lib", "-p", "redis-lock"])
            .current_dir(&root)
            .status()
            .expect("cargo build");
        assert!(status.success(), "building the module failed");
    });
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let path = target.join("debug").join("libredis_lock.so");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build` (or `make test`) first",
        path.display()
    );
    path
}

/// The directory of the workspace's Cargo.lock, above the crate under test.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .unwrap_or(manifest)
        .to_path_buf()
}

fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// How to start a server.
#[derive(Clone, Default)]
pub struct Config {
    /// Extra `--name value` server settings.
    pub settings: Vec<(String, String)>,
    /// Module arguments (`max-ttl 1000`).
    pub module_args: Vec<String>,
    /// Start a plain Redis, without the module.
    pub without_module: bool,
    /// The module file, instead of [`module_path()`].
    pub module: Option<PathBuf>,
    /// The server binary, instead of `REDIS_SERVER` or `redis-server`.
    pub binary: Option<String>,
    /// Files and directories copied into the server's directory before it starts
    /// (an RDB or AOF for it to load).
    pub preload: Vec<PathBuf>,
    /// Environment variables of the server process.
    pub env: Vec<(String, String)>,
    /// Also listen for TLS ([`Config::tls`]).
    pub tls: bool,
}

impl Config {
    pub fn set(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.into(), value.into()));
        self
    }

    pub fn module_arg(mut self, name: &str, value: &str) -> Self {
        self.module_args.push(name.into());
        self.module_args.push(value.into());
        self
    }

    pub fn without_module(mut self) -> Self {
        self.without_module = true;
        self
    }

    /// The module to load (a relative path is taken from the current directory: the
    /// server runs in a directory of its own).
    pub fn module_file(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        self.module = Some(std::fs::canonicalize(&path).unwrap_or(path));
        self
    }

    /// Copies `path` (a file or a directory) into the server's directory before it
    /// starts: `dump.rdb` or `appendonlydir` are then loaded.
    pub fn preload(mut self, path: impl Into<PathBuf>) -> Self {
        self.preload.push(path.into());
        self
    }

    /// Sets an environment variable of the server process.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    pub fn binary(mut self, binary: impl Into<String>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Also listen for TLS on [`Server::tls_port`], with a server certificate for
    /// `localhost` and `127.0.0.1` signed by a CA made for this server
    /// ([`Server::tls_ca`]); clients need no certificate of their own.
    #[cfg(feature = "tls")]
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Append-only file, fsynced on every write, no RDB snapshots.
    pub fn aof(self) -> Self {
        self.set("appendonly", "yes").set("appendfsync", "always")
    }
}

/// A running redis-server, killed on drop.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    /// The TLS port of a server started with [`Config::tls`].
    pub tls_port: Option<u16>,
    config: Config,
    dir: TempDir,
}

impl Server {
    pub fn start() -> Server {
        Server::with(Config::default())
    }

    pub fn with(config: Config) -> Server {
        Server::try_with(config)
            .unwrap_or_else(|error| panic!("redis-server did not start: {error}"))
    }

    /// Starts a server, or says why it did not (with its log): for tests of a
    /// start-up that must fail.
    pub fn try_with(config: Config) -> Result<Server, String> {
        let dir = tempfile::tempdir().expect("temp dir");
        for path in &config.preload {
            copy_into(path, dir.path())
                .map_err(|e| format!("preloading {}: {e}", path.display()))?;
        }
        if config.tls {
            tls::write_certificates(&dir.path().join(tls::DIR))
                .map_err(|e| format!("making the TLS certificates: {e}"))?;
        }
        let mut last_error = String::new();
        for _ in 0..20 {
            let port = portpicker::pick_unused_port().expect("a free port");
            let tls_port = config.tls.then(|| loop {
                let tls_port = portpicker::pick_unused_port().expect("a free port");
                if tls_port != port {
                    break tls_port;
                }
            });
            // A cluster node also listens on port + 10000 (the cluster bus).
            let clustered = config
                .settings
                .iter()
                .any(|(k, v)| k == "cluster-enabled" && v == "yes");
            if clustered && (port > 55_000 || !port_free(port + 10_000)) {
                continue;
            }
            match spawn(dir.path(), port, tls_port, &config) {
                Ok(child) => {
                    return Ok(Server {
                        child: Some(child),
                        port,
                        tls_port,
                        config,
                        dir,
                    })
                }
                // A server that exited for another reason than its port will not
                // start on another one either.
                Err(error)
                    if error.starts_with("exited") && !error.contains("Address already in use") =>
                {
                    return Err(error)
                }
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The `rediss://` URL of the TLS port (certificates checked against
    /// [`Server::tls_ca`]; add `#insecure` to skip the check).
    pub fn tls_url(&self) -> String {
        let port = self.tls_port.expect("a server started with Config::tls");
        format!("rediss://127.0.0.1:{port}/")
    }

    /// The PEM file of the CA that signed the TLS port's certificate.
    pub fn tls_ca(&self) -> PathBuf {
        self.dir.path().join(tls::DIR).join(tls::CA)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    /// A connection whose reads time out after [`READ_TIMEOUT`]: a reply that never
    /// comes (a waiter nobody answers) fails the test instead of hanging the suite.
    /// A test that blocks longer on purpose sets its own timeout.
    pub fn connection(&self) -> Connection {
        with_read_timeout(self.client().get_connection().expect("connection"))
    }

    pub fn resp3_connection(&self) -> Connection {
        let con = redis::Client::open(format!("{}?protocol=resp3", self.url()))
            .expect("client")
            .get_connection()
            .expect("RESP3 connection");
        with_read_timeout(con)
    }

    /// The pid of the running server process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the server process (SIGSTOP): it keeps its connections but answers
    /// nothing until [`Server::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
        }
    }

    /// Kills the server with SIGKILL: no shutdown save, no goodbye.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (so it reloads its RDB
    /// or AOF), after killing it if it still runs.
    pub fn restart(&mut self) {
        self.kill();
        let child = spawn(self.dir.path(), self.port, self.tls_port, &self.config)
            .unwrap_or_else(|error| panic!("redis-server did not restart: {error}"));
        self.child = Some(child);
    }

    /// Starts the server again on the same port and directory, with `config`.
    pub fn restart_with(&mut self, config: Config) {
        self.config = config;
        self.restart();
    }

    /// Makes this server a replica of `master` and waits until the link is up and
    /// the first sync is done.
    pub fn replicate_from(&self, master: &Server) {
        let mut con = self.connection();
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(master.port)
            .query(&mut con)
            .expect("REPLICAOF");
        wait_until(Duration::from_secs(20), || {
            info_field(&mut con, "replication", "master_link_status").as_deref() == Some("up")
        });
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    /// Asks the server to shut down (SIGTERM), so that a server under valgrind can
    /// report leaks; kills it if it has not exited within the grace period.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(if slow_server() { 60 } else { 5 });
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Copies a file, or a directory and what it holds, into `dir`.
fn copy_into(path: &Path, dir: &Path) -> std::io::Result<()> {
    let name = path.file_name().unwrap_or_default();
    let target = dir.join(name);
    if path.is_dir() {
        std::fs::create_dir_all(&target)?;
        for entry in std::fs::read_dir(path)? {
            copy_into(&entry?.path(), &target)?;
        }
        Ok(())
    } else {
        std::fs::copy(path, target).map(|_| ())
    }
}

/// How long a test connection waits for a reply (ten times that under valgrind).
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

fn with_read_timeout(con: Connection) -> Connection {
    let limit = if slow_server() {
        READ_TIMEOUT * 10
    } else {
        READ_TIMEOUT
    };
    con.set_read_timeout(Some(limit)).expect("read timeout");
    con
}

/// True when the server runs under a slow harness (valgrind): tests widen their
/// timing bounds.
pub fn slow_server() -> bool {
    std::env::var_os("MEMCHECK_LOGS").is_some()
}

fn port_free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// True for a Redis 6 server binary (from `--version`).
fn is_redis_6(binary: &str) -> bool {
    Command::new(binary)
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(" v=6."))
}

fn spawn(dir: &Path, port: u16, tls_port: Option<u16>, config: &Config) -> Result<Child, String> {
    let binary = config.binary.clone().unwrap_or_else(server_binary);
    let mut command = Command::new(&binary);
    command
        .current_dir(dir)
        .args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--dir", &dir.display().to_string()])
        .args(["--logfile", "redis.log"])
        .args(["--save", ""])
        .args(["--repl-diskless-sync-delay", "0"]);
    // Redis 6.2 has DEBUG on by default and refuses the setting that guards it.
    if !is_redis_6(&binary) {
        command.args(["--enable-debug-command", "local"]);
    }
    if !config.without_module {
        command
            .arg("--loadmodule")
            .arg(config.module.clone().unwrap_or_else(module_path))
            .args(&config.module_args);
    }
    if let Some(tls_port) = tls_port {
        let file = |name: &str| dir.join(tls::DIR).join(name).display().to_string();
        command
            .args(["--tls-port", &tls_port.to_string()])
            .args(["--tls-cert-file", &file(tls::CERT)])
            .args(["--tls-key-file", &file(tls::KEY)])
            .args(["--tls-ca-cert-file", &file(tls::CA)])
            .args(["--tls-auth-clients", "no"]);
    }
    for (name, value) in &config.settings {
        command.arg(format!("--{name}")).arg(value);
    }
    command.envs(config.env.iter().map(|(k, v)| (k, v)));
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run {binary}: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(if slow_server() { 120 } else { 20 });
    let url = format!("redis://127.0.0.1:{port}/");
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
            return Err(format!("exited with {status}; log:\n{log}"));
        }
        let answering = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
            .and_then(|mut con| {
                // PING answers LOADING while an AOF or RDB is still being read.
                redis::cmd("PING").query::<String>(&mut con)?;
                Ok(info_field(&mut con, "server", "process_id"))
            });
        if let Ok(pid) = answering {
            if pid.as_deref() == Some(child.id().to_string().as_str()) {
                return Ok(child);
            }
            // Another process answers on this port: ours could not bind it.
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "port {port} is taken by another server (process_id {pid:?})"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    Err("not answering PING after 20 s".into())
}

/// Polls `condition` every 10 ms until it holds; panics after `limit` (ten times
/// that under valgrind).
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) {
    let limit = if slow_server() { limit * 10 } else { limit };
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "condition not met within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One field of `INFO section`.
/// Calls of `command` so far (`INFO commandstats`), 0 before the first.
pub fn command_calls(con: &mut Connection, command: &str) -> u64 {
    info_field(con, "commandstats", &format!("cmdstat_{command}"))
        .and_then(|stat| {
            stat.split(',')
                .find_map(|part| part.strip_prefix("calls=")?.parse().ok())
        })
        .unwrap_or(0)
}

pub fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").arg(section).query(con).ok()?;
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .find(|(name, _)| *name == field)
        .map(|(_, value)| value.to_string())
}

/// A counter of `INFO lock` (`lock_<name>`).
pub fn lock_stat(con: &mut Connection, name: &str) -> i64 {
    info_field(con, "lock", &format!("lock_{name}"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO lock has no lock_{name}"))
}

pub fn acquire(con: &mut Connection, key: &str, owner: &str, ttl: i64) -> Option<i64> {
    redis::cmd("LOCK.ACQUIRE")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(con)
        .expect("LOCK.ACQUIRE")
}

pub fn release(con: &mut Connection, key: &str, owner: &str) -> i64 {
    redis::cmd("LOCK.RELEASE")
        .arg(key)
        .arg(owner)
        .query(con)
        .expect("LOCK.RELEASE")
}

pub fn extend(con: &mut Connection, key: &str, owner: &str, ttl: i64) -> i64 {
    redis::cmd("LOCK.EXTEND")
        .arg(key)
        .arg(owner)
        .arg(ttl)
        .query(con)
        .expect("LOCK.EXTEND")
}

/// LOCK.INFO as (field, value) pairs, whichever protocol the connection speaks.
pub fn lock_info(con: &mut Connection, key: &str) -> Option<LockInfo> {
    let value: Value = redis::cmd("LOCK.INFO")
        .arg(key)
        .query(con)
        .expect("LOCK.INFO");
    LockInfo::from_value(value)
}

/// The fields of a LOCK.INFO reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// `exclusive` or `shared`.
    pub mode: String,
    /// The holdings, oldest first.
    pub holders: Vec<Holder>,
    /// The first holding's owner, ttl and token (an exclusive lock's, as version 1
    /// of the reply gave them).
    pub owner: Vec<u8>,
    pub ttl: i64,
    pub token: i64,
    pub waiters: i64,
    /// The first waiters, longest-waiting first.
    pub queue: Vec<Queued>,
}

/// One waiter in a LOCK.INFO reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub owner: Vec<u8>,
    /// `exclusive` or `shared`.
    pub mode: String,
    /// Its LIMIT, if it gave one.
    pub limit: Option<i64>,
    /// Milliseconds since it joined the queue.
    pub waited: i64,
}

impl Queued {
    fn from_value(value: Value) -> Queued {
        let mut queued = Queued {
            owner: Vec::new(),
            mode: String::new(),
            limit: None,
            waited: i64::MIN,
        };
        for (name, value) in pairs(value) {
            match name.as_str() {
                "owner" => queued.owner = redis::from_redis_value(value).expect("owner"),
                "mode" => queued.mode = redis::from_redis_value(value).expect("mode"),
                "limit" => queued.limit = Some(redis::from_redis_value(value).expect("limit")),
                "waited" => queued.waited = redis::from_redis_value(value).expect("waited"),
                other => panic!("unexpected waiter field {other}"),
            }
        }
        assert!(queued.waited >= 0, "{queued:?}");
        assert!(
            ["exclusive", "shared"].contains(&queued.mode.as_str()),
            "{queued:?}"
        );
        assert!(
            queued.limit.is_none() || queued.mode == "shared",
            "{queued:?}"
        );
        queued
    }
}

/// One holding in a LOCK.INFO reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub owner: Vec<u8>,
    pub ttl: i64,
    pub token: i64,
    /// The LIMIT a shared holding was granted with, if any.
    pub limit: Option<i64>,
}

/// Field/value pairs of a map (RESP3) or flat array (RESP2).
fn pairs(value: Value) -> Vec<(String, Value)> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "odd RESP2 field/value array");
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            pairs
        }
        other => panic!("expected a map, got {other:?}"),
    };
    pairs
        .into_iter()
        .map(|(k, v)| (redis::from_redis_value(k).expect("field name"), v))
        .collect()
}

impl Holder {
    fn from_value(value: Value) -> Holder {
        let mut holder = Holder {
            owner: Vec::new(),
            ttl: i64::MIN,
            token: i64::MIN,
            limit: None,
        };
        for (name, value) in pairs(value) {
            match name.as_str() {
                "owner" => holder.owner = redis::from_redis_value(value).expect("owner"),
                "ttl" => holder.ttl = redis::from_redis_value(value).expect("ttl"),
                "token" => holder.token = redis::from_redis_value(value).expect("token"),
                "limit" => holder.limit = Some(redis::from_redis_value(value).expect("limit")),
                other => panic!("unexpected holder field {other}"),
            }
        }
        assert!(
            holder.ttl != i64::MIN && holder.token != i64::MIN,
            "{holder:?}"
        );
        holder
    }
}

impl LockInfo {
    pub fn from_value(value: Value) -> Option<LockInfo> {
        if value == Value::Nil {
            return None;
        }
        let mut info = LockInfo {
            mode: String::new(),
            holders: Vec::new(),
            owner: Vec::new(),
            ttl: i64::MIN,
            token: i64::MIN,
            waiters: i64::MIN,
            queue: Vec::new(),
        };
        let mut queue_listed = false;
        for (name, value) in pairs(value) {
            match name.as_str() {
                "owner" => info.owner = redis::from_redis_value(value).expect("owner"),
                "ttl" => info.ttl = redis::from_redis_value(value).expect("ttl"),
                "token" => info.token = redis::from_redis_value(value).expect("token"),
                "waiters" => info.waiters = redis::from_redis_value(value).expect("waiters"),
                "mode" => info.mode = redis::from_redis_value(value).expect("mode"),
                "holders" => {
                    let Value::Array(items) = value else {
                        panic!("holders is not an array: {value:?}");
                    };
                    info.holders = items.into_iter().map(Holder::from_value).collect();
                }
                "queue" => {
                    queue_listed = true;
                    let items = match value {
                        Value::Array(items) => items,
                        // An empty Lua table is an empty array, but RESP3 may see a map.
                        Value::Map(pairs) if pairs.is_empty() => Vec::new(),
                        other => panic!("queue is not an array: {other:?}"),
                    };
                    info.queue = items.into_iter().map(Queued::from_value).collect();
                }
                other => panic!("unexpected LOCK.INFO field {other}"),
            }
        }
        assert!(info.waiters != i64::MIN, "{info:?}");
        assert!(queue_listed, "no queue: {info:?}");
        assert_eq!(
            info.queue.len() as i64,
            info.waiters.min(10),
            "the first 10 waiters are listed: {info:?}"
        );
        assert!(!info.holders.is_empty(), "a lock has a holding: {info:?}");
        match info.mode.as_str() {
            "exclusive" => {
                // Version 1's fields are there, and say what the one holding says.
                assert_eq!(info.holders.len(), 1, "{info:?}");
                let holder = &info.holders[0];
                assert_eq!((&info.owner, info.token), (&holder.owner, holder.token));
                assert!(info.ttl != i64::MIN);
            }
            "shared" => {
                assert!(
                    info.ttl == i64::MIN,
                    "no version-1 fields for shared holdings"
                );
                let first = info.holders[0].clone();
                (info.owner, info.ttl, info.token) = (first.owner, first.ttl, first.token);
            }
            other => panic!("unexpected mode {other:?}"),
        }
        Some(info)
    }
}

pub fn query<T: redis::FromRedisValue>(con: &mut Connection, args: &[&str]) -> RedisResult<T> {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(con)
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    query(con, &["PTTL", key]).expect("PTTL")
}

pub fn dbsize(con: &mut Connection) -> i64 {
    query(con, &["DBSIZE"]).expect("DBSIZE")
}

/// A Redis Cluster of `masters` nodes on loopback, each with the module, all slots
/// assigned by `redis-cli --cluster create`.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start(masters: usize) -> Cluster {
        Cluster::start_with(masters, Config::default())
    }

    /// A Cluster whose nodes start from `config` (e.g. [`Config::without_module`]).
    pub fn start_with(masters: usize, config: Config) -> Cluster {
        let config = config
            .set("cluster-enabled", "yes")
            .set("cluster-config-file", "nodes.conf")
            .set("cluster-node-timeout", "5000");
        let nodes: Vec<Server> = (0..masters).map(|_| Server::with(config.clone())).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            output.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_until_ok();
        cluster
    }

    /// Waits until every node sees the cluster as ok and agrees on the slots.
    pub fn wait_until_ok(&self) {
        wait_until(Duration::from_secs(30), || {
            self.nodes.iter().all(|node| {
                let mut con = node.connection();
                info_field_cluster(&mut con).as_deref() == Some("ok")
            })
        });
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// The node id of node `i`.
    pub fn id(&self, i: usize) -> String {
        query(&mut self.nodes[i].connection(), &["CLUSTER", "MYID"]).expect("CLUSTER MYID")
    }

    pub fn slot(&self, key: &str) -> i64 {
        query(
            &mut self.nodes[0].connection(),
            &["CLUSTER", "KEYSLOT", key],
        )
        .expect("KEYSLOT")
    }

    /// The index of the node that serves `key`.
    pub fn owner_of(&self, key: &str) -> usize {
        let slot = self.slot(key);
        let slots: Vec<(i64, i64, Vec<redis::Value>)> =
            query(&mut self.nodes[0].connection(), &["CLUSTER", "SLOTS"]).expect("CLUSTER SLOTS");
        let port = slots
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .and_then(|(_, _, master)| master.get(1).cloned())
            .and_then(|port| redis::from_redis_value::<u16>(port).ok())
            .expect("a node serves every slot");
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("a known node")
    }
}

fn info_field_cluster(con: &mut Connection) -> Option<String> {
    let text: String = redis::cmd("CLUSTER").arg("INFO").query(con).ok()?;
    text.lines()
        .find_map(|line| line.trim_end().strip_prefix("cluster_state:"))
        .map(str::to_string)
}

/// Stores a lock of `owner` with `token` at `key` (expiring at `expires_at`, Unix ms,
/// or never), the way a client with RESTORE rights can: a DUMP payload built for it.
/// A restored lock raises the server's token mark to its token, so tests use this to
/// push the mark far above the clock (LOCK.APPLY, the module's replay command, is
/// refused from clients).
pub fn restore_lock(
    con: &mut Connection,
    key: &str,
    owner: &[u8],
    token: i64,
    expires_at: Option<i64>,
) -> RedisResult<()> {
    let payload = lock_payload(con, &same_slot_as(key), owner, token);
    let mut restore = redis::cmd("RESTORE");
    restore
        .arg(key)
        .arg(expires_at.unwrap_or(0))
        .arg(payload)
        .arg("REPLACE");
    if expires_at.is_some() {
        restore.arg("ABSTTL");
    }
    restore.query(con)
}

/// Raises the server's token mark to `token` with a lock that is restored and then
/// deleted, so nothing in the keyspace carries it.
pub fn raise_token_mark(con: &mut Connection, token: i64) {
    restore_lock(con, "testkit:mark", b"testkit", token, None).expect("RESTORE of a lock");
    let _: i64 = query(con, &["DEL", "testkit:mark"]).expect("DEL");
    assert!(lock_stat(con, "last_token") >= token);
}

/// A DUMP payload of a lock value: the module type and encoding version as this
/// server writes them (taken from a DUMP of a real lock), the owner as a string, the
/// token as an unsigned integer, the end opcode, then the RDB version and CRC-64.
/// `probe` names the key the real lock is taken at for a moment; in a cluster it
/// must hash to a slot of the connected node.
pub fn lock_payload(con: &mut Connection, probe: &str, owner: &[u8], token: i64) -> Vec<u8> {
    // Mode exclusive, one holding: owner, token, expiry 0 (and no limit).
    payload_of(con, probe, 0, &[(owner, token, 0)])
}

/// A DUMP payload of a shared lock with these holdings (owner, token, absolute
/// expiry in Unix ms), oldest first, written as the module writes one, whatever
/// they are: for tests of what a load refuses. `probe` as for [`lock_payload`].
pub fn shared_lock_payload(
    con: &mut Connection,
    probe: &str,
    holdings: &[(&[u8], i64, i64)],
) -> Vec<u8> {
    payload_of(con, probe, 1, holdings)
}

/// A DUMP payload of a lock in the server's encoding (version 2 or 3): `mode` (0
/// exclusive, 1 shared), the holdings' count, then each holding's owner, token,
/// expiry and (version 3) limit 0.
fn payload_of(
    con: &mut Connection,
    probe: &str,
    mode: u64,
    holdings: &[(&[u8], i64, i64)],
) -> Vec<u8> {
    let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg(probe)
        .arg("probe")
        .arg(60_000)
        .query(con)
        .expect("LOCK.ACQUIRE of the probe");
    let real: Vec<u8> = query(con, &["DUMP", probe]).expect("DUMP");
    let _: i64 = query(con, &["DEL", probe]).expect("DEL");
    // [type 7][0x81][8-byte module id] ... [2-byte RDB version][8-byte CRC-64]
    let type_and_id = &real[..10];
    let version = &real[real.len() - 10..real.len() - 8];
    // Module values encode every integer, signed or not, as an unsigned one.
    const OPCODE_UINT: u8 = 2;
    const OPCODE_STRING: u8 = 5;
    const OPCODE_EOF: u8 = 0;
    let mut value = type_and_id.to_vec();
    for n in [mode, holdings.len() as u64] {
        value.push(OPCODE_UINT);
        value.extend(rdb_len(n));
    }
    // The module id ends with the encoding version (its low 10 bits): from version
    // 3 on, each holding ends with its limit (0: none).
    let id = u64::from_be_bytes(type_and_id[2..10].try_into().expect("module id"));
    let encver = id & 1023;
    for (owner, token, expires_at) in holdings {
        value.push(OPCODE_STRING);
        value.extend(rdb_len(owner.len() as u64));
        value.extend_from_slice(owner);
        let limit = (encver >= 3).then_some(0);
        for n in [*token, *expires_at].into_iter().chain(limit) {
            value.push(OPCODE_UINT);
            value.extend(rdb_len(n as u64));
        }
    }
    value.push(OPCODE_EOF);
    seal_payload(&value, version)
}

/// A DUMP payload's footer: the RDB version, then a CRC-64 of everything before it.
pub fn seal_payload(value: &[u8], rdb_version: &[u8]) -> Vec<u8> {
    let mut payload = [value, rdb_version].concat();
    let crc = crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

/// A key name in the same cluster slot as `key`: one with the same hash tag.
fn same_slot_as(key: &str) -> String {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty());
    match tag {
        Some(tag) => format!("{{{tag}}}testkit:probe"),
        None => format!("{{{key}}}testkit:probe"),
    }
}

/// A length as RDB encodes it (`rdbSaveLen`).
fn rdb_len(len: u64) -> Vec<u8> {
    match len {
        0..=63 => vec![len as u8],
        64..=16383 => vec![0x40 | (len >> 8) as u8, len as u8],
        16384..=0xffff_ffff => [&[0x80][..], &(len as u32).to_be_bytes()].concat(),
        _ => [&[0x81][..], &len.to_be_bytes()].concat(),
    }
}

/// The certificates of a TLS server, made fresh in its directory: nothing secret is
/// kept in the repository.
mod tls {
    pub const DIR: &str = "tls";
    pub const CA: &str = "ca.crt";
    pub const CERT: &str = "server.crt";
    pub const KEY: &str = "server.key";

    #[cfg(feature = "tls")]
    pub fn write_certificates(dir: &std::path::Path) -> Result<(), String> {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let error = |e: rcgen::Error| e.to_string();
        let mut ca = CertificateParams::new(Vec::new()).map_err(error)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "redis-lock testkit CA");
        let ca =
            CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(error)?).map_err(error)?;
        let key = KeyPair::generate().map_err(error)?;
        let server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .map_err(error)?
            .signed_by(&key, &ca)
            .map_err(error)?;
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        for (name, pem) in [
            (CA, ca.pem()),
            (CERT, server.pem()),
            (KEY, key.serialize_pem()),
        ] {
            std::fs::write(dir.join(name), pem).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Without the feature no [`Config`](super::Config) asks for TLS.
    #[cfg(not(feature = "tls"))]
    pub fn write_certificates(_: &std::path::Path) -> Result<(), String> {
        Err("redis-lock-testkit was built without its tls feature".into())
    }
}

/// The `redislock` function library (`lua/redislock.lua`), as `FUNCTION LOAD` takes it.
pub fn library_source() -> String {
    let path = workspace_root().join("lua").join("redislock.lua");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The library as `SCRIPT LOAD` takes it: without its `#!lua` line, which Lua 5.1
/// does not skip.
pub fn library_script() -> String {
    redis_lock_core::protocol::library_script(&library_source()).to_string()
}

/// Loads (or replaces) the library on the server behind `con`.
pub fn load_library(con: &mut Connection) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_source())
        .query(con)
        .expect("FUNCTION LOAD");
    assert_eq!(name, "redislock");
}

/// The lock backend the client's and the CLI's suites run on, from
/// `REDIS_LOCK_BACKEND`: `module` (the default), `functions` (a plain server with the
/// `redislock` library loaded) or `scripts` (a plain server: the client sends the
/// library itself; `REDIS62_SERVER` names a Redis 6.2 to run it on).
pub fn backend_name() -> String {
    match std::env::var("REDIS_LOCK_BACKEND") {
        Ok(name) if !name.is_empty() => {
            assert!(
                ["module", "functions", "scripts"].contains(&name.as_str()),
                "REDIS_LOCK_BACKEND={name:?}: expected module, functions or scripts"
            );
            name
        }
        _ => "module".into(),
    }
}

/// True when the suites run on the module: tests of what only the module has
/// (`INFO lock`, keyspace events, its type) say so and pass on the others.
pub fn on_module(test: &str) -> bool {
    let backend = backend_name();
    if backend != "module" {
        eprintln!("{test}: skipped on the {backend} backend (module only)");
        return false;
    }
    true
}

/// A server for the backend under test ([`backend_name`]).
pub fn lock_server() -> Server {
    lock_server_with(Config::default())
}

/// [`lock_server`] with more settings.
pub fn lock_server_with(config: Config) -> Server {
    match backend_name().as_str() {
        "functions" => {
            let server = Server::with(config.without_module());
            load_library(&mut server.connection());
            server
        }
        "scripts" => {
            let config = match std::env::var("REDIS62_SERVER") {
                Ok(binary) if !binary.is_empty() && config.binary.is_none() => {
                    config.binary(binary)
                }
                _ => config,
            };
            Server::with(config.without_module())
        }
        _ => Server::with(config),
    }
}

/// Where `make deps` builds Redis 6.2 (tests/redis62/build): the default
/// `REDIS62_SERVER`, target/redis-6.2/redis-server in the workspace.
pub fn redis62_default() -> PathBuf {
    workspace_root()
        .join("target")
        .join("redis-6.2")
        .join("redis-server")
}

/// The Redis 6.2 server binary for the scripts backend's own tests: `REDIS62_SERVER`,
/// else [`redis62_default`] if present; `None` (say why and skip) if neither is
/// there, as before `make deps` on a machine with Debian's 7.0 only.
pub fn redis62_server() -> Option<String> {
    let binary = std::env::var("REDIS62_SERVER")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| redis62_default().display().to_string());
    if Path::new(&binary).exists() {
        return Some(binary);
    }
    eprintln!(
        "skipped: no Redis 6.2 at {binary} (make deps builds it; or set REDIS62_SERVER \
         to run the scripts path on 6.2)"
    );
    None
}

/// The call of `function` (`lock_acquire`, `lock_release`, `lock_extend`,
/// `lock_info`) on `key` for the backend under test, for tests that send raw
/// calls: `LOCK.ACQUIRE key`, `FCALL lock_acquire 1 key` or `EVAL <library> 1 key
/// lock_acquire`. The arguments after the key follow.
pub fn lock_cmd(function: &str, key: &str) -> redis::Cmd {
    match backend_name().as_str() {
        "module" => {
            let name = function.trim_start_matches("lock_").to_ascii_uppercase();
            let mut cmd = redis::cmd(&format!("LOCK.{name}"));
            cmd.arg(key);
            cmd
        }
        "functions" => {
            let mut cmd = redis::cmd(if function == "lock_info" {
                "FCALL_RO"
            } else {
                "FCALL"
            });
            cmd.arg(function).arg(1).arg(key);
            cmd
        }
        _ => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(library_script()).arg(1).arg(key).arg(function);
            cmd
        }
    }
}

/// What a shell script passes to `redis-cli` to read a lock's info on the backend
/// under test, before the key: `LOCK.INFO` or `FCALL_RO lock_info 1` (the scripts
/// backend has no loaded library to call: use the functions one there).
pub fn info_cli() -> &'static str {
    if backend_name() == "module" {
        "LOCK.INFO"
    } else {
        "FCALL_RO lock_info 1"
    }
}
