//! The rows that need a set of held keys, each used once: LOCK.RELEASE against the
//! compare-and-delete script, and memory per held lock. Driven by lock-bench itself,
//! since redis-benchmark cannot walk a key set in order.

use std::io::{Read, Write};
use std::net::TcpStream;

use redis::{Connection, RedisResult};

use crate::compare::{usec_per_call, Measure, LONG_TTL};
use crate::stats::{ceiling, median};

/// Keys released per run of the release row.
const RELEASE_KEYS: u64 = 200_000;
/// Client connections releasing in parallel: as many as redis-benchmark uses, so the
/// server, not the round trips of a few clients, sets the pace.
const RELEASE_CLIENTS: u64 = 50;

/// Releases RELEASE_KEYS held keys, each exactly once, from RELEASE_CLIENTS
/// connections; returns requests per second. As in redis-benchmark, the client does
/// as little as it can, so that the server sets the pace: the requests are packed
/// before the clock starts, and replies (one line each: an integer, or an error)
/// are counted, not parsed.
fn release_all(port: u16, command: impl Fn(u64) -> redis::Cmd + Sync, pipeline: u64) -> f64 {
    let batches: Vec<Vec<(Vec<u8>, usize)>> = (0..RELEASE_CLIENTS)
        .map(|c| {
            let keys: Vec<u64> = (c..RELEASE_KEYS)
                .step_by(RELEASE_CLIENTS as usize)
                .collect();
            keys.chunks(pipeline as usize)
                .map(|chunk| {
                    let bytes = chunk
                        .iter()
                        .flat_map(|&i| command(i).get_packed_command())
                        .collect();
                    (bytes, chunk.len())
                })
                .collect()
        })
        .collect();
    let connections: Vec<TcpStream> = (0..RELEASE_CLIENTS)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", port)).expect("connection");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            stream
        })
        .collect();
    let start = std::time::Instant::now();
    std::thread::scope(|scope| {
        for (batches, mut stream) in batches.iter().zip(connections) {
            scope.spawn(move || {
                let mut buffer = vec![0u8; 64 * 1024];
                for (bytes, replies) in batches {
                    stream.write_all(bytes).expect("send");
                    let mut seen = 0;
                    while seen < *replies {
                        let n = stream.read(&mut buffer).expect("read");
                        assert!(n > 0, "the server closed the connection");
                        seen += buffer.iter().take(n).filter(|&&b| b == b'\n').count();
                    }
                }
            });
        }
    });
    RELEASE_KEYS as f64 / start.elapsed().as_secs_f64()
}

fn populate(
    con: &mut Connection,
    keys: u64,
    command: impl Fn(u64) -> redis::Cmd,
) -> RedisResult<()> {
    for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.add_command(command(i)).ignore();
        }
        let _: () = pipe.query(con)?;
    }
    Ok(())
}

fn lock_key(i: u64) -> String {
    format!("lk:x{i:012}")
}

fn plain_key(i: u64) -> String {
    format!("sk:x{i:012}")
}

/// A 36-byte owner id, distinct per key.
fn owner(i: u64) -> String {
    format!("{i:08x}-3d4a-4f5b-9c8d-7e6f5a4b3c2d")
}

fn acquire_cmd(i: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(lock_key(i)).arg(owner(i)).arg(LONG_TTL);
    cmd
}

fn set_cmd(i: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(plain_key(i))
        .arg(owner(i))
        .arg("NX")
        .arg("PX")
        .arg(LONG_TTL);
    cmd
}

pub fn release_row(
    port: u16,
    con: &mut Connection,
    sha: &str,
    runs: usize,
    pipeline: u64,
) -> RedisResult<()> {
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for (side, samples) in [(true, &mut ours), (false, &mut theirs)] {
            let _: () = redis::cmd("FLUSHALL").query(con)?;
            if side {
                populate(con, RELEASE_KEYS, acquire_cmd)?;
            } else {
                populate(con, RELEASE_KEYS, set_cmd)?;
            }
            let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(con)?;
            let rps = if side {
                release_all(
                    port,
                    |i| {
                        let mut cmd = redis::cmd("LOCK.RELEASE");
                        cmd.arg(lock_key(i)).arg(owner(i));
                        cmd
                    },
                    pipeline,
                )
            } else {
                release_all(
                    port,
                    |i| {
                        let mut cmd = redis::cmd("EVALSHA");
                        cmd.arg(sha).arg(1).arg(plain_key(i)).arg(owner(i));
                        cmd
                    },
                    pipeline,
                )
            };
            let left: i64 = redis::cmd("DBSIZE").query(con)?;
            assert_eq!(left, 0, "every key released exactly once");
            let names: &[&str] = if side {
                &["lock.release"]
            } else {
                &["evalsha"]
            };
            samples.push(Measure {
                rps,
                usec_per_call: usec_per_call(con, names)?,
            });
        }
    }
    print_pair(
        "release by the owner",
        "LOCK.RELEASE",
        "EVALSHA compare-and-del",
        pipeline,
        &ours,
        &theirs,
        if pipeline > 1 {
            "≥ 2x throughput"
        } else {
            crate::compare::RETIRED_UNPIPELINED
        },
    );
    Ok(())
}

fn print_pair(
    step: &str,
    ours_label: &str,
    theirs_label: &str,
    pipeline: u64,
    ours: &[Measure],
    theirs: &[Measure],
    target: &str,
) {
    let rps = |m: &[Measure]| median(&m.iter().map(|x| x.rps).collect::<Vec<_>>());
    let usec = |m: &[Measure]| median(&m.iter().map(|x| x.usec_per_call).collect::<Vec<_>>());
    println!(
        "| {step} | {ours_label} | {theirs_label} | {} | {:.0} | {:.0} | {:.2}x | {:.2} | {:.2} | {:.2}x | {:.2}x | {target} |",
        if pipeline > 1 { format!("{pipeline} per round trip, {RELEASE_CLIENTS} clients") } else { format!("none, {RELEASE_CLIENTS} clients") },
        rps(ours),
        rps(theirs),
        rps(ours) / rps(theirs).max(1e-9),
        usec(ours),
        usec(theirs),
        usec(ours) / usec(theirs).max(1e-9),
        ceiling(rps(theirs), usec(theirs), 1),
    );
}

/// Locks held for the memory row.
const MEMORY_KEYS: u64 = 1_000_000;

fn used_memory(con: &mut Connection) -> RedisResult<f64> {
    let text: String = redis::cmd("INFO").arg("memory").query(con)?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

pub fn memory_row(con: &mut Connection, runs: usize) -> RedisResult<()> {
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for (side, samples) in [(true, &mut ours), (false, &mut theirs)] {
            let _: () = redis::cmd("FLUSHALL").query(con)?;
            let before = used_memory(con)?;
            if side {
                populate(con, MEMORY_KEYS, acquire_cmd)?;
            } else {
                populate(con, MEMORY_KEYS, set_cmd)?;
            }
            samples.push((used_memory(con)? - before) / MEMORY_KEYS as f64);
        }
    }
    let _: () = redis::cmd("FLUSHALL").query(con)?;
    let (ours, theirs) = (median(&ours), median(&theirs));
    println!();
    println!("| memory per held lock | ours (bytes) | SET PX (bytes) | ratio | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| {MEMORY_KEYS} locks, 16-byte keys, 36-byte owners, used_memory delta | {ours:.1} | {theirs:.1} | {:.2}x | ≤ 1.15x |",
        ours / theirs.max(1e-9)
    );
    Ok(())
}
