//! A panic anywhere in the module leaves redis-server up and is logged with its
//! location: in a command, in RESTORE's loader, in the other data-type callbacks and
//! in INFO. The faults are injected by the debug build the tests load, when the
//! server's environment asks for them (src/fault.rs).

use redis_lock_testkit as common;

use common::*;
use redis::Value;

fn server() -> Server {
    // Without an RDB preamble, BGREWRITEAOF writes each lock through aof_rewrite.
    let config = Config::default().set("aof-use-rdb-preamble", "no");
    Server::with(config.env("REDIS_LOCK_FAULT_INJECTION", "1"))
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

#[test]
fn without_the_environment_asking_for_it_no_fault_is_injected() {
    let server = Server::start();
    let mut con = server.connection();
    for site in ["command", "digest", "info"] {
        let owner = format!("panic:{site}");
        assert!(acquire(&mut con, &owner, &owner, 60_000).is_some());
    }
    let _: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    let _: String = query(&mut con, &["INFO", "lock"]).unwrap();
    assert!(!server.log().contains("injected fault"), "{}", server.log());
}
