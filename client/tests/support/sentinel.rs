//! redis-sentinel processes for tests (Debian package redis-sentinel), shared by the
//! client's and the CLI's Sentinel tests.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::Server;
use redis_lock_testkit as common;
use tempfile::TempDir;

/// The master's name the sentinels monitor.
pub const MASTER: &str = "mymaster";

/// A redis-sentinel process watching `master`, killed on drop.
pub struct SentinelProcess {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl SentinelProcess {
    pub fn start(master: &Server) -> SentinelProcess {
        let dir = tempfile::tempdir().unwrap();
        let port = portpicker::pick_unused_port().expect("a free port");
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile sentinel.log\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 10000\n",
                dir = dir.path().display(),
                master = master.port,
            ),
        )
        .unwrap();
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-sentinel (Debian package redis-sentinel; make deps installs it)");
        let sentinel = SentinelProcess {
            child,
            port,
            _dir: dir,
        };
        common::wait_until(Duration::from_secs(10), || sentinel.master_port().is_some());
        sentinel
    }

    pub fn port_number(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The master's port as this sentinel names it.
    pub fn master_port(&self) -> Option<u16> {
        let mut con = redis::Client::open(self.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(200))
            .ok()?;
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER)
            .query(&mut con)
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(Path::new(self._dir.path()).join("sentinel.log"))
            .unwrap_or_default()
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn sentinels(master: &Server, n: usize) -> Vec<SentinelProcess> {
    (0..n).map(|_| SentinelProcess::start(master)).collect()
}
