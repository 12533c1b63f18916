//! Shared locks that scale: what each step costs on a lock of n holdings, and what a
//! hand-off to N waiters and N lapses applied on a replica cost, in instructions of
//! a redis-server under callgrind (stable on a noisy machine). Beside them, the
//! same-run baseline: RPUSH waking N clients blocked in BLPOP.
//!
//! Each figure is the whole server's instructions (callgrind's program total)
//! between zeroing the counters and dumping them, divided by the steps counted: the
//! commands, their replies, the module's timers, and the event loop's idle turns,
//! which are few beside the steps.
//!
//! The run fails (exit status 1) when a step grows faster than its target: per
//! holding, acquire, extend, release, a single lapse and a lapse applied on a
//! replica O(log n) or better; the load of a lock O(n log n); a hand-off per waiter
//! O(log n) in N. Against RPUSH waking N BLPOP clients (a hand-off and a replica's
//! lapses at most its cost per client), each comparison is printed as met or missed
//! without failing the run: a constant factor, not a growth.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use redis::{Client, Connection, RedisResult};

use crate::queue::Callgrind;

const KEY: &str = "bench:scale";
/// Steps counted per row of the per-holding table.
const STEPS: usize = 1000;
/// Commands per pipeline when building a lock.
const CHUNK: usize = 5000;
/// A TTL that outlives the run.
const LONG_TTL: i64 = 3_600_000;

/// One measured series: instructions per step at each size.
struct Series {
    name: &'static str,
    points: Vec<(usize, f64)>,
}

fn pipelined(con: &mut Connection, commands: impl Iterator<Item = redis::Cmd>) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    let mut queued = 0;
    for cmd in commands {
        pipe.add_command(cmd).ignore();
        queued += 1;
        if queued == CHUNK {
            pipe.query::<()>(con)?;
            pipe.clear();
            queued = 0;
        }
    }
    if queued > 0 {
        pipe.query::<()>(con)?;
    }
    Ok(())
}

fn acquire(key: &str, owner: &str, ttl: i64) -> redis::Cmd {
    let mut cmd = redis::cmd("LOCK.ACQUIRE");
    cmd.arg(key).arg(owner).arg(ttl).arg("SHARED");
    cmd
}

/// Adds `count` shared holdings of owners `{prefix}{i}` to `key`.
fn build(con: &mut Connection, key: &str, prefix: &str, count: usize, ttl: i64) -> RedisResult<()> {
    pipelined(
        con,
        (0..count).map(|i| acquire(key, &format!("{prefix}{i}"), ttl)),
    )
}

/// Instructions of the server while `work` runs, divided by `steps`.
fn counted(
    callgrind: &Callgrind,
    steps: usize,
    work: impl FnOnce() -> RedisResult<()>,
) -> RedisResult<f64> {
    callgrind.control("-z")?;
    work()?;
    callgrind.control("-d")?;
    Ok(callgrind.last_dump_instructions()? / steps as f64)
}

fn info_field(con: &mut Connection, section: &str, field: &str) -> RedisResult<i64> {
    let text: String = redis::cmd("INFO").arg(section).query(con)?;
    Ok(text
        .lines()
        .find_map(|line| line.trim_end().strip_prefix(&format!("{field}:")))
        .and_then(|value| value.parse().ok())
        .unwrap_or(-1))
}

