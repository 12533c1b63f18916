//! The `redis-lock` binary against real servers: exclusion, waiting, renewal, loss
//! (deleted key, black-holed path), signals, exit statuses, the child's environment,
//! errors, `info` and `release`.

use redis_lock_testkit as common;

#[path = "../../client/tests/support/backend.rs"]
mod on_backend;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::proxy::Proxy;
use common::{Config, Server};
use redis_lock_client::LIBRARY_VERSION;

/// The binary, with `--url` pointing at `url` and no REDIS_URL from outside.
fn redis_lock(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    command.env_remove("REDIS_URL").args(["--url", url]);
    command
}

/// `redis-lock run [options] KEY -- sh -c SCRIPT`, spawned.
fn run(url: &str, options: &[&str], key: &str, script: &str) -> Child {
    redis_lock(url)
        .arg("run")
        .args(options)
        .args([key, "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-lock")
}

fn finish(child: Child) -> Output {
    child.wait_with_output().expect("redis-lock's output")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Wall-clock nanoseconds, comparable with the children's `date +%s%N`.
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A child's script that records in `dir/log` when it starts and ends (`start ns`,
/// `end ns` lines), sleeping `seconds` in between; and that log's path.
fn recording_child(dir: &Path, seconds: &str) -> (PathBuf, String) {
    let log = dir.join("log");
    let script = format!(
        "echo start $(date +%s%N) >> {log}; sleep {seconds}; echo end $(date +%s%N) >> {log}",
        log = log.display()
    );
    (log, script)
}

fn held(server: &Server, key: &str) -> bool {
    server.connection().lock_info(key).unwrap().is_some()
}

use on_backend::LockCommands;
use redis_lock_client::Request;

#[test]
fn two_runs_of_one_key_never_overlap_and_the_second_skips_or_waits() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let (log, script) = recording_child(dir.path(), "0.6");
    let first = run(&server.url(), &[], "job", &script);
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    let busy = finish(run(&server.url(), &[], "job", &script));
    assert_eq!(busy.status.code(), Some(75), "{}", stderr(&busy));
    assert!(
        stderr(&busy).contains("job is busy: held by"),
        "{}",
        stderr(&busy)
    );
    let custom = finish(run(&server.url(), &["--busy-exit", "0"], "job", &script));
    assert_eq!(custom.status.code(), Some(0));

    let second = run(&server.url(), &["--wait", "20s"], "job", &script);
    assert!(finish(first).status.success());
    let second = finish(second);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("waiting for job"),
        "{}",
        stderr(&second)
    );
    let lines: Vec<(String, u128)> = read(&log)
        .lines()
        .map(|l| {
            let (what, at) = l.split_once(' ').unwrap();
            (what.to_string(), at.parse().unwrap())
        })
        .collect();
    let order: Vec<&str> = lines.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(
        order,
        ["start", "end", "start", "end"],
        "only two ran, one after the other"
    );
    assert!(lines[1].1 <= lines[2].1, "no overlap");
    assert!(!held(&server, "job"), "released");
}

#[test]
fn a_child_running_past_several_ttls_keeps_the_lock() {
    let server = common::lock_server();
    let child = run(&server.url(), &["--ttl", "300ms"], "job", "sleep 1.2");
    thread::sleep(Duration::from_millis(900));
    let info = server
        .connection()
        .lock_info("job")
        .unwrap()
        .expect("still held after 3 TTLs");
    let output = finish(child);
    assert!(output.status.success(), "{}", stderr(&output));
    let events = stderr(&output);
    assert!(
        events.contains(&format!("acquired job with token {}", info.token)),
        "{events}"
    );
    assert!(events.contains("released job"), "{events}");
    assert!(!held(&server, "job"));
}

