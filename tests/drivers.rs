//! The same commands from other clients than the redis crate: a scripted redis-cli
//! session and redis-py, in RESP2 and RESP3.

use redis_lock_testkit as common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::*;

/// Runs redis-cli against `server` with `script` on its standard input and returns
/// the output lines.
fn redis_cli(server: &Server, extra: &[&str], script: &str) -> Vec<String> {
    let mut child = Command::new("redis-cli")
        .args(["-p", &server.port.to_string()])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli (Debian package redis-tools)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_scripted_redis_cli_session() {
    let server = Server::start();
    let script = "\
LOCK.ACQUIRE report worker-1 30000
LOCK.ACQUIRE report worker-1 30000
LOCK.ACQUIRE report worker-2 30000
LOCK.EXTEND report worker-2 60000
LOCK.EXTEND report worker-1 60000
LOCK.INFO report
LOCK.RELEASE report worker-2
LOCK.RELEASE report worker-1
LOCK.INFO report
LOCK.ACQUIRE report worker-2 30000
LOCK.ACQUIRE report worker-2 0
";
    let lines = redis_cli(&server, &["--no-raw"], script);
    let token: i64 = lines[0]
        .strip_prefix("(integer) ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("first reply {:?}", lines[0]));
    let expected_head = [
        format!("(integer) {token}"),
        format!("(integer) {token}"),
        "(nil)".to_string(),
        "(integer) 0".to_string(),
        "(integer) 1".to_string(),
        " 1) \"owner\"".to_string(),
        " 2) \"worker-1\"".to_string(),
        " 3) \"ttl\"".to_string(),
    ];
    assert_eq!(lines[..8], expected_head, "{lines:#?}");
    assert!(lines[8].starts_with(" 4) (integer) "), "{lines:#?}");
    assert_eq!(lines[9], " 5) \"token\"");
    assert_eq!(lines[10], format!(" 6) (integer) {token}"));
    assert_eq!(lines[11..13], [" 7) \"waiters\"", " 8) (integer) 0"]);
    assert_eq!(
        lines[13..17],
        [
            " 9) \"mode\"",
            "10) \"exclusive\"",
            "11) \"holders\"",
            "12) 1) 1) \"owner\""
        ]
    );
    assert_eq!(lines[17], "       2) \"worker-1\"");
    assert_eq!(lines[21], format!("       6) (integer) {token}"));
    assert_eq!(lines[22..24], ["13) \"queue\"", "14) (empty array)"]);
    assert_eq!(lines[24..27], ["(integer) 0", "(integer) 1", "(nil)"]);
    let next: i64 = lines[27]
        .strip_prefix("(integer) ")
        .and_then(|t| t.parse().ok())
        .unwrap();
    assert!(next > token);
    assert!(
        lines[28].starts_with("(error) ERR invalid ttl"),
        "{lines:#?}"
    );
    assert_eq!(lines.len(), 29, "{lines:#?}");
}

#[test]
fn redis_cli_in_resp3_shows_a_map() {
    let server = Server::start();
    let lines = redis_cli(
        &server,
        &["-3", "--no-raw"],
        "LOCK.ACQUIRE k me 5000\nLOCK.INFO k\nLOCK.ACQUIRE k you 5000\n",
    );
    assert!(lines[1].starts_with("1# \"owner\" => \"me\""), "{lines:#?}");
    assert_eq!(lines.last().unwrap(), "(nil)");
}

#[test]
fn redis_py_uses_the_commands_in_resp2_and_resp3() {
    let server = Server::start();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/redis_py_session.py");
    // redis-py from the project's own virtual environment (`make deps` makes it).
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python");
    let python = if venv.exists() {
        venv.as_path()
    } else {
        std::path::Path::new("python3")
    };
    let output = Command::new(python)
        .arg(script)
        .arg(server.port.to_string())
        .output()
        .expect("python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "redis-py session failed (is redis-py installed? `make deps`)\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("RESP2: ok") && stdout.contains("RESP3: ok"),
        "{stdout}"
    );
}
