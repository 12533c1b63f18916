//! The servers of one mode: three nodes with the module (a master and two replicas),
//! each behind a proxy, three sentinels, and the guarded resource.
//!
//! Each node announces its proxy's port (`replica-announce-port`) and the sentinels
//! monitor the master at its proxy, so every address the sentinels hand out, to
//! workers and in `REPLICAOF` alike, is a proxy's: black-holing a node's proxy cuts it
//! off from the sentinels, the other nodes and the workers that go through Sentinel,
//! while the workers beside it (see `worker`) still reach it at its own port.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::{Connection, Value};
use redis_lock_testkit::{proxy::Proxy, Config, Server};

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "mymaster";
/// Sentinel's `down-after-milliseconds`.
pub const DOWN_AFTER_MS: u64 = 1000;
/// Sentinel's `failover-timeout`: also, twice this must pass before the sentinels
/// fail the same master over again.
pub const FAILOVER_TIMEOUT_MS: u64 = 3000;

/// A node: its server (own port), its proxy, and the config it restarts with.
pub struct Node {
    pub server: Server,
    pub proxy: Proxy,
    pub config: Config,
}

impl Node {
    /// A direct connection that gives up on a reply after `timeout` (a stopped
    /// server answers nothing).
    pub fn connection(&self, timeout: Duration) -> Option<Connection> {
        connect(self.server.port, timeout)
    }

    /// Kills the server and starts it again on its port, empty (no persistence),
    /// then makes it a replica of the node at `master_proxy` before anything but
    /// this run can reach it, as an operator's `replicaof` line would.
    pub fn restart_as_replica(&mut self, master_proxy: u16) {
        self.server.restart_with(self.config.clone());
        if let Some(mut con) = self.connection(Duration::from_secs(2)) {
            let _: redis::RedisResult<()> = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(master_proxy)
                .query(&mut con);
        }
    }
}

