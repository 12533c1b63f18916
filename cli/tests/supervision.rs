//! What `redis-lock run` keeps promising when the world around it fails: its
//! terminal or its stderr's reader goes away, a grandchild ignores SIGTERM, the
//! command leaves processes behind, the server stops answering; and the arguments it
//! refuses, and the owners it prints.

use redis_lock_testkit as common;

#[path = "../../client/tests/support/backend.rs"]
mod on_backend;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::Server;
use on_backend::LockCommands;

fn redis_lock(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    command.env_remove("REDIS_URL").args(["--url", url]);
    command
}

/// `redis-lock run [options] KEY -- sh -c SCRIPT`, not yet spawned.
fn run(url: &str, options: &[&str], key: &str, script: &str) -> Command {
    let mut command = redis_lock(url);
    command
        .arg("run")
        .args(options)
        .args([key, "--", "sh", "-c", script]);
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn held(server: &Server, key: &str) -> bool {
    server.connection().lock_info(key).unwrap().is_some()
}

fn del(server: &Server, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.connection())
        .unwrap();
}

fn signal(child: &Child, number: i32) {
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(child.id() as i32, number);
    }
}

/// True while process `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// The exit status of `child` within `limit`; kills it and fails if it runs on.
fn exits_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still running after {limit:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Reads `from` until `text` was seen.
fn read_until(from: &mut impl Read, text: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    while !String::from_utf8_lossy(&seen).contains(text) {
        let n = from.read(&mut buf).expect("the output");
        assert!(
            n > 0,
            "ended before {text:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// A pseudo-terminal: (master, slave).
fn pty() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes the two descriptors; the name and settings are null.
    let made = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(made, 0, "openpty");
    for fd in [master, slave] {
        // SAFETY: fcntl on a descriptor just opened; no memory effects. Without
        // close-on-exec, `run` would inherit the master and keep the terminal alive.
        assert_eq!(
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) },
            0
        );
    }
    // SAFETY: both descriptors were just opened and are owned here alone.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

/// Where `run`'s events go, and how that output is taken away after "acquired".
enum Gone {
    /// stderr is a pipe whose reader closes (EPIPE from then on).
    Pipe,
    /// stdout and stderr are a terminal that is closed (EIO from then on), as when
    /// an ssh session drops.
    Pty,
}

/// With its output gone, `run` still passes SIGHUP on, still holds the lock while
/// the command runs (past several TTLs, a second run finds it busy), and on a loss
/// still stops the command's group and exits 76.
fn supervision_outlives_its_output(gone: Gone) {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let (pid, seen) = (dir.path().join("pid"), dir.path().join("seen"));
    // The command's own output goes elsewhere: a shell that writes to the closed pipe
    // dies of SIGPIPE, which is the command's business, not run's.
    let script = format!(
        "exec >/dev/null 2>&1; trap 'echo hup >> {seen}' HUP; trap 'echo term >> {seen}; exit 0' TERM; echo $$ > {pid}; \
         while :; do sleep 0.02; done",
        pid = pid.display(),
        seen = seen.display()
    );
    let mut command = run(&server.url(), &["--ttl", "600ms"], "job", &script);
    command.stdin(Stdio::null());
    let mut child = match gone {
        Gone::Pipe => {
            let mut child = command
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut events = child.stderr.take().unwrap();
            read_until(&mut events, "acquired job");
            drop(events);
            child
        }
        Gone::Pty => {
            let (mut master, slave) = pty();
            let child = command
                .stdout(Stdio::from(slave.try_clone().unwrap()))
                .stderr(Stdio::from(slave))
                .spawn()
                .unwrap();
            drop(command); // the parent's copies of the slave
            read_until(&mut master, "acquired job");
            drop(master);
            child
        }
    };
    common::wait_until(Duration::from_secs(5), || !read(&pid).is_empty());
    let group: i32 = read(&pid).trim().parse().unwrap();
    signal(&child, libc::SIGHUP);
    common::wait_until(Duration::from_secs(5), || read(&seen).contains("hup"));
    thread::sleep(Duration::from_millis(1500)); // over two TTLs
    assert!(child.try_wait().unwrap().is_none(), "run ended");
    assert!(
        held(&server, "job"),
        "the lock lapsed under a running command"
    );
    let rival = run(&server.url(), &[], "job", "true").output().unwrap();
    assert_eq!(rival.status.code(), Some(75), "{}", stderr(&rival));

    del(&server, "job");
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(76), "{status:?}");
    assert!(read(&seen).contains("term"), "the command got SIGTERM");
    assert!(!alive(group), "the command outlived run");
}

#[test]
fn a_closed_stderr_pipe_does_not_end_the_supervision() {
    supervision_outlives_its_output(Gone::Pipe);
}

#[test]
fn a_closed_terminal_does_not_end_the_supervision() {
    supervision_outlives_its_output(Gone::Pty);
}

#[test]
fn after_a_loss_a_grandchild_that_ignores_sigterm_is_killed_before_run_exits() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("grandchild");
    let script = format!(
        "bash -c 'echo $$ > {}; trap \"\" TERM; exec sleep 30' >/dev/null 2>&1 & wait",
        pid.display()
    );
    let options = ["--ttl", "600ms", "--kill-after", "300ms"];
    let child = run(&server.url(), &options, "job", &script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || {
        held(&server, "job") && !read(&pid).is_empty()
    });
    let grandchild: i32 = read(&pid).trim().parse().unwrap();
    thread::sleep(Duration::from_millis(100)); // its trap is set
    del(&server, "job");
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(76), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("SIGKILL to the group"),
        "{}",
        stderr(&output)
    );
    assert!(
        !alive(grandchild),
        "the grandchild runs on after run exited"
    );
}

