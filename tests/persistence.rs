//! Locks and fencing tokens survive DEBUG RELOAD, a restart from RDB, a restart from
//! AOF after SIGKILL, an AOF rewrite, and DUMP/RESTORE to another server.
//!
//! Tokens normally follow the clock (unix ms x 1000), which alone would make them
//! increase across a restart. To test what is persisted rather than the clock, each
//! test first raises the token high-water mark far above the clock with a restored
//! lock: only a server that kept that mark can hand out a greater token afterwards.

use redis_lock_testkit as common;

use common::*;
use redis::Connection;

/// Far above any clock-derived token (year 5138), far below i64::MAX.
const HIGH: i64 = 100_000_000_000_000_000;

fn apply(con: &mut Connection, key: &str, owner: &str, token: i64) {
    restore_lock(con, key, owner.as_bytes(), token, None).unwrap();
}

fn expire_time(con: &mut Connection, key: &str) -> i64 {
    query(con, &["PEXPIRETIME", key]).unwrap()
}

/// Raises the high-water mark to HIGH with a lock that is then force-released, so
/// nothing in the keyspace carries it.
fn raise_high_water(con: &mut Connection) {
    apply(con, "seed", "seed", HIGH);
    let _: i64 = query(con, &["DEL", "seed"]).unwrap();
    assert_eq!(lock_stat(con, "last_token"), HIGH);
}

/// Key `k` still holds owner `a`'s lock with `token` and expiry `at`; the next grant
/// after its release gets a greater token.
fn assert_kept_and_next_is_greater(con: &mut Connection, token: i64, at: i64) {
    let info = lock_info(con, "k").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], token));
    assert_eq!(expire_time(con, "k"), at);
    release(con, "k", "a");
    assert!(acquire(con, "k", "b", 1_000).unwrap() > token);
}

#[test]
fn tokens_increase_through_release_expiry_and_del() {
    let server = Server::start();
    let mut con = server.connection();
    raise_high_water(&mut con);
    let mut tokens = vec![acquire(&mut con, "k", "a", 10_000).unwrap()];
    release(&mut con, "k", "a");
    tokens.push(acquire(&mut con, "k", "b", 20).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(40));
    tokens.push(acquire(&mut con, "k", "c", 10_000).unwrap());
    let _: i64 = query(&mut con, &["DEL", "k"]).unwrap();
    tokens.push(acquire(&mut con, "k", "d", 10_000).unwrap());
    assert!(tokens[0] > HIGH);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[test]
fn debug_reload_keeps_locks_and_the_high_water_mark() {
    let server = Server::start();
    let mut con = server.connection();
    raise_high_water(&mut con);
    let token = acquire(&mut con, "k", "a", 60_000).unwrap();
    let at = expire_time(&mut con, "k");
    let digest: String = query(&mut con, &["DEBUG", "DIGEST"]).unwrap();
    let _: () = query(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(
        query::<String>(&mut con, &["DEBUG", "DIGEST"]).unwrap(),
        digest
    );
    assert_kept_and_next_is_greater(&mut con, token, at);
}

#[test]
fn a_restart_from_rdb_restores_locks_and_the_high_water_mark() {
    let mut server = Server::start();
    let mut con = server.connection();
    raise_high_water(&mut con);
    let token = acquire(&mut con, "k", "a", 60_000).unwrap();
    release(&mut con, "k", "a");
    let held = acquire(&mut con, "held", "b", 60_000).unwrap();
    let held_at = expire_time(&mut con, "held");
    let _: () = query(&mut con, &["SAVE"]).unwrap();

    server.restart();
    let mut con = server.connection();
    assert_eq!(
        lock_stat(&mut con, "last_token"),
        held,
        "high-water mark kept"
    );
    let info = lock_info(&mut con, "held").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"b"[..], held));
    assert_eq!(expire_time(&mut con, "held"), held_at);
    assert_eq!(lock_info(&mut con, "k"), None);
    let next = acquire(&mut con, "k", "c", 1_000).unwrap();
    assert!(next > held && held > token);
}

