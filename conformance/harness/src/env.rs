//! The backends a scenario runs on, the servers behind each, the faults the harness
//! injects into them, and what it reads from them on its own connection.

use std::sync::Arc;
use std::time::Duration;

use redis::{Connection, Value};
use redis_lock_testkit::postgres::Postgres;
use redis_lock_testkit::proxy::Proxy;
use redis_lock_testkit::{Cluster, Config, Server};
use serde_json::{json, Map};

/// The restrictive ACL user of the `acl` backend: the rules docs/PROTOCOL.md ("ACL")
/// gives a user of the library by `FCALL` (its calls, `BLPOP`, and the commands the
/// library runs inside them), with `EVALSHA` beside them, and the lock's key pattern.
/// Nothing else: no `FUNCTION`, `SCRIPT LOAD`, `COMMAND` or `INFO`.
pub const ACL_USER: &str = "locker";
pub const ACL_PASSWORD: &str = "conformance-pw";

/// The `acl` backend's rules, from docs/PROTOCOL.md's `# functions` line, for keys
/// under `conf:`.
pub fn acl_rules(root: &std::path::Path) -> Result<Vec<String>, String> {
    let path = root.join("docs").join("PROTOCOL.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let line = text
        .lines()
        .skip_while(|l| l.trim() != "# functions")
        .find(|l| l.starts_with("ACL SETUSER "))
        .ok_or_else(|| {
            format!(
                "{}: no ACL SETUSER line after `# functions`",
                path.display()
            )
        })?;
    let mut rules: Vec<String> = line
        .split_whitespace()
        .skip(3) // ACL SETUSER <user>
        .map(|rule| match rule {
            r if r.starts_with('~') => "~conf:*".to_string(),
            r if r.starts_with('>') => format!(">{ACL_PASSWORD}"),
            r => r.to_string(),
        })
        .collect();
    if !rules.iter().any(|r| r == "+evalsha") {
        rules.push("+evalsha".into());
    }
    Ok(rules)
}

/// Where the lock lives, as the table's columns name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Debian's redis-server with the module (and the library loaded beside it, so
    /// that detection must prefer the module).
    Module,
    /// A plain redis-server with the library loaded.
    Functions,
    /// A plain Redis 6.2: the client sends the library itself.
    Scripts,
    /// A 3-master Cluster with the module.
    Cluster,
    /// The library, used by an ACL user limited to the library's calls.
    Acl,
}

impl Backend {
    pub const ALL: [Backend; 5] = [
        Backend::Module,
        Backend::Functions,
        Backend::Scripts,
        Backend::Cluster,
        Backend::Acl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Module => "module",
            Backend::Functions => "functions",
            Backend::Scripts => "scripts",
            Backend::Cluster => "cluster",
            Backend::Acl => "acl",
        }
    }

    pub fn parse(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }

    /// The backend a client must detect here.
    pub fn detected(self) -> &'static str {
        match self {
            Backend::Module | Backend::Cluster => "module",
            Backend::Functions | Backend::Acl => "functions",
            Backend::Scripts => "scripts",
        }
    }

    /// The capabilities a client needs to run anything here.
    pub fn needs(self) -> &'static [&'static str] {
        match self {
            Backend::Module => &["module"],
            Backend::Functions => &["functions"],
            Backend::Scripts => &["scripts"],
            Backend::Cluster => &["cluster", "module"],
            Backend::Acl => &["auth", "functions"],
        }
    }

    /// True where the lock is the library's (side keys, the waiting protocol).
    pub fn is_library(self) -> bool {
        !matches!(self, Backend::Module | Backend::Cluster)
    }
}

/// The Redis 6.2 binary of the scripts backend, if there is one: `REDIS62_SERVER`,
/// else target/redis-6.2/redis-server, which `make deps` builds.
pub fn redis62() -> Option<String> {
    let binary = std::env::var("REDIS62_SERVER")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| redis_lock_testkit::redis62_default().display().to_string());
    std::path::Path::new(&binary).exists().then_some(binary)
}

/// Why `backend` cannot run on this machine, if so.
pub fn unavailable(backend: Backend) -> Option<String> {
    match backend {
        Backend::Scripts if redis62().is_none() => Some(
            "no Redis 6.2 (make deps builds target/redis-6.2/redis-server; or set REDIS62_SERVER)"
                .into(),
        ),
        Backend::Cluster if which("redis-cli").is_none() => {
            Some("no redis-cli to create the Cluster".into())
        }
        _ => None,
    }
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.exists())
    })
}

