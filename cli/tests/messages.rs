//! What `redis-lock` tells people, from the real binary against real servers:
//! "waiting" only when the lock is busy, a refused semaphore's permits, timestamped
//! event lines and the time waited, the cause of a loss, no internal error-type
//! names, and `--help` with the connection options apart.

use redis_lock_testkit as common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use common::Server;

/// The binary, with `--url` pointing at `url` and no REDIS_URL from outside.
fn redis_lock(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    command.env_remove("REDIS_URL").args(["--url", url]);
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `redis-lock run OPTIONS KEY -- sh -c SCRIPT`, to its end.
fn run(url: &str, options: &[&str], key: &str, script: &str) -> Output {
    redis_lock(url)
        .arg("run")
        .args(options)
        .args([key, "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("redis-lock")
}

/// Takes a holding of `ttl` ms on the backend under test.
fn take(server: &Server, key: &str, owner: &str, ttl: i64, mode: &[&str]) {
    let token: Option<i64> = common::lock_cmd("lock_acquire", key)
        .arg(owner)
        .arg(ttl)
        .arg(mode)
        .query(&mut server.connection())
        .expect("acquire");
    assert!(token.is_some(), "granted");
}

/// The seconds in "waited 1.0 s", checked to have one decimal.
fn waited(text: &str) -> f64 {
    let after = text.split("waited ").nth(1).expect("a waited part");
    let number = after.split(" s").next().unwrap();
    let (_, decimals) = number.split_once('.').expect("a decimal point");
    assert_eq!(decimals.len(), 1, "one decimal: {text}");
    number.parse().unwrap()
}

#[test]
fn waiting_is_said_only_when_the_first_attempt_found_the_lock_busy() {
    let server = common::lock_server();
    let free = run(&server.url(), &["--wait", "5s"], "job", "true");
    assert!(free.status.success(), "{}", stderr(&free));
    assert!(!stderr(&free).contains("waiting"), "{}", stderr(&free));
    assert!(!stderr(&free).contains("waited"), "{}", stderr(&free));

    take(&server, "job", "other", 1000, &[]);
    let busy = run(&server.url(), &["--wait", "5s"], "job", "true");
    let text = stderr(&busy);
    assert!(busy.status.success(), "{text}");
    assert!(
        text.contains("waiting for job: it is busy (waiting up to 5s)"),
        "{text}"
    );
    let acquired = text
        .lines()
        .find(|l| l.contains("acquired job"))
        .expect("an acquired line");
    let seconds = waited(acquired);
    assert!((0.5..=3.0).contains(&seconds), "{acquired}");
}

#[test]
fn a_refused_semaphore_says_all_its_permits_are_in_use() {
    let server = common::lock_server();
    for owner in ["p1", "p2", "p3"] {
        take(&server, "exports", owner, 60_000, &["LIMIT", "3"]);
    }
    let refused = run(&server.url(), &["--limit", "3"], "exports", "true");
    assert_eq!(refused.status.code(), Some(75), "{}", stderr(&refused));
    let text = stderr(&refused);
    assert!(
        text.contains("exports is busy: all 3 permits are in use (held by p1, p2, p3)"),
        "{text}"
    );
    let more = run(&server.url(), &["--limit", "4"], "exports", "true");
    assert!(more.status.success(), "a fourth permit: {}", stderr(&more));
}

#[test]
fn event_lines_carry_an_rfc3339_utc_timestamp() {
    let server = common::lock_server();
    let before = SystemTime::now() - Duration::from_secs(1);
    let output = run(&server.url(), &[], "job", "true");
    let after = SystemTime::now() + Duration::from_secs(1);
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert_eq!(text.lines().count(), 2, "acquired, released: {text}");
    for line in text.lines() {
        let rest = line.strip_prefix("redis-lock: ").expect("the prefix");
        let (stamp, event) = rest.split_once(' ').unwrap();
        assert!(stamp.ends_with('Z') && stamp.len() == 24, "UTC, ms: {line}");
        let at = humantime::parse_rfc3339(stamp).expect("RFC 3339");
        assert!(before <= at && at <= after, "{line}");
        assert!(
            event.starts_with("acquired job") || event.starts_with("released job"),
            "{line}"
        );
    }
}

#[test]
fn the_loss_line_names_a_renewal_answered_0_and_the_key_gone() {
    let server = common::lock_server();
    let port = server.port;
    let output = run(
        &server.url(),
        &["--ttl", "1s"],
        "job",
        &format!("redis-cli -p {port} DEL job > /dev/null; sleep 5"),
    );
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let text = stderr(&output);
    let lost = text
        .lines()
        .find(|l| l.contains("lost job"))
        .expect("a loss line");
    assert!(
        lost.contains(
            "(a renewal was answered 0: the server no longer holds it for this owner; \
             the key no longer exists: deleted, or expired): SIGTERM to the command's group"
        ),
        "{lost}"
    );
}

#[test]
fn the_loss_line_names_a_lease_run_out_and_the_last_renewal_error() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let child = redis_lock(&server.url())
        .args(["run", "--ttl", "1s", "job", "--", "sh", "-c"])
        .arg(format!("touch {}; sleep 5", started.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || started.exists());
    server.pause();
    let output = child.wait_with_output().unwrap();
    server.resume();
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let text = stderr(&output);
    let lost = text
        .lines()
        .find(|l| l.contains("lost job"))
        .expect("a loss line");
    assert!(
        lost.contains("(no renewal was acknowledged before the lease ran out; the last renewal failed: connection to the server failed: "),
        "{lost}"
    );
}

#[test]
fn no_message_names_an_internal_error_type() {
    let server = common::lock_server();
    let mut con = server.connection();
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let url = server.url();
    let cases: [&[&str]; 5] = [
        &["--url", "foo://nowhere", "info", "job"],
        &["--url", "redis://127.0.0.1:1/", "info", "job"],
        &["--url", &url, "info", "text"],
        &["--url", &url, "--cluster", "list"],
        &["--url", &url, "run", "text", "--", "true"],
    ];
    for args in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_redis-lock"))
            .env_remove("REDIS_URL")
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let text = stderr(&output);
        assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
        for internal in [
            "Error:",
            "Error(",
            "Error {",
            "InvalidClientConfig",
            "IoError",
            "Io(",
            "Some(",
            "RedisError",
            " - ",
        ] {
            assert!(!text.contains(internal), "{args:?}: {internal:?} in {text}");
        }
    }
}

#[test]
fn help_shows_the_connection_options_under_a_heading_of_their_own() {
    for args in [&["--help"][..], &["run", "--help"], &["list", "--help"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_redis-lock"))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (before, connection) = text
            .split_once("\nConnection options:\n")
            .unwrap_or_else(|| panic!("{args:?}: no heading: {text}"));
        let section: Vec<&str> = connection
            .lines()
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            section,
            ["--url", "--sentinel", "--master", "--cluster", "--backend"],
            "{args:?}: {text}"
        );
        assert!(!before.contains("--url"), "{args:?}: {text}");
    }
}

#[test]
fn info_shows_a_semaphore_s_limit_and_who_waits_for_how_long() {
    let server = common::lock_server();
    take(&server, "exports", "p1", 60_000, &["LIMIT", "2"]);
    take(&server, "exports", "p2", 60_000, &["LIMIT", "2"]);
    let mut waiter = redis_lock(&server.url())
        .args([
            "run", "--limit", "2", "--wait", "30s", "--owner", "w1", "exports",
        ])
        .args(["--", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-lock run");
    let info = || {
        let output = redis_lock(&server.url())
            .args(["info", "exports"])
            .output()
            .expect("redis-lock info");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut text = info();
    while !text.contains("queued 1") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        text = info();
    }
    let _ = waiter.kill();
    let _ = waiter.wait();
    assert!(
        text.contains("owner p1") && text.contains("limit 2"),
        "{text}"
    );
    assert!(
        text.contains("queued 1: w1 (one of 2 permits), waited "),
        "{text}"
    );
}

/// A server's refusal is shown as the server wrote it (`READONLY You can't write …`),
/// never as the client library names it (`ReadOnly: You can't …`), also as the
/// last renewal error of a loss line.
#[test]
fn server_errors_are_shown_as_the_server_wrote_them() {
    let master = common::lock_server();
    let replica = common::lock_server();
    replica.replicate_from(&master);
    let output = redis_lock(&replica.url())
        .args(["run", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(70), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("READONLY You can't write against a read only replica.")
            && !text.contains("ReadOnly"),
        "{text}"
    );

    let holder = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let child = redis_lock(&holder.url())
        .args(["run", "--ttl", "1500ms", "job", "--", "sh", "-c"])
        .arg(format!("touch {}; sleep 10", started.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || started.exists());
    // Renewals are now refused (READONLY) until the lease runs out.
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query(&mut holder.connection())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let text = stderr(&output);
    let lost = text
        .lines()
        .find(|l| l.contains("lost job"))
        .expect("a loss line");
    assert!(
        lost.contains(
            "the last renewal failed: the server refused the command: READONLY You can't write"
        ) && !lost.contains("ReadOnly"),
        "{lost}"
    );
}
