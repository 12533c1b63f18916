//! The summary: one block per mode, the verdict, and bench/FAILOVER.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use redis_lock_client::{AsyncLockCommands, Request};

use crate::check::Report;
use crate::run::{ModeRun, Options};
use crate::topology::Topology;

/// Acquire round trips on a free key at the master (a direct connection), p50 and
/// p99 in ms: what a durable acquire's `WAIT` costs when nothing fails.
pub fn round_trips(
    topology: &Topology,
    durable: Option<u32>,
    backend: redis_lock_client::Backend,
) -> Result<(f64, f64), String> {
    let master = topology.settled().ok_or("no settled master")?;
    let url = topology.nodes[master].server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let mut took = Vec::new();
        for _ in 0..300 {
            let mut request =
                Request::new("bench:round-trip", Duration::from_secs(5)).backend(backend);
            if let Some(replicas) = durable {
                request = request.durable(replicas, Duration::from_millis(200));
            }
            let sent = Instant::now();
            let lock = con.acquire_with(request).await.map_err(|e| e.to_string())?;
            took.push(sent.elapsed().as_secs_f64() * 1e3);
            if let Some(lock) = lock {
                con.release(&lock).await.map_err(|e| e.to_string())?;
            }
        }
        took.sort_by(f64::total_cmp);
        Ok((took[took.len() / 2], took[took.len() * 99 / 100]))
    })
}

fn seconds(ms: &[f64]) -> String {
    if ms.is_empty() {
        return "none".into();
    }
    let each: Vec<String> = ms.iter().map(|ms| format!("{:.1}", ms / 1e3)).collect();
    format!("{} s", each.join(", "))
}

/// Per fault kind, the figure `pick` takes from each of its faults.
fn per_kind(report: &Report, pick: impl Fn(&crate::check::FaultOutcome) -> Option<f64>) -> String {
    let mut by_kind: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for fault in &report.faults {
        if let Some(value) = pick(fault) {
            by_kind.entry(&fault.kind).or_default().push(value);
        }
    }
    if by_kind.is_empty() {
        return "none".into();
    }
    let each: Vec<String> = by_kind
        .iter()
        .map(|(kind, values)| format!("{kind} {}", seconds(values)))
        .collect();
    each.join("; ")
}

/// The summary of one mode's records (no run details).
pub fn mode_summary(name: &str, report: &Report) -> String {
    let mut out = String::new();
    let mut fault_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for fault in &report.faults {
        *fault_counts.entry(&fault.kind).or_default() += 1;
    }
    let faults: Vec<String> = fault_counts
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let errors: Vec<String> = report
        .errors
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let error_total: usize = report.errors.values().sum();
    let lines = [
        ("grants", report.grants.to_string()),
        (
            "waiters",
            format!(
                "{} asked, {} answered: {} granted, {} null, {error_total} errors ({})",
                report.asks,
                report.grants_answered(),
                report.grants,
                report.nones,
                if errors.is_empty() {
                    "none".into()
                } else {
                    errors.join(", ")
                }
            ),
        ),
        ("unanswered waiters", report.unanswered.len().to_string()),
        (
            "faults",
            if faults.is_empty() {
                "none".into()
            } else {
                faults.join(", ")
            },
        ),
        ("failovers observed", report.failovers.to_string()),
        (
            "fault to first grant on new master",
            per_kind(report, |f| f.first_grant_ms),
        ),
        ("fault to failover", per_kind(report, |f| f.failover_ms)),
        (
            "old master still master after",
            per_kind(report, |f| f.stale_master_ms),
        ),
        (
            "grants by a replaced master",
            report.replaced_master_grants.to_string(),
        ),
        ("overlapping holdings", report.overlaps.len().to_string()),
        ("token regressions", report.regressions.len().to_string()),
        (
            "equal tokens, two holders",
            report.equal_tokens.len().to_string(),
        ),
        (
            "overlaps the fence did not resolve",
            report.unresolved.len().to_string(),
        ),
        (
            "writes accepted / stale rejected",
            format!("{} / {}", report.accepted_writes, report.rejected_writes),
        ),
    ];
    let _ = writeln!(out, "mode {name}");
    for (label, value) in lines {
        let _ = writeln!(out, "  {:<36}{value}", format!("{label}:"));
    }
    let problems = report
        .equal_tokens
        .iter()
        .chain(&report.unresolved)
        .chain(&report.unanswered)
        .chain(report.regressions.iter().take(3));
    for problem in problems.take(12) {
        let _ = writeln!(out, "  ! {problem}");
    }
    out
}