#[test]
fn a_restart_from_aof_after_sigkill_loses_no_grant() {
    let mut server = Server::with(Config::default().aof());
    let mut con = server.connection();
    raise_high_water(&mut con);
    let first = acquire(&mut con, "k", "a", 60_000).unwrap();
    release(&mut con, "k", "a");
    let held = acquire(&mut con, "held", "b", 60_000).unwrap();
    assert_eq!(extend(&mut con, "held", "b", 120_000), 1);
    let held_at = expire_time(&mut con, "held");
    let refreshed = acquire(&mut con, "held", "b", 90_000).unwrap();
    assert_eq!(refreshed, held);
    let refreshed_at = expire_time(&mut con, "held");
    assert!(refreshed_at < held_at);

    server.kill(); // SIGKILL: only what appendfsync always wrote survives
    server.restart();
    let mut con = server.connection();
    assert_eq!(lock_stat(&mut con, "last_token"), held);
    let info = lock_info(&mut con, "held").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"b"[..], held));
    assert_eq!(
        expire_time(&mut con, "held"),
        refreshed_at,
        "same absolute expiry"
    );
    assert_eq!(lock_info(&mut con, "k"), None, "the release was replayed");
    let next = acquire(&mut con, "k", "c", 1_000).unwrap();
    assert!(next > held && held > first);
}

/// The commands of every AOF file of `server` (`appendonly.aof`, or Redis 7's
/// `appendonlydir/*.aof`), each as its arguments.
fn aof_commands(server: &Server) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    for dir in [
        server.dir().to_path_buf(),
        server.dir().join("appendonlydir"),
    ] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().ends_with(".aof") {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    let mut commands = Vec::new();
    for file in files {
        let text = String::from_utf8_lossy(&std::fs::read(file).unwrap()).into_owned();
        let mut lines = text.split("\r\n");
        while let Some(line) = lines.next() {
            let Some(count) = line.strip_prefix('*') else {
                continue;
            };
            let count: usize = count.parse().unwrap();
            let command = (0..count).map(|_| {
                lines.next(); // $len
                lines.next().unwrap().to_owned()
            });
            commands.push(command.collect());
        }
    }
    commands
}

#[test]
fn grants_and_refreshes_reach_the_aof_as_their_effect_with_the_absolute_expiry() {
    let server = Server::with(Config::default().aof());
    let mut con = server.connection();
    let mut written = Vec::new();
    for (key, ttl) in [("a", 60_000), ("b", 60_000), ("c", 60_000), ("a", 90_000)] {
        let token = acquire(&mut con, key, "owner-1", ttl).unwrap();
        written.push(vec![
            "LOCK.APPLY".to_owned(),
            key.to_owned(),
            "owner-1".to_owned(),
            token.to_string(),
            "PXAT".to_owned(),
            expire_time(&mut con, key).to_string(),
        ]);
    }
    let applied: Vec<Vec<String>> = aof_commands(&server)
        .into_iter()
        .filter(|command| command[0].eq_ignore_ascii_case("LOCK.APPLY"))
        .collect();
    assert_eq!(applied, written);
}

