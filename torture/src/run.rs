//! The torture run: servers, workers, faults, then the checker's verdict.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rand::Rng;

use redis_lock_testkit::{Config, Server};

use crate::worker::{LockBackend, Mode};
use crate::{check, now_ns, record_file};

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Worker processes.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Locks they contend for.
    #[arg(long, default_value_t = 4)]
    pub keys: usize,
    #[arg(long, default_value_t = 300)]
    pub ttl_ms: u64,
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
    /// Time between injected faults.
    #[arg(long, default_value_t = 1000)]
    pub fault_every_ms: u64,
    /// The module to load (default: the workspace's debug build).
    #[arg(long)]
    pub module: Option<PathBuf>,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: String,
    /// What the workers take.
    #[arg(long, value_enum, default_value_t = Mode::Exclusive)]
    pub mode: Mode,
    /// Permits of each semaphore (`--mode semaphore`).
    #[arg(long, default_value_t = 3)]
    pub permits: u32,
    /// Where the locks live: the module, or the redislock function library loaded
    /// into a plain server (`functions`; the library is in the AOF, so it survives
    /// the restarts).
    #[arg(long, value_enum, default_value_t = LockBackend::Module)]
    pub backend: LockBackend,
}

fn signal(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
}

pub fn run(options: Options) -> i32 {
    let module = options
        .module
        .clone()
        .unwrap_or_else(redis_lock_testkit::module_path);
    if !module.exists() {
        eprintln!(
            "torture: no module at {} (cargo build first)",
            module.display()
        );
        return 2;
    }
    let work_dir = tempfile::tempdir().expect("a temp dir");
    let records = work_dir.path().join("records");
    std::fs::create_dir_all(&records).expect("records dir");
    let server = Config::default().binary(options.redis_server.as_str());
    let mut locks = match options.backend {
        LockBackend::Module => Server::with(server.clone().module_file(&module).aof()),
        LockBackend::Functions => {
            let locks = Server::with(server.clone().without_module().aof());
            redis_lock_testkit::load_library(&mut locks.connection());
            locks
        }
    };
    let resource = Server::with(server.without_module());

    let until = now_ns() + (options.seconds * 1e9) as i128;
    let (lock_port, resource_port) = (locks.port.to_string(), resource.port.to_string());
    let generation = AtomicUsize::new(0);
    let exe = std::env::current_exe().expect("own path");
    let spawn_worker = |id: usize| -> Child {
        let g = generation.fetch_add(1, Ordering::Relaxed);
        Command::new(&exe)
            .arg("worker")
            .args(["--lock-port", &lock_port])
            .args(["--resource-port", &resource_port])
            .args(["--keys", &options.keys.to_string()])
            .args(["--ttl-ms", &options.ttl_ms.to_string()])
            .args(["--until-ns", &until.to_string()])
            .args(["--mode", mode_name(options.mode)])
            .args(["--permits", &options.permits.to_string()])
            .args(["--backend", options.backend.name()])
            .arg("--out")
            .arg(record_file(&records, id, g))
            .spawn()
            .expect("worker process")
    };
    let mut workers: Vec<Child> = (0..options.workers).map(&spawn_worker).collect();

    let (mut kills, mut restarts, mut pauses) = (0, 0, 0);
    let paused: Arc<AtomicUsize> = Arc::new(AtomicUsize::new(0));
    let mut rng = rand::thread_rng();
    let started = Instant::now();
    let fault_every = Duration::from_millis(options.fault_every_ms);
    let mut next_fault = started + fault_every;
    while now_ns() < until - (options.ttl_ms as i128 * 3_000_000) {
        thread::sleep(Duration::from_millis(10));
        if Instant::now() < next_fault {
            continue;
        }
        next_fault += fault_every;
        let victim = rng.gen_range(0..workers.len());
        match rng.gen_range(0..3) {
            0 => {
                // A worker dies mid-whatever; its locks must free at TTL, not before.
                let _ = workers[victim].kill();
                let _ = workers[victim].wait();
                workers[victim] = spawn_worker(victim);
                kills += 1;
            }
            1 => {
                // The lock server dies; AOF (fsync always) brings every grant back.
                locks.restart();
                restarts += 1;
            }
            _ => {
                // A holder freezes past its TTL; its late write must be fenced off.
                let child = &workers[victim];
                signal(child, "-STOP");
                let pid = child.id().to_string();
                let pause = Duration::from_millis(options.ttl_ms * 2);
                let count = Arc::clone(&paused);
                count.fetch_add(1, Ordering::Relaxed);
                thread::spawn(move || {
                    thread::sleep(pause);
                    let _ = Command::new("kill").args(["-CONT", &pid]).status();
                    count.fetch_sub(1, Ordering::Relaxed);
                });
                pauses += 1;
            }
        }
    }
    while paused.load(Ordering::Relaxed) > 0 {
        thread::sleep(Duration::from_millis(10));
    }
    for mut worker in workers {
        let _ = worker.wait();
    }
    drop(locks);
    drop(resource);

    let report = match check::read(&records) {
        Ok(records) => {
            let limit = (options.mode == Mode::Semaphore).then_some(options.permits as usize);
            check::check(&records, limit)
        }
        Err(error) => {
            eprintln!("torture: cannot read records: {error}");
            return 2;
        }
    };
    println!(
        "torture: {} workers, {} locks ({}, {}), TTL {} ms, {:.0} s",
        options.workers,
        options.keys,
        match options.mode {
            Mode::Exclusive => "exclusive".to_string(),
            Mode::Semaphore => format!("semaphores of {} permits", options.permits),
            Mode::Rw => "read-write".to_string(),
        },
        options.backend.name(),
        options.ttl_ms,
        options.seconds
    );
    println!("  locks granted:          {}", report.grants);
    println!("  holdings completed:     {}", report.completed);
    println!("  writes accepted:        {}", report.accepted_writes);
    println!("  stale writes rejected:  {}", report.rejected_writes);
    println!("  grants that came stale: {}", report.stale_grants);
    println!("  faults injected:        {kills} workers killed, {restarts} server restarts, {pauses} holders paused");
    println!("  most held at once:      {}", report.most_at_once);
    println!("  overlaps found:         {}", report.overlaps.len());
    println!("  over the limit:         {}", report.over_limit.len());
    println!(
        "  token regressions:      {}",
        report.token_regressions.len()
    );
    println!(
        "  tokens granted twice:   {}",
        report.duplicate_tokens.len()
    );
    for problem in report
        .overlaps
        .iter()
        .chain(&report.token_regressions)
        .chain(&report.duplicate_tokens)
        .chain(&report.over_limit)
        .take(20)
    {
        println!("  ! {problem}");
    }
    let clean = report.overlaps.is_empty()
        && report.token_regressions.is_empty()
        && report.duplicate_tokens.is_empty()
        && report.over_limit.is_empty();
    if clean && report.grants > 0 {
        println!("torture: ok");
        0
    } else {
        println!("torture: FAILED");
        1
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Semaphore => "semaphore",
        Mode::Rw => "rw",
    }
}
