//! A read-write lock under load: `readers` connections take shared holdings and
//! `writers` exclusive ones of one key in a loop, each holding it `hold_ms`, for a
//! fixed time. The module's `SHARED` holdings with server-side WAIT, against the
//! plain-Redis recipe: Lua scripts over a hash (a mode field and a reader count, as
//! Redisson's RReadWriteLock keeps it) polled with a 1 ms sleep on a miss.
//!
//! What the table shows beside the grants per second: how long writers wait. With a
//! FIFO queue across modes a writer waits for the readers ahead of it only; a
//! polling writer competes with every reader that comes back, and may wait long.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Client, RedisResult, Script};

use crate::stats::{median, quantile, server_cpu_us};

const KEY: &str = "bench:rw";
const TTL_MS: i64 = 10_000;

/// Takes a read holding unless a writer holds the lock: 1, else 0.
const READ_ACQUIRE: &str = r#"
if redis.call('HGET', KEYS[1], 'mode') == 'write' then return 0 end
redis.call('HSET', KEYS[1], 'mode', 'read')
redis.call('HINCRBY', KEYS[1], 'readers', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"#;

/// Takes the write holding if nobody holds the lock: 1, else 0.
const WRITE_ACQUIRE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'mode', 'write')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"#;

/// Gives a read holding back; the last reader deletes the lock.
const READ_RELEASE: &str = r#"
if redis.call('HGET', KEYS[1], 'mode') ~= 'read' then return 0 end
if redis.call('HINCRBY', KEYS[1], 'readers', -1) <= 0 then redis.call('DEL', KEYS[1]) end
return 1
"#;

/// Gives the write holding back.
const WRITE_RELEASE: &str = r#"
if redis.call('HGET', KEYS[1], 'mode') ~= 'write' then return 0 end
return redis.call('DEL', KEYS[1])
"#;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Wait,
    Poll,
}

/// What one client did: its grants and, for a writer, how long each grant took to
/// come, in ms (and how long the last, ungranted, wait had lasted when the run ended).
struct Tally {
    writer: bool,
    grants: u64,
    waits_ms: Vec<f64>,
}

fn one_client(
    client: &Client,
    side: Side,
    id: usize,
    writer: bool,
    hold: Duration,
    until: Instant,
) -> RedisResult<Tally> {
    let mut con = client.get_connection()?;
    let owner = format!("client-{id:02}");
    let (acquire, release) = if writer {
        (Script::new(WRITE_ACQUIRE), Script::new(WRITE_RELEASE))
    } else {
        (Script::new(READ_ACQUIRE), Script::new(READ_RELEASE))
    };
    let mut done = Tally {
        writer,
        grants: 0,
        waits_ms: Vec::new(),
    };
    // When this client began to want the lock: a wait that times out (WAIT 200) or
    // a polling miss keeps the first time, so a wait spans every retry.
    let mut asked: Option<Instant> = None;
    while Instant::now() < until {
        let since = *asked.get_or_insert_with(Instant::now);
        let granted = match side {
            Side::Wait => {
                let mut cmd = redis::cmd("LOCK.ACQUIRE");
                cmd.arg(KEY).arg(&owner).arg(TTL_MS);
                if !writer {
                    cmd.arg("SHARED");
                }
                cmd.arg("WAIT")
                    .arg(200)
                    .query::<Option<i64>>(&mut con)?
                    .is_some()
            }
            Side::Poll => loop {
                let got: i64 = acquire.key(KEY).arg(TTL_MS).invoke(&mut con)?;
                if got == 1 {
                    break true;
                }
                if Instant::now() >= until {
                    break false;
                }
                thread::sleep(Duration::from_millis(1));
            },
        };
        if !granted {
            continue;
        }
        asked = None;
        if Instant::now() < until {
            done.grants += 1;
            if writer {
                done.waits_ms.push(since.elapsed().as_secs_f64() * 1e3);
            }
        }
        thread::sleep(hold);
        match side {
            Side::Wait => {
                let _: i64 = redis::cmd("LOCK.RELEASE")
                    .arg(KEY)
                    .arg(&owner)
                    .query(&mut con)?;
            }
            Side::Poll => {
                let _: i64 = release.key(KEY).invoke(&mut con)?;
            }
        }
    }
    // A writer still waiting when the run ends waited at least this long: counting
    // it keeps a starved writer from vanishing from the quantiles.
    if let (true, Some(since)) = (writer, asked) {
        done.waits_ms.push(since.elapsed().as_secs_f64() * 1e3);
    }
    Ok(done)
}

