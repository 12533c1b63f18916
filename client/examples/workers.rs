//! The problem our users have, solved: several instances of a service each try to run
//! the same recurring jobs ("daily-report", "cleanup"); every job must run exactly
//! once per round, however many instances there are.
//!
//! Each worker is a task with its own connection. Per round and job, every worker
//! queues for the job's lock in the server (`WAIT`), and whoever gets it first runs the
//! job and records it with a fenced write: the result is stored only if the lock's
//! token is greater than the last token that wrote it. Later holders see the job done.
//!
//! `--kill-one`: in the first round, the worker that gets "daily-report" freezes
//! mid-job past its TTL (as a killed or paused process would). Another worker takes
//! over when the TTL lapses; when the frozen one wakes and tries to write, its stale
//! token is rejected.
//!
//! ```text
//! make run                                    # a server on 127.0.0.1:6390
//! cargo run --example workers -- --workers 5 --rounds 3 --kill-one
//! ```

#![allow(dead_code)] // also compiled into the demo's test, which does not call main

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};
use redis_lock_client::{AsyncLockCommands, Lock, Request};
use tokio::sync::Barrier;

pub const JOBS: [&str; 2] = ["daily-report", "cleanup"];

#[derive(Parser, Debug, Clone)]
#[command(about = "Workers that run each recurring job exactly once per round")]
pub struct Options {
    /// Redis server with the lock module.
    #[arg(long, default_value = "redis://127.0.0.1:6390/")]
    pub url: String,
    /// Worker instances.
    #[arg(long, default_value_t = 5)]
    pub workers: usize,
    /// Rounds of the recurring jobs.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Lock TTL in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub ttl_ms: u64,
    /// Freeze the first worker that gets "daily-report" in round 0 past its TTL.
    #[arg(long)]
    pub kill_one: bool,
    /// A prefix for the demo's keys, so runs do not see each other.
    #[arg(long, default_value = "demo")]
    pub prefix: String,
}

/// A job run, as recorded by the fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub round: usize,
    pub job: &'static str,
    pub worker: usize,
    pub token: i64,
}

/// What the demo saw.
#[derive(Debug, Default)]
pub struct Report {
    pub runs: Vec<Run>,
    /// Writes refused because their token was older than the last writer's.
    pub stale_writes_rejected: Vec<Run>,
}

/// Stores the result only if the writer's token is greater than the job's fence.
const FENCED_WRITE: &str = r#"
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= fence then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'round:' .. ARGV[2], ARGV[3])
return 1
"#;

fn result_key(prefix: &str, job: &str) -> String {
    format!("{prefix}:result:{job}")
}

