//! Each lock step against the plain-Redis way of doing it, on the same server in the
//! same run: client-side throughput from `redis-benchmark` (unpipelined and `-P 32`)
//! and server-side cost (`usec_per_call` from INFO commandstats, reset before each run).
//! Keys are 16 bytes, owners 36-byte UUIDs, on both sides.

use std::process::Command;

use redis::{Client, Connection, RedisResult};

use crate::keysets;
use crate::stats::{ceiling, median};

const OWNER: &str = "6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d";
const OTHER: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
pub const LONG_TTL: &str = "3600000";

pub const RELEASE_SCRIPT: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
pub const EXTEND_SCRIPT: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
/// The fencing-token acquire users write by hand for plain Redis, as Redisson's
/// fenced lock does: the lock by SET NX PX and, if granted, a token from INCR of a
/// key of its own.
pub const FENCED_ACQUIRE_SCRIPT: &str = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return false";

/// The unpipelined release and extend rows had a 2x target, retired: one command per
/// round trip leaves the server mostly reading, parsing and replying (the ceiling
/// column), which no command can make faster.
pub const RETIRED_UNPIPELINED: &str = "none (2x retired: see the ceiling)";

/// One side of a comparison: a redis-benchmark command line.
struct Side {
    label: &'static str,
    /// The command, `__rand_int__` standing for a 12-digit key suffix.
    args: Vec<String>,
    /// The commandstats entries whose cost this side pays.
    cmdstats: &'static [&'static str],
}

/// Keys the held-key rows use: `lk:x000000000000` … `lk:x000000000999`.
const HELD_KEYS: u64 = 1000;

struct Row {
    name: &'static str,
    ours: Side,
    theirs: Vec<Side>,
    /// Random key range: huge for free keys, HELD_KEYS for held ones.
    range: u64,
    /// Whether keys must be held (by OWNER) before each run.
    held: bool,
    /// Without a pipeline, and with one.
    target: [&'static str; 2],
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

fn rows(extend_sha: &str, fenced_sha: &str) -> Vec<Row> {
    vec![
        Row {
            name: "acquire a free key",
            ours: Side {
                label: "LOCK.ACQUIRE",
                args: args(&["LOCK.ACQUIRE", "lk:x__rand_int__", OWNER, "100000"]),
                cmdstats: &["lock.acquire"],
            },
            theirs: vec![Side {
                label: "SET NX PX",
                args: args(&["SET", "sk:x__rand_int__", OWNER, "NX", "PX", "100000"]),
                cmdstats: &["set"],
            }],
            range: 100_000_000,
            held: false,
            target: ["throughput ≥ 1.0x, usec_per_call ≤ 1.05x"; 2],
        },
        Row {
            name: "acquire a free key, with a fencing token",
            ours: Side {
                label: "LOCK.ACQUIRE",
                args: args(&["LOCK.ACQUIRE", "lk:x__rand_int__", OWNER, "100000"]),
                cmdstats: &["lock.acquire"],
            },
            theirs: vec![Side {
                label: "EVALSHA SET NX PX + INCR",
                args: args(&[
                    "EVALSHA",
                    fenced_sha,
                    "2",
                    "fk:x__rand_int__",
                    "fk:token:x__rand_int__",
                    OWNER,
                    "100000",
                ]),
                cmdstats: &["evalsha"],
            }],
            range: 100_000_000,
            held: false,
            target: ["usec_per_call ≤ 0.5x"; 2],
        },
        Row {
            name: "acquire a held key (miss)",
            ours: Side {
                label: "LOCK.ACQUIRE",
                args: args(&["LOCK.ACQUIRE", "lk:x__rand_int__", OTHER, "100000"]),
                cmdstats: &["lock.acquire"],
            },
            theirs: vec![Side {
                label: "SET NX PX",
                args: args(&["SET", "sk:x__rand_int__", OTHER, "NX", "PX", "100000"]),
                cmdstats: &["set"],
            }],
            range: HELD_KEYS,
            held: true,
            target: ["≥ 1.0x"; 2],
        },
        Row {
            name: "extend by the owner",
            ours: Side {
                label: "LOCK.EXTEND",
                args: args(&["LOCK.EXTEND", "lk:x__rand_int__", OWNER, LONG_TTL]),
                cmdstats: &["lock.extend"],
            },
            theirs: vec![Side {
                label: "EVALSHA compare-and-pexpire",
                args: args(&[
                    "EVALSHA",
                    extend_sha,
                    "1",
                    "sk:x__rand_int__",
                    OWNER,
                    LONG_TTL,
                ]),
                cmdstats: &["evalsha"],
            }],
            range: HELD_KEYS,
            held: true,
            target: [RETIRED_UNPIPELINED, "≥ 2x throughput"],
        },
        Row {
            name: "read the lock",
            ours: Side {
                label: "LOCK.INFO",
                args: args(&["LOCK.INFO", "lk:x__rand_int__"]),
                cmdstats: &["lock.info"],
            },
            theirs: vec![
                Side {
                    label: "PTTL",
                    args: args(&["PTTL", "sk:x__rand_int__"]),
                    cmdstats: &["pttl"],
                },
                Side {
                    label: "GET",
                    args: args(&["GET", "sk:x__rand_int__"]),
                    cmdstats: &["get"],
                },
            ],
            range: HELD_KEYS,
            held: true,
            target: ["≥ 1.0x (against PTTL and GET together)"; 2],
        },
    ]
}

/// What one run of one side measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Measure {
    pub rps: f64,
    pub usec_per_call: f64,
}

fn redis_benchmark(port: u16, side: &Side, range: u64, requests: u64, pipeline: u32) -> f64 {
    let output = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-n",
            &requests.to_string(),
            "-c",
            "50",
            "-r",
            &range.to_string(),
        ])
        .args(["-P", &pipeline.to_string(), "--csv"])
        .args(&side.args)
        .output()
        .expect("redis-benchmark (Debian package redis-tools)");
    let text = String::from_utf8_lossy(&output.stdout);
    // CSV: a header line, then "<test>","<rps>",...
    text.lines()
        .nth(1)
        .and_then(|line| line.split(',').nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())
        .unwrap_or(0.0)
}