#[test]
fn the_lock_is_held_until_the_commands_group_is_empty_unless_no_wait_group() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let script = format!(
        "(sleep 1; touch {}) >/dev/null 2>&1 & exit 3",
        done.display()
    );
    let child = run(&server.url(), &["--ttl", "300ms"], "job", &script)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    thread::sleep(Duration::from_millis(500));
    assert!(!done.exists());
    assert!(held(&server, "job"), "released while the group still ran");
    let output = child.wait_with_output().unwrap();
    assert!(done.exists(), "run exited before its command's group");
    assert_eq!(output.status.code(), Some(3), "the command's own status");
    assert!(
        stderr(&output).contains("left processes in its group"),
        "{}",
        stderr(&output)
    );
    assert!(!held(&server, "job"));

    std::fs::remove_file(&done).unwrap();
    let output = run(&server.url(), &["--no-wait-group"], "job", &script)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(!done.exists(), "--no-wait-group waited for the group");
    assert!(!held(&server, "job"), "released at once");
    common::wait_until(Duration::from_secs(5), || done.exists());
}

/// A stopped server answers nothing: a wait of 1 s gives up after about 1 s plus
/// the client's margin (1 s), whether the server stopped before the run connected
/// or while it waited in the queue, and says why.
#[test]
fn a_wait_on_a_stopped_server_gives_up_in_time_and_says_why() {
    let server = common::lock_server();
    let mut holder = server.connection();
    let lock = holder
        .try_acquire("job", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    for stop_first in [false, true] {
        if stop_first {
            server.pause();
        }
        let mut child = run(&server.url(), &["--wait", "1s"], "job", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if !stop_first {
            common::wait_until(Duration::from_secs(5), || {
                holder
                    .lock_info("job")
                    .unwrap()
                    .is_some_and(|i| i.waiters == 1)
            });
            server.pause();
        }
        let started = Instant::now();
        let status = exits_within(&mut child, Duration::from_secs(10));
        let waited = started.elapsed();
        server.resume();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.code(), Some(69), "{err}");
        // Stopped before the connect: the connect times out; while queued: the wait.
        let why = if stop_first {
            "(set --url or REDIS_URL): timed out"
        } else {
            "no answer from the server within the wait of 1s"
        };
        assert!(err.contains(why), "{err}");
        assert!(waited < Duration::from_secs(4), "gave up after {waited:?}");
    }
    assert!(holder.release(&lock).unwrap());
}

#[test]
fn too_short_ttls_and_bad_owners_are_usage_errors() {
    let server = common::lock_server();
    let long_owner = "o".repeat(300);
    let cases: [(&[&str], &str); 5] = [
        (
            &["run", "--owner", long_owner.as_str(), "job", "--", "true"],
            "invalid owner",
        ),
        (
            &["run", "--ttl", "1ms", "job", "--", "true"],
            "at least 200ms",
        ),
        (
            &["run", "--ttl", "10ms", "job", "--", "true"],
            "at least 200ms",
        ),
        (
            &["run", "--owner", "", "job", "--", "true"],
            "must not be empty",
        ),
        (&["release", "job", "--owner", ""], "must not be empty"),
    ];
    for (args, says) in cases {
        let output = redis_lock(&server.url()).args(args).output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(!held(&server, "job"));
    let ok = redis_lock(&server.url())
        .args(["run", "--ttl", "200ms", "job", "--", "true"])
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", stderr(&ok));
}

/// Owners are any bytes a client sends: printed for people they are escaped, and in
/// JSON exact.
#[test]
fn owners_are_printed_escaped_and_exact() {
    let server = common::lock_server();
    let mut con = server.connection();
    let evil: &[u8] = b"evil\x1b[31m\nredis-lock: forged";
    let acquire = |con: &mut redis::Connection, owner: &[u8]| {
        let token: Option<i64> = common::lock_cmd("lock_acquire", "job")
            .arg(owner)
            .arg(60_000)
            .arg("SHARED")
            .query(con)
            .unwrap();
        assert!(token.is_some());
    };
    acquire(&mut con, evil);
    let busy = run(&server.url(), &[], "job", "true").output().unwrap();
    assert_eq!(busy.status.code(), Some(75));
    let line = stderr(&busy);
    assert!(
        line.contains(r"held by evil\u{1b}[31m\nredis-lock: forged"),
        "{line}"
    );
    assert!(
        !line.contains('\x1b') && line.lines().count() == 1,
        "{line:?}"
    );

    let text = redis_lock(&server.url())
        .args(["info", "job"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(r"owner evil\u{1b}[31m\nredis-lock: forged"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");

    // Two owners whose lossy texts are the same: one not UTF-8, one that is.
    let mut con = server.connection();
    let _: i64 = redis::cmd("DEL").arg("job").query(&mut con).unwrap();
    acquire(&mut con, b"\xff\xfe");
    acquire(&mut con, "\u{fffd}\u{fffd}".as_bytes());
    let json = redis_lock(&server.url())
        .args(["info", "job", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{json}");
    assert_eq!(holders[0]["owner"], "\u{fffd}\u{fffd}");
    assert_eq!(holders[0]["owner_hex"], "fffe", "{json}");
    assert_eq!(holders[1]["owner"], "\u{fffd}\u{fffd}");
    assert!(holders[1].get("owner_hex").is_none(), "{json}");
}

/// The event lines of a run through a black-holed path still end: the wait gives
/// up within its bound.
#[test]
fn a_wait_through_a_black_hole_gives_up_in_time() {
    let server = common::lock_server();
    let proxy = Proxy::start(server.port);
    let mut holder = server.connection();
    let lock = holder
        .try_acquire("job", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let mut child = run(&proxy.url(), &["--wait", "1s"], "job", "true")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || {
        holder
            .lock_info("job")
            .unwrap()
            .is_some_and(|i| i.waiters == 1)
    });
    proxy.black_hole();
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(69));
    assert!(holder.release(&lock).unwrap());
}

/// A panic of `redis-lock` while the command runs (injected at a signal it passes
/// on: debug builds only) ends the renewals, so the panic hook stops the command's
/// group before the process goes: SIGTERM, then SIGKILL after --kill-after to what
/// ignores it.
#[test]
fn a_panic_of_run_stops_the_commands_group() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let script = format!(
        "exec >/dev/null 2>&1; bash -c 'trap \"\" TERM HUP; echo $$ > {}; exec sleep 30' & wait",
        pid.display()
    );
    let options = ["--owner", "panic:signal", "--kill-after", "500ms"];
    let mut child = run(&server.url(), &options, "job", &script)
        .env("REDIS_LOCK_FAULT_INJECTION", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || !read(&pid).is_empty());
    let grandchild: i32 = read(&pid).trim().parse().unwrap();
    signal(&child, libc::SIGHUP);
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(101), "a panic");
    assert!(!alive(grandchild), "the command's group outlived the panic");
}

/// `info` into a pipe nobody reads: an error status, not a panic.
#[test]
fn info_into_a_closed_pipe_exits_74() {
    let server = common::lock_server();
    let mut ends = [-1; 2];
    // SAFETY: pipe writes the two descriptors into `ends`.
    assert_eq!(unsafe { libc::pipe(ends.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just opened and are owned here alone; the read
    // end is closed at once.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(read_end);
    for json in [false, true] {
        let mut command = redis_lock(&server.url());
        command.args(["info", "job"]);
        if json {
            command.arg("--json");
        }
        let output = command
            .stdout(Stdio::from(write_end.try_clone().unwrap()))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(74), "{}", stderr(&output));
    }
}

/// Signals a terminal or a user sends that `run` does not need itself (Ctrl-\, SIGUSR1
/// …) would end `run` by default and leave its command, in a group of its own, running
/// without anyone renewing the lock: they are passed on to the command's group.
#[test]
fn signals_that_would_end_run_are_passed_on_to_the_command() {
    let server = common::lock_server();
    for number in [libc::SIGQUIT, libc::SIGUSR1, libc::SIGALRM] {
        let dir = tempfile::tempdir().unwrap();
        let pid = dir.path().join("pid");
        let script = format!("echo $$ > {}; exec sleep 30", pid.display());
        let mut child = run(&server.url(), &["--ttl", "1s"], "job", &script)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        common::wait_until(Duration::from_secs(5), || {
            held(&server, "job") && !read(&pid).is_empty()
        });
        let command: i32 = read(&pid).trim().parse().unwrap();
        signal(&child, number);
        let status = exits_within(&mut child, Duration::from_secs(10));
        assert!(
            !alive(command),
            "signal {number}: the command runs on after run exited"
        );
        assert_eq!(
            status.code(),
            Some(128 + number),
            "signal {number}: its status"
        );
        assert!(!held(&server, "job"), "signal {number}: released");
    }
}

/// Ctrl-Z stops `run` and its command together, as one job; resumed within the
/// lease, both go on under the lock. Resumed after the lease ran out, the command is
/// killed without running again, and `run` exits as on any loss.
#[test]
fn ctrl_z_stops_the_command_with_run_and_it_never_runs_after_the_lease() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let (pid, done) = (dir.path().join("pid"), dir.path().join("done"));
    let script = format!(
        // Long enough that a loaded machine stops it before it ends by itself.
        "echo $$ > {}; sleep 3; touch {}",
        pid.display(),
        done.display()
    );
    let state = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| stat.rsplit_once(") ")?.1.chars().next())
    };
    // 'D' too: a shell that vforked its `sleep` waits for it uninterruptibly, and
    // shows D for as long as the child is stopped before its exec.
    let stopped = |pid: i32| matches!(state(pid), Some('T' | 'D'));

    // Resumed in time: the command finishes under the lock.
    let mut child = run(&server.url(), &["--ttl", "3s"], "job", &script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || !read(&pid).is_empty());
    let command: i32 = read(&pid).trim().parse().unwrap();
    signal(&child, libc::SIGTSTP);
    common::wait_until(Duration::from_secs(5), || {
        stopped(child.id() as i32) && stopped(command)
    });
    thread::sleep(Duration::from_millis(1500));
    assert!(!done.exists(), "the command ran on while run was stopped");
    assert!(held(&server, "job"));
    signal(&child, libc::SIGCONT);
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert!(done.exists());

    // Resumed too late: the lease ran out while both were stopped.
    std::fs::remove_file(&done).unwrap();
    std::fs::remove_file(&pid).unwrap();
    let mut child = run(&server.url(), &["--ttl", "2s"], "job", &script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || !read(&pid).is_empty());
    let command: i32 = read(&pid).trim().parse().unwrap();
    signal(&child, libc::SIGTSTP);
    common::wait_until(Duration::from_secs(5), || {
        stopped(child.id() as i32) && stopped(command)
    });
    // Nothing renews it while run is stopped: the lock lapses on the server.
    common::wait_until(Duration::from_secs(10), || !held(&server, "job"));
    signal(&child, libc::SIGCONT);
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(76), "a loss");
    assert!(!alive(command));
    thread::sleep(Duration::from_millis(3500));
    assert!(!done.exists(), "the command ran after the lease ran out");
}

/// A process of the group that is stopped acts on a SIGTERM only once continued:
/// `run` continues the group after every signal it passes on, so a stopped
/// leftover cannot hold the lock for ever.
#[test]
fn a_stopped_process_left_in_the_group_ends_on_sigterm() {
    let server = common::lock_server();
    let script = "sh -c 'kill -STOP $$' & sleep 0.3; exit 0";
    let mut child = run(&server.url(), &["--ttl", "1s"], "job", script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || held(&server, "job"));
    thread::sleep(Duration::from_millis(800));
    assert!(held(&server, "job"), "held while the stopped process lives");
    signal(&child, libc::SIGTERM);
    exits_within(&mut child, Duration::from_secs(10));
    assert!(!held(&server, "job"));
}

/// The command runs out of the terminal's foreground group, where a read of the
/// terminal would stop it for ever with the lock held: with a terminal on
/// `redis-lock`'s standard input, the command's is `/dev/null` (its read ends).
#[test]
fn a_command_never_waits_on_the_terminal_it_cannot_have() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let read_status = dir.path().join("read");
    let (_master, slave) = pty();
    let script = format!("read line; echo $? > {}", read_status.display());
    let mut child = run(&server.url(), &["--ttl", "1s"], "job", &script)
        .stdin(Stdio::from(slave))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = exits_within(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    assert_eq!(read(&read_status).trim(), "1", "the read met end of file");
    assert!(!held(&server, "job"));
}

/// A job stopped (SIGSTOP of `run` and of the job's process group) past its TTL,
/// while another `run` takes the lock and writes through `redis-lock guard`: the
/// stopped job's own guarded write, made when it is continued, is refused with
/// status 77 and writes nothing; the rival's value stays.
#[test]
fn a_job_stopped_past_its_ttl_finds_its_guarded_write_fenced() {
    let server = common::lock_server();
    let dir = tempfile::tempdir().unwrap();
    let (pid, status, err) = (
        dir.path().join("pid"),
        dir.path().join("status"),
        dir.path().join("err"),
    );
    let guard = format!("{} guard --", env!("CARGO_BIN_EXE_redis-lock"));
    let stale = format!(
        "echo $$ > {pid}; sleep 1; {guard} SET '{{job}}:out' stale 2> {err}; echo $? > {status}",
        pid = pid.display(),
        err = err.display(),
        status = status.display(),
    );
    let mut holder = run(&server.url(), &["--ttl", "600ms"], "{job}", &stale)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_until(Duration::from_secs(5), || !read(&pid).is_empty());
    let group: i32 = read(&pid).trim().parse().unwrap();
    signal(&holder, libc::SIGSTOP);
    // SAFETY: killpg has no memory effects.
    unsafe {
        libc::killpg(group, libc::SIGSTOP);
    }
    let rival_job = format!("{guard} SET '{{job}}:out' rival");
    let rival = run(&server.url(), &["--wait", "10s"], "{job}", &rival_job)
        .output()
        .unwrap();
    assert_eq!(rival.status.code(), Some(0), "{}", stderr(&rival));
    assert_eq!(String::from_utf8_lossy(&rival.stdout), "OK\n");

    // SAFETY: as above.
    unsafe {
        libc::killpg(group, libc::SIGCONT);
    }
    common::wait_until(Duration::from_secs(10), || !read(&status).is_empty());
    assert_eq!(read(&status).trim(), "77", "{}", read(&err));
    assert!(
        read(&err).contains("fenced write was refused"),
        "{}",
        read(&err)
    );
    let stored: String = redis::cmd("GET")
        .arg("{job}:out")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(stored, "rival", "the stale write wrote nothing");
    signal(&holder, libc::SIGCONT);
    let code = exits_within(&mut holder, Duration::from_secs(10)).code();
    assert!(
        matches!(code, Some(76 | 77)),
        "lost, or the job's own: {code:?}"
    );
}