async fn connect(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// True if the job already ran in `round`.
async fn done(con: &mut MultiplexedConnection, prefix: &str, job: &str, round: usize) -> bool {
    let by: Option<String> = redis::cmd("HGET")
        .arg(result_key(prefix, job))
        .arg(format!("round:{round}"))
        .query_async(con)
        .await
        .unwrap_or(None);
    by.is_some()
}

/// The job's side effect, guarded by the fencing token: true if accepted.
async fn fenced_write(con: &mut MultiplexedConnection, prefix: &str, run: &Run) -> bool {
    let accepted: i64 = Script::new(FENCED_WRITE)
        .key(result_key(prefix, run.job))
        .arg(run.token)
        .arg(run.round)
        .arg(format!("worker-{}", run.worker))
        .invoke_async(con)
        .await
        .unwrap_or(0);
    accepted == 1
}

async fn worker(
    id: usize,
    options: Options,
    barrier: Arc<Barrier>,
    report: Arc<Mutex<Report>>,
    freeze: Arc<AtomicBool>,
) -> redis_lock_client::Result<()> {
    let mut con = connect(&options.url).await?;
    let ttl = Duration::from_millis(options.ttl_ms);
    for round in 0..options.rounds {
        barrier.wait().await; // every instance wakes for the round at once
        for job in JOBS {
            let key = format!("{}:lock:{job}", options.prefix);
            let request = Request::new(key.clone(), ttl).wait(ttl * 4);
            if options.kill_one && round == 0 && job == JOBS[0] {
                // Without renewal, so a frozen holder's lock can lapse.
                if let Some(lock) = con.acquire_with(request).await? {
                    if done(&mut con, &options.prefix, job, round).await {
                        con.release(&lock).await?;
                    } else if freeze.swap(false, Ordering::SeqCst) {
                        frozen_run(&mut con, &options, id, round, job, lock, &report).await;
                    } else {
                        run_job(&mut con, &options.prefix, id, round, job, &lock, &report).await;
                        con.release(&lock).await?;
                    }
                }
                continue;
            }
            let mut work_con = con.clone();
            let (prefix, report) = (options.prefix.clone(), Arc::clone(&report));
            con.run_locked_with(request, move |lock, lost| async move {
                if done(&mut work_con, &prefix, job, round).await || lost.is_lost() {
                    return;
                }
                run_job(&mut work_con, &prefix, id, round, job, &lock, &report).await;
            })
            .await?;
        }
    }
    Ok(())
}

/// The job itself: some work, then its result, written with the lock's token.
async fn run_job(
    con: &mut MultiplexedConnection,
    prefix: &str,
    id: usize,
    round: usize,
    job: &'static str,
    lock: &Lock,
    report: &Mutex<Report>,
) {
    tokio::time::sleep(lock.ttl() / 5).await; // the job's work
    let run = Run {
        round,
        job,
        worker: id,
        token: lock.token(),
    };
    if fenced_write(con, prefix, &run).await {
        println!(
            "round {round}: {job:<12} ran by worker {id} (token {})",
            run.token
        );
        report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .runs
            .push(run);
    }
}

/// A holder that freezes past its TTL, then wakes and tries to write anyway.
async fn frozen_run(
    con: &mut MultiplexedConnection,
    options: &Options,
    id: usize,
    round: usize,
    job: &'static str,
    lock: Lock,
    report: &Arc<Mutex<Report>>,
) {
    println!(
        "round {round}: {job:<12} worker {id} took the lock (token {}) and froze",
        lock.token()
    );
    let mut con = con.clone();
    let options = options.clone();
    let report = Arc::clone(report);
    // Frozen in the background, so this worker's task (the "process") goes on later.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(options.ttl_ms * 3)).await;
        let run = Run {
            round,
            job,
            worker: id,
            token: lock.token(),
        };
        let accepted = fenced_write(&mut con, &options.prefix, &run).await;
        let mut report = report.lock().unwrap_or_else(|e| e.into_inner());
        if accepted {
            println!("round {round}: {job:<12} worker {id} woke up and wrote (nobody took over)");
            report.runs.push(run);
        } else {
            println!(
                "round {round}: {job:<12} worker {id} woke up; its write with stale token {} was rejected",
                run.token
            );
            report.stale_writes_rejected.push(run);
        }
    })
    .await
    .ok();
}

/// Runs the demo and returns what happened.
pub async fn run_demo(options: Options) -> redis_lock_client::Result<Report> {
    let report = Arc::new(Mutex::new(Report::default()));
    let barrier = Arc::new(Barrier::new(options.workers));
    let freeze = Arc::new(AtomicBool::new(true));
    let tasks: Vec<_> = (0..options.workers)
        .map(|id| {
            tokio::spawn(worker(
                id,
                options.clone(),
                Arc::clone(&barrier),
                Arc::clone(&report),
                Arc::clone(&freeze),
            ))
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| {
            redis_lock_client::Error::UnexpectedReply(format!("worker task failed: {e}"))
        })??;
    }
    let report = std::mem::take(&mut *report.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(report)
}

#[tokio::main]
async fn main() -> redis_lock_client::Result<()> {
    let options = Options::parse();
    let report = run_demo(options.clone()).await?;
    println!();
    for round in 0..options.rounds {
        for job in JOBS {
            let ran = report
                .runs
                .iter()
                .filter(|r| r.round == round && r.job == job)
                .count();
            println!("round {round}: {job:<12} ran {ran} time(s)");
        }
    }
    println!(
        "stale writes rejected by the fencing token: {}",
        report.stale_writes_rejected.len()
    );
    Ok(())
}