#[test]
fn a_deleted_lock_stops_the_child_and_exits_76() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let term = dir.path().join("term");
    let script = format!(
        "trap 'date +%s%N > {}; exit 0' TERM; while :; do sleep 0.02; done",
        term.display()
    );
    let child = run(&server.url(), &["--ttl", "600ms"], "job", &script);
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    thread::sleep(Duration::from_millis(100));
    let deleted = now_ns();
    let _: i64 = redis::cmd("DEL")
        .arg("job")
        .query(&mut server.connection())
        .unwrap();
    let output = finish(child);
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let got_term: u128 = read(&term).trim().parse().expect("the child got SIGTERM");
    let after = Duration::from_nanos((got_term - deleted) as u64);
    assert!(
        after < Duration::from_secs(1),
        "SIGTERM {after:?} after the DEL"
    );
    assert!(stderr(&output).contains("lost job"), "{}", stderr(&output));

    // A child that ignores SIGTERM is killed after --kill-after.
    let stubborn = "trap '' TERM; while :; do sleep 0.02; done";
    let started = Instant::now();
    let child = run(
        &server.url(),
        &[
            "--ttl",
            "600ms",
            "--kill-after",
            "300ms",
            "--lost-exit",
            "9",
        ],
        "job",
        stubborn,
    );
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    let _: i64 = redis::cmd("DEL")
        .arg("job")
        .query(&mut server.connection())
        .unwrap();
    let output = finish(child);
    assert_eq!(output.status.code(), Some(9), "{}", stderr(&output));
    assert!(stderr(&output).contains("SIGKILL"), "{}", stderr(&output));
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The holder's path is black-holed while a rival waits on the server directly: the
/// child must get SIGTERM before the rival is granted the lock.
#[test]
fn through_a_black_hole_the_child_is_stopped_before_a_rival_is_granted() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let dir = tempfile::tempdir().unwrap();
    let term = dir.path().join("term");
    let script = format!(
        "trap 'date +%s%N > {}; exit 0' TERM; while :; do sleep 0.02; done",
        term.display()
    );
    let child = run(&proxy.url(), &["--ttl", "2s"], "job", &script);
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    let mut rival_con = server.connection();
    let rival = thread::spawn(move || {
        let request = Request::new("job", Duration::from_secs(60))
            .owner("rival")
            .wait(Duration::from_secs(20));
        let token = rival_con.acquire_with(request).unwrap();
        assert!(token.is_some());
        now_ns()
    });
    common::wait_until(Duration::from_secs(5), || {
        server
            .connection()
            .lock_info("job")
            .unwrap()
            .is_some_and(|i| i.waiters == 1)
    });
    thread::sleep(Duration::from_secs(1));
    let cut = now_ns();
    proxy.black_hole();
    let granted = rival.join().unwrap();
    let output = finish(child);
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let got_term: u128 = read(&term).trim().parse().expect("the child got SIGTERM");
    let ms = |ns: u128| ns as f64 / 1e6;
    println!(
        "black hole: the child got SIGTERM {:.0} ms after the cut, the rival was granted the lock {:.0} ms after it",
        ms(got_term - cut),
        ms(granted - cut)
    );
    assert!(
        got_term < granted,
        "the rival was granted the lock before the child was stopped"
    );
}

#[test]
fn sigterm_to_run_reaches_the_child_and_the_lock_outlives_it() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let during = dir.path().join("during");
    let script = format!(
        "trap 'redis-cli -p {port} {info} job > {during}; exit 3' TERM; while :; do sleep 0.02; done",
        port = server.port,
        info = common::info_cli(),
        during = during.display()
    );
    let child = run(&server.url(), &[], "job", &script);
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    thread::sleep(Duration::from_millis(100));
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let output = finish(child);
    assert_eq!(
        output.status.code(),
        Some(3),
        "the child's status: {}",
        stderr(&output)
    );
    assert!(
        read(&during).contains("owner"),
        "held while the child ran its trap: {:?}",
        read(&during)
    );
    assert!(
        stderr(&output).contains("passing signal 15"),
        "{}",
        stderr(&output)
    );
    assert!(!held(&server, "job"), "released after the child exited");
}