/// Sum of `usec` over `calls` for the given commandstats entries.
pub fn usec_per_call(con: &mut Connection, names: &[&str]) -> RedisResult<f64> {
    let text: String = redis::cmd("INFO").arg("commandstats").query(con)?;
    let (mut calls, mut usec) = (0.0, 0.0);
    for line in text.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if !names.contains(&name) {
            continue;
        }
        for field in fields.split(',') {
            match field.split_once('=') {
                Some(("calls", v)) => calls += v.parse::<f64>().unwrap_or(0.0),
                Some(("usec", v)) => usec += v.parse::<f64>().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    Ok(if calls > 0.0 { usec / calls } else { 0.0 })
}

/// Holds the HELD_KEYS keys of both sides, as OWNER, with a long TTL.
fn hold_keys(con: &mut Connection) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for i in 0..HELD_KEYS {
        let suffix = format!("{i:012}");
        pipe.cmd("LOCK.ACQUIRE")
            .arg(format!("lk:x{suffix}"))
            .arg(OWNER)
            .arg(LONG_TTL)
            .ignore();
        pipe.cmd("SET")
            .arg(format!("sk:x{suffix}"))
            .arg(OWNER)
            .arg("PX")
            .arg(LONG_TTL)
            .ignore();
    }
    pipe.query(con)
}

fn measure(
    port: u16,
    con: &mut Connection,
    row: &Row,
    side: &Side,
    pipeline: u32,
) -> RedisResult<Measure> {
    let _: () = redis::cmd("FLUSHALL").query(con)?;
    if row.held {
        hold_keys(con)?;
    }
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con)?;
    let requests = if pipeline > 1 { 1_000_000 } else { 200_000 };
    let rps = redis_benchmark(port, side, row.range, requests, pipeline);
    Ok(Measure {
        rps,
        usec_per_call: usec_per_call(con, side.cmdstats)?,
    })
}

/// Runs every row, alternating ours and theirs `runs` times, and prints the table.
pub fn run(client: &Client, port: u16, runs: usize) -> RedisResult<()> {
    let mut con = client.get_connection()?;
    let release_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE_SCRIPT)
        .query(&mut con)?;
    let extend_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(EXTEND_SCRIPT)
        .query(&mut con)?;
    let fenced_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(FENCED_ACQUIRE_SCRIPT)
        .query(&mut con)?;
    println!("| step | ours | plain Redis | pipeline | ours (req/s) | plain (req/s) | throughput ratio | ours usec/call | plain usec/call | cost ratio | ceiling (a 0 µs command) | target |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in rows(&extend_sha, &fenced_sha) {
        for pipeline in [1, 32] {
            let mut ours = Vec::new();
            let mut theirs: Vec<Vec<Measure>> = vec![Vec::new(); row.theirs.len()];
            for _ in 0..runs {
                ours.push(measure(port, &mut con, &row, &row.ours, pipeline)?);
                for (side, samples) in row.theirs.iter().zip(theirs.iter_mut()) {
                    samples.push(measure(port, &mut con, &row, side, pipeline)?);
                }
            }
            let our_rps = median(&ours.iter().map(|m| m.rps).collect::<Vec<_>>());
            let our_usec = median(&ours.iter().map(|m| m.usec_per_call).collect::<Vec<_>>());
            // Several plain commands for one of ours: their times add up.
            let their_secs_per_op: f64 = theirs
                .iter()
                .map(|s| 1.0 / median(&s.iter().map(|m| m.rps).collect::<Vec<_>>()).max(1e-9))
                .sum();
            let their_rps = 1.0 / their_secs_per_op;
            let their_usec: f64 = theirs
                .iter()
                .map(|s| median(&s.iter().map(|m| m.usec_per_call).collect::<Vec<_>>()))
                .sum();
            let labels: Vec<&str> = row.theirs.iter().map(|s| s.label).collect();
            println!(
                "| {} | {} | {} | {} | {:.0} | {:.0} | {:.2}x | {:.2} | {:.2} | {:.2}x | {:.2}x | {} |",
                row.name,
                row.ours.label,
                labels.join(" + "),
                if pipeline > 1 { "-P 32" } else { "none" },
                our_rps,
                their_rps,
                our_rps / their_rps.max(1e-9),
                our_usec,
                their_usec,
                our_usec / their_usec.max(1e-9),
                ceiling(their_rps, their_usec, row.theirs.len()),
                row.target[usize::from(pipeline > 1)]
            );
        }
    }
    for pipeline in [1, 32] {
        keysets::release_row(port, &mut con, &release_sha, runs, pipeline)?;
    }
    keysets::memory_row(&mut con, runs)?;
    Ok(())
}
