//! The run: for each mode, servers, workers, faults, then the checker's verdict.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::check::{self, Report};
use crate::faults::{self, Kind, Log, Trackers};
use crate::topology::{Topology, FAILOVER_TIMEOUT_MS};
use crate::{now_ns, records, report};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Plain acquires.
    Plain,
    /// Durable acquires: every replica must acknowledge each grant.
    Durable,
    /// Plain acquires on masters with `min-replicas-to-write 1` and
    /// `min-replicas-max-lag` (`--max-lag`): a master that lost its replicas refuses
    /// writes.
    Bounded,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Durable => "durable",
            Mode::Bounded => "bounded",
        }
    }

    fn settings(self, max_lag: u32) -> Vec<(String, String)> {
        match self {
            Mode::Bounded => vec![
                ("min-replicas-to-write".into(), "1".into()),
                ("min-replicas-max-lag".into(), max_lag.to_string()),
            ],
            _ => Vec::new(),
        }
    }

    /// Replicas that must acknowledge a grant: all of them in durable mode.
    fn durable(self) -> Option<u32> {
        (self == Mode::Durable).then_some(2)
    }

    /// True where a token regression fails the run.
    pub fn regressions_fail(self) -> bool {
        self == Mode::Durable
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Seconds of work per mode.
    #[arg(long, default_value_t = 75.0)]
    pub seconds: f64,
    #[arg(long, value_delimiter = ',', default_value = "plain,durable,bounded")]
    pub modes: Vec<Mode>,
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill,stop,partition,replica-restart"
    )]
    pub faults: Vec<Kind>,
    /// Worker processes.
    #[arg(long, default_value_t = 12)]
    pub workers: usize,
    /// How many of them reach the nodes past the proxies (beside the servers).
    #[arg(long, default_value_t = 4)]
    pub beside: usize,
    #[arg(long, default_value_t = 3)]
    pub keys: usize,
    #[arg(long, default_value_t = 1000)]
    pub ttl_ms: u64,
    #[arg(long, default_value_t = 2000)]
    pub wait_ms: u64,
    /// `min-replicas-max-lag` of the bounded mode, in seconds.
    #[arg(long, default_value_t = 1)]
    pub max_lag: u32,
    /// The module (default: the workspace's debug build).
    #[arg(long)]
    pub module: Option<PathBuf>,
    /// Where the locks live: `module`, or `functions` (plain servers with the
    /// redislock library, loaded on the master and replicated).
    #[arg(long, default_value = "module", value_parser = ["module", "functions"])]
    pub backend: String,
    /// Writes the summary there too (bench/FAILOVER.md).
    #[arg(long)]
    pub write: Option<PathBuf>,
    /// Keeps every mode's records under this directory.
    #[arg(long)]
    pub keep: Option<PathBuf>,
    #[arg(long)]
    pub seed: Option<u64>,
}

/// The outcome of one mode.
pub struct ModeRun {
    pub mode: Mode,
    pub report: Report,
    /// Uncontended acquire + release round trips in ms: p50, p99.
    pub latency: (f64, f64),
    pub seconds: f64,
}

impl ModeRun {
    pub fn passed(&self) -> bool {
        self.report.fence_held()
            && self.report.waiters_answered()
            && (self.report.regressions.is_empty() || !self.mode.regressions_fail())
            && self.report.grants > 0
    }
}

