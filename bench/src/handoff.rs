//! Hand-off latency: how long after the holder learns its RELEASE succeeded does the
//! next waiter learn it holds the lock. Both replies leave the server in the same
//! event-loop pass, so the target is "within about one PING round trip".

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::{Client, RedisResult};

use crate::stats::{median, quantile};

const KEY: &str = "bench:handoff";

struct Run {
    /// A PING round trip on the holder's connection, one per round, in µs.
    ping: Vec<f64>,
    /// RELEASE reply at the holder -> lock reply at the waiter, in µs.
    after_reply: Vec<f64>,
    /// RELEASE sent by the holder -> lock reply at the waiter, in µs.
    after_send: Vec<f64>,
}

/// The `waiters` field of a LOCK.INFO reply (RESP2: a flat field/value array, whose
/// fields grew with shared holdings: look it up by name, not by position).
fn waiters(info: &[redis::Value]) -> Option<i64> {
    info.chunks(2).find_map(|pair| match pair {
        [redis::Value::BulkString(name), redis::Value::Int(n)] if name == b"waiters" => Some(*n),
        _ => None,
    })
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn signed_micros(from: Instant, to: Instant) -> f64 {
    if to >= from {
        micros(to - from)
    } else {
        -micros(from - to)
    }
}

fn hand_offs(client: &Client, rounds: usize) -> RedisResult<Run> {
    let mut holder = client.get_connection()?;
    let mut observer = client.get_connection()?;
    let mut waiter = client.get_connection()?;
    let (granted_tx, granted_rx) = mpsc::channel::<Instant>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let waiter_thread = thread::spawn(move || -> RedisResult<()> {
        while go_rx.recv().is_ok() {
            let token: Option<i64> = redis::cmd("LOCK.ACQUIRE")
                .arg(KEY)
                .arg("waiter")
                .arg(60_000)
                .arg("WAIT")
                .arg(0)
                .query(&mut waiter)?;
            let at = Instant::now();
            assert!(token.is_some());
            let _: i64 = redis::cmd("LOCK.RELEASE")
                .arg(KEY)
                .arg("waiter")
                .query(&mut waiter)?;
            if granted_tx.send(at).is_err() {
                break;
            }
        }
        Ok(())
    });
    let mut run = Run {
        ping: Vec::with_capacity(rounds),
        after_reply: Vec::with_capacity(rounds),
        after_send: Vec::with_capacity(rounds),
    };
    for _ in 0..rounds {
        let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
            .arg(KEY)
            .arg("holder")
            .arg(60_000)
            .query(&mut holder)?;
        let _ = go_tx.send(());
        // Wait (outside the measurement) until the waiter is queued.
        loop {
            let info: Vec<redis::Value> = redis::cmd("LOCK.INFO").arg(KEY).query(&mut observer)?;
            if waiters(&info) == Some(1) {
                break;
            }
        }
        let ping_start = Instant::now();
        let _: String = redis::cmd("PING").query(&mut holder)?;
        run.ping.push(micros(ping_start.elapsed()));
        let sent = Instant::now();
        let _: i64 = redis::cmd("LOCK.RELEASE")
            .arg(KEY)
            .arg("holder")
            .query(&mut holder)?;
        let replied = Instant::now();
        let granted = granted_rx.recv().expect("waiter thread");
        run.after_reply.push(signed_micros(replied, granted));
        run.after_send.push(signed_micros(sent, granted));
    }
    drop(go_tx);
    let _ = waiter_thread.join();
    Ok(run)
}

pub fn run(client: &Client, runs: usize, rounds: usize) -> RedisResult<()> {
    let mut rows = Vec::new();
    for _ in 0..runs {
        rows.push(hand_offs(client, rounds)?);
    }
    println!("| run | PING RTT median (µs) | PING RTT p99 | hand-off after RELEASE reply, median (µs) | p99 | hand-off after RELEASE sent, median (µs) | p99 | median / PING median |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut ratios = Vec::new();
    for (i, hand) in rows.iter().enumerate() {
        let ping = &hand.ping;
        let ping_median = median(ping);
        let after_send = median(&hand.after_send);
        let ratio = after_send / ping_median;
        ratios.push(ratio);
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}x |",
            i + 1,
            ping_median,
            quantile(ping, 0.99),
            median(&hand.after_reply),
            quantile(&hand.after_reply, 0.99),
            after_send,
            quantile(&hand.after_send, 0.99),
            ratio
        );
    }
    let after_reply: Vec<f64> = rows.iter().map(|r| median(&r.after_reply)).collect();
    println!(
        "\nMedian over runs: hand-off after the RELEASE reply **{:.1} µs** (negative: the waiter's reply left the server first); \
         after the RELEASE was sent, **{:.2}x** a PING round trip (target: within 2x). \
         Each round measures one PING and one hand-off on the same connections.",
        median(&after_reply),
        median(&ratios)
    );
    Ok(())
}