/// A redis-sentinel process in a process group of its own, killed on drop.
pub struct SentinelProcess {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl SentinelProcess {
    fn start(master_proxy: u16) -> Result<SentinelProcess, String> {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = portpicker::pick_unused_port().ok_or("no free port")?;
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile \"sentinel.log\"\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_proxy} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                dir = dir.path().display()
            ),
        )
        .map_err(|e| e.to_string())?;
        let child = Command::new(sentinel_binary())
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot run redis-sentinel: {e}"))?;
        let sentinel = SentinelProcess {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while connect(port, Duration::from_millis(200)).is_none() {
            if Instant::now() > deadline {
                return Err(format!("redis-sentinel on port {port} did not start"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(sentinel)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The proxy port this sentinel names the master at.
    pub fn master_port(&self) -> Option<u16> {
        let mut con = connect(self.port, Duration::from_millis(300))?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .query(&mut con)
            .ok()?;
        addr.map(|(_, port)| port)
    }

    /// How many replicas and other sentinels this sentinel knows of.
    fn peers(&self) -> Option<(usize, usize)> {
        let mut con = connect(self.port, Duration::from_millis(300))?;
        let count = |con: &mut Connection, what: &str| -> Option<usize> {
            let list: Vec<Value> = redis::cmd("SENTINEL")
                .arg(what)
                .arg(MASTER_NAME)
                .query(con)
                .ok()?;
            Some(list.len())
        };
        Some((count(&mut con, "replicas")?, count(&mut con, "sentinels")?))
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

fn sentinel_binary() -> PathBuf {
    std::env::var_os("REDIS_SENTINEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| "redis-sentinel".into())
}

/// A connection to a loopback port whose connect and replies time out.
pub fn connect(port: u16, timeout: Duration) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client.get_connection_with_timeout(timeout).ok()?;
    con.set_read_timeout(Some(timeout)).ok()?;
    con.set_write_timeout(Some(timeout)).ok()?;
    Some(con)
}

/// One field of `INFO replication`.
pub fn replication_field(con: &mut Connection, field: &str) -> Option<String> {
    redis_lock_testkit::info_field(con, "replication", field)
}

/// Every server of one mode. Dropping it stops them all.
pub struct Topology {
    pub nodes: Vec<Node>,
    pub sentinels: Vec<SentinelProcess>,
    pub resource: Server,
}

impl Topology {
    /// Starts the nodes with `settings` (e.g. `min-replicas-to-write`), links the
    /// replicas, starts the sentinels and waits until they know each other.
    /// With `library`, the nodes are plain servers and the redislock library is
    /// loaded on the master, whence it replicates (and reaches a restarted node by
    /// its full sync).
    pub fn start(
        module: &Path,
        library: bool,
        settings: &[(String, String)],
    ) -> Result<Topology, String> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let base = if library {
                Config::default().without_module()
            } else {
                Config::default().module_file(module)
            };
            let mut config = base
                .set("replica-announce-ip", "127.0.0.1")
                .set("repl-timeout", "5");
            for (name, value) in settings {
                config = config.set(name, value);
            }
            let server = Server::try_with(config.clone())?;
            let proxy = Proxy::start(server.port);
            let config = config.set("replica-announce-port", &proxy.port().to_string());
            let mut con = server.connection();
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("replica-announce-port")
                .arg(proxy.port())
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            nodes.push(Node {
                server,
                proxy,
                config,
            });
        }
        if library {
            // Before the replicas attach: a bounded mode's min-replicas-to-write is
            // lifted for the load, which the replicas then get by their full sync.
            let mut con = nodes[0].server.connection();
            let bound: Vec<String> = redis::cmd("CONFIG")
                .arg("GET")
                .arg("min-replicas-to-write")
                .query(&mut con)
                .map_err(|e| e.to_string())?;
            let bound = bound.get(1).cloned().unwrap_or_else(|| "0".into());
            let set = |con: &mut redis::Connection, value: &str| {
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg("min-replicas-to-write")
                    .arg(value)
                    .query::<()>(con)
                    .map_err(|e| e.to_string())
            };
            set(&mut con, "0")?;
            let _: String = redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg("REPLACE")
                .arg(redis_lock_client::LIBRARY_SOURCE)
                .query(&mut con)
                .map_err(|e| format!("FUNCTION LOAD: {e}"))?;
            set(&mut con, &bound)?;
        }
        let master_proxy = nodes[0].proxy.port();
        for node in &nodes[1..] {
            let mut con = node.server.connection();
            let _: () = redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(master_proxy)
                .query(&mut con)
                .map_err(|e| e.to_string())?;
        }
        let resource = Server::try_with(Config::default().without_module())?;
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(master_proxy))
            .collect::<Result<Vec<_>, _>>()?;
        let topology = Topology {
            nodes,
            sentinels,
            resource,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(topology.settled() == Some(0)
            && topology.sentinels.iter().all(|s| s.peers() == Some((2, 2))))
        {
            if Instant::now() > deadline {
                return Err("the sentinels did not find every replica and each other".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(topology)
    }

    /// The node whose own port or proxy port is `port`.
    pub fn node_at(&self, port: u16) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.server.port == port || n.proxy.port() == port)
    }

    /// The master as most sentinels name it now.
    pub fn master(&self) -> Option<usize> {
        let sentinels: Vec<u16> = self.sentinels.iter().map(|s| s.port).collect();
        let nodes: Vec<(u16, u16)> = self
            .nodes
            .iter()
            .map(|n| (n.server.port, n.proxy.port()))
            .collect();
        majority_master(&sentinels, &nodes)
    }

    /// The master, once every sentinel names it, it says it is master, and both
    /// other nodes replicate from it with their link up.
    pub fn settled(&self) -> Option<usize> {
        let ports: Vec<Option<u16>> = self.sentinels.iter().map(|s| s.master_port()).collect();
        let master = self.node_at(ports[0]?)?;
        if ports.iter().any(|p| *p != ports[0]) {
            return None;
        }
        let timeout = Duration::from_millis(300);
        for (i, node) in self.nodes.iter().enumerate() {
            let mut con = node.connection(timeout)?;
            let role = replication_field(&mut con, "role")?;
            if i == master {
                if role != "master" {
                    return None;
                }
                continue;
            }
            let port = replication_field(&mut con, "master_port")?;
            let link = replication_field(&mut con, "master_link_status")?;
            if role != "slave"
                || port != self.nodes[master].proxy.port().to_string()
                || link != "up"
            {
                return None;
            }
        }
        Some(master)
    }

    /// Waits up to `limit` for [`settled`](Self::settled).
    pub fn wait_settled(&self, limit: Duration) -> Option<usize> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(master) = self.settled() {
                return Some(master);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelProcess::url).collect()
    }

    /// `proxy:own` port pairs, for the workers beside the servers.
    pub fn port_map(&self) -> String {
        let pairs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}:{}", n.proxy.port(), n.server.port))
            .collect();
        pairs.join(",")
    }
}

/// A node's own role (`master`, `slave`), or `None` if it does not answer in time.
pub fn role(port: u16) -> Option<String> {
    let mut con = connect(port, Duration::from_millis(200))?;
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut con).ok()?;
    redis::from_redis_value(role.into_iter().next()?).ok()
}

/// The node most sentinels name master; `nodes` are (own port, proxy port) pairs.
pub fn majority_master(sentinels: &[u16], nodes: &[(u16, u16)]) -> Option<usize> {
    let named: Vec<usize> = sentinels
        .iter()
        .filter_map(|&port| {
            let mut con = connect(port, Duration::from_millis(300))?;
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(MASTER_NAME)
                .query(&mut con)
                .ok()?;
            let proxy = addr?.1;
            nodes.iter().position(|&(_, p)| p == proxy)
        })
        .collect();
    (0..nodes.len()).find(|n| named.iter().filter(|&&m| m == *n).count() * 2 > sentinels.len())
}