/// The worker processes of a mode, killed if still running when dropped.
struct Workers(Vec<Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn run(options: Options) -> i32 {
    let module = options
        .module
        .clone()
        .unwrap_or_else(redis_lock_testkit::module_path);
    // The servers run in directories of their own.
    let Ok(module) = std::fs::canonicalize(&module) else {
        eprintln!("lock-failover: no module at {}", module.display());
        return 2;
    };
    let seed = options.seed.unwrap_or_else(|| rand::thread_rng().gen());
    let started = Instant::now();
    let mut runs = Vec::new();
    for (i, &mode) in options.modes.iter().enumerate() {
        match run_mode(&options, mode, &module, seed.wrapping_add(i as u64)) {
            Ok(run) => {
                println!("{}", report::mode_block(&run));
                runs.push(run);
            }
            Err(error) => {
                eprintln!("lock-failover: mode {}: {error}", mode.name());
                return 2;
            }
        }
    }
    let summary = report::summary(&options, seed, &runs, started.elapsed());
    println!("{}", summary.verdict);
    if let Some(path) = &options.write {
        if let Err(error) = std::fs::write(path, &summary.markdown) {
            eprintln!("lock-failover: cannot write {}: {error}", path.display());
            return 2;
        }
    }
    i32::from(!runs.iter().all(ModeRun::passed))
}

fn run_mode(options: &Options, mode: Mode, module: &Path, seed: u64) -> Result<ModeRun, String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = work.path().join(mode.name());
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let library = options.backend == "functions";
    let mut topology = Topology::start(module, library, &mode.settings(options.max_lag))?;
    let backend = if library {
        redis_lock_client::Backend::Functions
    } else {
        redis_lock_client::Backend::Module
    };
    let latency = report::round_trips(&topology, mode.durable(), backend)?;
    let log = Log::create(&dir.join("run.log")).map_err(|e| e.to_string())?;
    let trackers = Trackers::start(&topology, &log);

    let until = now_ns() + (options.seconds * 1e9) as i128;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sentinels = topology.sentinel_urls().join(",");
    let ports = topology.port_map();
    let mut workers = Workers(Vec::new());
    for i in 0..options.workers {
        let mut command = Command::new(&exe);
        command
            .arg("worker")
            .args(["--sentinels", &sentinels])
            .args(["--ports", &ports])
            .args(["--resource-port", &topology.resource.port.to_string()])
            .args(["--keys", &options.keys.to_string()])
            .args(["--ttl-ms", &options.ttl_ms.to_string()])
            .args(["--wait-ms", &options.wait_ms.to_string()])
            .args(["--until-ns", &until.to_string()])
            .args(["--backend", &options.backend])
            .arg("--out")
            .arg(dir.join(format!("worker-{i}.log")));
        if i < options.beside {
            command.arg("--beside");
        }
        if let Some(replicas) = mode.durable() {
            command.args(["--durable", &replicas.to_string()]);
        }
        workers
            .0
            .push(command.spawn().map_err(|e| format!("worker: {e}"))?);
    }

    // Faults from 2 s in until a few seconds before the end, each kind in turn (in
    // a shuffled order), each on a settled topology and followed by a few quiet
    // seconds, so each mode also shows how it runs between faults.
    let quiet_tail = (options.wait_ms as i128 + 4000) * 1_000_000;
    let mut kinds = options.faults.clone();
    let mut last_failover: Option<Instant> = None;
    thread::sleep(Duration::from_secs(2));
    'faults: while now_ns() < until - quiet_tail {
        kinds.shuffle(&mut rng);
        for &kind in &kinds {
            if now_ns() >= until - quiet_tail {
                break 'faults;
            }
            if kind.fails_over() {
                // The sentinels fail one master over at most once per 2 × failover-timeout.
                let gap = Duration::from_millis(2 * FAILOVER_TIMEOUT_MS + 500);
                if let Some(left) = last_failover.and_then(|t| gap.checked_sub(t.elapsed())) {
                    thread::sleep(left);
                }
            }
            let Some(master) = topology.wait_settled(Duration::from_secs(30)) else {
                log.line(format_args!("UNSETTLED {}", now_ns()));
                continue;
            };
            faults::inject(&mut topology, master, kind, &mut rng, &log);
            if kind.fails_over() {
                last_failover = Some(Instant::now());
            }
            // Quiet seconds once it has settled again (which takes Sentinel ~10 s
            // after a stop or a partition), if that comes before the end.
            let left = u64::try_from(until - now_ns()).unwrap_or(0);
            topology.wait_settled(Duration::from_nanos(left).min(Duration::from_secs(30)));
            thread::sleep(Duration::from_millis(rng.gen_range(1500..3000)));
        }
    }

    let deadline = Instant::now()
        + Duration::from_millis(options.wait_ms)
        + crate::worker::GRACE
        + Duration::from_secs(10);
    for child in &mut workers.0 {
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
    }
    drop(workers);
    drop(trackers);
    drop(topology);

    let records = records::read(&dir).map_err(|e| format!("reading records: {e}"))?;
    let scope = if library {
        check::TokenScope::Key
    } else {
        check::TokenScope::Server
    };
    let report = check::check_scoped(&records, scope);
    if let Some(keep) = &options.keep {
        let target = keep.join(mode.name());
        let _ = std::fs::remove_dir_all(&target);
        std::fs::create_dir_all(&target).map_err(|e| e.to_string())?;
        for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if let Some(name) = path.file_name() {
                let _ = std::fs::copy(&path, target.join(name));
            }
        }
    }
    Ok(ModeRun {
        mode,
        report,
        latency,
        seconds: options.seconds,
    })
}
