//! `lock-conformance`: every registered client (conformance/adapters) against every
//! backend present, scenario by scenario (conformance/scenarios), and a table of the
//! outcomes. Exits 1 when any cell failed.
//!
//! ```text
//! lock-conformance [--clients rust,python] [--backends module,acl] [--scenarios fifo]
//!                  [--jobs N] [--root DIR] [--build] [--list]
//! ```
//!
//! `--build` runs each registration's `build` command first (`make conformance`
//! does); a build that fails fails every cell of its client. Without it, an adapter
//! whose program is missing is reported skipped, not built.
//!
//! ```text
//! ```
//!
//! The protocol every adapter speaks: conformance/ADAPTER.md.

mod actor;
mod cycle;
mod env;
mod pool;
mod registry;
mod scenario;
mod slots;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use env::{Backend, Env};
use registry::{Adapter, Hello};
use scenario::{Context, Outcome, Run, Scenario};

struct Options {
    clients: Option<Vec<String>>,
    backends: Option<Vec<String>>,
    scenarios: Option<Vec<String>>,
    jobs: usize,
    root: PathBuf,
    list: bool,
    build: bool,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        clients: None,
        backends: None,
        scenarios: None,
        jobs: 6,
        root: default_root(),
        list: false,
        build: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        let list = |v: String| -> Option<Vec<String>> {
            let items: Vec<String> = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            (!items.is_empty()).then_some(items)
        };
        match arg.as_str() {
            "--clients" => options.clients = list(value()?),
            "--backends" => options.backends = list(value()?),
            "--scenarios" => options.scenarios = list(value()?),
            "--jobs" => options.jobs = value()?.parse().map_err(|_| "--jobs takes a number")?,
            "--root" => options.root = PathBuf::from(value()?),
            "--list" => options.list = true,
            "--build" => options.build = true,
            "-h" | "--help" => {
                println!("lock-conformance [--clients a,b] [--backends a,b] [--scenarios a,b] [--jobs N] [--root DIR] [--build] [--list]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    options.jobs = options.jobs.max(1);
    Ok(options)
}

/// The repository: the working directory if it has conformance/, else the one this
/// harness was built in.
fn default_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    if cwd.join("conformance").join("scenarios").is_dir() {
        return cwd;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..")
}

fn scenarios(root: &Path, only: Option<&Vec<String>>) -> Result<Vec<Scenario>, String> {
    let dir = root.join("conformance").join("scenarios");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
        .collect();
    paths.sort();
    let mut found = Vec::new();
    for path in paths {
        let scenario = Scenario::load(&path)?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if scenario.name != stem {
            return Err(format!(
                "{}: named {:?}, not after its file",
                path.display(),
                scenario.name
            ));
        }
        if only.is_none_or(|names| names.contains(&scenario.name)) {
            found.push(scenario);
        }
    }
    Ok(found)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// How many timing scenarios (their checks depend on the clients' timing) run their
/// steps at once, at most: the others keep the rest of the machine.
const TIMING_SLOTS: usize = 2;

struct Cell {
    client: usize,
    backend: Backend,
    scenario: usize,
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(error) => {
            eprintln!("lock-conformance: {error}");
            std::process::exit(2);
        }
    }
}

fn run() -> Result<bool, String> {
    let options = options()?;
    let root = std::fs::canonicalize(&options.root)
        .map_err(|e| format!("{}: {e}", options.root.display()))?;
    let scenarios = scenarios(&root, options.scenarios.as_ref())?;
    if options.list {
        for scenario in &scenarios {
            println!("{:32} {}", scenario.name, scenario.description);
        }
        return Ok(true);
    }
    let protocol = registry::protocol(&root)?;
    let acl = env::acl_rules(&root)?;
    let adapters: Vec<Adapter> = registry::adapters(&root)?
        .into_iter()
        .filter(|a| {
            options
                .clients
                .as_ref()
                .is_none_or(|c| c.contains(&a.client))
        })
        .collect();
    let backends: Vec<Backend> = match &options.backends {
        Some(names) => names
            .iter()
            .map(|n| Backend::parse(n).ok_or_else(|| format!("unknown backend {n:?}")))
            .collect::<Result<_, _>>()?,
        None => Backend::ALL.to_vec(),
    };
    let logs = root.join("target").join("conformance");
    let _ = std::fs::remove_dir_all(&logs);
    let started = Instant::now();

    // Each client's hello, once: its capabilities decide what is skipped.
    let mut hellos: Vec<Result<Hello, String>> = Vec::new();
    let mut broken: Vec<Option<String>> = Vec::new();
    // A build two adapters share (the Node client's, for ioredis and node-redis) runs
    // once, and its outcome holds for both.
    let mut builds: BTreeMap<Vec<String>, Result<(), String>> = BTreeMap::new();
    for adapter in &adapters {
        let built = if options.build {
            builds
                .entry(adapter.build.clone())
                .or_insert_with(|| build(adapter, &root))
                .clone()
        } else {
            Ok(())
        };
        broken.push(built.err());
        hellos.push(match adapter.missing(&root) {
            Some(why) => Err(why),
            None => Hello::probe(adapter, &root, &logs),
        });
    }
    let cluster_wanted = backends.contains(&Backend::Cluster)
        && env::unavailable(Backend::Cluster).is_none()
        && hellos
            .iter()
            .any(|h| h.as_ref().is_ok_and(|h| h.capabilities.contains("cluster")));
    let cluster = if cluster_wanted {
        Some(Arc::new(env::start_cluster()?))
    } else {
        None
    };
    // One PostgreSQL for the run's fenced writes, with the fence table and the table
    // the adapters write to; each cell's rows are its own (named with its prefix).
    let postgres = if scenarios.iter().any(|s| s.postgres) {
        Some(env::start_postgres(&root)?)
    } else {
        None
    };

    // The clients in turn, cell by cell: a client whose actors are slow to start (an
    // interpreter importing its libraries) has its cells spread over the whole run,
    // so its pool refills between them and its starts never crowd the machine at once.
    let mut cells = Vec::new();
    for &backend in &backends {
        for scenario in 0..scenarios.len() {
            for client in 0..adapters.len() {
                cells.push(Cell {
                    client,
                    backend,
                    scenario,
                });
            }
        }
    }
    println!(
        "lock-conformance: {} clients x {} backends x {} scenarios, {} at a time",
        adapters.len(),
        backends.len(),
        scenarios.len(),
        options.jobs
    );
    // The adapter processes each client's runs will take, started ahead of them.
    let pools: Vec<pool::Pool> = adapters
        .iter()
        .enumerate()
        .map(|(client, adapter)| {
            let demand = match (&broken[client], &hellos[client]) {
                (None, Ok(hello)) => backends
                    .iter()
                    .flat_map(|&b| scenarios.iter().map(move |s| (b, s)))
                    .filter(|(b, s)| skip_reason(*b, s, hello, &adapter.client).is_none())
                    .map(|(_, s)| s.actor_count())
                    .sum(),
                _ => 0,
            };
            pool::Pool::new(adapter.clone(), root.clone(), logs.clone(), demand)
        })
        .collect();
    let host = hostname();
    let queue = Mutex::new(
        cells
            .into_iter()
            .enumerate()
            .collect::<std::collections::VecDeque<_>>(),
    );
    let results: Mutex<BTreeMap<usize, (usize, Backend, usize, Outcome)>> =
        Mutex::new(BTreeMap::new());
    let serial = Mutex::new(0u64);
    let filled = AtomicBool::new(false);
    let timing = slots::Slots::new(TIMING_SLOTS);
    std::thread::scope(|scope| {
        for pool in &pools {
            let filled = &filled;
            scope.spawn(move || pool.fill(filled));
        }
        let mut workers = Vec::new();
        for _ in 0..options.jobs {
            workers.push(scope.spawn(|| loop {
                // Timing cells as soon as one can be claimed, the rest meanwhile; once
                // only timing cells are left, a worker waits for a claim.
                let (next, claim) = {
                    let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                    let claim = timing.claim();
                    let is_timing = |c: &Cell| scenarios[c.scenario].timing;
                    let position = match claim {
                        Some(_) => queue.iter().position(|(_, c)| is_timing(c)),
                        None => queue.iter().position(|(_, c)| !is_timing(c)),
                    };
                    let position = position.or_else(|| (!queue.is_empty()).then_some(0));
                    (position.and_then(|p| queue.remove(p)), claim)
                };
                let Some((index, cell)) = next else { break };
                let claim = match (scenarios[cell.scenario].timing, claim) {
                    (false, _) => None,
                    (true, Some(claim)) => Some(claim),
                    (true, None) => Some(timing.claim_waiting()),
                };
                let adapter = &adapters[cell.client];
                let scenario = &scenarios[cell.scenario];
                let outcome = match (&broken[cell.client], &hellos[cell.client]) {
                    (Some(why), _) => Outcome::Failed(why.clone()),
                    (None, Err(why)) if broken_hello(why) => Outcome::Failed(why.clone()),
                    (None, Err(why)) => Outcome::Skipped(why.clone()),
                    (None, Ok(hello)) => {
                        let n = {
                            let mut serial = serial.lock().unwrap_or_else(|e| e.into_inner());
                            *serial += 1;
                            *serial
                        };
                        let ctx = Context {
                            adapter,
                            pool: &pools[cell.client],
                            acl: &acl,
                            hello,
                            protocol: &protocol,
                            logs: logs
                                .join(&adapter.client)
                                .join(cell.backend.name())
                                .join(&scenario.name),
                            hostname: host.clone(),
                            turn: claim.as_ref(),
                            postgres: postgres.as_ref(),
                        };
                        run_cell(&ctx, cell.backend, scenario, cluster.clone(), n)
                    }
                };
                eprintln!(
                    "  {} / {} / {}: {}",
                    adapter.client,
                    cell.backend.name(),
                    scenario.name,
                    short(&outcome)
                );
                results
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(index, (cell.client, cell.backend, cell.scenario, outcome));
            }));
        }
        for worker in workers {
            let _ = worker.join();
        }
        filled.store(true, Ordering::SeqCst);
    });
    for pool in &pools {
        pool.drain();
    }
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let passed = print_table(&adapters, &hellos, &backends, &scenarios, &results);
    println!(
        "in {:.0} s; logs in {}",
        started.elapsed().as_secs_f64(),
        logs.display()
    );
    Ok(passed)
}

/// Runs a registration's build command in the repository.
fn build(adapter: &Adapter, root: &Path) -> Result<(), String> {
    let Some((program, args)) = adapter.build.split_first() else {
        return Ok(());
    };
    eprintln!(
        "building the {} adapter: {}",
        adapter.client,
        adapter.build.join(" ")
    );
    let status = std::process::Command::new(program)
        .args(args)
        .current_dir(root)
        .status()
        .map_err(|e| format!("the adapter's build ({program}) did not run: {e}"))?;
    if !status.success() {
        return Err(format!(
            "the adapter's build failed ({status}): {}",
            adapter.build.join(" ")
        ));
    }
    Ok(())
}

/// A hello that went wrong for another reason than a missing adapter.
fn broken_hello(why: &str) -> bool {
    !why.starts_with("adapter not built")
}

fn short(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Passed(took) => format!("passed ({:.1} s)", took.as_secs_f64()),
        Outcome::Failed(why) => format!("FAILED: {}", why.lines().next().unwrap_or("")),
        Outcome::Skipped(why) => format!("skipped: {why}"),
    }
}

/// Why a cell is skipped, if it is.
fn skip_reason(
    backend: Backend,
    scenario: &Scenario,
    hello: &Hello,
    client: &str,
) -> Option<String> {
    if let Some(why) = env::unavailable(backend) {
        return Some(why);
    }
    if let Some(why) = scenario.not_on(backend) {
        return Some(why);
    }
    let lacks = scenario::missing(scenario, backend, hello);
    (!lacks.is_empty()).then(|| format!("{client} lacks {}", lacks.join(", ")))
}

fn run_cell(
    ctx: &Context<'_>,
    backend: Backend,
    scenario: &Scenario,
    cluster: Option<Arc<redis_lock_testkit::Cluster>>,
    serial: u64,
) -> Outcome {
    if let Some(why) = skip_reason(backend, scenario, ctx.hello, &ctx.adapter.client) {
        return Outcome::Skipped(why);
    }
    let started = Instant::now();
    let prefix = format!("conf:{serial}:{}:", scenario.name);
    let mut env = match Env::start(backend, scenario.server.aof, cluster, prefix, ctx.acl) {
        Ok(env) => env,
        Err(why) => return Outcome::Failed(format!("the servers did not start: {why}")),
    };
    let mut run = Run::new(ctx, &mut env, scenario);
    let result = run.run();
    let logs = run.finish();
    let trace = std::mem::take(&mut run.trace);
    drop(run);
    let _ = std::fs::create_dir_all(&ctx.logs);
    let _ = std::fs::write(ctx.logs.join("trace.txt"), trace.join("\n") + "\n");
    match result {
        Ok(()) => Outcome::Passed(started.elapsed()),
        Err(why) => {
            let mut report = why;
            report.push_str("\n    what happened (ms since the start):");
            for line in trace.iter().rev().take(40).rev() {
                report.push_str(&format!("\n      {line}"));
            }
            for (name, path, tail, garbage) in logs {
                if !garbage.is_empty() {
                    report.push_str(&format!(
                        "\n    {name} wrote what is not the protocol: {garbage:?}"
                    ));
                }
                if !tail.trim().is_empty() {
                    report.push_str(&format!("\n    {name}'s log ({}):", path.display()));
                    for line in tail.lines() {
                        report.push_str(&format!("\n      {line}"));
                    }
                }
            }
            let _ = std::fs::create_dir_all(&ctx.logs);
            let _ = std::fs::write(ctx.logs.join("failure.txt"), &report);
            Outcome::Failed(report)
        }
    }
}

type Results = BTreeMap<usize, (usize, Backend, usize, Outcome)>;

fn print_table(
    adapters: &[Adapter],
    hellos: &[Result<Hello, String>],
    backends: &[Backend],
    scenarios: &[Scenario],
    results: &Results,
) -> bool {
    let find = |client: usize, backend: Backend, scenario: usize| {
        results
            .values()
            .find(|(c, b, s, _)| *c == client && *b == backend && *s == scenario)
            .map(|(_, _, _, o)| o)
    };
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut failures = Vec::new();
    let mut skips: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (client, adapter) in adapters.iter().enumerate() {
        let about = match &hellos[client] {
            Ok(hello) => format!("{} {}", hello.name, hello.version),
            Err(why) => why.clone(),
        };
        println!("\n{} ({about})", adapter.client);
        print!("{:34}", "scenario");
        for backend in backends {
            print!(" {:10}", backend.name());
        }
        println!();
        for (index, scenario) in scenarios.iter().enumerate() {
            print!("{:34}", scenario.name);
            for &backend in backends {
                let cell = match find(client, backend, index) {
                    Some(Outcome::Passed(_)) => {
                        passed += 1;
                        "passed"
                    }
                    Some(Outcome::Failed(why)) => {
                        failed += 1;
                        failures.push(format!(
                            "{} / {} / {}: {why}",
                            adapter.client,
                            backend.name(),
                            scenario.name
                        ));
                        "FAILED"
                    }
                    Some(Outcome::Skipped(why)) => {
                        skipped += 1;
                        skips.entry(why.clone()).or_default().push(format!(
                            "{} / {} / {}",
                            adapter.client,
                            backend.name(),
                            scenario.name
                        ));
                        "skipped"
                    }
                    None => "-",
                };
                print!(" {cell:10}");
            }
            println!();
        }
    }
    if !skips.is_empty() {
        println!("\nskipped, and why:");
        for (why, cells) in &skips {
            println!("  {why}: {}", summarize(cells));
        }
    }
    if !failures.is_empty() {
        println!("\nFAILED:");
        for failure in &failures {
            println!("  {failure}\n");
        }
    }
    println!("\n{passed} passed, {failed} FAILED, {skipped} skipped");
    failed == 0
}

/// A list of cells, shortened when long.
fn summarize(cells: &[String]) -> String {
    if cells.len() <= 4 {
        return cells.join(", ");
    }
    format!("{}, … ({} cells)", cells[..3].join(", "), cells.len())
}