#[test]
fn the_childs_status_passes_through() {
    let server = common::lock_server();
    let output = finish(run(&server.url(), &[], "job", "exit 7"));
    assert_eq!(output.status.code(), Some(7));
    let output = finish(run(&server.url(), &[], "job", "kill -9 $$"));
    assert_eq!(output.status.code(), Some(128 + 9));
    let output = redis_lock(&server.url())
        .args(["run", "job", "--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127), "{}", stderr(&output));
    assert!(!held(&server, "job"));
}

#[test]
fn the_child_sees_the_lock_in_its_environment() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("env");
    let info = dir.path().join("info");
    let script = format!(
        "echo \"$REDIS_LOCK_KEY $REDIS_LOCK_OWNER $REDIS_LOCK_TOKEN\" > {env}; \
         redis-cli -p {port} {info_cli} \"$REDIS_LOCK_KEY\" > {info}",
        info_cli = common::info_cli(),
        env = env.display(),
        info = info.display(),
        port = server.port
    );
    let output = finish(run(&server.url(), &["--owner", "worker-7"], "job", &script));
    assert!(output.status.success(), "{}", stderr(&output));
    let seen = read(&env);
    let parts: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(parts[..2], ["job", "worker-7"], "{seen:?}");
    let fields: Vec<String> = read(&info).lines().map(str::to_string).collect();
    let token_at = fields
        .iter()
        .position(|f| f == "token")
        .expect("LOCK.INFO has a token");
    assert_eq!(
        parts[2],
        fields[token_at + 1],
        "REDIS_LOCK_TOKEN is LOCK.INFO's token"
    );
}

/// `redis-lock guard` in a job under `run`: its writes land while the job holds the
/// lock, on the server `run` was given (as an ACL user, whose password reaches the
/// job through `REDIS_LOCK_URL`, not a `REDIS_URL` that names another server), and
/// the replies are printed as redis-cli prints them to a pipe; an error reply exits
/// 1, a write once the lock is gone exits 77 and writes nothing; and outside of
/// `run` it says what it is for.
#[test]
fn a_job_under_run_guards_its_writes() {
    let server = common::lock_server();
    let mut admin = server.connection();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "jobs", "on", ">s3cret", "~*", "&*", "+@all"])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://jobs:s3cret@127.0.0.1:{}/", server.port);
    let dir = tempfile::tempdir().unwrap();
    let (out, env, status) = (
        dir.path().join("out"),
        dir.path().join("env"),
        dir.path().join("status"),
    );
    let guard = format!("{} guard --", env!("CARGO_BIN_EXE_redis-lock"));
    let script = format!(
        "echo \"$REDIS_LOCK_BACKEND $REDIS_LOCK_URL\" > {env}; \
         {guard} SET '{{job}}:out' first > {out}; \
         {guard} INCRBY '{{job}}:n' 5 >> {out}; \
         {guard} MGET '{{job}}:out' '{{job}}:n' >> {out}; \
         {guard} GET '{{job}}:none' >> {out}; \
         {guard} INCR '{{job}}:out' 2>> {out}; echo $? > {status}; \
         redis-cli -p {port} DEL '{{job}}' > /dev/null; \
         {guard} SET '{{job}}:out' stale 2>> {out}; echo $? >> {status}",
        env = env.display(),
        out = out.display(),
        status = status.display(),
        port = server.port,
    );
    let child = redis_lock(&url)
        .env("REDIS_URL", "redis://127.0.0.1:1/")
        .args(["run", "{job}", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = finish(child);
    assert!(output.status.success(), "{}", stderr(&output));
    let backend = common::backend_name();
    assert_eq!(read(&env).trim(), format!("{backend} {url}"));
    let printed = read(&out);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 7, "{printed}");
    assert_eq!(lines[..5], ["OK", "5", "first", "5", ""], "{printed}");
    assert!(
        lines[5].starts_with("(error) ERR value is not an integer"),
        "{printed}"
    );
    assert!(
        lines[6].starts_with("redis-lock: the fenced write was refused")
            && lines[6].contains("the lock is free")
            && !printed.contains("s3cret"),
        "{printed}"
    );
    assert_eq!(
        read(&status).split_whitespace().collect::<Vec<_>>(),
        ["1", "77"]
    );
    let stored: String = redis::cmd("GET")
        .arg("{job}:out")
        .query(&mut admin)
        .unwrap();
    assert_eq!(stored, "first", "the fenced write wrote nothing");

    let outside = redis_lock(&server.url())
        .env_remove("REDIS_LOCK_KEY")
        .env_remove("REDIS_LOCK_TOKEN")
        .args(["guard", "--", "SET", "x", "1"])
        .output()
        .unwrap();
    assert_eq!(outside.status.code(), Some(64), "{}", stderr(&outside));
    assert!(
        stderr(&outside).contains("under `redis-lock run`"),
        "{}",
        stderr(&outside)
    );
}

