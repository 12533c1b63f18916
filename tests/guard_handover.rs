//! Guarded writes while a lock is handed over and over under load: workers take the
//! lock with short TTLs, some of them stall past their TTL, and every worker keeps
//! writing with the token it was granted, as a holder that does not know it lost the
//! lock would. Each write that lands appends its token to one list: since tokens grow
//! with every grant and only the holding with a token may write, the list must never
//! go down (a write of a holder that lost the lock, landing after its successor's,
//! would). On the module (LOCK.GUARD) and on the library (lock_guard).
//!
//! `GUARD_WRITES=n` sets the number of guarded writes (10,000 by default).

mod library;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use redis::Value;
use redis_lock_testkit::*;

use library::{library_server, Backend};

const WORKERS: usize = 8;
const KEY: &str = "{handover}";
const LOG: &str = "{handover}:log";

fn run(url: &str, backend: Backend) {
    let total: u64 = std::env::var("GUARD_WRITES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let sent = Arc::new(AtomicU64::new(0));
    let landed = Arc::new(AtomicU64::new(0));
    let fenced = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (url, backend) = (url.to_string(), backend.clone());
        let (sent, landed, fenced) = (sent.clone(), landed.clone(), fenced.clone());
        workers.push(thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(worker as u64);
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            let owner = format!("worker-{worker}");
            let mut token: Option<i64> = None;
            while sent.load(Ordering::SeqCst) < total {
                if token.is_none() || rng.gen_bool(0.05) {
                    // A new holding when free; a worker that held keeps its old token
                    // meanwhile (a stale writer) until it is granted again.
                    if let Some(granted) = backend.acquire(&mut con, KEY, &owner, 30, &[]).unwrap()
                    {
                        token = Some(granted);
                    }
                }
                let Some(t) = token else {
                    thread::sleep(Duration::from_millis(1));
                    continue;
                };
                sent.fetch_add(1, Ordering::SeqCst);
                if rng.gen_bool(0.02) {
                    // A stall past the TTL: another worker may take the lock meanwhile.
                    thread::sleep(Duration::from_millis(40));
                }
                let reply = backend.guard(
                    &mut con,
                    KEY,
                    &[LOG],
                    &t.to_string(),
                    &["RPUSH", LOG, &t.to_string()],
                );
                match reply {
                    Ok(Value::Int(_)) => {
                        landed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) if e.code() == Some("FENCED") => {
                        fenced.fetch_add(1, Ordering::SeqCst);
                    }
                    other => panic!("guarded RPUSH: {other:?}"),
                }
                if rng.gen_bool(0.1) {
                    backend.release(&mut con, KEY, &owner);
                    token = None;
                }
            }
        }));
    }
    for worker in workers {
        worker.join().unwrap();
    }
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let log: Vec<i64> = query(&mut con, &["LRANGE", LOG, "0", "-1"]).unwrap();
    let (landed, fenced) = (landed.load(Ordering::SeqCst), fenced.load(Ordering::SeqCst));
    eprintln!("{backend:?}: {landed} guarded writes landed, {fenced} fenced");
    assert_eq!(log.len() as u64, landed);
    if let Some(at) = log.windows(2).position(|pair| pair[1] < pair[0]) {
        panic!(
            "a write of token {} landed after one of token {} (at {at} of {})",
            log[at + 1],
            log[at],
            log.len()
        );
    }
    assert!(
        fenced > 0 && landed > 0,
        "both kinds happened: {landed} landed, {fenced} fenced"
    );
}

#[test]
fn no_write_of_a_holder_that_lost_the_lock_lands_on_the_module() {
    let server = Server::start();
    run(&server.url(), Backend::Module);
}

#[test]
fn no_write_of_a_holder_that_lost_the_lock_lands_on_the_library() {
    let (server, mut con) = library_server(Config::default());
    let scripts = Backend::scripts(&mut con);
    run(&server.url(), Backend::Functions);
    let _: () = query(&mut con, &["DEL", LOG]).unwrap();
    run(&server.url(), scripts);
}
