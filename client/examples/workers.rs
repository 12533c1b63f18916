//! The problem our users have, solved: several instances of a service each try to run
//! the same recurring jobs ("daily-report", "cleanup"); every job must run exactly
//! once per round, however many instances there are, and even when one dies mid-job.
//!
//! Each worker is a process of its own. Per round and job, every worker queues for
//! the job's lock in the server (`WAIT`); whoever gets it runs the job, renewing the
//! lock meanwhile, and records it with a fenced write: the result is stored only if
//! the lock's token is greater than the last token that wrote it. Later holders see
//! the job done and skip it.
//!
//! `--kill-one`: in the first round, the worker that starts "daily-report" is killed
//! (SIGKILL) mid-job. Its lock is no longer renewed; when its TTL lapses the server
//! hands it to the next waiting worker, which runs the job.
//!
//! ```text
//! make demo                                         # a throwaway server, --kill-one
//! cargo run --example workers -- --url redis://127.0.0.1:6390/ --workers 5 --kill-one
//! ```
//!
//! Without `--url` the demo starts its own server with the module (the test
//! launcher's). Every run uses keys of its own, so runs against one server do not
//! see each other.

#![allow(dead_code)] // also compiled into the demo's test, which does not call main

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use clap::Parser;
use redis::Script;
use redis_lock_client::{LockClient, Wait};

pub const JOBS: [&str; 2] = ["daily-report", "cleanup"];

#[derive(Parser, Debug, Clone)]
#[command(about = "Worker processes that run each recurring job exactly once per round")]
pub struct Options {
    /// Redis server with the lock module (default: start one).
    #[arg(long)]
    pub url: Option<String>,
    /// Worker processes.
    #[arg(long, default_value_t = 5)]
    pub workers: usize,
    /// Rounds of the recurring jobs.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Lock TTL in milliseconds (a job takes about as long, renewed meanwhile).
    #[arg(long, default_value_t = 500)]
    pub ttl_ms: u64,
    /// Kill the worker that starts "daily-report" in round 0, mid-job.
    #[arg(long)]
    pub kill_one: bool,
    /// Run as worker number N of a round (what the demo starts; not for people).
    #[arg(long, hide = true)]
    pub worker: Option<usize>,
    #[arg(long, hide = true)]
    pub round: Option<usize>,
    #[arg(long, hide = true)]
    pub prefix: Option<String>,
}

/// A job run, as recorded by the fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub round: usize,
    pub job: String,
    pub worker: usize,
    pub token: i64,
}

/// What the demo saw.
#[derive(Debug, Default)]
pub struct Report {
    pub runs: Vec<Run>,
    /// The worker killed mid-job, and the round and job it was running.
    pub killed: Option<(usize, String, usize)>,
}

/// Records the run only if the writer's token is greater than the job's fence.
const FENCED_WRITE: &str = r#"
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) <= fence then return 0 end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'round:' .. ARGV[2], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[2] .. ' ' .. ARGV[4] .. ' ' .. ARGV[3] .. ' ' .. ARGV[1])
return 1
"#;

fn result_key(prefix: &str, job: &str) -> String {
    format!("{prefix}:result:{job}")
}

fn runs_key(prefix: &str) -> String {
    format!("{prefix}:runs")
}

/// Where a worker announces the job it started, so the demo can kill it mid-job.
fn running_key(prefix: &str, round: usize, job: &str) -> String {
    format!("{prefix}:running:{round}:{job}")
}

/// One worker process's round: each job, under its lock, unless already done.
async fn work_round(
    url: &str,
    prefix: &str,
    id: usize,
    round: usize,
    ttl: Duration,
) -> redis_lock_client::Result<()> {
    let client = redis::Client::open(url)?;
    let locks = LockClient::new(client.clone());
    let mut con = client.get_multiplexed_async_connection().await?;
    for job in JOBS {
        let key = format!("{prefix}:lock:{job}");
        let con = &mut con;
        locks
            .run_locked(&key, ttl, Wait::For(ttl * 20), |lock, lost| async move {
                let done: Option<String> = redis::cmd("HGET")
                    .arg(result_key(prefix, job))
                    .arg(format!("round:{round}"))
                    .query_async(con)
                    .await
                    .unwrap_or(None);
                if done.is_some() {
                    return;
                }
                let _: redis::RedisResult<()> = redis::cmd("SET")
                    .arg(running_key(prefix, round, job))
                    .arg(format!("{id} {}", std::process::id()))
                    .query_async(con)
                    .await;
                tokio::select! {
                    _ = lost.lost() => return, // the write would be fenced off anyway
                    _ = tokio::time::sleep(ttl) => {} // the job's work, renewed meanwhile
                }
                let _: redis::RedisResult<i64> = Script::new(FENCED_WRITE)
                    .key(result_key(prefix, job))
                    .key(runs_key(prefix))
                    .arg(lock.token())
                    .arg(round)
                    .arg(format!("worker-{id}"))
                    .arg(job)
                    .invoke_async(con)
                    .await;
            })
            .await?;
    }
    Ok(())
}

