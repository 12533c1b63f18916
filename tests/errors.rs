//! Every bad call of contract.md "Errors" gets an error naming what is wrong and
//! changes nothing: the dataset digest, the counters and the token high-water mark
//! stay as they were.

use redis_lock_testkit as common;

use common::*;
use redis::{Connection, Value};

/// The state a bad call must not touch.
fn snapshot(con: &mut Connection) -> (String, String) {
    let digest: String = query(con, &["DEBUG", "DIGEST"]).unwrap();
    let info: String = query(con, &["INFO", "lock"]).unwrap();
    (digest, info)
}

/// Sends `args`, expects an error reply starting with `prefix` and containing
/// `mentions`, and checks that nothing changed.
fn assert_refused(con: &mut Connection, args: &[&[u8]], prefix: &str, mentions: &str) {
    let before = snapshot(con);
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let shown: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let error = match cmd.query::<Value>(con) {
        Err(error) => error,
        Ok(value) => panic!("{shown:?} succeeded with {value:?}"),
    };
    let text = format!(
        "{} {}",
        error.code().unwrap_or(""),
        error.detail().unwrap_or("")
    );
    assert!(
        text.starts_with(prefix),
        "{shown:?}: error {text:?} does not start with {prefix:?}"
    );
    assert!(
        text.contains(mentions),
        "{shown:?}: error {text:?} does not mention {mentions:?}"
    );
    assert_eq!(
        snapshot(con),
        before,
        "{shown:?} changed the dataset or counters"
    );
}

fn setup(config: Config) -> (Server, Connection) {
    let server = Server::with(config);
    let mut con = server.connection();
    acquire(&mut con, "held", "owner-1", 60_000).unwrap();
    let _: () = query(&mut con, &["SET", "text", "v"]).unwrap();
    (server, con)
}

#[test]
fn wrong_arity_is_refused() {
    let (_server, mut con) = setup(Config::default());
    for args in [
        &[&b"LOCK.ACQUIRE"[..]][..],
        &[b"LOCK.ACQUIRE", b"k"],
        &[b"LOCK.ACQUIRE", b"k", b"o"],
        &[b"LOCK.RELEASE", b"held"],
        &[b"LOCK.RELEASE", b"held", b"owner-1", b"extra"],
        &[b"LOCK.EXTEND", b"held", b"owner-1"],
        &[b"LOCK.EXTEND", b"held", b"owner-1", b"100", b"extra"],
        &[b"LOCK.INFO"],
        &[b"LOCK.INFO", b"held", b"extra"],
    ] {
        assert_refused(&mut con, args, "ERR", "wrong number of arguments");
    }
}

#[test]
fn bad_owners_are_refused() {
    let (_server, mut con) = setup(Config::default());
    let long = vec![b'x'; 257];
    for command in [&b"LOCK.ACQUIRE"[..], b"LOCK.EXTEND"] {
        assert_refused(&mut con, &[command, b"k", b"", b"100"], "ERR", "owner");
    }
    assert_refused(&mut con, &[b"LOCK.RELEASE", b"held", b""], "ERR", "owner");
    // lock.max-owner-len bounds new holdings: free or held by another owner.
    assert_refused(
        &mut con,
        &[b"LOCK.ACQUIRE", b"k", &long, b"100"],
        "ERR",
        "max-owner-len",
    );
    assert_refused(
        &mut con,
        &[b"LOCK.ACQUIRE", b"held", &long, b"100"],
        "ERR",
        "max-owner-len",
    );
    let waiting = [&b"LOCK.ACQUIRE"[..], b"held", &long, b"100", b"WAIT", b"50"];
    assert_refused(&mut con, &waiting, "ERR", "max-owner-len");
    // A release or extend by such an owner is one by an owner that holds nothing.
    let long = String::from_utf8(long).unwrap();
    assert_eq!(release(&mut con, "held", &long), 0);
    assert_eq!(extend(&mut con, "held", &long, 100), 0);
    // 256 bytes is still fine.
    assert!(acquire(&mut con, "k", &"x".repeat(256), 100).is_some());
}

#[test]
fn bad_ttls_are_refused() {
    let (_server, mut con) = setup(Config::default());
    for ttl in [
        &b"0"[..],
        b"-1",
        b"abc",
        b"1.5",
        b"",
        b"+5",
        b" 5",
        b"99999999999999999999",
        b"9223372036854775807", // fits i64, but now + ttl does not
    ] {
        assert_refused(&mut con, &[b"LOCK.ACQUIRE", b"k", b"o", ttl], "ERR", "ttl");
        // On a held lock, by its holder and (validated whatever the lock's state)
        // by another owner.
        for owner in [&b"owner-1"[..], b"owner-2"] {
            for command in [&b"LOCK.ACQUIRE"[..], b"LOCK.EXTEND"] {
                assert_refused(&mut con, &[command, b"held", owner, ttl], "ERR", "ttl");
            }
        }
    }
    // Past i64 the number is well formed, only too large.
    for args in [
        &[&b"LOCK.ACQUIRE"[..], b"k", b"o", b"9223372036854775808"][..],
        &[
            b"LOCK.ACQUIRE",
            b"k",
            b"o",
            b"100",
            b"WAIT",
            b"9223372036854775808",
        ],
    ] {
        assert_refused(&mut con, args, "ERR", "out of range");
    }
}