/// The table the adapters' fenced PostgreSQL writes go to (`fence_postgres`): one
/// value per resource.
pub const WRITES_TABLE: &str = "conformance_writes";

/// A PostgreSQL server for the run, with the fence table (fence/postgresql/table.sql,
/// as every client's helper expects it) and [`WRITES_TABLE`].
pub fn start_postgres(root: &std::path::Path) -> Result<Postgres, String> {
    let pg = Postgres::start()?;
    let table = std::fs::read_to_string(root.join("fence/postgresql/table.sql"))
        .map_err(|e| format!("fence/postgresql/table.sql: {e}"))?;
    pg.sql(&table)?;
    pg.sql(&format!(
        "CREATE TABLE IF NOT EXISTS {WRITES_TABLE} (resource text PRIMARY KEY, value text NOT NULL)"
    ))?;
    Ok(pg)
}

/// The servers of one scenario run.
pub struct Env {
    pub backend: Backend,
    server: Option<Server>,
    cluster: Option<Arc<Cluster>>,
    proxy: Option<Proxy>,
    /// Every key of the run starts with it (`conf:…`, the ACL user's pattern).
    pub prefix: String,
    acl: Vec<String>,
}

impl Env {
    /// Servers for `backend`; `aof`: persistence that survives a restart. A Cluster is
    /// shared between runs (`cluster`), each with keys of its own.
    pub fn start(
        backend: Backend,
        aof: bool,
        cluster: Option<Arc<Cluster>>,
        prefix: String,
        acl: &[String],
    ) -> Result<Env, String> {
        let config = if aof {
            Config::default().aof()
        } else {
            Config::default()
        };
        let server = match backend {
            Backend::Module => {
                let server = Server::try_with(config)?;
                load_library(&mut connection(&server)?, None)?;
                Some(server)
            }
            Backend::Functions | Backend::Acl => {
                let server = Server::try_with(config.without_module())?;
                let mut con = connection(&server)?;
                load_library(&mut con, None)?;
                if backend == Backend::Acl {
                    set_acl_user(&mut con, acl)?;
                }
                Some(server)
            }
            Backend::Scripts => {
                let binary = redis62().ok_or("no Redis 6.2")?;
                Some(Server::try_with(config.without_module().binary(binary))?)
            }
            Backend::Cluster => None,
        };
        if backend == Backend::Cluster && cluster.is_none() {
            return Err("no Cluster started".into());
        }
        Ok(Env {
            backend,
            server,
            cluster,
            proxy: None,
            prefix,
            acl: acl.to_vec(),
        })
    }

    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The fields of an actor's `open`: where to connect, as whom.
    pub fn open_fields(
        &mut self,
        via_proxy: bool,
    ) -> Result<Map<String, serde_json::Value>, String> {
        let mut fields = Map::new();
        match (&self.server, &self.cluster) {
            (Some(server), _) => {
                let url = if via_proxy {
                    if self.proxy.is_none() {
                        self.proxy = Some(Proxy::start(server.port));
                    }
                    self.proxy.as_ref().map(Proxy::url).unwrap_or_default()
                } else {
                    server.url()
                };
                fields.insert("url".into(), json!(url));
            }
            (None, Some(cluster)) => {
                if via_proxy {
                    return Err("no proxy in front of a Cluster".into());
                }
                fields.insert("cluster".into(), json!(cluster.urls()));
            }
            (None, None) => return Err("no server".into()),
        }
        if self.backend == Backend::Acl {
            fields.insert("username".into(), json!(ACL_USER));
            fields.insert("password".into(), json!(ACL_PASSWORD));
        }
        fields.insert("backend".into(), json!("auto"));
        Ok(fields)
    }

    fn server(&self) -> Result<&Server, String> {
        self.server
            .as_ref()
            .ok_or_else(|| format!("no single server on the {} backend", self.backend.name()))
    }