#[test]
fn an_aof_rewrite_without_rdb_preamble_keeps_locks_and_expiries() {
    let mut server = Server::with(Config::default().aof().set("aof-use-rdb-preamble", "no"));
    let mut con = server.connection();
    raise_high_water(&mut con);
    let token = acquire(&mut con, "k", "a", 60_000).unwrap();
    let at = expire_time(&mut con, "k");
    let permit: i64 = query(
        &mut con,
        &["LOCK.ACQUIRE", "sem", "p", "60000", "LIMIT", "3"],
    )
    .unwrap();
    let _: String = query(&mut con, &["BGREWRITEAOF"]).unwrap();
    wait_until(std::time::Duration::from_secs(20), || {
        info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    server.kill();
    server.restart();
    let mut con = server.connection();
    let sem = lock_info(&mut con, "sem").unwrap();
    assert_eq!(
        (sem.holders[0].token, sem.holders[0].limit),
        (permit, Some(3)),
        "a permit keeps its limit"
    );
    assert_kept_and_next_is_greater(&mut con, token, at);
}

#[test]
fn restore_on_another_server_raises_its_tokens() {
    let source = Server::start();
    let target = Server::start();
    let mut src = source.connection();
    let mut dst = target.connection();
    raise_high_water(&mut src);
    let token = acquire(&mut src, "k", "a", 60_000).unwrap();
    let payload: Vec<u8> = query(&mut src, &["DUMP", "k"]).unwrap();
    let before = acquire(&mut dst, "other", "x", 60_000).unwrap();
    assert!(before < token, "the target's own tokens follow its clock");

    let _: () = redis::cmd("RESTORE")
        .arg("k")
        .arg(0)
        .arg(payload)
        .query(&mut dst)
        .unwrap();
    let info = lock_info(&mut dst, "k").unwrap();
    assert_eq!((info.owner.as_slice(), info.token), (&b"a"[..], token));
    assert_eq!(release(&mut dst, "k", "a"), 1);
    let next = acquire(&mut dst, "k", "b", 1_000).unwrap();
    assert!(next > token, "{next} after restored {token}");
    let elsewhere = acquire(&mut dst, "fresh", "b", 1_000).unwrap();
    assert!(elsewhere > next);
}

/// A DUMP payload: the value, then the RDB version (2 bytes) and a CRC-64 (8 bytes)
/// of everything before it. Returns `value` sealed with the footer of `like`.
fn sealed(value: &[u8], like: &[u8]) -> Vec<u8> {
    let version = &like[like.len() - 10..like.len() - 8];
    let mut payload = [value, version].concat();
    let crc = crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    payload
}

#[test]
fn a_corrupt_restore_payload_is_refused_and_the_server_stays_up() {
    let server = Server::start();
    let mut con = server.connection();
    acquire(&mut con, "k", "owner-1", 60_000).unwrap();
    let payload: Vec<u8> = query(&mut con, &["DUMP", "k"]).unwrap();
    let value = &payload[..payload.len() - 10];
    // Encoding version 3 ends with the token (an opcode, then 0x81 and 8 bytes:
    // tokens are above 2^32), the expiry (an opcode and 0: an exclusive holding's
    // expiry is the key's), the limit (an opcode and 0: none) and the module data's
    // end opcode (0). Mode and count are the two integers after the module id.
    let token_at = value.len() - 15;
    let limit_at = value.len() - 3;
    assert_eq!(value[limit_at..], [2, 0, 0], "{value:?}");
    assert_eq!(value[token_at + 1], 0x81, "{value:?}");
    let resealed: Vec<u8> = sealed(value, &payload);
    assert_eq!(resealed, payload, "the test seals payloads as Redis does");

    let mut wrong_opcode = value.to_vec();
    wrong_opcode[token_at] = 5; // a string where the token's integer is
    let mut zero_token = value.to_vec();
    zero_token[token_at + 2..token_at + 10].fill(0);
    let mut unknown_mode = value.to_vec();
    unknown_mode[11] = 7;
    let mut no_holding = value.to_vec();
    no_holding[13] = 0;
    // A count of 2^40 holdings with one behind it: refused, nothing reserved for it.
    let huge_count = [
        &value[..12],
        &[0x81, 0, 0, 1, 0, 0, 0, 0, 0][..],
        &value[14..],
    ]
    .concat();
    // A limit on an exclusive holding; a limit above 2^31.
    let limited = [&value[..limit_at], &[2, 3, 0][..]].concat();
    let huge_limit = [&value[..limit_at], &[2, 0x80, 0x80, 0, 0, 1, 0][..]].concat();
    let corrupt = [
        ("a limit on an exclusive holding", limited),
        ("a limit above 2^31", huge_limit),
        ("an unknown mode", unknown_mode),
        ("no holding", no_holding),
        ("2^40 holdings", huge_count),
        ("no token", [&value[..token_at], &[0][..]].concat()),
        ("a string for the token", wrong_opcode),
        ("a token of 0", zero_token),
        (
            "nothing after the module id",
            [&value[..10], &[0][..]].concat(),
        ),
        ("cut short", value[..value.len() - 5].to_vec()),
    ];
    for (what, value) in corrupt {
        let result: redis::RedisResult<()> = redis::cmd("RESTORE")
            .arg("copy")
            .arg(0)
            .arg(sealed(&value, &payload))
            .query(&mut con);
        let error = result.expect_err(what);
        assert!(
            error.to_string().contains("Bad data format"),
            "{what}: {error}"
        );
        let pong: String = query(&mut con, &["PING"]).unwrap();
        assert_eq!(pong, "PONG", "{what}");
        assert_eq!(lock_info(&mut con, "copy"), None, "{what}");
    }
    // The original payload still restores.
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(lock_info(&mut con, "copy").unwrap().owner, b"owner-1");
}

/// A fixture written by the module's first on-disk format (`tests/fixtures/v1`).
fn fixture(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/v1")
        .join(path)
}

#[test]
fn an_rdb_of_the_second_format_loads_its_shared_holdings_without_limits() {
    let rdb =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2/rdb/dump.rdb");
    let server = Server::with(Config::default().preload(rdb));
    let mut con = server.connection();
    let held = lock_info(&mut con, "fixture:held").expect("the lock loaded");
    assert_eq!(held.owner, b"owner-a");
    assert_eq!(expire_time(&mut con, "fixture:held"), 4_102_444_800_000);
    for (key, owners) in [
        ("fixture:permits", &["p1", "p2"][..]),
        ("fixture:readers", &["r1"][..]),
    ] {
        let info = lock_info(&mut con, key).expect("the lock loaded");
        assert_eq!(info.mode, "shared");
        let loaded: Vec<_> = info
            .holders
            .iter()
            .map(|h| (h.owner.as_slice(), h.limit))
            .collect();
        let expected: Vec<_> = owners.iter().map(|o| (o.as_bytes(), None)).collect();
        assert_eq!(loaded, expected, "{key}: version 2 kept no limit");
    }
    // Saved again, it loads in the current format.
    let _: () = query(&mut con, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(
        lock_info(&mut con, "fixture:permits")
            .unwrap()
            .holders
            .len(),
        2
    );
    assert_eq!(release(&mut con, "fixture:permits", "p1"), 1);
}

#[test]
fn an_rdb_of_the_first_format_loads() {
    let server = Server::with(Config::default().preload(fixture("rdb/dump.rdb")));
    let mut con = server.connection();
    let held = lock_info(&mut con, "fixture:held").expect("the lock loaded");
    assert_eq!(held.owner, b"owner-a");
    assert_eq!(expire_time(&mut con, "fixture:held"), 4_102_444_800_000);
    let long = lock_info(&mut con, "fixture:long-owner").expect("the lock loaded");
    assert_eq!(long.owner, vec![b'o'; 60]);
    assert_eq!(lock_stat(&mut con, "last_token"), HIGH);
    assert!(acquire(&mut con, "fresh", "b", 1000).unwrap() > HIGH);
    assert_eq!(release(&mut con, "fixture:held", "owner-a"), 1);
}

#[test]
fn an_aof_of_the_first_format_loads() {
    let config = Config::default()
        .aof()
        .preload(fixture("aof/appendonlydir"));
    let server = Server::with(config);
    let mut con = server.connection();
    assert_eq!(
        lock_info(&mut con, "fixture:held").unwrap().owner,
        b"owner-a"
    );
    let after = lock_info(&mut con, "fixture:after").expect("granted after the rewrite");
    assert_eq!(
        (after.owner.as_slice(), after.token),
        (&b"owner-c"[..], HIGH + 1)
    );
    assert_eq!(expire_time(&mut con, "fixture:after"), 4_102_444_800_000);
    assert_eq!(lock_info(&mut con, "fixture:released"), None);
    assert!(acquire(&mut con, "fresh", "b", 1000).unwrap() > HIGH + 2);
}