/// Sleeps until `ms` after `start` (not at all if that has passed).
fn sleep_until(start: Instant, ms: i64) {
    let due = start + Duration::from_millis(ms.max(0) as u64);
    if let Some(left) = due.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

/// Polls until `done`, at most `limit`.
fn until(limit: Duration, mut done: impl FnMut() -> RedisResult<bool>) -> RedisResult<()> {
    let start = Instant::now();
    while !done()? {
        if start.elapsed() > limit {
            return Err((redis::ErrorKind::Io, "timed out waiting").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Per holding on a lock of `n`: acquire, extend, release, a lapse, and the load
/// (RESTORE of its DUMP) per holding.
fn per_holding(con: &mut Connection, callgrind: &Callgrind, n: usize) -> RedisResult<[f64; 5]> {
    let _: () = redis::cmd("FLUSHALL").query(con)?;
    build(con, KEY, "h", n, LONG_TTL)?;
    let acquire_cost = counted(callgrind, STEPS, || build(con, KEY, "a", STEPS, LONG_TTL))?;
    let extend_cost = counted(callgrind, STEPS, || {
        pipelined(
            con,
            (0..STEPS).map(|i| {
                let mut cmd = redis::cmd("LOCK.EXTEND");
                cmd.arg(KEY).arg(format!("a{i}")).arg(LONG_TTL);
                cmd
            }),
        )
    })?;
    let release_cost = counted(callgrind, STEPS, || {
        pipelined(
            con,
            (0..STEPS).map(|i| {
                let mut cmd = redis::cmd("LOCK.RELEASE");
                cmd.arg(KEY).arg(format!("a{i}"));
                cmd
            }),
        )
    })?;
    // Holdings that lapse while n others live on: the module's timer removes them.
    let lapse_ttl = 3_000;
    let expirations = info_field(con, "lock", "lock_expirations")?;
    let built = Instant::now();
    build(con, KEY, "l", STEPS, lapse_ttl)?;
    // The count starts shortly before they lapse: idle turns of the event loop are
    // not what is measured.
    sleep_until(built, lapse_ttl - 300);
    let lapse_cost = counted(callgrind, STEPS, || {
        until(Duration::from_secs(120), || {
            Ok(info_field(con, "lock", "lock_expirations")? >= expirations + STEPS as i64)
        })
    })?;
    let payload: Vec<u8> = redis::cmd("DUMP").arg(KEY).query(con)?;
    let load_cost = counted(callgrind, n, || {
        redis::cmd("RESTORE")
            .arg("bench:scale:copy")
            .arg(0)
            .arg(payload)
            .query::<()>(con)
    })?;
    let _: () = redis::cmd("FLUSHALL").query(con)?;
    Ok([
        acquire_cost,
        extend_cost,
        release_cost,
        lapse_cost,
        load_cost,
    ])
}

/// Connections that each sent `command` and wait for its reply.
fn blocked(
    port: u16,
    count: usize,
    command: impl Fn(usize) -> Vec<String>,
) -> RedisResult<Vec<BufReader<TcpStream>>> {
    let mut streams = Vec::with_capacity(count);
    for i in 0..count {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        let args = command(i);
        let mut request = format!("*{}\r\n", args.len());
        for arg in &args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes())?;
        streams.push(BufReader::new(stream));
    }
    Ok(streams)
}

/// Reads the first line of each connection's reply (enough to know it came).
fn replied(streams: &mut [BufReader<TcpStream>]) -> RedisResult<()> {
    let mut line = String::new();
    for stream in streams {
        line.clear();
        stream.read_line(&mut line)?;
        if line.starts_with('-') || line.starts_with("*-1") || line.starts_with("_") {
            return Err((redis::ErrorKind::Io, "unexpected reply", line.clone()).into());
        }
    }
    Ok(())
}

/// Per waiter: a writer's release handing the lock to `n` shared waiters, and RPUSH
/// of `n` elements waking `n` clients blocked in BLPOP.
fn per_waiter(
    con: &mut Connection,
    port: u16,
    callgrind: &Callgrind,
    n: usize,
) -> RedisResult<[f64; 2]> {
    let _: () = redis::cmd("FLUSHALL").query(con)?;
    let _: Option<i64> = redis::cmd("LOCK.ACQUIRE")
        .arg(KEY)
        .arg("writer")
        .arg(LONG_TTL)
        .query(con)?;
    let mut readers = blocked(port, n, |i| {
        [
            "LOCK.ACQUIRE",
            KEY,
            &format!("r{i}"),
            "600000",
            "SHARED",
            "WAIT",
            "0",
        ]
        .map(String::from)
        .to_vec()
    })?;
    until(Duration::from_secs(300), || {
        Ok(info_field(con, "clients", "blocked_clients")? >= n as i64)
    })?;
    let hand_off = counted(callgrind, n, || {
        let _: i64 = redis::cmd("LOCK.RELEASE")
            .arg(KEY)
            .arg("writer")
            .query(con)?;
        replied(&mut readers)
    })?;
    drop(readers);
    let _: () = redis::cmd("FLUSHALL").query(con)?;
    let mut poppers = blocked(port, n, |_| {
        ["BLPOP", "bench:list", "0"].map(String::from).to_vec()
    })?;
    until(Duration::from_secs(300), || {
        Ok(info_field(con, "clients", "blocked_clients")? >= n as i64)
    })?;
    let elements: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
    let blpop = counted(callgrind, n, || {
        let _: i64 = redis::cmd("RPUSH")
            .arg("bench:list")
            .arg(&elements)
            .query(con)?;
        replied(&mut poppers)
    })?;
    drop(poppers);
    until(Duration::from_secs(60), || {
        Ok(info_field(con, "clients", "connected_clients")? <= 2)
    })?;
    Ok([hand_off, blpop])
}

/// Per lapse applied on a replica: `n` holdings built on the master lapse together;
/// the server under callgrind, a replica meanwhile, applies each LOCK.APPLY … LAPSED.
fn per_replica_lapse(
    replica: &mut Connection,
    master: &mut Connection,
    master_port: u16,
    callgrind: &Callgrind,
    n: usize,
) -> RedisResult<f64> {
    let _: () = redis::cmd("FLUSHALL").query(master)?;
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master_port)
        .query(replica)?;
    until(Duration::from_secs(120), || {
        let text: String = redis::cmd("INFO").arg("replication").query(replica)?;
        Ok(text.contains("master_link_status:up"))
    })?;
    let started = Instant::now();
    // Long enough for the build and for the replica (slow under callgrind) to catch up.
    // The replica, slow under callgrind, applies each grant in a few hundred µs.
    let ttl = 5_000 + 3 * n as i64;
    // One holding outlives them: the key stays, and the master's settle removes the
    // n as n lapses, which the replica applies one by one.
    build(master, KEY, "anchor", 1, LONG_TTL)?;
    let expirations = info_field(master, "lock", "lock_expirations")?;
    build(master, KEY, "p", n, ttl)?;
    let _: i64 = redis::cmd("WAIT").arg(1).arg(600_000).query(master)?;
    if started.elapsed() > Duration::from_millis(ttl as u64) {
        return Err((
            redis::ErrorKind::Io,
            "holdings lapsed before the count began",
        )
            .into());
    }
    sleep_until(started, ttl - 500);
    let cost = counted(callgrind, n, || {
        until(Duration::from_secs(600), || {
            Ok(info_field(master, "lock", "lock_expirations")? >= expirations + n as i64)
        })?;
        // Until the replica acknowledges the stream up to the last lapse.
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(600_000).query(master)?;
        if acked < 1 {
            return Err((redis::ErrorKind::Io, "the replica did not acknowledge").into());
        }
        Ok(())
    })?;
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(replica)?;
    let _: () = redis::cmd("FLUSHALL").query(replica)?;
    Ok(cost)
}

/// How much a cost per step may grow from the smallest to the largest size. O(log n)
/// per step gives the ratio of the logarithms; a step that looks at every holding
/// grows with n (100x from 1k to 100k).
fn log_bound(small: usize, large: usize) -> f64 {
    (large as f64).ln() / (small as f64).ln()
}

pub struct Sizes {
    pub holders: Vec<usize>,
    pub waiters: Vec<usize>,
}

pub fn run(
    client: &Client,
    port: u16,
    master_port: u16,
    sizes: &Sizes,
    callgrind: Callgrind,
    plot: &std::path::Path,
) -> RedisResult<bool> {
    let mut con = client.get_connection()?;
    let master_client = Client::open(format!("redis://127.0.0.1:{master_port}/"))?;
    let mut master = master_client.get_connection()?;
    let names = [
        "acquire",
        "extend",
        "release",
        "single lapse",
        "load (RESTORE), per holding",
    ];
    let mut series: Vec<Series> = names
        .iter()
        .map(|name| Series {
            name,
            points: Vec::new(),
        })
        .collect();
    println!("| holdings n | acquire | extend | release | single lapse | load, per holding |");
    println!("|---|---|---|---|---|---|");
    for &n in &sizes.holders {
        let row = per_holding(&mut con, &callgrind, n)?;
        for (s, cost) in series.iter_mut().zip(&row) {
            s.points.push((n, *cost));
        }
        let cells: Vec<String> = row.iter().map(|c| format!("{c:.0}")).collect();
        println!("| {n} | {} |", cells.join(" | "));
    }
    println!();
    println!(
        "| N | hand-off to N waiters, per waiter | N lapses applied on a replica, per lapse | RPUSH waking N BLPOP clients, per client | hand-off / RPUSH | lapses / RPUSH |"
    );
    println!("|---|---|---|---|---|---|");
    let mut replica = Series {
        name: "lapse applied on a replica (N together), per lapse",
        points: Vec::new(),
    };
    let mut hand_off = Series {
        name: "hand-off to N shared waiters, per waiter",
        points: Vec::new(),
    };
    let mut blpop = Series {
        name: "RPUSH waking N BLPOP clients, per client",
        points: Vec::new(),
    };
    for &n in &sizes.waiters {
        let [ours, theirs] = per_waiter(&mut con, port, &callgrind, n)?;
        let lapses = per_replica_lapse(&mut con, &mut master, master_port, &callgrind, n)?;
        println!(
            "| {n} | {ours:.0} | {lapses:.0} | {theirs:.0} | {:.2}x | {:.2}x |",
            ours / theirs,
            lapses / theirs
        );
        hand_off.points.push((n, ours));
        replica.points.push((n, lapses));
        blpop.points.push((n, theirs));
    }
    series.push(replica);
    series.push(hand_off);
    series.push(blpop);
    println!();
    let ok = verdicts(&series);
    write_plot(plot, &series)?;
    println!();
    println!("Plotted (log-log) in `{}`.", plot.display());
    Ok(ok)
}

/// Prints each target and whether this run meets it; false if any is missed.
fn verdicts(series: &[Series]) -> bool {
    let mut ok = true;
    let mut verdict = |text: String, met: bool| {
        println!("- {text}: {}", if met { "met" } else { "MISSED" });
        ok &= met;
    };
    let compared = |text: String, met: bool| {
        println!("- {text}: {}", if met { "met" } else { "missed" });
    };
    let find = |name: &str| series.iter().find(|s| s.name.starts_with(name));
    for name in [
        "acquire",
        "extend",
        "release",
        "single lapse",
        "lapse applied",
        "hand-off",
    ] {
        let Some(s) = find(name) else { continue };
        if let (Some(&(small, a)), Some(&(large, b))) = (s.points.first(), s.points.last()) {
            // Twice the growth of a logarithm: room for the caches of a bigger lock.
            let bound = 2.0 * log_bound(small, large);
            verdict(
                format!(
                    "{} per step, O(log n): {large} costs {:.2}x {small} (at most {bound:.2}x)",
                    s.name,
                    b / a
                ),
                b / a <= bound,
            );
        }
    }
    if let Some(s) = find("load") {
        for pair in s.points.windows(2) {
            let [(small, a), (large, b)] = [pair[0], pair[1]];
            // Totals: n log n grows by (large/small) times the ratio of logarithms.
            let growth = (large as f64 * b) / (small as f64 * a);
            let bound = 1.5 * (large as f64 / small as f64) * log_bound(small, large);
            verdict(
                format!(
                    "load of a lock, O(n log n): {large} holdings cost {growth:.1}x {small} (at most {bound:.1}x)"
                ),
                growth <= bound,
            );
        }
    }
    if let (Some(ours), Some(theirs)) = (find("hand-off"), find("RPUSH")) {
        for (&(n, a), &(_, b)) in ours.points.iter().zip(&theirs.points) {
            compared(
                format!(
                    "hand-off to {n} waiters: {:.2}x RPUSH waking {n} BLPOP clients (at most 1x)",
                    a / b
                ),
                a <= b,
            );
        }
    }
    if let (Some(ours), Some(theirs)) = (find("lapse applied"), find("RPUSH")) {
        for &(n, a) in &ours.points {
            if let Some(&(_, b)) = theirs.points.iter().find(|(m, _)| *m == n) {
                compared(
                    format!("{n} lapses on a replica: {:.2}x RPUSH waking {n} BLPOP clients, per client (at most 1x)", a / b),
                    a <= b,
                );
            }
        }
    }
    ok
}

/// A log-log plot of every series, as SVG: no plotting library needed.
fn write_plot(path: &std::path::Path, series: &[Series]) -> std::io::Result<()> {
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(n, cost) in points {
        let (x, y) = ((n as f64).log10(), cost.max(1.0).log10());
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    let (x0, x1, y0, y1) = (
        x0.floor(),
        x1.ceil().max(x0.floor() + 1.0),
        y0.floor(),
        y1.ceil().max(y0.floor() + 1.0),
    );
    let (w, h, left, top, plot_w, plot_h) = (1000.0, 520.0, 80.0, 30.0, 520.0, 420.0);
    let px = |n: f64| left + (n.log10() - x0) / (x1 - x0) * plot_w;
    let py = |c: f64| top + plot_h - (c.max(1.0).log10() - y0) / (y1 - y0) * plot_h;
    let colours = [
        "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    ];
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <rect x=\"{left}\" y=\"{top}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"black\"/>\n"
    );
    for e in (x0 as i32)..=(x1 as i32) {
        let x = px(10f64.powi(e));
        svg.push_str(&format!(
            "<line x1=\"{x}\" y1=\"{top}\" x2=\"{x}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">1e{e}</text>\n",
            top + plot_h,
            top + plot_h + 16.0
        ));
    }
    for e in (y0 as i32)..=(y1 as i32) {
        let y = py(10f64.powi(e));
        svg.push_str(&format!(
            "<line x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">1e{e}</text>\n",
            left + plot_w,
            left - 6.0,
            y + 4.0
        ));
    }
    svg.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">n holdings / N waiters</text>\n\
         <text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">instructions per step</text>\n",
        left + plot_w / 2.0,
        h - 8.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    ));
    for (i, s) in series.iter().enumerate() {
        let colour = colours[i % colours.len()];
        let line: Vec<String> = s
            .points
            .iter()
            .map(|&(n, c)| format!("{:.1},{:.1}", px(n as f64), py(c)))
            .collect();
        svg.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n",
            line.join(" ")
        ));
        for &(n, c) in &s.points {
            svg.push_str(&format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{colour}\"/>\n",
                px(n as f64),
                py(c)
            ));
        }
        let ly = top + 10.0 + 18.0 * i as f64;
        svg.push_str(&format!(
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
            left + plot_w + 15.0,
            left + plot_w + 35.0,
            left + plot_w + 40.0,
            ly + 4.0,
            s.name
        ));
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg)
}
