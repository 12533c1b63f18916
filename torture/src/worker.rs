//! One worker process: takes random locks, records each holding, writes to the
//! resource with its fencing token.
//!
//! Records (one line each, written before the next step, so a killed worker leaves
//! what it did):
//! - `GRANT key token t_granted t_expires mode`: the holding was ours from
//!   `t_granted` (reply received) to at least `t_expires` (a lower bound of its
//!   expiry, from LOCK.INFO or lock_info); `mode` is `x` (exclusive) or `s` (shared);
//! - `END key token t_end accepted`: the work ended at `t_end`; an exclusive holder's
//!   write was accepted (1) or rejected as stale (0), a shared holder writes nothing
//!   (`-`).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use rand::Rng;
use redis::{Connection, Script};
use redis_lock_client::{Backend, LockCommands, Request, Retry};

use crate::now_ns;

#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    #[arg(long)]
    pub lock_port: u16,
    #[arg(long)]
    pub resource_port: u16,
    #[arg(long)]
    pub keys: usize,
    #[arg(long)]
    pub ttl_ms: u64,
    /// Stop taking locks at this wall-clock time (ns since the epoch).
    #[arg(long)]
    pub until_ns: i128,
    /// What the workers take: exclusive locks, permits of a semaphore, or read and
    /// write holdings of a read-write lock.
    #[arg(long, value_enum, default_value_t = Mode::Exclusive)]
    pub mode: Mode,
    /// Permits of each semaphore (`--mode semaphore`).
    #[arg(long, default_value_t = 3)]
    pub permits: u32,
    #[arg(long)]
    pub out: PathBuf,
    /// Where the locks live: the module, or the redislock library (`functions`).
    #[arg(long, value_enum, default_value_t = LockBackend::Module)]
    pub backend: LockBackend,
}

/// The lock's backend, as the command line names it.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockBackend {
    /// The redis-lock module.
    Module,
    /// The redislock function library on a plain server (FCALL).
    Functions,
}

impl LockBackend {
    pub fn client(self) -> Backend {
        match self {
            LockBackend::Module => Backend::Module,
            LockBackend::Functions => Backend::Functions,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LockBackend::Module => "module",
            LockBackend::Functions => "functions",
        }
    }
}

/// What the workers contend for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Exclusive locks, each holder writes with its token.
    Exclusive,
    /// `LIMIT permits`: at most that many holders at once.
    Semaphore,
    /// A read-write lock: a quarter of the holdings exclusive (writers, who write
    /// with their token), the rest shared (readers).
    Rw,
}

/// Stores `token` for the key only if it is greater than the stored one.
pub const FENCED_WRITE: &str = r#"
local fence = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= fence then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"#;

fn connect(port: u16) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    Some(con)
}

/// One holding: acquire, record, work, write, record, release. `None` on a
/// connection problem (the caller reconnects).
fn hold_once(
    options: &Options,
    locks: &mut Connection,
    resource: &mut Connection,
    out: &mut std::fs::File,
    rng: &mut impl Rng,
) -> Option<()> {
    let key = format!("torture:{}", rng.gen_range(0..options.keys));
    let ttl = Duration::from_millis(options.ttl_ms);
    let mut request = Request::new(key.clone(), ttl)
        .wait(ttl * 2)
        .retry(Retry::NONE)
        .backend(options.backend.client());
    let shared = match options.mode {
        Mode::Exclusive => false,
        Mode::Semaphore => {
            request = request.limit(options.permits);
            true
        }
        Mode::Rw if rng.gen_range(0..4) > 0 => {
            request = request.shared();
            true
        }
        Mode::Rw => false,
    };
    let Some(lock) = locks.acquire_with(request).ok()? else {
        return Some(());
    };
    let granted = now_ns();
    let info_sent = now_ns();
    let info = locks.lock_info_with(&key, options.backend.client()).ok()?;
    // Ours until at least (INFO sent + TTL it reported); nothing if it is not ours.
    let ours = info.and_then(|info| {
        info.holders
            .into_iter()
            .find(|h| h.owner == lock.owner().as_bytes() && h.token == lock.token())
    });
    let expires = match ours {
        Some(holder) => info_sent + holder.ttl.map_or(0, |t| t.as_nanos() as i128),
        None => granted,
    };
    let mode = if shared { "s" } else { "x" };
    writeln!(
        out,
        "GRANT {key} {} {granted} {expires} {mode}",
        lock.token()
    )
    .ok()?;
    std::thread::sleep(Duration::from_millis(
        rng.gen_range(1..=options.ttl_ms / 10 + 1),
    ));
    let accepted = if shared {
        "-".to_string()
    } else {
        let accepted: i64 = Script::new(FENCED_WRITE)
            .key(format!("resource:{key}"))
            .arg(lock.token())
            .invoke(resource)
            .ok()?;
        accepted.to_string()
    };
    writeln!(out, "END {key} {} {} {accepted}", lock.token(), now_ns()).ok()?;
    locks.release(&lock).ok()?;
    Some(())
}

pub fn work(options: Options) -> i32 {
    let Ok(mut out) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&options.out)
    else {
        eprintln!("worker: cannot open {}", options.out.display());
        return 2;
    };
    let mut rng = rand::thread_rng();
    let (mut locks, mut resource) = (None, None);
    while now_ns() < options.until_ns {
        if locks.is_none() {
            locks = connect(options.lock_port);
        }
        if resource.is_none() {
            resource = connect(options.resource_port);
        }
        let done = match (locks.as_mut(), resource.as_mut()) {
            (Some(l), Some(r)) => hold_once(&options, l, r, &mut out, &mut rng),
            _ => None,
        };
        if done.is_none() {
            // The lock server may be restarting: reconnect after a pause.
            locks = None;
            resource = None;
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    0
}