    /// A connection of the harness's own (the default user) to the node that
    /// serves `key`.
    pub fn admin(&self, key: &str) -> Result<Connection, String> {
        match (&self.server, &self.cluster) {
            (Some(server), _) => connection(server),
            (None, Some(cluster)) => connection(&cluster.nodes[cluster.owner_of(key)]),
            (None, None) => Err("no server".into()),
        }
    }

    /// Injects `fault`, then checks that it acted (a fault that did nothing would
    /// let a scenario pass for the wrong reason).
    pub fn fault(
        &mut self,
        fault: &str,
        key: Option<&str>,
        ms: Option<u64>,
        versions: Versions,
    ) -> Result<(), String> {
        let run_id = match fault {
            "restart" | "start_server" => self.run_id(),
            _ => None,
        };
        if fault == "release_reversed" {
            // Acted when something was held back: a hold that caught nothing proves
            // nothing of the order.
            let gap = Duration::from_millis(ms.unwrap_or(100));
            // Acted when two connections or more had commands held back: a hold
            // that caught one connection's (or none) changes no order.
            return match self.proxy()?.release_reversed(gap) {
                n @ 0..=1 => Err(format!(
                    "the fault release_reversed did not act: {n} connection(s) had commands held back"
                )),
                _ => Ok(()),
            };
        }
        self.inject(fault, key, ms, versions)?;
        self.acted(fault, versions, run_id)
            .map_err(|why| format!("the fault {fault} did not act: {why}"))
    }

    fn inject(
        &mut self,
        fault: &str,
        key: Option<&str>,
        ms: Option<u64>,
        versions: Versions,
    ) -> Result<(), String> {
        match fault {
            "black_hole" => self.proxy()?.black_hole(),
            "drop_replies" => self.proxy()?.drop_replies(),
            "hold" => self.proxy()?.hold(),
            "delay" => {
                let ms = ms.ok_or("fault delay needs ms")?;
                self.proxy()?.delay(Duration::from_millis(ms));
            }
            "heal" => self.proxy()?.heal(),
            "pause" => self.server()?.pause(),
            "resume" => self.server()?.resume(),
            "kill_server" => self.server_mut()?.kill(),
            "restart" | "start_server" => {
                let backend = self.backend;
                let acl = self.acl.clone();
                let server = self.server_mut()?;
                server.restart();
                if backend == Backend::Acl {
                    // ACL users live in memory only (no aclfile).
                    set_acl_user(&mut connection(server)?, &acl)?;
                }
            }
            "del" => {
                let key = key.ok_or("fault del needs a key")?;
                let deleted: i64 = query(&mut self.admin(key)?, &["DEL", key])?;
                if deleted != 1 {
                    return Err(format!("the fault del did not act: {key} did not exist"));
                }
            }
            "function_flush" => {
                let _: Value = query(&mut connection(self.server()?)?, &["FUNCTION", "FLUSH"])?;
            }
            "script_flush" => {
                let _: Value = query(&mut connection(self.server()?)?, &["SCRIPT", "FLUSH"])?;
            }
            "load_library" => load_library(&mut connection(self.server()?)?, None)?,
            "load_old_library" => {
                load_library(&mut connection(self.server()?)?, Some(versions.old))?
            }
            "load_new_library" => {
                load_library(&mut connection(self.server()?)?, Some(versions.new))?
            }
            other => return Err(format!("unknown fault {other:?}")),
        }
        Ok(())
    }