#[test]
fn each_error_has_its_own_status_and_line() {
    let server = common::lock_server();
    let plain = Server::with(Config::default().without_module());
    let _: () = redis::cmd("SET")
        .arg("text")
        .arg("v")
        .query(&mut server.connection())
        .unwrap();
    let cases: [(String, &[&str], i32, &str); 5] = [
        (
            "redis://127.0.0.1:1/".into(),
            &["run", "job", "--", "true"],
            69,
            "cannot reach the server at redis://127.0.0.1:1/ (set --url or REDIS_URL)",
        ),
        (
            plain.url(),
            &["--backend", "module", "run", "job", "--", "true"],
            78,
            "no module",
        ),
        (
            plain.url(),
            &["--backend", "functions", "run", "job", "--", "true"],
            78,
            "redis-lock functions load",
        ),
        (
            server.url(),
            &["run", "text", "--", "true"],
            65,
            "not a lock",
        ),
        (
            server.url(),
            &["run", "--ttl", "soon", "job", "--", "true"],
            64,
            "not a duration",
        ),
    ];
    for (url, args, status, says) in cases {
        let output = redis_lock(&url).args(args).output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(status), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.lines().filter(|l| l.contains(says)).count(), 1, "{err}");
    }
    let output = redis_lock(&server.url())
        .args(["run", "--ttl", "0s", "job", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64), "{}", stderr(&output));
}

