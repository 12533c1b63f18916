//! `redis-lock elect` and `redis-lock leader` against real servers, on the module
//! and the library: one daemon leads at a time, SIGTERM resigns and hands over
//! through the queue, a loss stops the daemon's group before a rival can lead and
//! `--again` campaigns anew, and `leader --watch` prints each leader once, in order.

use redis_lock_testkit as common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Config, Server};

fn servers() -> Vec<(&'static str, Server)> {
    let library = Server::with(Config::default().without_module());
    common::load_library(&mut library.connection());
    vec![("module", Server::start()), ("functions", library)]
}

fn redis_lock(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    command.env_remove("REDIS_URL").args(["--url", url]);
    command
}

/// `redis-lock elect [options] KEY -- sh -c SCRIPT`, spawned.
fn elect(url: &str, options: &[&str], key: &str, script: &str) -> Child {
    redis_lock(url)
        .arg("elect")
        .args(options)
        .args([key, "--", "sh", "-c", script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn signal(child: &Child, number: i32) {
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(child.id() as i32, number);
    }
}

fn leader(url: &str, key: &str) -> String {
    let output = redis_lock(url).args(["leader", key]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

fn exit_code(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Two daemons campaign; the first leads, SIGTERM ends its daemon and resigns, and
/// the second leads at once with a greater term; `leader` follows.
#[test]
fn sigterm_resigns_and_the_next_candidate_leads() {
    for (name, server) in servers() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let script = format!(
            "echo \"$0 $REDIS_LOCK_TERM\" >> {log}; trap 'echo \"$0 stop\" >> {log}; exit 0' TERM; \
             while :; do sleep 0.05; done",
            log = log.display()
        );
        let url = server.url();
        let mut a = elect(
            &url,
            &["--value", "a:1", "--ttl", "5s"],
            "svc",
            &script.replace("$0", "a"),
        );
        eventually(Duration::from_secs(5), "a leads", || {
            read(&log).contains("a ")
        });
        let mut b = elect(
            &url,
            &["--value", "b:2", "--ttl", "5s"],
            "svc",
            &script.replace("$0", "b"),
        );
        std::thread::sleep(Duration::from_millis(500));
        assert!(!read(&log).contains("b "), "{name}: one leader at a time");
        assert!(leader(&url, "svc").starts_with("svc: a:1 (term "), "{name}");
        let resigned = Instant::now();
        signal(&a, libc::SIGTERM);
        assert_eq!(exit_code(&mut a, Duration::from_secs(5)), 0, "{name}");
        eventually(Duration::from_secs(2), "b leads", || {
            read(&log).contains("b ")
        });
        let handover = resigned.elapsed();
        assert!(
            handover < Duration::from_secs(2),
            "{name}: {handover:?}: the queue, not the TTL"
        );
        let lines = read(&log);
        let term = |who: &str| -> i64 {
            let line = lines
                .lines()
                .find(|l| l.starts_with(who) && !l.ends_with("stop"))
                .unwrap();
            line.split(' ').nth(1).unwrap().parse().unwrap()
        };
        assert!(
            lines.find("a stop").unwrap() < lines.find("b ").unwrap(),
            "{name}: {lines}"
        );
        assert!(term("b ") > term("a "), "{name}");
        assert_eq!(
            leader(&url, "svc"),
            format!("svc: b:2 (term {})\n", term("b ")),
            "{name}"
        );
        signal(&b, libc::SIGTERM);
        assert_eq!(exit_code(&mut b, Duration::from_secs(5)), 0, "{name}");
        assert_eq!(leader(&url, "svc"), "svc: no leader\n", "{name}");
    }
}

/// The lock deleted under a leader: its daemon's group is stopped, and `--again`
/// campaigns and runs the daemon anew with a greater term; without it, exit 76.
#[test]
fn a_lost_leadership_stops_the_daemon_and_again_campaigns_anew() {
    for (name, server) in servers() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let script = format!(
            "echo \"run $REDIS_LOCK_TERM\" >> {log}; while :; do sleep 0.05; done",
            log = log.display()
        );
        let url = server.url();
        let mut again = elect(&url, &["--again", "--ttl", "600ms"], "svc", &script);
        eventually(Duration::from_secs(5), "leads", || {
            read(&log).lines().count() == 1
        });
        let _: i64 = redis::cmd("DEL")
            .arg("svc")
            .query(&mut server.connection())
            .unwrap();
        eventually(Duration::from_secs(5), "leads again", || {
            read(&log).lines().count() == 2
        });
        let terms: Vec<i64> = read(&log)
            .lines()
            .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
            .collect();
        assert!(terms[1] > terms[0], "{name}: {terms:?}");
        signal(&again, libc::SIGTERM);
        assert_eq!(
            exit_code(&mut again, Duration::from_secs(5)),
            143,
            "{name}: sh dies of TERM"
        );

        let mut once = elect(&url, &["--ttl", "600ms"], "svc", &script);
        eventually(Duration::from_secs(5), "leads", || {
            read(&log).lines().count() == 3
        });
        let _: i64 = redis::cmd("DEL")
            .arg("svc")
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(exit_code(&mut once, Duration::from_secs(5)), 76, "{name}");
    }
}

/// `leader --watch --json` prints each leader once, in term order, as they come.
#[test]
fn leader_watch_prints_each_leader_in_order() {
    for (name, server) in servers() {
        let url = server.url();
        let mut watch = redis_lock(&url)
            .args(["leader", "svc", "--watch", "--json"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
        let mut seen = |want: &str| -> i64 {
            let line = lines.next().unwrap().unwrap();
            let leader: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(leader["value"], want, "{name}: {line}");
            leader["term"].as_i64().unwrap()
        };
        // A leader that stays until the watch has printed it: the watch is positioned
        // (it printed n0, as the current leader or as it came), whatever its start took.
        let mut first = elect(&url, &["--value", "n0"], "svc", "sleep 30");
        let mut terms = vec![seen("n0")];
        signal(&first, libc::SIGTERM);
        exit_code(&mut first, Duration::from_secs(5));
        for n in 1..3 {
            let status = redis_lock(&url)
                .args(["elect", "--value", &format!("n{n}"), "svc", "--", "true"])
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "{name}");
            terms.push(seen(&format!("n{n}")));
        }
        assert!(terms.windows(2).all(|w| w[0] < w[1]), "{name}: {terms:?}");
        let _ = watch.kill();
        let _ = watch.wait();
    }
}

#[test]
fn a_key_that_cannot_hold_a_record_is_refused() {
    let output = redis_lock("redis://127.0.0.1:1/")
        .args(["elect", "a}b", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid election key"));
}