    /// The server's `run_id`, new at every start.
    fn run_id(&self) -> Option<String> {
        let mut con = connection(self.server.as_ref()?).ok()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut con).ok()?;
        info.lines()
            .find_map(|l| l.trim().strip_prefix("run_id:"))
            .map(str::to_string)
    }

    /// True if a PING on a fresh connection to `port` is answered within 300 ms.
    fn answers(port: u16) -> bool {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
            return false;
        };
        let limit = Duration::from_millis(300);
        client
            .get_connection_with_timeout(limit)
            .and_then(|mut con| {
                con.set_read_timeout(Some(limit))?;
                redis::cmd("PING").query::<String>(&mut con)
            })
            .is_ok()
    }

    fn acted(&self, fault: &str, versions: Versions, run_id: Option<String>) -> Result<(), String> {
        match fault {
            "black_hole" if Env::answers(self.proxy()?.port()) => {
                Err("PING through the proxy is answered".into())
            }
            "heal" if !Env::answers(self.proxy()?.port()) => {
                Err("PING through the proxy is not answered".into())
            }
            "pause" | "kill_server" if Env::answers(self.server()?.port) => {
                Err("the server answers PING".into())
            }
            "resume" if !Env::answers(self.server()?.port) => {
                Err("the server does not answer PING".into())
            }
            "restart" | "start_server" => {
                let now = self.run_id();
                if now.is_none() || now == run_id {
                    return Err(format!("run_id {now:?} (before: {run_id:?})"));
                }
                Ok(())
            }
            // DEL answered 1: it acted (a waiter may hold the key again at once).
            "del" => Ok(()),
            "function_flush" => {
                let libraries: Vec<Value> =
                    query(&mut connection(self.server()?)?, &["FUNCTION", "LIST"])?;
                if !libraries.is_empty() {
                    return Err("FUNCTION LIST still lists a library".into());
                }
                Ok(())
            }
            "load_old_library" | "load_new_library" => {
                let version: i64 = query(
                    &mut connection(self.server()?)?,
                    &["FCALL_RO", "lock_version", "0"],
                )?;
                let wanted = if fault == "load_old_library" {
                    versions.old
                } else {
                    versions.new
                };
                if version != wanted {
                    return Err(format!("lock_version answers {version}"));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn server_mut(&mut self) -> Result<&mut Server, String> {
        let backend = self.backend;
        self.server
            .as_mut()
            .ok_or_else(|| format!("no single server on the {} backend", backend.name()))
    }

    fn proxy(&self) -> Result<&Proxy, String> {
        self.proxy
            .as_ref()
            .ok_or_else(|| "no actor connects through the proxy".into())
    }

    /// The value of a data key (GET), on the harness's own connection.
    pub fn get(&self, key: &str) -> Result<Option<String>, String> {
        query(&mut self.admin(key)?, &["GET", key])
    }

    /// What the server says of the lock at `key`.
    pub fn info(&self, key: &str) -> Result<Option<ServerInfo>, String> {
        lock_info(self.backend, &mut self.admin(key)?, key)
    }

    /// What the library left beside `key`: queue places and grants in the queue
    /// key, and grant lists (none on the module, which keeps no side keys).
    pub fn leftovers(&self, key: &str) -> Result<Vec<String>, String> {
        if !self.backend.is_library() {
            return Ok(Vec::new());
        }
        let mut con = self.admin(key)?;
        let queue = format!("{key}{{{key}}}:lockq");
        let fields: Vec<String> = query(&mut con, &["HKEYS", &queue])?;
        let mut left: Vec<String> = fields
            .into_iter()
            .filter(|f| f.starts_with("w:") || f.starts_with("g:"))
            .map(|f| format!("{queue} {f}"))
            .collect();
        let pattern = format!("{key}{{{key}}}:lockg:*");
        let lists: Vec<String> = query(&mut con, &["KEYS", &pattern])?;
        left.extend(lists);
        Ok(left)
    }
}

/// The library versions just outside the ones the clients accept (protocol.json).
#[derive(Debug, Clone, Copy)]
pub struct Versions {
    pub old: i64,
    pub new: i64,
}

/// The lock as the harness reads it from the server.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    pub mode: String,
    pub holders: Vec<(String, i64)>,
    pub waiters: i64,
}

/// `LOCK.INFO`, or the library's `lock_info`, on `con`.
pub fn lock_info(
    backend: Backend,
    con: &mut Connection,
    key: &str,
) -> Result<Option<ServerInfo>, String> {
    let cmd = match backend {
        Backend::Module | Backend::Cluster => {
            let mut cmd = redis::cmd("LOCK.INFO");
            cmd.arg(key);
            cmd
        }
        Backend::Functions | Backend::Acl => {
            let mut cmd = redis::cmd("FCALL_RO");
            cmd.arg("lock_info").arg(1).arg(key);
            cmd
        }
        Backend::Scripts => {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(redis_lock_testkit::library_script())
                .arg(1)
                .arg(key)
                .arg("lock_info");
            cmd
        }
    };
    let value: Value = cmd
        .query(con)
        .map_err(|e| format!("lock info of {key}: {e}"))?;
    Ok(parse_info(value))
}

fn pairs(value: Value) -> Vec<(String, Value)> {
    let items: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            let mut items = items.into_iter();
            std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
        }
        _ => Vec::new(),
    };
    items
        .into_iter()
        .filter_map(|(k, v)| Some((redis::from_redis_value::<String>(k).ok()?, v)))
        .collect()
}

