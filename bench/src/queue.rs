//! Long queues: what one hand-off costs with few and with many clients queued on the
//! lock. Waiters are raw connections that send `LOCK.ACQUIRE … WAIT 0` and are never
//! read; a control connection releases each grant on behalf of its owner, which
//! hands the lock to the next in line. A hand-off that looked at the whole queue
//! would cost more per waiter queued; the two lengths should cost about the same.
//!
//! With `--callgrind` (a redis-server under `valgrind --tool=callgrind`), the drain
//! is also counted in instructions: stable where CPU time is noisy.

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use redis::{Client, RedisResult};

use crate::stats::{median, server_cpu_us};

const KEY: &str = "bench:queue";

/// A redis-server running under callgrind: its pid and its `--callgrind-out-file`.
pub struct Callgrind {
    pub pid: u32,
    pub out_file: PathBuf,
}

impl Callgrind {
    pub fn control(&self, flag: &str) -> RedisResult<()> {
        Command::new("callgrind_control")
            .arg(flag)
            .arg(self.pid.to_string())
            .output()?;
        Ok(())
    }

    /// Instructions of the newest dump (`PROGRAM TOTALS` of callgrind_annotate).
    pub fn last_dump_instructions(&self) -> RedisResult<f64> {
        let dir = self.out_file.parent().unwrap_or(Path::new("."));
        let newest = std::fs::read_dir(dir)?
            .filter_map(|entry| entry.ok())
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with("callgrind.out")
            })
            .max_by_key(|entry| entry.metadata().and_then(|m| m.modified()).ok())
            .map(|entry| entry.path());
        let Some(dump) = newest else {
            return Ok(f64::NAN);
        };
        let annotated = Command::new("callgrind_annotate").arg(dump).output()?;
        let text = String::from_utf8_lossy(&annotated.stdout);
        Ok(text
            .lines()
            .find(|line| line.contains("PROGRAM TOTALS"))
            .and_then(|line| line.split_whitespace().next())
            .and_then(|count| count.replace(',', "").parse::<f64>().ok())
            .unwrap_or(f64::NAN))
    }
}

/// Per hand-off with `waiters` queued: server CPU and wall time in µs, and the
/// server's instructions when it runs under callgrind.
fn drain(
    client: &Client,
    port: u16,
    waiters: usize,
    callgrind: Option<&Callgrind>,
) -> RedisResult<(f64, f64, f64)> {
    let mut con = client.get_connection()?;
    let _: i64 = redis::cmd("DEL").arg(KEY).query(&mut con)?;
    let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg(KEY)
        .arg("holder")
        .arg(600_000)
        .query(&mut con)?;
    let mut queued = Vec::with_capacity(waiters);
    for i in 0..waiters {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        let owner = format!("w{i}");
        write!(
            stream,
            "*6\r\n$12\r\nLOCK.ACQUIRE\r\n${}\r\n{KEY}\r\n${}\r\n{owner}\r\n$6\r\n600000\r\n$4\r\nWAIT\r\n$1\r\n0\r\n",
            KEY.len(),
            owner.len()
        )?;
        queued.push(stream);
    }
    loop {
        let info: redis::Value = redis::cmd("LOCK.INFO").arg(KEY).query(&mut con)?;
        if format!("{info:?}").contains(&format!("int({waiters})")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if let Some(callgrind) = callgrind {
        callgrind.control("-z")?;
    }
    let (cpu_before, started) = (server_cpu_us(&mut con)?, Instant::now());
    let mut owner = String::from("holder");
    for i in 0..waiters {
        let released: i64 = redis::cmd("LOCK.RELEASE")
            .arg(KEY)
            .arg(&owner)
            .query(&mut con)?;
        assert_eq!(released, 1, "{owner} held the lock");
        owner = format!("w{i}");
    }
    let elapsed = started.elapsed().as_secs_f64() * 1e6;
    let cpu = server_cpu_us(&mut con)? - cpu_before;
    let instructions = match callgrind {
        Some(callgrind) => {
            callgrind.control("-d")?;
            callgrind.last_dump_instructions()?
        }
        None => f64::NAN,
    };
    let _: i64 = redis::cmd("LOCK.RELEASE")
        .arg(KEY)
        .arg(&owner)
        .query(&mut con)?;
    let n = waiters as f64;
    Ok((cpu / n, elapsed / n, instructions / n))
}

pub fn run(
    client: &Client,
    port: u16,
    runs: usize,
    short: usize,
    long: usize,
    callgrind: Option<Callgrind>,
) -> RedisResult<()> {
    if let Some(callgrind) = callgrind {
        // One run: instructions do not vary from run to run.
        println!("| clients queued | server instructions per release + hand-off |");
        println!("|---|---|");
        let mut counts = Vec::new();
        for waiters in [short, long] {
            let (_, _, instructions) = drain(client, port, waiters, Some(&callgrind))?;
            println!("| {waiters} | {instructions:.0} |");
            counts.push(instructions);
        }
        if let [short_count, long_count] = counts[..] {
            println!();
            println!(
                "{long} clients queued cost {:.2}x the instructions per hand-off of {short}.",
                long_count / short_count
            );
        }
        return Ok(());
    }
    println!(
        "| run | clients queued | server CPU per hand-off (µs) | release + hand-off, wall (µs) |"
    );
    println!("|---|---|---|---|");
    let (mut cpu, mut wall) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for run in 1..=runs {
        for (side, waiters) in [short, long].into_iter().enumerate() {
            let (c, w, _) = drain(client, port, waiters, None)?;
            println!("| {run} | {waiters} | {c:.1} | {w:.1} |");
            cpu[side].push(c);
            wall[side].push(w);
        }
    }
    println!();
    println!(
        "Median server CPU per hand-off: {:.1} µs with {short} clients queued, {:.1} µs with {long} ({:.2}x); \
         wall time per release and hand-off: {:.1} against {:.1} µs.",
        median(&cpu[0]),
        median(&cpu[1]),
        median(&cpu[1]) / median(&cpu[0]).max(1e-9),
        median(&wall[0]),
        median(&wall[1]),
    );
    Ok(())
}
