//! The worker demo's invariant, with real worker processes: every job runs exactly
//! once per round, however many workers; a worker killed mid-job is taken over once
//! its lock lapses; a second run against the same server works too.

use std::path::PathBuf;
use std::process::Command;

use redis_lock_testkit as common;
#[path = "../examples/workers.rs"]
mod workers;

use workers::{run_demo, Options, Report, JOBS};

/// The example's binary, built if needed (`cargo test` builds examples, but a
/// single `--test demo` may not).
fn worker_exe() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "redis-lock-client",
            "--example",
            "workers",
        ])
        .status()
        .expect("cargo build --example workers");
    assert!(status.success());
    let deps = std::env::current_exe().expect("test binary");
    let debug = deps.parent().and_then(|d| d.parent()).expect("target dir");
    debug.join("examples").join("workers")
}

fn options(workers: usize, kill_one: bool) -> Options {
    Options {
        url: None,
        workers,
        rounds: 2,
        ttl_ms: 300,
        kill_one,
        worker: None,
        round: None,
        prefix: None,
    }
}

fn assert_each_job_once_per_round(report: &Report, rounds: usize) {
    for round in 0..rounds {
        for job in JOBS {
            let runs: Vec<_> = report
                .runs
                .iter()
                .filter(|r| r.round == round && r.job == job)
                .collect();
            assert_eq!(runs.len(), 1, "round {round} {job}: {:?}", report.runs);
        }
    }
    assert_eq!(report.runs.len(), rounds * JOBS.len());
}

#[test]
fn every_job_runs_once_per_round_and_a_second_run_works_too() {
    let server = common::lock_server();
    let exe = worker_exe();
    for workers in [1, 4] {
        let report = run_demo(&server.url(), &options(workers, false), &exe).unwrap();
        assert_each_job_once_per_round(&report, 2);
        assert_eq!(report.killed, None);
    }
}

#[test]
fn a_worker_killed_mid_job_is_taken_over() {
    let server = common::lock_server();
    let exe = worker_exe();
    let report = run_demo(&server.url(), &options(3, true), &exe).unwrap();
    assert_each_job_once_per_round(&report, 2);
    let (round, job, killed) = report.killed.clone().expect("a worker was killed");
    let run = report
        .runs
        .iter()
        .find(|r| r.round == round && r.job == job)
        .unwrap();
    assert_ne!(run.worker, killed, "another worker took over: {report:?}");
}
