//! One adapter process: an actor of a scenario (conformance/ADAPTER.md).
//!
//! A reader thread stamps every line from the adapter's stdout with this process's
//! monotonic clock when it arrives, and files it as the reply to its request or as
//! an event; the scenario waits on those. The adapter runs in a process group of its
//! own, so that killing the actor (SIGKILL) takes whatever it started with it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::registry::Adapter;

/// A line from the adapter, and when it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub value: Value,
}

#[derive(Default)]
struct Inbox {
    hello: Option<Received>,
    replies: HashMap<u64, Received>,
    events: Vec<Received>,
    /// Lines that were not protocol lines: a broken adapter, shown on failure.
    garbage: Vec<String>,
    /// stdout ended: the process exited or closed it.
    ended: bool,
}

type Shared = Arc<(Mutex<Inbox>, Condvar)>;

fn inbox(shared: &Shared) -> MutexGuard<'_, Inbox> {
    shared.0.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Actor {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    shared: Shared,
    next_id: u64,
    /// When each request was written.
    pub sent: HashMap<u64, Instant>,
    pub log: PathBuf,
    killed: bool,
}

impl Actor {
    /// Starts the adapter of `adapter` as actor `name`, its stderr into `log`.
    pub fn spawn(
        adapter: &Adapter,
        root: &Path,
        name: &str,
        scenario: &str,
        log: &Path,
    ) -> Result<Actor, String> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let stderr = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let argv = adapter.argv(root);
        let (program, args) = argv.split_first().ok_or("an empty adapter command")?;
        let mut child = Command::new(program)
            .args(args)
            .current_dir(root)
            .envs(&adapter.env)
            .env("LOCK_CONFORMANCE_ACTOR", name)
            .env("LOCK_CONFORMANCE_SCENARIO", scenario)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let shared: Shared = Arc::default();
        let reading = Arc::clone(&shared);
        std::thread::spawn(move || read_lines(stdout, &reading));
        Ok(Actor {
            name: name.into(),
            stdin: child.stdin.take(),
            child,
            shared,
            next_id: 0,
            sent: HashMap::new(),
            log: log.to_path_buf(),
            killed: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The hello line, waiting up to `limit` for it.
    pub fn hello(&self, limit: Duration) -> Result<Received, String> {
        self.wait(limit, |inbox| inbox.hello.clone())
            .ok_or_else(|| format!("no hello from {} within {limit:?}", self.name))
    }

    /// Writes request `op` with `fields`; its id.
    pub fn send(
        &mut self,
        op: &str,
        fields: &serde_json::Map<String, Value>,
    ) -> Result<u64, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut request = json!({"id": id, "op": op});
        if let Some(object) = request.as_object_mut() {
            for (name, value) in fields {
                object.insert(name.clone(), value.clone());
            }
        }
        let mut line = request.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        // Stamped before the write: whatever the request causes comes after it.
        self.sent.insert(id, Instant::now());
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to {}: {e}", self.name))?;
        Ok(id)
    }

    /// The reply to request `id`, waiting up to `limit`.
    pub fn reply(&self, id: u64, limit: Duration) -> Option<Received> {
        self.wait(limit, |inbox| inbox.replies.get(&id).cloned())
    }

    /// The reply to `id` if it came already.
    pub fn reply_now(&self, id: u64) -> Option<Received> {
        inbox(&self.shared).replies.get(&id).cloned()
    }

    /// The first event that `matches`, waiting up to `limit`.
    pub fn event(&self, limit: Duration, matches: impl Fn(&Value) -> bool) -> Option<Received> {
        self.wait(limit, |inbox| {
            inbox.events.iter().find(|e| matches(&e.value)).cloned()
        })
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<Received> {
        inbox(&self.shared).events.clone()
    }

    /// True once the adapter's stdout ended.
    pub fn ended(&self) -> bool {
        inbox(&self.shared).ended
    }

    /// What went wrong with the adapter's output, for a failure's report.
    pub fn garbage(&self) -> Vec<String> {
        inbox(&self.shared).garbage.clone()
    }

    fn wait<T>(&self, limit: Duration, mut found: impl FnMut(&Inbox) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + limit;
        let (lock, ready) = &*self.shared;
        let mut inbox = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(value) = found(&inbox) {
                return Some(value);
            }
            let now = Instant::now();
            if now >= deadline || inbox.ended {
                return None;
            }
            inbox = ready
                .wait_timeout(inbox, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// SIGKILL to the adapter's process group: a crashed holder.
    pub fn kill(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `signal` (`-STOP`, `-CONT`) to the adapter's process group: a holder paused
    /// (a GC pause, a swap storm) and continued.
    pub fn signal(&self, signal: &str) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args([signal, "--", &group])
            .stderr(Stdio::null())
            .status();
    }

    /// True while the adapter process is stopped (SIGSTOP): its state in
    /// `/proc/<pid>/stat`, the field after the command's closing parenthesis.
    pub fn stopped(&self) -> bool {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        state.is_some_and(|rest| rest.starts_with('T') || rest.starts_with('t'))
    }

    /// True once the adapter process has exited (been reaped).
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Ends the actor: `close`, a moment to exit, then SIGKILL.
    pub fn finish(&mut self) {
        if self.killed {
            return;
        }
        if self.stdin.is_some() && !self.ended() {
            let _ = self.send("close", &serde_json::Map::new());
        }
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }

    /// The last lines of the adapter's stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_lines(stdout: std::process::ChildStdout, shared: &Shared) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let at = Instant::now();
        let mut inbox = inbox(shared);
        match serde_json::from_str::<Value>(&line) {
            Ok(value) if value.get("hello").is_some() && inbox.hello.is_none() => {
                inbox.hello = Some(Received { at, value });
            }
            Ok(value) if value.get("id").and_then(Value::as_u64).is_some() => {
                let id = value.get("id").and_then(Value::as_u64).unwrap_or(0);
                match inbox.replies.entry(id) {
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(Received { at, value });
                    }
                    std::collections::hash_map::Entry::Occupied(_) => {
                        inbox
                            .garbage
                            .push(format!("a second reply to {id}: {line}"));
                    }
                }
            }
            Ok(value) if value.get("event").is_some() => {
                inbox.events.push(Received { at, value });
            }
            _ => inbox.garbage.push(line),
        }
        drop(inbox);
        shared.1.notify_all();
    }
    inbox(shared).ended = true;
    shared.1.notify_all();
}
