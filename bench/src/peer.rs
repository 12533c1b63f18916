//! One client process of `make bench-peers` (bench/peers/), for the side that uses
//! our Rust client crate: it loops `acquire` (LOCK.ACQUIRE … WAIT 0, waiting in the
//! server until it holds the lock) → hold → `release` on one connection of its own.
//!
//! It speaks the same protocol as the Python clients of bench/peers/clients.py, so
//! the orchestrator treats every side alike: it prints `ready` once connected, reads
//! `go <t0> <t1>` (Unix times in seconds) from stdin, runs from t0, and at t1 prints
//! one JSON line of what it measured and exits, wherever it is at that moment (a
//! wait still open at t1 is reported as `pending`, the time it had waited so far).
//! With `go <t0> <t1> first` it reports at its first grant instead (the dead-holder
//! cell: how long until a waiter gets a lock whose holder was killed).
//!
//! The request is exclusive by default; `--shared` asks for a read holding and
//! `--limit n` for one of n permits, for the read-write and semaphore rows.

use std::io::{self, BufRead, Write};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis_lock_client::{Backend, LockCommands, Request, Wait};

/// What one client measured in the window [t0, t1].
#[derive(Default)]
struct Record {
    /// Wait of each acquisition granted in the window, in µs: from the call to the
    /// reply that grants the lock.
    waits_us: Vec<f64>,
    /// Seconds this client held the lock in the window (grant reply to release).
    held_s: f64,
    /// Since when the client waits for the lock now, or holds it now.
    waiting_since: Option<f64>,
    holding_since: Option<f64>,
    errors: u64,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn sleep_until(at: f64) {
    let left = at - now();
    if left > 0.0 {
        thread::sleep(Duration::from_secs_f64(left));
    }
}

/// The kind of holding each acquire asks for, and the role it reports.
pub struct Kind {
    pub shared: bool,
    pub limit: Option<u32>,
    /// `reader` or `writer` in the read-write rows, echoed in the report.
    pub role: Option<String>,
    /// The module, or the function library.
    pub backend: Backend,
}

/// The JSON line of bench/peers/clients.py's `report`.
fn report(record: &Record, t1: f64, role: Option<&str>) -> String {
    let mut held = record.held_s;
    if let Some(since) = record.holding_since {
        held += (t1 - since).max(0.0);
    }
    let pending = record.waiting_since.map_or("null".to_string(), |since| {
        format!("{:.1}", (t1 - since) * 1e6)
    });
    let waits: Vec<String> = record.waits_us.iter().map(|w| format!("{w:.1}")).collect();
    let role = role.map_or(String::new(), |r| format!(",\"role\":\"{r}\""));
    format!(
        "{{\"waits_us\":[{}],\"pending_us\":{},\"held_s\":{:.6},\"errors\":{}{}}}",
        waits.join(","),
        pending,
        held,
        record.errors,
        role
    )
}

/// Runs one client against `port` (127.0.0.1) on `key`, holding each grant `hold`.
pub fn run(
    port: u16,
    key: &str,
    ttl: Duration,
    hold: Duration,
    kind: Kind,
) -> redis::RedisResult<()> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut con = client.get_connection()?;
    redis::cmd("PING").query::<String>(&mut con)?;
    println!("ready");
    io::stdout().flush()?;

    let mut line = String::new();
    io::stdin().lock().read_line(&mut line)?;
    let first = line.split_whitespace().nth(3) == Some("first");
    let times: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .take(2)
        .filter_map(|t| t.parse().ok())
        .collect();
    let [t0, t1] = times[..] else {
        return Err(
            io::Error::other(format!("expected `go <t0> <t1> [first]`, got {line:?}")).into(),
        );
    };

    let record = Arc::new(Mutex::new(Record::default()));
    let watchdog = Arc::clone(&record);
    let role = kind.role.clone();
    let say = move |record: &Record| {
        println!("{}", report(record, t1, role.as_deref()));
        let _ = io::stdout().flush();
        std::process::exit(0);
    };
    let say_at_t1 = say.clone();
    thread::spawn(move || {
        sleep_until(t1);
        say_at_t1(&watchdog.lock().unwrap_or_else(|e| e.into_inner()));
    });

    sleep_until(t0);
    let update = |f: &mut dyn FnMut(&mut Record)| {
        let mut record = record.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut record);
    };
    loop {
        // A retry after an error goes on with the same wait.
        let asked = now();
        update(&mut |r| {
            r.waiting_since.get_or_insert(asked);
        });
        let mut request = Request::new(key, ttl)
            .wait(Wait::Forever)
            .backend(kind.backend);
        if kind.shared {
            request = request.shared();
        }
        if let Some(permits) = kind.limit {
            request = request.limit(permits);
        }
        let lock = match con.acquire_with(request) {
            Ok(Some(lock)) => lock,
            Ok(None) => continue,
            Err(_) => {
                update(&mut |r| r.errors += 1);
                con = client.get_connection()?;
                continue;
            }
        };
        let granted = now();
        update(&mut |r| {
            let since = r.waiting_since.take().unwrap_or(asked);
            if granted <= t1 {
                r.waits_us.push((granted - since) * 1e6);
            }
            r.holding_since = Some(granted);
        });
        if first {
            say(&record.lock().unwrap_or_else(|e| e.into_inner()));
        }
        if !hold.is_zero() {
            thread::sleep(hold);
        }
        let done = now();
        update(&mut |r| {
            r.held_s += done - granted;
            r.holding_since = None;
        });
        if con.release(&lock).is_err() {
            update(&mut |r| r.errors += 1);
            con = client.get_connection()?;
        }
    }
}
