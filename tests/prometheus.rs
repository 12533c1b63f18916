//! The Prometheus recipe (docs/operations.md, "Prometheus"): Debian's prometheus-redis-exporter
//! runs contrib/prometheus/lock-metrics.lua, which turns `INFO lock` into metrics.
//! Scrapes the real exporter against a real server.

use redis_lock_testkit as common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

const EXPORTER: &str = "prometheus-redis-exporter";

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The body of `GET /metrics`, once the exporter answers.
fn scrape(port: u16) -> String {
    let started = Instant::now();
    loop {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
            let mut response = String::new();
            if stream.write_all(request.as_bytes()).is_ok()
                && stream.read_to_string(&mut response).is_ok()
                && response.starts_with("HTTP/1.0 200")
            {
                return response;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the exporter never answered"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// The value of `redis_script_values{key="<field>"}` in a scrape.
fn metric(body: &str, field: &str) -> Option<f64> {
    let prefix = format!("redis_script_values{{key=\"{field}\"}} ");
    body.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

#[test]
fn the_exporter_serves_info_lock_as_metrics() {
    if Command::new(EXPORTER).arg("--version").output().is_err() {
        // `make test` installs it (Makefile DEBS); a bare `cargo test` may lack it.
        eprintln!("skipped: {EXPORTER} is not installed (apt-get install {EXPORTER})");
        return;
    }
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "job", "holder", 60_000).unwrap();
    acquire(&mut con, "other", "holder", 60_000).unwrap();
    assert!(acquire(&mut con, "job", "rival", 60_000).is_none());
    assert_eq!(release(&mut con, "other", "holder"), 1);

    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/prometheus/lock-metrics.lua");
    let _exporter = Exporter(
        Command::new(EXPORTER)
            .arg(format!("--redis.addr=redis://127.0.0.1:{}", server.port))
            .arg(format!("--script={}", script.display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let body = scrape(port);
    assert_eq!(metric(&body, "lock_acquisitions"), Some(2.0), "{body}");
    assert_eq!(metric(&body, "lock_contended"), Some(1.0));
    assert_eq!(metric(&body, "lock_releases"), Some(1.0));
    assert_eq!(metric(&body, "lock_locks"), Some(1.0));
    assert_eq!(metric(&body, "lock_keys_with_waiters"), Some(0.0));
    assert_eq!(metric(&body, "lock_wait_ms_le_inf"), Some(0.0));
    assert_eq!(metric(&body, "lock_wait_ms_count"), Some(0.0));
    // The release above: one hold, of less than a minute; no hand-off.
    assert_eq!(metric(&body, "lock_hold_ms_count"), Some(1.0));
    assert_eq!(metric(&body, "lock_hold_ms_le_60000"), Some(1.0));
    assert_eq!(metric(&body, "lock_handoff_ms_le_inf"), Some(0.0));
}