struct Outcome {
    clients: Vec<Tally>,
    seconds: f64,
    server_cpu_us: f64,
}

impl Outcome {
    fn grants(&self, writers: bool) -> u64 {
        self.clients
            .iter()
            .filter(|c| c.writer == writers)
            .map(|c| c.grants)
            .sum()
    }

    fn writer_wait(&self, q: f64) -> f64 {
        let waits: Vec<f64> = self
            .clients
            .iter()
            .filter(|c| c.writer)
            .flat_map(|c| c.waits_ms.iter().copied())
            .collect();
        quantile(&waits, q)
    }
}

fn run_side(
    client: &Client,
    side: Side,
    readers: usize,
    writers: usize,
    hold: Duration,
    seconds: f64,
) -> RedisResult<Outcome> {
    let mut con = client.get_connection()?;
    let _: i64 = redis::cmd("DEL").arg(KEY).query(&mut con)?;
    let cpu_before = server_cpu_us(&mut con)?;
    let start = Arc::new(Barrier::new(readers + writers + 1));
    let duration = Duration::from_secs_f64(seconds);
    let threads: Vec<_> = (0..readers + writers)
        .map(|id| {
            let (client, start) = (client.clone(), Arc::clone(&start));
            let writer = id >= readers;
            thread::spawn(move || {
                start.wait();
                one_client(&client, side, id, writer, hold, Instant::now() + duration)
            })
        })
        .collect();
    start.wait();
    let mut clients = Vec::new();
    for t in threads {
        clients.push(t.join().expect("client thread")?);
    }
    let server_cpu_us = server_cpu_us(&mut con)? - cpu_before;
    let _: i64 = redis::cmd("DEL").arg(KEY).query(&mut con)?;
    Ok(Outcome {
        clients,
        seconds,
        server_cpu_us,
    })
}

pub fn run(
    client: &Client,
    runs: usize,
    readers: usize,
    writers: usize,
    hold_ms: u64,
    seconds: f64,
) -> RedisResult<()> {
    let hold = Duration::from_millis(hold_ms);
    println!("| run | side | grants / s | reader grants | writer grants | writer wait p50 (ms) | writer wait p99 (ms) | server CPU per grant (µs) |");
    println!("|---|---|---|---|---|---|---|---|");
    let (mut rate_ratios, mut p99_ratios) = (Vec::new(), Vec::new());
    let (mut writer_grants_wait, mut writer_grants_poll) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let wait = run_side(client, Side::Wait, readers, writers, hold, seconds)?;
        let poll = run_side(client, Side::Poll, readers, writers, hold, seconds)?;
        for (name, outcome) in [
            ("LOCK.ACQUIRE [SHARED] WAIT", &wait),
            ("Lua read-write scripts + 1 ms polling", &poll),
        ] {
            let grants = (outcome.grants(false) + outcome.grants(true)).max(1);
            println!(
                "| {} | {} | {:.0} | {} | {} | {:.1} | {:.1} | {:.1} |",
                i + 1,
                name,
                grants as f64 / outcome.seconds,
                outcome.grants(false),
                outcome.grants(true),
                outcome.writer_wait(0.5),
                outcome.writer_wait(0.99),
                outcome.server_cpu_us / grants as f64,
            );
        }
        let total = |o: &Outcome| (o.grants(false) + o.grants(true)) as f64;
        rate_ratios.push(total(&wait) / total(&poll).max(1.0));
        p99_ratios.push(wait.writer_wait(0.99) / poll.writer_wait(0.99).max(1e-9));
        writer_grants_wait.push(wait.grants(true) as f64);
        writer_grants_poll.push(poll.grants(true) as f64);
    }
    println!(
        "\n{readers} readers and {writers} writers, each holding {hold_ms} ms, {seconds} s per run. \
         A writer's wait runs from its first ask to its grant, across WAIT timeouts and polling \
         misses; a writer never granted counts the time it had waited when the run ended. \
         Medians: writer grants per run **{:.0}** with WAIT, **{:.0}** polling; writers' p99 wait \
         WAIT / polling **{:.3}x**; all grants per second WAIT / polling **{:.2}x**.",
        median(&writer_grants_wait),
        median(&writer_grants_poll),
        median(&p99_ratios),
        median(&rate_ratios),
    );
    Ok(())
}