#[test]
fn ttl_over_max_ttl_is_refused() {
    let (_server, mut con) = setup(Config::default().module_arg("max-ttl", "60000"));
    assert_refused(
        &mut con,
        &[b"LOCK.ACQUIRE", b"k", b"o", b"60001"],
        "ERR",
        "lock.max-ttl",
    );
    assert_refused(
        &mut con,
        &[b"LOCK.EXTEND", b"held", b"owner-1", b"60001"],
        "ERR",
        "lock.max-ttl",
    );
    assert!(acquire(&mut con, "k", "o", 60000).is_some());
}

#[test]
fn bad_timeouts_and_options_are_refused() {
    let (_server, mut con) = setup(Config::default());
    let acquire_with = |extra: &[&'static [u8]]| {
        let mut args: Vec<&[u8]> = vec![b"LOCK.ACQUIRE", b"k", b"o", b"100"];
        args.extend_from_slice(extra);
        args
    };
    for timeout in [
        &b"-1"[..],
        b"x",
        b"1.5",
        b"99999999999999999999",
        b"9223372036854775807", // fits i64, but now + timeout does not
    ] {
        let args = acquire_with(&[b"WAIT", timeout]);
        assert_refused(&mut con, &args, "ERR", "timeout");
        // On a held key, where the client would block.
        let args: Vec<&[u8]> = vec![
            b"LOCK.ACQUIRE",
            b"held",
            b"owner-2",
            b"100",
            b"WAIT",
            timeout,
        ];
        assert_refused(&mut con, &args, "ERR", "timeout");
    }
    assert_refused(&mut con, &acquire_with(&[b"WAIT"]), "ERR", "WAIT");
    assert_refused(&mut con, &acquire_with(&[b"NX"]), "ERR", "'NX'");
    assert_refused(&mut con, &acquire_with(&[b"FOO", b"1"]), "ERR", "'FOO'");
    assert_refused(
        &mut con,
        &acquire_with(&[b"WAIT", b"1", b"WAIT", b"2"]),
        "ERR",
        "more than once",
    );
    assert_refused(
        &mut con,
        &acquire_with(&[b"WAIT", b"1", b"FOO", b"2"]),
        "ERR",
        "'FOO'",
    );
}

#[test]
fn keys_of_another_type_are_wrongtype() {
    let (_server, mut con) = setup(Config::default());
    assert_refused(
        &mut con,
        &[b"LOCK.ACQUIRE", b"text", b"o", b"100"],
        "WRONGTYPE",
        "",
    );
    assert_refused(&mut con, &[b"LOCK.RELEASE", b"text", b"o"], "WRONGTYPE", "");
    assert_refused(
        &mut con,
        &[b"LOCK.EXTEND", b"text", b"o", b"100"],
        "WRONGTYPE",
        "",
    );
    assert_refused(&mut con, &[b"LOCK.INFO", b"text"], "WRONGTYPE", "");
    let text: String = query(&mut con, &["GET", "text"]).unwrap();
    assert_eq!(text, "v");
}

#[test]
fn apply_calls_from_clients_are_refused_whatever_their_arguments() {
    let (_server, mut con) = setup(Config::default());
    for call in [
        &[&b"LOCK.APPLY"[..], b"k", b"o", b"5"][..],
        &[b"LOCK.APPLY", b"k", b"o", b"0"],
        &[b"LOCK.APPLY", b"k", b"", b"5"],
        &[b"LOCK.APPLY", b"k", b"o", b"5", b"PXAT", b"-3"],
    ] {
        assert_refused(&mut con, call, "ERR", "internal");
    }
}

#[test]
fn hostile_bytes_get_a_clean_error_and_the_server_stays_up() {
    let (_server, mut con) = setup(Config::default());
    let nasty: &[u8] = b"\x00\r\n-ERR\xff";
    assert_refused(
        &mut con,
        &[b"LOCK.ACQUIRE", b"k", b"o", nasty],
        "ERR",
        "ttl",
    );
    assert_refused(
        &mut con,
        &[b"LOCK.ACQUIRE", b"k", b"o", b"5", nasty, b"1"],
        "ERR",
        "unknown option",
    );
    let many: Vec<&[u8]> = std::iter::once(&b"LOCK.ACQUIRE"[..])
        .chain([&b"k"[..], b"o", b"5"])
        .chain(std::iter::repeat_n(&b"WAIT"[..], 40))
        .collect();
    assert_refused(&mut con, &many, "ERR", "");
    let pong: String = query(&mut con, &["PING"]).unwrap();
    assert_eq!(pong, "PONG");
}
