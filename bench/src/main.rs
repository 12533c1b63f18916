//! lock-bench: the workloads `redis-benchmark` cannot express, against a running
//! redis-server with the lock module. Each subcommand alternates the two sides of its
//! comparison `--runs` times and prints a Markdown table of medians.

mod compare;
mod handoff;
mod hot;
mod keysets;
mod peer;
mod queue;
mod rwlock;
mod scaling;
mod stats;

use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Benchmarks for the redis-lock module")]
struct Cli {
    /// Port of the redis-server (on 127.0.0.1) with the module loaded.
    #[arg(long, default_value_t = 6390)]
    port: u16,
    /// How many times each side of a comparison runs (alternating).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Hand-off latency: from the holder's RELEASE reply to the next waiter's reply,
    /// beside a loopback PING round trip.
    Handoff {
        /// Hand-offs measured per run.
        #[arg(long, default_value_t = 2000)]
        rounds: usize,
    },
    /// Each lock step against the plain-Redis way (SET NX PX, EVALSHA scripts, PTTL +
    /// GET), throughput and server cost, and memory per held lock.
    Compare,
    /// A hot lock: clients acquire/release one key in a loop for a fixed time, with
    /// server-side WAIT, and polling with SET NX PX and a 1 ms sleep.
    Hot {
        #[arg(long, default_value_t = 32)]
        clients: usize,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// Long queues: server CPU per hand-off with `short` and with `long` clients
    /// queued on one lock.
    Queue {
        #[arg(long, default_value_t = 100)]
        short: usize,
        #[arg(long, default_value_t = 8000)]
        long: usize,
        /// Pid of a redis-server under `valgrind --tool=callgrind`: count instructions.
        #[arg(long, requires = "callgrind_out_file")]
        callgrind_pid: Option<u32>,
        /// That server's `--callgrind-out-file`.
        #[arg(long)]
        callgrind_out_file: Option<std::path::PathBuf>,
    },
    /// A read-write lock: `readers` shared and `writers` exclusive clients of one key
    /// in a loop, with server-side WAIT, and with Lua scripts over a hash and a 1 ms
    /// polling sleep.
    Rwlock {
        #[arg(long, default_value_t = 16)]
        readers: usize,
        #[arg(long, default_value_t = 2)]
        writers: usize,
        /// How long each grant is held before the release, in ms.
        #[arg(long, default_value_t = 1)]
        hold_ms: u64,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// Shared locks that scale: instructions per acquire, extend, release, lapse and
    /// load at n holdings, per waiter of a hand-off and per lapse applied on a
    /// replica, beside RPUSH waking N BLPOP clients; a log-log plot; exit status 1
    /// when a step grows faster than its target. `--port` is a redis-server under
    /// callgrind, made a replica of `--master-port` for a while.
    Scaling {
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        holders: Vec<usize>,
        #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
        waiters: Vec<usize>,
        /// A redis-server with the module, not under callgrind: the master.
        #[arg(long)]
        master_port: u16,
        #[arg(long)]
        callgrind_pid: u32,
        #[arg(long)]
        callgrind_out_file: std::path::PathBuf,
        /// Where the SVG plot goes.
        #[arg(long, default_value = "bench/scaling.svg")]
        plot: std::path::PathBuf,
    },
    /// One client process of `make bench-peers` (bench/peers/peers.py starts N of
    /// them): acquire with WAIT through the client crate, hold, release, in a loop.
    Peer {
        /// The lock every client contends for.
        #[arg(long)]
        key: String,
        /// How long each grant is held before the release, in ms.
        #[arg(long)]
        hold_ms: u64,
        /// The lock's TTL, in ms.
        #[arg(long, default_value_t = 10_000)]
        ttl_ms: u64,
        /// Ask for a shared holding (a read lock).
        #[arg(long)]
        shared: bool,
        /// Ask for one of this many permits (`LIMIT n`, a semaphore).
        #[arg(long)]
        limit: Option<u32>,
        /// `reader` or `writer`, echoed in the report of the read-write rows.
        #[arg(long)]
        role: Option<String>,
        /// The form of the lock to use: `module` (LOCK.ACQUIRE … WAIT), or the
        /// function library (`functions`, its waiting protocol), loaded beforehand.
        #[arg(long, default_value = "module")]
        backend: redis_lock_client::Backend,
    },
}

fn main() -> redis::RedisResult<()> {
    let cli = Cli::parse();
    let url = format!("redis://127.0.0.1:{}/", cli.port);
    let client = redis::Client::open(url)?;
    match cli.command {
        Command::Handoff { rounds } => handoff::run(&client, cli.runs, rounds),
        Command::Compare => compare::run(&client, cli.port, cli.runs),
        Command::Hot { clients, seconds } => hot::run(&client, cli.runs, clients, seconds),
        Command::Queue {
            short,
            long,
            callgrind_pid,
            callgrind_out_file,
        } => {
            let callgrind = callgrind_pid
                .zip(callgrind_out_file)
                .map(|(pid, out_file)| queue::Callgrind { pid, out_file });
            queue::run(&client, cli.port, cli.runs, short, long, callgrind)
        }
        Command::Rwlock {
            readers,
            writers,
            hold_ms,
            seconds,
        } => rwlock::run(&client, cli.runs, readers, writers, hold_ms, seconds),
        Command::Scaling {
            holders,
            waiters,
            master_port,
            callgrind_pid,
            callgrind_out_file,
            plot,
        } => {
            let callgrind = queue::Callgrind {
                pid: callgrind_pid,
                out_file: callgrind_out_file,
            };
            let sizes = scaling::Sizes { holders, waiters };
            let met = scaling::run(&client, cli.port, master_port, &sizes, callgrind, &plot)?;
            if !met {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Peer {
            key,
            hold_ms,
            ttl_ms,
            shared,
            limit,
            role,
            backend,
        } => peer::run(
            cli.port,
            &key,
            Duration::from_millis(ttl_ms),
            Duration::from_millis(hold_ms),
            peer::Kind {
                shared,
                limit,
                role,
                backend,
            },
        ),
    }
}
