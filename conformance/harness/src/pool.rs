//! Adapter processes started ahead of the scenarios that use them: a client whose
//! adapter takes a while to start (an interpreter importing its libraries) starts
//! while other scenarios sleep through their TTLs, one process at a time, so the
//! starts never crowd the machine at a moment a scenario measures. A scenario takes
//! each actor from here; every process still serves exactly one actor.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::actor::Actor;
use crate::registry::Adapter;

/// How many started processes wait for a scenario at most.
const READY: usize = 12;

pub struct Pool {
    adapter: Adapter,
    root: PathBuf,
    logs: PathBuf,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    ready: VecDeque<Actor>,
    /// Processes the scenarios still need that are not started yet.
    demand: usize,
    started: usize,
}

impl Pool {
    /// A pool for `demand` actors of `adapter` in all.
    pub fn new(adapter: Adapter, root: PathBuf, logs: PathBuf, demand: usize) -> Pool {
        Pool {
            adapter,
            root,
            logs,
            state: Mutex::new(State {
                ready: VecDeque::new(),
                demand,
                started: 0,
            }),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start_one(&self) -> Result<Actor, String> {
        let n = {
            let mut state = self.state();
            state.started += 1;
            state.demand = state.demand.saturating_sub(1);
            state.started
        };
        let log = self
            .logs
            .join(&self.adapter.client)
            .join("processes")
            .join(format!("{n}.log"));
        let actor = Actor::spawn(&self.adapter, &self.root, &format!("process-{n}"), "", &log)?;
        actor
            .hello(Duration::from_secs(60))
            .map_err(|e| format!("{e}; its log:\n{}", actor.log_tail(15)))?;
        Ok(actor)
    }

    /// An adapter process that said hello, named `name` from now on.
    pub fn take(&self, name: &str) -> Result<Actor, String> {
        let ready = self.state().ready.pop_front();
        let mut actor = match ready {
            Some(actor) => actor,
            None => self.start_one()?,
        };
        self.changed.notify_all();
        actor.name = name.to_string();
        Ok(actor)
    }

    /// Keeps processes ready, one start at a time, until `stop`; none while `quiet`
    /// counts a timing run.
    pub fn fill(&self, stop: &AtomicBool, quiet: &AtomicUsize) {
        while !stop.load(Ordering::SeqCst) {
            let wanted = {
                let state = self.state();
                state.demand > 0 && state.ready.len() < READY && quiet.load(Ordering::SeqCst) == 0
            };
            if !wanted {
                let state = self.state();
                let _ = self
                    .changed
                    .wait_timeout(state, Duration::from_millis(100))
                    .unwrap_or_else(|e| e.into_inner());
                continue;
            }
            match self.start_one() {
                Ok(actor) => self.state().ready.push_back(actor),
                // The scenario that takes one will start it itself and see why.
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Ends the processes nobody took.
    pub fn drain(&self) {
        let left: Vec<Actor> = self.state().ready.drain(..).collect();
        for mut actor in left {
            actor.finish();
        }
    }
}
