//! Adapter processes started ahead of the scenarios that use them: a client whose
//! adapter takes a while to start (an interpreter importing its libraries) starts
//! while other scenarios sleep through their TTLs, one process at a time, so the
//! starts never crowd the machine at a moment a scenario measures. A scenario takes
//! each actor from here; every process still serves exactly one actor.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::actor::Actor;
use crate::registry::Adapter;

/// Waits for a process's hello.
fn said_hello(actor: &Actor) -> Result<(), String> {
    actor
        .hello(Duration::from_secs(60))
        .map(|_| ())
        .map_err(|e| format!("{e}; its log:\n{}", actor.log_tail(15)))
}

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

    /// Starts a process (its hello not awaited yet).
    fn spawn_one(&self) -> Result<Actor, String> {
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
        Actor::spawn(&self.adapter, &self.root, &format!("process-{n}"), "", &log)
    }

    fn start_one(&self) -> Result<Actor, String> {
        let actor = self.spawn_one()?;
        said_hello(&actor)?;
        Ok(actor)
    }

    /// Adapter processes that said hello, named `names` from now on: the ready ones
    /// first, the rest started together.
    pub fn take(&self, names: &[String]) -> Result<Vec<Actor>, String> {
        let mut actors = Vec::new();
        let mut started = Vec::new();
        for name in names {
            let ready = self.state().ready.pop_front();
            match ready {
                Some(mut actor) => {
                    actor.name = name.clone();
                    actors.push(actor);
                }
                None => {
                    let mut actor = self.spawn_one()?;
                    actor.name = name.clone();
                    started.push(actor);
                }
            }
        }
        self.changed.notify_all();
        for actor in started {
            said_hello(&actor)?;
            actors.push(actor);
        }
        Ok(actors)
    }

    /// Keeps processes ready, one start at a time, until `stop`.
    pub fn fill(&self, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            let wanted = {
                let state = self.state();
                state.demand > 0 && state.ready.len() < READY
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