fn parse_info(value: Value) -> Option<ServerInfo> {
    if value == Value::Nil {
        return None;
    }
    let mut info = ServerInfo::default();
    let mut single = (String::new(), 0);
    for (name, value) in pairs(value) {
        match name.as_str() {
            "mode" => info.mode = redis::from_redis_value(value).unwrap_or_default(),
            "waiters" => info.waiters = redis::from_redis_value(value).unwrap_or_default(),
            "owner" => single.0 = redis::from_redis_value(value).unwrap_or_default(),
            "token" => single.1 = redis::from_redis_value(value).unwrap_or_default(),
            "holders" => {
                let list: Vec<Value> = redis::from_redis_value(value).unwrap_or_default();
                for holder in list {
                    let mut held = (String::new(), 0);
                    for (name, value) in pairs(holder) {
                        match name.as_str() {
                            "owner" => held.0 = redis::from_redis_value(value).unwrap_or_default(),
                            "token" => held.1 = redis::from_redis_value(value).unwrap_or_default(),
                            _ => {}
                        }
                    }
                    info.holders.push(held);
                }
            }
            _ => {}
        }
    }
    if info.holders.is_empty() && !single.0.is_empty() {
        info.holders.push(single);
    }
    Some(info)
}

fn connection(server: &Server) -> Result<Connection, String> {
    let con = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(5))
        .map_err(|e| format!("harness connection: {e}"))?;
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    Ok(con)
}

fn query<T: redis::FromRedisValue>(con: &mut Connection, args: &[&str]) -> Result<T, String> {
    let mut cmd = redis::cmd(args.first().copied().unwrap_or("PING"));
    for arg in args.iter().skip(1) {
        cmd.arg(*arg);
    }
    cmd.query(con)
        .map_err(|e| format!("{}: {e}", args.join(" ")))
}

/// The library of `version` as it was last committed (tests/fixtures), if kept there:
/// an older library reads (or refuses) what this one stores as that version did.
fn committed_library(version: i64) -> Option<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(format!("redislock-v{version}.lua"));
    std::fs::read_to_string(path).ok()
}

/// Loads the library; `other`: that version, as last committed where the
/// repository keeps it, else this one with its version line changed (a newer one).
fn load_library(con: &mut Connection, other: Option<i64>) -> Result<(), String> {
    let mut source = redis_lock_testkit::library_source();
    if let Some(committed) = other.and_then(committed_library) {
        source = committed;
    } else if let Some(version) = other {
        let line = source
            .lines()
            .find(|l| l.starts_with("local VERSION = "))
            .ok_or("no VERSION line in lua/redislock.lua")?
            .to_string();
        source = source.replacen(&line, &format!("local VERSION = {version}"), 1);
    }
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(source)
        .query(con)
        .map_err(|e| format!("FUNCTION LOAD: {e}"))?;
    if name != "redislock" {
        return Err(format!("FUNCTION LOAD named {name}"));
    }
    Ok(())
}

fn set_acl_user(con: &mut Connection, rules: &[String]) -> Result<(), String> {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(ACL_USER);
    for rule in rules {
        cmd.arg(rule);
    }
    cmd.query::<()>(con)
        .map_err(|e| format!("ACL SETUSER: {e}"))
}

/// The shared Cluster of the `cluster` column.
pub fn start_cluster() -> Result<Cluster, String> {
    std::panic::catch_unwind(|| Cluster::start(3)).map_err(|_| "the Cluster did not start".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acl_user_is_the_documented_library_user_on_conf_keys() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let rules = acl_rules(&root).unwrap();
        for rule in [
            "-@all",
            "+fcall",
            "+fcall_ro",
            "+blpop",
            "+evalsha",
            "~conf:*",
        ] {
            assert!(rules.iter().any(|r| r == rule), "{rule} in {rules:?}");
        }
        for refused in ["+function", "+script", "+command", "+@all", "~*"] {
            assert!(
                !rules.iter().any(|r| r.starts_with(refused)),
                "{refused} in {rules:?}"
            );
        }
    }
}
