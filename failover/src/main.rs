//! lock-failover: locks through real failovers.
//!
//! `lock-failover run` starts, on loopback, a master and two replicas with the
//! module, each behind a TCP proxy (the only address the sentinels, the replicas and
//! most workers know it by), three redis-sentinels (quorum 2) and a guarded
//! resource: a plain redis-server keeping per lock key the highest token it
//! accepted, written with a fenced-write script. Worker processes contend for a few
//! keys through Sentinel with `WAIT`; each holder writes twice with its token. The
//! run kills, stops and partitions the master and restarts replicas, then the
//! checker reads every record and says whether the fence held. One run covers each
//! mode asked for (plain, durable, bounded), each on servers of its own.

mod check;
mod faults;
mod records;
mod report;
mod run;
mod topology;
mod worker;

use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Locks through real failovers, and a checker of the fence")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every mode, prints the summary; fails unless the fence held.
    Run(run::Options),
    /// One worker process (started by `run`).
    Worker(worker::Options),
    /// Checks the records of an earlier run's mode (a directory `run` kept).
    Check {
        /// The mode's directory, with run.log and the workers' records.
        dir: std::path::PathBuf,
    },
}

/// Wall-clock nanoseconds: comparable across the processes of one machine.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(options) => run::run(options),
        Command::Worker(options) => worker::work(options),
        Command::Check { dir } => match records::read(&dir) {
            Ok(records) => {
                let report = check::check(&records);
                println!("{}", report::mode_summary("checked", &report));
                i32::from(!report.fence_held())
            }
            Err(error) => {
                eprintln!("lock-failover: cannot read {}: {error}", dir.display());
                2
            }
        },
    };
    std::process::exit(code);
}
