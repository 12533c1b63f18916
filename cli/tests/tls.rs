//! The `redis-lock` binary over TLS (`rediss://` URLs) against a real redis-server
//! that also listens for TLS: a run holds the lock through the TLS port, the server's
//! certificate is checked against the roots (`SSL_CERT_FILE`) unless the URL says
//! `#insecure`, and a URL of the wrong kind for a port fails with its own line.

use redis_lock_testkit as common;

use std::process::{Command, Output};

use common::{Config, Server};

/// The binary, with `--url` pointing at `url`, no REDIS_URL from outside and the
/// system's roots (no SSL_CERT_FILE or SSL_CERT_DIR from outside).
fn redis_lock(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    command
        .env_remove("REDIS_URL")
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .args(["--url", url]);
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A server that also listens for TLS; `None` (the test passes, saying why) when
/// this redis-server was built without TLS (`make BUILD_TLS=no`), as source builds
/// of other versions often are. Debian's, which CI runs, has it.
fn tls_server() -> Option<Server> {
    match Server::try_with(Config::default().tls()) {
        Ok(server) => Some(server),
        Err(log)
            if log.contains("Failed finding TLS support") || log.contains("TLS not supported") =>
        {
            eprintln!("skipped: this redis-server was built without TLS");
            None
        }
        Err(log) => panic!("redis-server did not start: {log}"),
    }
}

#[test]
fn a_run_through_the_tls_port_holds_the_lock_while_its_child_runs() {
    let Some(server) = tls_server() else {
        return;
    };
    // A TTL of 1 s: the child, 2 s in, still sees the lock held, so the renewals went
    // through the TLS port too (nothing else listens there, and a plain client gets
    // nowhere on it: the last test). It looks through the plain port.
    let script = format!(
        "sleep 2; redis-cli -p {port} LOCK.INFO job; exit 3",
        port = server.port
    );
    let output = redis_lock(&format!("{}#insecure", server.tls_url()))
        .args(["run", "--ttl", "1s", "--owner", "over-tls", "job", "--"])
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let seen = stdout(&output);
    assert!(
        seen.lines().any(|line| line == "over-tls"),
        "LOCK.INFO names the run's owner: {seen}"
    );
    assert!(stderr(&output).contains("acquired"), "{}", stderr(&output));
    // Released when the child exited.
    assert!(common::lock_info(&mut server.connection(), "job").is_none());

    // `info` and `release` take the same way.
    let info = redis_lock(&format!("{}#insecure", server.tls_url()))
        .args(["info", "job", "--json"])
        .output()
        .unwrap();
    assert!(info.status.success(), "{}", stderr(&info));
    assert_eq!(stdout(&info).trim(), r#"{"key":"job","held":false}"#);
}

#[test]
fn the_certificate_is_checked_against_the_roots_unless_the_url_says_insecure() {
    let Some(server) = tls_server() else {
        return;
    };
    let port = server.tls_port.unwrap();
    let info = |url: &str, roots: Option<&std::path::Path>| {
        let mut command = redis_lock(url);
        if let Some(roots) = roots {
            command.env("SSL_CERT_FILE", roots);
        }
        command.args(["info", "job", "--json"]).output().unwrap()
    };
    // Signed by the server's CA, for localhost and 127.0.0.1.
    let ca = server.tls_ca();
    for url in [
        format!("rediss://127.0.0.1:{port}/"),
        format!("rediss://localhost:{port}/"),
    ] {
        let output = info(&url, Some(&ca));
        assert!(output.status.success(), "{url}: {}", stderr(&output));
        assert_eq!(stdout(&output).trim(), r#"{"key":"job","held":false}"#);
    }
    // The system's roots do not know that CA.
    let output = info(&server.tls_url(), None);
    assert_eq!(output.status.code(), Some(69), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.starts_with("redis-lock: cannot reach the server at rediss://")
            && err.contains("certificate"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // `#insecure` takes any certificate.
    let output = info(&format!("{}#insecure", server.tls_url()), None);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn a_plain_url_to_the_tls_port_and_a_tls_url_to_the_plain_port_fail_with_one_line() {
    let Some(server) = tls_server() else {
        return;
    };
    let port = server.tls_port.unwrap();
    for url in [
        format!("redis://127.0.0.1:{port}/"),
        format!("rediss://127.0.0.1:{}/#insecure", server.port),
    ] {
        let output = redis_lock(&url)
            .args(["run", "job", "--", "true"])
            .output()
            .unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(69), "{url}: {err}");
        assert!(
            err.starts_with(&format!("redis-lock: cannot reach the server at {url} ")),
            "{url}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{url}: {err}");
    }
    assert!(common::lock_info(&mut server.connection(), "job").is_none());
}