/// One mode's block: its settings, round trips and checker summary.
pub fn mode_block(run: &ModeRun) -> String {
    let mut out = mode_summary(run.mode.name(), &run.report);
    let verdict = if run.passed() { "ok" } else { "FAILED" };
    let grants_per_s = run.report.grants as f64 / run.seconds;
    let _ = writeln!(
        out,
        "  {:<36}p50 {:.2} ms, p99 {:.2} ms",
        "acquire round trip (no faults):", run.latency.0, run.latency.1
    );
    let _ = writeln!(out, "  {:<36}{grants_per_s:.0}", "grants per second:");
    let _ = write!(out, "  {:<36}{verdict}", "verdict:");
    out
}

pub struct Summary {
    pub verdict: String,
    pub markdown: String,
}

fn shell(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{}, {cores} cores ({cpu}), {}",
        shell("uname", &["-srm"]),
        shell("redis-server", &["--version"])
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

pub fn summary(options: &Options, seed: u64, runs: &[ModeRun], took: Duration) -> Summary {
    let passed = runs.iter().all(ModeRun::passed);
    let modes: Vec<&str> = runs.iter().map(|r| r.mode.name()).collect();
    let verdict = format!(
        "failover: {} in {:.0} s (modes {}, seed {seed})",
        if passed { "ok" } else { "FAILED" },
        took.as_secs_f64(),
        modes.join(", ")
    );
    let mut md = String::new();
    let _ = writeln!(md, "# Locks through a real failover\n");
    let _ = writeln!(
        md,
        "Written by `make failover` (`lock-failover run`, in `failover/`); do not edit by hand.\n"
    );
    let _ = writeln!(
        md,
        "- date: {}",
        shell("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
    );
    let commit = shell("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = !shell("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    let _ = writeln!(
        md,
        "- measured: the module built from commit {commit}{}",
        if dirty {
            " with uncommitted changes"
        } else {
            ""
        }
    );
    let _ = writeln!(md, "- machine: {}", machine());
    let _ = writeln!(
        md,
        "- setup: a master and two replicas with the {}, each behind a proxy; three \
         redis-sentinels (quorum 2, down-after-milliseconds 1000, failover-timeout 3000); \
         a plain redis-server as the guarded resource (fenced-write script, token >= highest)",
        if options.backend == "functions" {
            "redislock function library (no module)"
        } else {
            "module"
        }
    );
    let _ = writeln!(
        md,
        "- load: {} worker processes ({} beside the servers, the rest through Sentinel and \
         the proxies), {} keys, TTL {} ms, WAIT {} ms, two fenced writes per holding; \
         {:.0} s per mode",
        options.workers,
        options.beside,
        options.keys,
        options.ttl_ms,
        options.wait_ms,
        options.seconds
    );
    let _ = writeln!(
        md,
        "- modes, each on servers of its own: plain (`LOCK.ACQUIRE … WAIT`); durable \
         (`Request::durable(2, 200 ms)`: both replicas must acknowledge, else the grant \
         is released); bounded (plain acquires, `min-replicas-to-write 1`, \
         `min-replicas-max-lag {}` on every node)",
        options.max_lag
    );
    let _ = writeln!(
        md,
        "- faults, in turn at random: SIGKILL of the master (back as a replica once a \
         replica was promoted), SIGSTOP of the master for 1.5-3 s, a partition of the \
         master's proxy for 2.5-4 s, a replica restart"
    );
    let _ = writeln!(md, "- {verdict}\n");
    for run in runs {
        let _ = writeln!(md, "```text\n{}\n```\n", mode_block(run));
    }
    let _ = writeln!(
        md,
        "Pass rule: in every mode no equal tokens, no overlap the fence did not resolve, \
         every waiter answered; in durable mode no token regression. Definitions: \
         `failover/src/check.rs`; what they mean for users: docs/replication.md."
    );
    Summary {
        verdict,
        markdown: md,
    }
}
