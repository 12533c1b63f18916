//! The worker demo's invariant: every job runs exactly once per round, however many
//! workers; a frozen holder is taken over after its TTL and its late write is fenced off.

use redis_lock_testkit as common;
#[path = "../examples/workers.rs"]
mod workers;

use common::Server;
use workers::{run_demo, Options, Report, JOBS};

fn options(server: &Server, workers: usize, kill_one: bool) -> Options {
    Options {
        url: server.url(),
        workers,
        rounds: 3,
        ttl_ms: 300,
        kill_one,
        prefix: format!("demo-{workers}-{kill_one}"),
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
            assert_eq!(runs.len(), 1, "round {round} {job}: {runs:?}");
        }
    }
    assert_eq!(report.runs.len(), rounds * JOBS.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_runs_once_per_round_with_one_or_many_workers() {
    let server = Server::start();
    for workers in [1, 8] {
        let report = run_demo(options(&server, workers, false)).await.unwrap();
        assert_each_job_once_per_round(&report, 3);
        assert!(report.stale_writes_rejected.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_worker_is_taken_over_and_its_late_write_rejected() {
    let server = Server::start();
    let report = run_demo(options(&server, 4, true)).await.unwrap();
    assert_each_job_once_per_round(&report, 3);
    assert_eq!(report.stale_writes_rejected.len(), 1);
    let stale = &report.stale_writes_rejected[0];
    let winner = report
        .runs
        .iter()
        .find(|r| r.round == stale.round && r.job == stale.job)
        .unwrap();
    assert_ne!(winner.worker, stale.worker, "another worker took over");
    assert!(
        winner.token > stale.token,
        "the takeover's token is greater"
    );
}
