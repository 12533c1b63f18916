//! The faults, and the run's log of them and of who was master when.

use std::fs::File;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::now_ns;
use crate::topology::{self, Topology};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// SIGKILL of the master; once the sentinels promoted a replica, it comes back
    /// empty as a replica of the new master.
    Kill,
    /// SIGSTOP of the master for longer than `down-after-milliseconds`, then SIGCONT.
    Stop,
    /// The master's proxy black-holes every byte: the sentinels, the replicas and the
    /// workers that go through Sentinel lose it; the workers beside it do not.
    Partition,
    /// A replica killed and started again, empty, as a replica of the master.
    ReplicaRestart,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kill => "kill",
            Kind::Stop => "stop",
            Kind::Partition => "partition",
            Kind::ReplicaRestart => "replica-restart",
        }
    }

    /// True for the faults that should make the sentinels fail over.
    pub fn fails_over(self) -> bool {
        self != Kind::ReplicaRestart
    }
}

/// `run.log`, shared by the fault loop and the trackers.
#[derive(Clone)]
pub struct Log(Arc<Mutex<File>>);

impl Log {
    pub fn create(path: &std::path::Path) -> std::io::Result<Log> {
        Ok(Log(Arc::new(Mutex::new(File::create(path)?))))
    }

    pub fn line(&self, line: std::fmt::Arguments) {
        let mut file = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(file, "{line}");
    }
}

/// Injects `kind` into the current `master` (or one of its replicas) and returns
/// once the fault is over (the node runs again, the partition healed).
pub fn inject(topology: &mut Topology, master: usize, kind: Kind, rng: &mut impl Rng, log: &Log) {
    let start = now_ns();
    let node = match kind {
        Kind::Kill => {
            topology.nodes[master].server.kill();
            // It stays dead until the sentinels promoted another node.
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut promoted = None;
            while promoted.is_none() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(50));
                promoted = topology.master().filter(|&m| m != master);
            }
            let new_master = promoted.unwrap_or((master + 1) % topology.nodes.len());
            let proxy = topology.nodes[new_master].proxy.port();
            topology.nodes[master].restart_as_replica(proxy);
            master
        }
        Kind::Stop => {
            topology.nodes[master].server.pause();
            thread::sleep(Duration::from_millis(rng.gen_range(1500..3000)));
            topology.nodes[master].server.resume();
            master
        }
        Kind::Partition => {
            topology.nodes[master].proxy.black_hole();
            thread::sleep(Duration::from_millis(rng.gen_range(2500..4000)));
            topology.nodes[master].proxy.heal();
            master
        }
        Kind::ReplicaRestart => {
            let replica = (master + rng.gen_range(1..topology.nodes.len())) % topology.nodes.len();
            let proxy = topology.nodes[master].proxy.port();
            topology.nodes[replica].restart_as_replica(proxy);
            replica
        }
    };
    log.line(format_args!(
        "FAULT {} {node} {start} {}",
        kind.name(),
        now_ns()
    ));
}

/// Threads that log the sentinels' master and each node's own role whenever they
/// change, every 50 ms, until dropped.
pub struct Trackers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Trackers {
    pub fn start(topology: &Topology, log: &Log) -> Trackers {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let nodes: Vec<(u16, u16)> = topology
            .nodes
            .iter()
            .map(|n| (n.server.port, n.proxy.port()))
            .collect();
        let sentinels: Vec<u16> = topology.sentinels.iter().map(|s| s.port).collect();
        {
            let (stop, log, nodes) = (Arc::clone(&stop), log.clone(), nodes.clone());
            threads.push(thread::spawn(move || {
                let mut last = None;
                while !stop.load(Ordering::Relaxed) {
                    let master = topology::majority_master(&sentinels, &nodes);
                    if master.is_some() && master != last {
                        log.line(format_args!("MASTER {} {}", now_ns(), master.unwrap_or(0)));
                        last = master;
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }));
        }
        for (i, &(port, _)) in nodes.iter().enumerate() {
            let (stop, log) = (Arc::clone(&stop), log.clone());
            threads.push(thread::spawn(move || {
                let mut last: Option<String> = None;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(role) = topology::role(port) {
                        if last.as_ref() != Some(&role) {
                            log.line(format_args!("ROLE {} {i} {role}", now_ns()));
                            last = Some(role);
                        }
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }));
        }
        Trackers { stop, threads }
    }
}

impl Drop for Trackers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
