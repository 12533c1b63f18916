//! The worker demo's invariant, with real worker processes: every job runs exactly
//! once per round, however many workers; a worker killed mid-job is taken over once
//! its lock lapses; a second run against the same server works too.

use std::path::PathBuf;
use std::process::Command;

use redis_lock_testkit as common;
#[path = "../examples/workers.rs"]
mod workers;

use workers::{run_demo, Options, Report, JOBS};

/// The example's binary. `cargo test` builds the examples with the tests, so it is
/// there and fresh under `cargo test --workspace` (`make test`); a single `--test
/// demo` does not build it, and then it is built here if missing or older than this
/// test binary (which includes the example's source: an edit rebuilds both).
fn worker_exe() -> PathBuf {
    // Once per test process: the tests run in parallel, and one must not start the
    // binary while another's build rewrites it.
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(build_worker_exe).clone()
}

fn build_worker_exe() -> PathBuf {
    let deps = std::env::current_exe().expect("test binary");
    let debug = deps.parent().and_then(|d| d.parent()).expect("target dir");
    let exe = debug.join("examples").join("workers");
    let modified = |path: &std::path::Path| path.metadata().and_then(|m| m.modified()).ok();
    if modified(&exe).is_none_or(|built| modified(&deps).is_some_and(|test| built < test)) {
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
    }
    exe
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
