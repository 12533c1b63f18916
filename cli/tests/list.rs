//! `redis-lock list` and `redis-lock stats` against real servers: every kind of lock
//! and a waiter, the pattern filter, JSON read field by field, a 3-master Cluster,
//! a keyspace that takes many SCAN steps, a hash of a million fields that is not a
//! lock, and `stats` on the module and the library.

use redis_lock_testkit as common;

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{Cluster, Config, Server};
use serde_json::Value as Json;

/// The binary, with `--url` pointing at `url` and no REDIS_URL from outside.
fn redis_lock(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    command.env_remove("REDIS_URL").args(["--url", url]);
    command
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `redis-lock --url URL ARGS…`, asserting it succeeded.
fn ok(url: &str, args: &[&str]) -> String {
    let output = redis_lock(url).args(args).output().expect("redis-lock");
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    stdout(&output)
}

/// Takes a holding on the backend under test; its token.
fn take(con: &mut redis::Connection, key: &str, owner: &str, mode: &[&str]) -> i64 {
    let token: Option<i64> = common::lock_cmd("lock_acquire", key)
        .arg(owner)
        .arg(60_000)
        .arg(mode)
        .query(con)
        .expect("acquire");
    token.expect("granted")
}

/// A client queued for `key` (on any backend: the CLI's own wait), until killed.
fn waiter(url: &str, key: &str) -> Child {
    redis_lock(url)
        .args(["run", "--wait", "30s", key, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-lock run")
}

fn waiters(server: &Server, key: &str) -> u64 {
    let info = redis_lock(&server.url())
        .args(["info", key, "--json"])
        .output()
        .expect("info");
    let json: Json = serde_json::from_slice(&info.stdout).unwrap_or_default();
    json["waiters"].as_u64().unwrap_or(0)
}

#[test]
fn list_shows_every_lock_with_its_holders_and_waiters() {
    let server = common::lock_server();
    let mut con = server.connection();
    let a = take(&mut con, "jobs:a", "alpha", &[]);
    let r1 = take(&mut con, "jobs:b", "r1", &["SHARED"]);
    let r2 = take(&mut con, "jobs:b", "r2", &["SHARED"]);
    let p1 = take(&mut con, "sem:c", "p1", &["LIMIT", "3"]);
    // Neither a string nor a hash that is not a lock is listed.
    let _: () = redis::cmd("SET")
        .arg("jobs:plain")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("jobs:profile")
        .arg("mode")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let mut queued = waiter(&server.url(), "jobs:a");
    common::wait_until(Duration::from_secs(5), || waiters(&server, "jobs:a") == 1);

    let json: Json = serde_json::from_str(&ok(&server.url(), &["list", "--json"])).unwrap();
    let locks = json["locks"].as_array().expect("an array of locks");
    let keys: Vec<&str> = locks.iter().filter_map(|l| l["key"].as_str()).collect();
    assert_eq!(keys, ["jobs:a", "jobs:b", "sem:c"], "{json}");
    let holders = |lock: &Json| -> Vec<(String, i64)> {
        lock["holders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                let ttl = h["ttl_ms"].as_u64().unwrap();
                assert!(ttl > 0 && ttl <= 60_000, "{h}");
                (
                    h["owner"].as_str().unwrap().to_string(),
                    h["token"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(locks[0]["mode"], "exclusive");
    assert_eq!(holders(&locks[0]), [("alpha".to_string(), a)]);
    assert_eq!(locks[0]["waiters"], 1, "the queued run");
    assert_eq!(locks[1]["mode"], "shared");
    assert_eq!(
        holders(&locks[1]),
        [("r1".to_string(), r1), ("r2".to_string(), r2)]
    );
    assert_eq!(locks[1]["waiters"], 0);
    assert_eq!(locks[2]["mode"], "shared");
    assert_eq!(holders(&locks[2]), [("p1".to_string(), p1)]);
    assert!(locks
        .iter()
        .all(|l| l["held"] == true && l.get("node").is_none()));

    let text = ok(&server.url(), &["list", "jobs:*"]);
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(
        blocks.len(),
        2,
        "one block per lock, sem:c filtered out: {text}"
    );
    assert!(
        blocks[0].starts_with("jobs:a: held (exclusive), 1 holder(s), 1 waiting\n")
            && blocks[0].contains(&format!("owner alpha  token {a}  ttl ")),
        "{text}"
    );
    assert!(
        blocks[1].contains(&format!("owner r1  token {r1}"))
            && blocks[1].contains(&format!("owner r2  token {r2}")),
        "{text}"
    );
    let none = ok(&server.url(), &["list", "nothing:*"]);
    assert_eq!(none, "no locks held\n");
    let _ = queued.kill();
    let _ = queued.wait();
}

/// A Cluster on the backend under test: the module, or the library on every node.
fn lock_cluster() -> Option<Cluster> {
    match common::backend_name().as_str() {
        "module" => Some(Cluster::start(3)),
        "functions" => {
            let cluster = Cluster::start_with(3, Config::default().without_module());
            for node in &cluster.nodes {
                common::load_library(&mut node.connection());
            }
            Some(cluster)
        }
        other => {
            eprintln!("skipped on the {other} backend");
            None
        }
    }
}

#[test]
fn list_on_a_cluster_finds_the_locks_of_every_master() {
    let Some(cluster) = lock_cluster() else {
        return;
    };
    let mut expected = Vec::new();
    let mut per_node = [0; 3];
    for i in 0.. {
        if per_node.iter().all(|&n| n > 0) {
            break;
        }
        let key = format!("job:{i}");
        let node = cluster.owner_of(&key);
        per_node[node] += 1;
        let token = take(&mut cluster.nodes[node].connection(), &key, "me", &[]);
        expected.push((key, token, cluster.nodes[node].port));
    }
    expected.sort();
    let output = redis_lock(&cluster.nodes[0].url())
        .args(["--cluster", "list", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let json: Json = serde_json::from_slice(&output.stdout).unwrap();
    let found: Vec<(String, i64, u16)> = json["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let node = l["node"].as_str().unwrap();
            let port = node.rsplit_once(':').unwrap().1.parse().unwrap();
            let key = l["key"].as_str().unwrap().to_string();
            (key, l["holders"][0]["token"].as_i64().unwrap(), port)
        })
        .collect();
    assert_eq!(found, expected, "every lock, each on its master");
}

#[test]
fn list_walks_a_large_keyspace_in_bounded_steps() {
    let server = common::lock_server();
    let mut con = server.connection();
    for batch in 0..20 {
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            pipe.cmd("SET")
                .arg(format!("data:{batch}:{i}"))
                .arg(i)
                .ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    for key in ["lock:1", "lock:2", "lock:3"] {
        take(&mut con, key, "me", &[]);
    }
    let scans = common::command_calls(&mut con, "scan");
    let started = Instant::now();
    let json: Json =
        serde_json::from_str(&ok(&server.url(), &["list", "--json", "--count", "500"])).unwrap();
    let took = started.elapsed();
    let keys: Vec<&str> = json["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["key"].as_str())
        .collect();
    assert_eq!(keys, ["lock:1", "lock:2", "lock:3"]);
    let steps = common::command_calls(&mut con, "scan") - scans;
    // 20,003 keys at COUNT 500: about 40 steps, none of them long.
    assert!((30..=120).contains(&steps), "{steps} SCAN steps");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// PINGs `url` until told to stop; the longest answer it waited for.
fn pinger(url: String, stop: Arc<AtomicBool>) -> thread::JoinHandle<Duration> {
    thread::spawn(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let mut longest = Duration::ZERO;
        while !stop.load(Ordering::Relaxed) {
            let sent = Instant::now();
            let _: String = redis::cmd("PING").query(&mut con).unwrap();
            longest = longest.max(sent.elapsed());
            thread::sleep(Duration::from_millis(2));
        }
        longest
    })
}

/// cli.md: "no call holds the server up, whatever its size", on every backend. A
/// hash of a million fields that is not a lock is told apart in O(1), by `list`,
/// `info` and the backend's own info call, while another client's PINGs are
/// answered as usual (a library that read the hash whole held the server 1.2 s in
/// one call).
#[test]
fn a_hash_of_a_million_fields_holds_no_call_up() {
    let server = common::lock_server();
    let mut con = server.connection();
    for batch in 0..20 {
        let mut pipe = redis::pipe();
        for command in 0..50 {
            let mut hset = redis::cmd("HSET");
            hset.arg("profiles");
            for field in 0..1000 {
                hset.arg(format!("user:{batch}:{command}:{field}"))
                    .arg(field);
            }
            pipe.add_command(hset).ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
    }
    let fields: i64 = redis::cmd("HLEN").arg("profiles").query(&mut con).unwrap();
    assert_eq!(fields, 1_000_000);
    let a = take(&mut con, "jobs:a", "alpha", &[]);

    let stop = Arc::new(AtomicBool::new(false));
    let pings = pinger(server.url(), stop.clone());
    thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    let json: Json = serde_json::from_str(&ok(&server.url(), &["list", "--json"])).unwrap();
    let listed = started.elapsed();
    let locks = json["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 1, "{json}");
    assert_eq!(locks[0]["key"], "jobs:a");
    assert_eq!(locks[0]["holders"][0]["token"], a);
    let started = Instant::now();
    let info = redis_lock(&server.url())
        .args(["info", "profiles"])
        .output()
        .unwrap();
    let informed = started.elapsed();
    assert_eq!(info.status.code(), Some(65), "{}", stderr(&info));
    let started = Instant::now();
    let reply: redis::RedisResult<redis::Value> =
        common::lock_cmd("lock_info", "profiles").query(&mut con);
    let asked = started.elapsed();
    assert_eq!(
        reply.as_ref().err().and_then(|e| e.code()),
        Some("WRONGTYPE"),
        "{reply:?}"
    );
    thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let longest = pings.join().unwrap();
    eprintln!(
        "list {listed:?}, info {informed:?}, lock_info {asked:?}; the longest PING {longest:?}"
    );
    assert!(
        longest < Duration::from_millis(500),
        "a PING waited {longest:?}"
    );
}

#[test]
fn stats_prints_info_lock_and_the_rates_of_its_counters() {
    if !common::on_module("stats_prints_info_lock_and_the_rates_of_its_counters") {
        return;
    }
    let server = Server::start();
    let mut con = server.connection();
    common::acquire(&mut con, "job", "a", 60_000);
    common::release(&mut con, "job", "a");
    let text = ok(&server.url(), &["stats"]);
    assert!(text.contains("counts since the module loaded"), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("acquisitions "))
        .unwrap_or_default();
    assert!(line.trim_end().ends_with(" 1"), "{text}");
    assert!(text.contains("wait_ms: 0 so far"), "{text}");

    let sampling = redis_lock(&server.url())
        .args(["stats", "--interval", "1s", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..10 {
        common::acquire(&mut con, "job", "a", 60_000);
        common::release(&mut con, "job", "a");
    }
    let output = sampling.wait_with_output().unwrap();
    assert!(output.status.success());
    let json: Json = serde_json::from_slice(&output.stdout).unwrap();
    let seconds = json["interval_s"].as_f64().unwrap();
    assert!((0.9..2.0).contains(&seconds), "{json}");
    let counter = |name: &str| {
        json["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name}: {json}"))
    };
    assert_eq!(counter("acquisitions")["total"], 11);
    let rate = counter("releases")["per_s"].as_f64().unwrap();
    assert!(
        (rate * seconds - 10.0).abs() < 0.01,
        "{rate}/s over {seconds}s"
    );
    let gauges = json["gauges"].as_array().unwrap();
    assert!(
        gauges
            .iter()
            .any(|g| g["name"] == "locks" && g["value"] == 0),
        "{json}"
    );
    let histogram = &json["histograms"][0];
    assert_eq!(histogram["name"], "wait_ms");
    assert_eq!(histogram["buckets"].as_array().unwrap().len(), 12, "{json}");
}

#[test]
fn stats_on_the_function_library_says_it_keeps_no_counters() {
    let server = Server::with(Config::default().without_module());
    common::load_library(&mut server.connection());
    let output = redis_lock(&server.url()).arg("stats").output().unwrap();
    assert_eq!(output.status.code(), Some(78), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("keeps no counters") && text.contains("INFO lock"),
        "{text}"
    );
    assert!(stdout(&output).is_empty());
}
