//! lock-torture: worker processes contend for a few locks while faults are injected,
//! then a checker proves from their records that the locks held.
//!
//! `lock-torture run` starts a lock server (the module, AOF with appendfsync always)
//! and a resource server (plain Redis), and N `lock-torture worker` processes. Each
//! worker takes a random lock with WAIT, records the grant, works a few ms, writes to
//! the resource with its fencing token (accepted only if greater than the last token
//! that wrote there), records the end, and releases. Meanwhile the run SIGKILLs
//! workers (their locks must free at TTL, never earlier), SIGKILLs and restarts the
//! lock server (no granted token may go backwards), and pauses workers past the TTL
//! with SIGSTOP (their late writes must be rejected).

mod check;
mod run;
mod worker;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Torture test for the redis-lock module")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the whole torture test and prints the summary; fails on any violation.
    Run(run::Options),
    /// One worker process (started by `run`).
    Worker(worker::Options),
}

/// Wall-clock nanoseconds: comparable across the processes of one machine.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// Where a worker writes its records.
pub fn record_file(dir: &std::path::Path, worker: usize, generation: usize) -> PathBuf {
    dir.join(format!("worker-{worker}-{generation}.log"))
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(options) => run::run(options),
        Command::Worker(options) => worker::work(options),
    };
    std::process::exit(code);
}
