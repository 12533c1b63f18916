//! Hostile input: random argument vectors for every lock command, sent to a real
//! server. The server must stay up and answer every call with a well-formed reply or
//! error, and never block a client that did not ask to wait.
//!
//! `HOSTILE_CALLS` sets the number of calls (default 200,000; `make fuzz` sends
//! 1,000,000); `HOSTILE_SEED` replays a run (the seed is printed).

use redis_lock_testkit as common;

use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

/// The lock commands, and key commands a lock meets in the keyspace.
const COMMANDS: [&str; 19] = [
    "LOCK.GUARD",
    "lock.guard",
    "LOCK.ACQUIRE",
    "lock.acquire",
    "LOCK.ACQUIRE",
    "LOCK.RELEASE",
    "LOCK.EXTEND",
    "LOCK.INFO",
    "LOCK.APPLY",
    "Lock.Extend",
    "DEL",
    "SET",
    "PEXPIRE",
    "PEXPIREAT",
    "PERSIST",
    "RENAME",
    "COPY",
    "MOVE",
    "DUMP",
];

fn number(rng: &mut StdRng) -> Vec<u8> {
    let n: i128 = match rng.gen_range(0..10) {
        0 => 0,
        1 => -1,
        2 => i64::MAX as i128,
        3 => i64::MIN as i128,
        4 => i64::MAX as i128 + 1,
        5 => rng.gen_range(-1_000_000..1_000_000),
        _ => rng.gen_range(1..200),
    };
    let mut text = n.to_string().into_bytes();
    match rng.gen_range(0..12) {
        0 => text.insert(0, b'+'),
        1 => text.insert(0, b'0'),
        2 => text.push(b' '),
        3 => text.extend_from_slice(b".5"),
        _ => {}
    }
    text
}

fn garbage(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0 => 0,
        1 => rng.gen_range(200..1200),
        _ => rng.gen_range(1..20),
    };
    (0..len).map(|_| rng.gen()).collect()
}

fn argument(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0..=2 => format!("k{}", rng.gen_range(0..8)).into_bytes(),
        3 | 4 => number(rng),
        5 => ["WAIT", "wait", "PXAT", "NX", "PX"][rng.gen_range(0..5)].into(),
        6 => format!("owner-{}", rng.gen_range(0..3)).into_bytes(),
        _ => garbage(rng),
    }
}

/// A random call. One argument is tamed, everything else is as random as it comes:
/// WAIT never gets a timeout that could block long. (LOCK.APPLY, refused from
/// clients, can no longer push the token mark to its end.)
fn random_call(rng: &mut StdRng) -> Vec<Vec<u8>> {
    let mut call = vec![COMMANDS[rng.gen_range(0..COMMANDS.len())]
        .as_bytes()
        .to_vec()];
    let arity = match rng.gen_range(0..10) {
        0 => rng.gen_range(0..12),
        _ => rng.gen_range(1..6),
    };
    // Redis's own commands echo some bad arguments in their errors, which the client
    // cannot parse when they are not UTF-8: those get keys and numbers only (and so
    // does LOCK.GUARD, whose inner command is Redis's).
    let upper = call[0].to_ascii_uppercase();
    let guarded = upper == b"LOCK.GUARD";
    let ours = upper.starts_with(b"LOCK.") && !guarded;
    for _ in 0..arity {
        let mut arg = argument(rng);
        while !ours && std::str::from_utf8(&arg).is_err() {
            arg = argument(rng);
        }
        call.push(arg);
    }
    // A guarded call runs a command that exists, mostly: the ones a holder writes
    // with, its own lock's commands, and those a script may not run.
    if guarded && call.len() > 3 && rng.gen_range(0..4) > 0 {
        const INNER: [&str; 16] = [
            "SET",
            "GET",
            "DEL",
            "INCR",
            "HSET",
            "RENAME",
            "LOCK.ACQUIRE",
            "LOCK.RELEASE",
            "BLPOP",
            "MULTI",
            "EVAL",
            "SHUTDOWN",
            "DEBUG",
            "PEXPIRE",
            "COPY",
            "FLUSHDB",
        ];
        call[3] = INNER[rng.gen_range(0..INNER.len())].into();
    }
    for i in 1..call.len() {
        if call[i].eq_ignore_ascii_case(b"WAIT") {
            if let Some(timeout) = call.get_mut(i + 1) {
                let parsed = std::str::from_utf8(timeout)
                    .ok()
                    .and_then(|t| t.parse::<i64>().ok());
                if parsed.is_some_and(|t| t >= 0) {
                    *timeout = rng.gen_range(1..4).to_string().into_bytes();
                }
            }
        }
    }
    call
}

#[test]
fn random_calls_get_replies_and_the_server_stays_up() {
    let calls: u64 = std::env::var("HOSTILE_CALLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let seed: u64 = std::env::var("HOSTILE_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("hostile: {calls} calls, HOSTILE_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let server = Server::start();
    let mut con = server.connection();
    con.set_read_timeout(Some(Duration::from_secs(30))).unwrap();

    let (mut errors, mut replies) = (0u64, 0u64);
    let started = Instant::now();
    let mut sent = 0;
    while sent < calls {
        let batch = 500.min(calls - sent);
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for _ in 0..batch {
            let call = random_call(&mut rng);
            let cmd = pipe.cmd(std::str::from_utf8(&call[0]).unwrap());
            for arg in &call[1..] {
                cmd.arg(&arg[..]);
            }
        }
        // One reply or error reply per call; a connection error or a timeout (a
        // crashed or blocked server) fails the test.
        let values: Vec<redis::RedisResult<Value>> = pipe
            .query(&mut con)
            .unwrap_or_else(|error| panic!("after {sent} calls (seed {seed}): {error}"));
        assert_eq!(values.len() as u64, batch, "one reply per call");
        for value in values {
            match value {
                Ok(_) => replies += 1,
                Err(error) if error.code().is_some() => {
                    let text = error.to_string();
                    // A caught panic in the module answers "internal error".
                    assert!(!text.contains("internal error"), "seed {seed}: {text}");
                    errors += 1;
                }
                Err(error) => {
                    panic!("not a server reply after {sent} calls (seed {seed}): {error}")
                }
            }
        }
        sent += batch;
        if sent % 50_000 == 0 {
            // Clear the locks now and then, so grants keep happening.
            let _: () = redis::cmd("FLUSHDB").query(&mut con).unwrap();
        }
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert!(
        lock_stat(&mut con, "acquisitions") > 0,
        "some calls were valid grants"
    );
    assert!(errors > 0 && replies > 0);
    assert_eq!(lock_stat(&mut con, "waiters"), 0, "no waiter left behind");
    eprintln!(
        "hostile: {sent} calls in {:.1} s: {replies} replies, {errors} errors, server up",
        started.elapsed().as_secs_f64()
    );
}