#[test]
fn info_and_release_for_people_and_scripts() {
    let server = common::lock_server();
    let url = server.url();
    let free = redis_lock(&url)
        .args(["info", "job", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&free.stdout).trim(),
        r#"{"key":"job","held":false}"#
    );
    let child = run(&url, &["--owner", "worker-7", "--quiet"], "job", "sleep 30");
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    let token = server.connection().lock_info("job").unwrap().unwrap().token;
    let json = redis_lock(&url)
        .args(["info", "job", "--json"])
        .output()
        .unwrap();
    let json = String::from_utf8_lossy(&json.stdout).into_owned();
    assert!(json.starts_with(r#"{"key":"job","held":true,"mode":"exclusive","waiters":0,"holders":[{"owner":"worker-7","token":"#), "{json}");
    assert!(json.contains(&token.to_string()), "{json}");
    let text = redis_lock(&url).args(["info", "job"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("job: held (exclusive)") && text.contains("owner worker-7"),
        "{text}"
    );

    let other = redis_lock(&url)
        .args(["release", "job", "--owner", "someone"])
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(1), "{}", stderr(&other));
    let released = redis_lock(&url)
        .args(["release", "job", "--owner", "worker-7"])
        .output()
        .unwrap();
    assert!(released.status.success(), "{}", stderr(&released));
    assert!(!held(&server, "job"));
    // The run notices at its next renewal and stops its child.
    let output = finish(child);
    assert_eq!(output.status.code(), Some(76));
    assert!(stderr(&output).is_empty(), "--quiet: {}", stderr(&output));
}

#[test]
fn a_wait_is_given_up_cleanly_on_sigint() {
    let server = common::lock_server();
    let mut con = server.connection();
    let held_lock = con
        .try_acquire("job", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    let dir: PathBuf = tempfile::tempdir().unwrap().keep();
    let ran = dir.join("ran");
    let child = run(
        &server.url(),
        &["--wait", "forever"],
        "job",
        &format!("touch {}", ran.display()),
    );
    common::wait_until(Duration::from_secs(5), || {
        con.lock_info("job")
            .unwrap()
            .is_some_and(|i| i.waiters == 1)
    });
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = finish(child);
    assert_eq!(output.status.code(), Some(128 + 2), "{}", stderr(&output));
    common::wait_until(Duration::from_secs(5), || {
        con.lock_info("job")
            .unwrap()
            .is_some_and(|i| i.waiters == 0)
    });
    assert!(con.release(&held_lock).unwrap());
    assert!(!ran.exists(), "the command never ran");
    assert!(
        !held(&server, "job"),
        "no lock left to the one that gave up"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[path = "../../client/tests/support/sentinel.rs"]
mod sentinel;

#[test]
fn through_sentinel_the_lock_is_taken_on_the_named_master() {
    let master = Server::with(Config::default());
    let watching = sentinel::sentinels(&master, 1);
    let address = format!("127.0.0.1:{}", watching[0].port_number());
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    let output = Command::new(env!("CARGO_BIN_EXE_redis-lock"))
        .env_remove("REDIS_URL")
        .args(["--sentinel", &address, "--master", sentinel::MASTER])
        .args(["run", "job", "--", "sh", "-c"])
        .arg(format!(
            "echo $REDIS_LOCK_TOKEN > {}; redis-cli -p {} LOCK.INFO job > {}.info",
            token.display(),
            master.port,
            token.display()
        ))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let info = read(&token.with_extension("info"));
    assert!(
        info.contains(read(&token).trim()),
        "held on the master: {info:?}"
    );
}

#[test]
fn in_a_cluster_the_lock_is_taken_on_the_keys_node() {
    let cluster = common::Cluster::start(3);
    let key = "report:daily";
    let node = cluster.owner_of(key);
    let seed = cluster.nodes[(node + 1) % 3].url(); // not the key's node: -MOVED is followed
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    let output = redis_lock(&seed)
        .args(["--cluster", "run", key, "--", "sh", "-c"])
        .arg(format!(
            "echo $REDIS_LOCK_TOKEN > {}; redis-cli -p {} LOCK.INFO {key} > {}.info",
            token.display(),
            cluster.nodes[node].port,
            token.display()
        ))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let info = read(&token.with_extension("info"));
    assert!(
        info.contains(read(&token).trim()),
        "held on the key's node: {info:?}"
    );
    let free = redis_lock(&seed)
        .args(["--cluster", "info", key, "--json"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&free.stdout).contains(r#""held":false"#));
}

/// The most children that ran at the same time, from their `start`/`end` lines.
fn most_at_once(log: &Path) -> usize {
    let (mut running, mut most) = (0usize, 0usize);
    let mut events: Vec<(u128, i32)> = read(log)
        .lines()
        .map(|l| {
            let (what, at) = l.split_once(' ').unwrap();
            (at.parse().unwrap(), if what == "start" { 1 } else { -1 })
        })
        .collect();
    // An end and a start at the same instant: the end first.
    events.sort();
    for (_, step) in events {
        running = running.saturating_add_signed(step as isize);
        most = most.max(running);
    }
    most
}

#[test]
fn with_limit_3_eight_runs_never_run_more_than_3_children_at_once() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let (log, script) = recording_child(dir.path(), "0.3");
    let runs: Vec<Child> = (0..8)
        .map(|_| {
            run(
                &server.url(),
                &["--limit", "3", "--wait", "30s"],
                "exports",
                &script,
            )
        })
        .collect();
    for child in runs {
        let output = finish(child);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    assert_eq!(read(&log).lines().count(), 16, "all eight ran");
    let most = most_at_once(&log);
    assert!((2..=3).contains(&most), "{most} children at once");
    assert!(!held(&server, "exports"));
}

#[test]
fn shared_runs_run_together_and_an_exclusive_run_waits_for_them() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let (log, script) = recording_child(dir.path(), "0.5");
    let readers: Vec<Child> = (0..3)
        .map(|_| run(&server.url(), &["--shared"], "catalog", &script))
        .collect();
    common::wait_until(Duration::from_secs(5), || {
        server
            .connection()
            .lock_info("catalog")
            .unwrap()
            .is_some_and(|i| i.holders.len() == 3)
    });
    let busy = finish(run(&server.url(), &[], "catalog", "true"));
    assert_eq!(
        busy.status.code(),
        Some(75),
        "a writer is busy while readers run"
    );
    let writer = run(&server.url(), &["--wait", "20s"], "catalog", &script);
    for reader in readers {
        assert!(finish(reader).status.success());
    }
    assert!(finish(writer).status.success());
    let lines = read(&log);
    assert_eq!(lines.lines().count(), 8);
    assert_eq!(most_at_once(&log), 3, "the readers ran together");
    let last_start = lines.lines().rfind(|l| l.starts_with("start")).unwrap();
    let first_ends: Vec<&str> = lines
        .lines()
        .filter(|l| l.starts_with("end"))
        .take(3)
        .collect();
    let at = |l: &str| -> u128 { l.split_once(' ').unwrap().1.parse().unwrap() };
    assert!(
        first_ends.iter().all(|e| at(e) <= at(last_start)),
        "the writer ran after every reader"
    );
}

#[test]
fn functions_load_installs_the_library_that_print_shows() {
    let plain = Server::with(Config::default().without_module());
    let printed = redis_lock(&plain.url())
        .args(["functions", "load", "--print"])
        .output()
        .unwrap();
    assert!(printed.status.success(), "{}", stderr(&printed));
    assert_eq!(
        String::from_utf8_lossy(&printed.stdout).trim_end(),
        common::library_source().trim_end(),
        "--print prints lua/redislock.lua"
    );
    let forced = redis_lock(&plain.url())
        .args(["--backend", "functions", "info", "job"])
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(78), "{}", stderr(&forced));
    let loaded = redis_lock(&plain.url())
        .args(["functions", "load"])
        .output()
        .unwrap();
    assert!(loaded.status.success(), "{}", stderr(&loaded));
    assert_eq!(
        String::from_utf8_lossy(&loaded.stdout).trim(),
        format!("loaded the redislock library, version {LIBRARY_VERSION}")
    );
    let dir = tempfile::tempdir().unwrap();
    let info = dir.path().join("info");
    let script = format!(
        "redis-cli -p {} FCALL_RO lock_info 1 job > {}",
        plain.port,
        info.display()
    );
    let output = finish(run(&plain.url(), &["--owner", "worker-7"], "job", &script));
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        read(&info).contains("worker-7"),
        "held through FCALL: {:?}",
        read(&info)
    );
    // Loading again upgrades in place.
    let again = redis_lock(&plain.url())
        .args(["functions", "load"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", stderr(&again));
}

/// The library as version `version` says it is (the repository's source, its
/// `local VERSION` changed).
fn library_claiming(version: i64) -> String {
    let current = format!("local VERSION = {LIBRARY_VERSION}\n");
    let source = common::library_source();
    assert!(source.contains(&current));
    source.replace(&current, &format!("local VERSION = {version}\n"))
}

/// The previous library, version 1 (tests/fixtures/redislock-v1.lua).
fn library_v1() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/redislock-v1.lua"
    );
    std::fs::read_to_string(path).expect("tests/fixtures/redislock-v1.lua")
}

fn lock_version(server: &Server) -> i64 {
    redis::cmd("FCALL_RO")
        .arg("lock_version")
        .arg(0)
        .query(&mut server.connection())
        .unwrap()
}

#[test]
fn functions_load_keeps_a_newer_library_unless_forced() {
    let plain = Server::with(Config::default().without_module());
    let newer = LIBRARY_VERSION + 1;
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library_claiming(newer))
        .query(&mut plain.connection())
        .unwrap();
    let refused = redis_lock(&plain.url())
        .args(["functions", "load"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(78), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(said.contains(&format!("version {newer}, newer")), "{said}");
    assert!(
        said.contains(&format!("version {LIBRARY_VERSION}")),
        "{said}"
    );
    assert!(said.contains("--force"), "{said}");
    assert_eq!(lock_version(&plain), newer, "the newer library stays");
    let forced = redis_lock(&plain.url())
        .args(["functions", "load", "--force"])
        .output()
        .unwrap();
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert_eq!(lock_version(&plain), LIBRARY_VERSION);
    // An older library is replaced without --force: an upgrade.
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_v1())
        .query(&mut plain.connection())
        .unwrap();
    let upgraded = redis_lock(&plain.url())
        .args(["functions", "load"])
        .output()
        .unwrap();
    assert!(upgraded.status.success(), "{}", stderr(&upgraded));
    assert_eq!(lock_version(&plain), LIBRARY_VERSION);
}

/// The previous library (version 1) loaded by FUNCTION LOAD REPLACE under a running
/// `run --limit 3`: it cannot read the holding the current library wrote, and
/// answers WRONGTYPE, changing nothing. The job's renewals fail, and its loss line
/// names the library's version and what to do, not a WRONGTYPE.
#[test]
fn an_older_library_loaded_under_a_running_job_is_named_in_its_loss() {
    let plain = Server::with(Config::default().without_module());
    common::load_library(&mut plain.connection());
    let holder = run(
        &plain.url(),
        &["--ttl", "1s", "--limit", "3"],
        "job",
        "while :; do sleep 0.02; done",
    );
    common::wait_until(Duration::from_secs(5), || {
        let exists: i64 = redis::cmd("EXISTS")
            .arg("job")
            .query(&mut plain.connection())
            .unwrap();
        exists == 1
    });
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library_v1())
        .query(&mut plain.connection())
        .unwrap();
    let output = finish(holder);
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(
        said.contains(
            "redislock library on the server is version 1, older than this client accepts"
        ),
        "{said}"
    );
    assert!(said.contains("redis-lock functions load"), "{said}");
}

#[test]
fn on_redis_6_2_runs_go_through_scripts() {
    let Some(binary) = common::redis62_server() else {
        return;
    };
    let old = Server::with(Config::default().without_module().binary(binary));
    let dir = tempfile::tempdir().unwrap();
    let (log, script) = recording_child(dir.path(), "0.3");
    let first = run(&old.url(), &["--ttl", "1s"], "job", &script);
    common::wait_until(Duration::from_secs(5), || read(&log).contains("start"));
    let busy = finish(run(&old.url(), &[], "job", "true"));
    assert_eq!(busy.status.code(), Some(75), "{}", stderr(&busy));
    let waited = finish(run(
        &old.url(),
        &["--wait", "10s", "--backend", "scripts"],
        "job",
        &script,
    ));
    assert!(waited.status.success(), "{}", stderr(&waited));
    assert!(finish(first).status.success());
    assert_eq!(read(&log).matches("start").count(), 2);
    assert_eq!(most_at_once(&log), 1);
    let refused = redis_lock(&old.url())
        .args(["functions", "load"])
        .output()
        .unwrap();
    assert_ne!(refused.status.code(), Some(0), "no FUNCTION on 6.2");
}

/// A restart without persistence loses the library and the lock: a rival, finding
/// no library, takes the scripts path and is granted at once. The holder's next
/// renewal (a third of the TTL) must learn the truth then, not retry the missing
/// function until its lease runs out (which left two jobs running for most of a
/// TTL): its job gets SIGTERM within about one renewal period of the restart.
#[test]
fn after_a_restart_that_lost_the_library_the_job_stops_at_its_next_renewal() {
    let mut plain = Server::with(Config::default().without_module());
    common::load_library(&mut plain.connection());
    let dir = tempfile::tempdir().unwrap();
    let term = dir.path().join("term");
    let script = format!(
        "trap 'date +%s%N > {}; exit 0' TERM; while :; do sleep 0.02; done",
        term.display()
    );
    // TTL 15 s: renewals every 5 s; the lease (without an acknowledged renewal)
    // would last 13.5 s past the last one, at least 8.5 s past the restart.
    let holder = run(&plain.url(), &["--ttl", "15s"], "job", &script);
    common::wait_until(Duration::from_secs(5), || {
        let mut con = plain.connection();
        redis_lock_client::LockCommands::lock_info_with(
            &mut con,
            "job",
            redis_lock_client::Backend::Functions,
        )
        .is_ok_and(|info| info.is_some())
    });
    plain.restart();
    let restarted = now_ns();
    let rival = finish(run(&plain.url(), &[], "job", "true"));
    assert!(
        rival.status.success(),
        "the rival is granted: {}",
        stderr(&rival)
    );
    let output = finish(holder);
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    let got_term: u128 = read(&term).trim().parse().expect("the job got SIGTERM");
    let after = Duration::from_nanos((got_term - restarted) as u64);
    assert!(
        after < Duration::from_secs(7),
        "SIGTERM {after:?} after the restart: later than the next renewal"
    );
}
