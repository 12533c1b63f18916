//! A panic anywhere in the module leaves redis-server up and is logged with its
//! location: in a command, in RESTORE's loader, in the other data-type callbacks and
//! in INFO. The faults are injected by a build of the module with the cargo feature
//! `fault-injection` (src/fault.rs), made once for this file in a target directory
//! of its own.

use redis_lock_testkit as common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use redis::Value;

fn fault_injection_module() -> PathBuf {
    static MODULE: OnceLock<PathBuf> = OnceLock::new();
    MODULE
        .get_or_init(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            let target = root.join("target").join("fault-injection");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--quiet", "--lib", "-p", "redis-lock"])
                .args(["--features", "fault-injection"])
                .arg("--target-dir")
                .arg(&target)
                .current_dir(&root)
                .status()
                .expect("cargo build");
            assert!(
                status.success(),
                "building the fault-injection module failed"
            );
            target.join("debug").join("libredis_lock.so")
        })
        .clone()
}

fn server() -> Server {
    // Without an RDB preamble, BGREWRITEAOF writes each lock through aof_rewrite.
    let config = Config::default().set("aof-use-rdb-preamble", "no");
    Server::with(config.module_file(fault_injection_module()))
}

/// The server answers, and its log names the panic's site in the module's source.
fn assert_survived(server: &Server, con: &mut redis::Connection, site: &str) {
    let pong: String = query(con, &["PING"]).expect("the server is up");
    assert_eq!(pong, "PONG", "{site}");
    let log = server.log();
    let line = log
        .lines()
        .find(|line| line.contains(&format!("injected fault at {site}")))
        .unwrap_or_else(|| panic!("{site}: no panic in the log:\n{log}"));
    assert!(line.contains("lock module: panic at src/"), "{line}");
}

#[test]
fn a_panic_in_a_command_is_an_error_reply() {
    let server = server();
    let mut con = server.connection();
    let error =
        query::<Value>(&mut con, &["LOCK.ACQUIRE", "k", "panic:command", "1000"]).unwrap_err();
    assert!(error.to_string().contains("internal error"), "{error}");
    assert_survived(&server, &mut con, "command");
}

#[test]
fn a_panic_in_restores_loader_is_bad_data() {
    let server = server();
    let mut con = server.connection();
    let error = restore_lock(&mut con, "k", b"panic:rdb_load", 5, None).unwrap_err();
    assert!(error.to_string().contains("Bad data format"), "{error}");
    assert_survived(&server, &mut con, "rdb_load");
    assert_eq!(dbsize(&mut con), 0);
}

#[test]
fn panics_in_the_other_data_type_callbacks_and_info_leave_the_server_up() {
    let server = server();
    let mut con = server.connection();
    let calls: [(&str, &[&str]); 4] = [
        ("digest", &["DEBUG", "DIGEST-VALUE", "panic:digest"]),
        ("mem_usage", &["MEMORY", "USAGE", "panic:mem_usage"]),
        ("rdb_save", &["DUMP", "panic:rdb_save"]),
        ("aof_rewrite", &["BGREWRITEAOF"]),
    ];
    for (site, call) in calls {
        let owner = format!("panic:{site}");
        acquire(&mut con, &owner, &owner, 60_000).unwrap();
        let _ = query::<Value>(&mut con, call);
        if site == "aof_rewrite" {
            // The rewrite runs in a child process: wait for it to end.
            wait_until(std::time::Duration::from_secs(20), || {
                info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref()
                    == Some("0")
                    && info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref()
                        == Some("0")
            });
        }
        assert_survived(&server, &mut con, site);
    }
    acquire(&mut con, "k", "panic:info", 60_000).unwrap();
    let _: String = query(&mut con, &["INFO", "lock"]).unwrap();
    assert_survived(&server, &mut con, "info");
    // INFO works again afterwards.
    assert!(lock_stat(&mut con, "acquisitions") >= 5);
}