/// Runs the demo: `options.rounds` rounds of `options.workers` processes of
/// `worker_exe` (this example's binary) against `url`.
pub fn run_demo(url: &str, options: &Options, worker_exe: &PathBuf) -> Result<Report, String> {
    let prefix = format!("demo-{}", uuid_like());
    let mut con = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    let mut report = Report::default();
    for round in 0..options.rounds {
        let mut workers: Vec<Child> = (0..options.workers)
            .map(|id| {
                Command::new(worker_exe)
                    .args(["--url", url, "--prefix", &prefix])
                    .args(["--worker", &id.to_string(), "--round", &round.to_string()])
                    .args(["--ttl-ms", &options.ttl_ms.to_string()])
                    .spawn()
                    .map_err(|e| format!("cannot start {}: {e}", worker_exe.display()))
            })
            .collect::<Result<_, _>>()?;
        if options.kill_one && round == 0 {
            let (id, pid) = wait_for_start(&mut con, &running_key(&prefix, round, JOBS[0]))?;
            if let Some(child) = workers.iter_mut().find(|c| c.id() == pid) {
                let _ = child.kill(); // SIGKILL: no release, no goodbye
                println!(
                    "round {round}: {:<12} worker {id} (pid {pid}) killed mid-job",
                    JOBS[0]
                );
                report.killed = Some((round, JOBS[0].to_string(), id));
            }
        }
        for mut child in workers {
            let _ = child.wait();
        }
    }
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(runs_key(&prefix))
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .map_err(|e| e.to_string())?;
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        if let [round, job, worker, token] = parts[..] {
            let run = Run {
                round: round.parse().unwrap_or(usize::MAX),
                job: job.to_string(),
                worker: worker
                    .trim_start_matches("worker-")
                    .parse()
                    .unwrap_or(usize::MAX),
                token: token.parse().unwrap_or(0),
            };
            println!(
                "round {}: {:<12} ran by worker {} (token {})",
                run.round, run.job, run.worker, run.token
            );
            report.runs.push(run);
        }
    }
    Ok(report)
}

/// The worker id and pid that announced the job, once one did.
fn wait_for_start(con: &mut redis::Connection, key: &str) -> Result<(usize, u32), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let started: Option<String> = redis::cmd("GET")
            .arg(key)
            .query(con)
            .map_err(|e| e.to_string())?;
        if let Some((id, pid)) = started.as_deref().and_then(|s| s.split_once(' ')) {
            return Ok((id.parse().unwrap_or(usize::MAX), pid.parse().unwrap_or(0)));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Err("no worker started the job within 20 s".into())
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}-{}", nanos, std::process::id())
}

fn main() {
    let options = Options::parse();
    if let (Some(id), Some(round), Some(prefix), Some(url)) =
        (options.worker, options.round, &options.prefix, &options.url)
    {
        let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
        let ttl = Duration::from_millis(options.ttl_ms);
        if let Err(error) = runtime.block_on(work_round(url, prefix, id, round, ttl)) {
            eprintln!("worker {id}: {error}");
            std::process::exit(1);
        }
        return;
    }
    // Our own throwaway server unless given one (REDIS_LOCK_MODULE: the module file).
    let server = options
        .url
        .is_none()
        .then(redis_lock_testkit::Server::start);
    let url = options
        .url
        .clone()
        .or_else(|| server.as_ref().map(|s| s.url()))
        .unwrap_or_default();
    let exe = std::env::current_exe().expect("the demo's own binary");
    match run_demo(&url, &options, &exe) {
        Ok(report) => {
            println!();
            let mut once = true;
            for round in 0..options.rounds {
                for job in JOBS {
                    let ran = report
                        .runs
                        .iter()
                        .filter(|r| r.round == round && r.job == job)
                        .count();
                    once &= ran == 1;
                    println!("round {round}: {job:<12} ran {ran} time(s)");
                }
            }
            if !once {
                std::process::exit(1);
            }
        }
        Err(error) => {
            eprintln!("demo failed: {error}");
            std::process::exit(1);
        }
    }
}
