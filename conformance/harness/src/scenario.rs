//! A scenario (`conformance/scenarios/*.json`, shape in `conformance/schema.json`)
//! and its run: steps on named actors, faults, and checks of replies, events, times
//! and the server, all timed with this process's monotonic clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::actor::{Actor, Received};
use crate::cycle::{self, Cycle, CycleSpec};
use crate::env::{Backend, Env};
use crate::registry::{Adapter, Hello};

#[derive(Debug, Clone, Deserialize)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Capabilities every client must have for it.
    #[serde(default)]
    pub requires: Vec<String>,
    /// The backends it runs on (all when absent), and why not on the others.
    #[serde(default)]
    pub backends: Option<Vec<String>>,
    /// One reason, or one per backend.
    #[serde(default)]
    pub not_elsewhere: Value,
    /// Its checks depend on the clients' timing: few such runs at once.
    #[serde(default)]
    pub timing: bool,
    #[serde(default)]
    pub server: ServerSpec,
    /// It writes to PostgreSQL: the actors' `open` names the run's server.
    #[serde(default)]
    pub postgres: bool,
    #[serde(default)]
    pub actors: BTreeMap<String, ActorSpec>,
    pub steps: Vec<Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServerSpec {
    /// Append-only persistence, so that a restart keeps the locks and the library.
    #[serde(default)]
    pub aof: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ActorSpec {
    /// `n`: actors `<name>1` to `<name>n`.
    #[serde(default)]
    pub count: Option<u32>,
    /// `proxy`: through the black-hole proxy.
    #[serde(default)]
    pub via: Option<String>,
    /// `false`: the scenario opens it itself; an object: fields of the harness's open.
    #[serde(default)]
    pub open: Option<Value>,
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let scenario: Scenario =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        scenario
            .validate()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(scenario)
    }

    /// Every step's op is known and has the fields it needs (schema.json says the
    /// same, for other tools); every backend named exists.
    pub fn validate(&self) -> Result<(), String> {
        for backend in self.backends.iter().flatten() {
            if Backend::parse(backend).is_none() {
                return Err(format!("unknown backend {backend:?}"));
            }
        }
        validate_steps(&self.steps)
    }

    /// Why it does not run on `backend`, if so.
    pub fn not_on(&self, backend: Backend) -> Option<String> {
        let list = self.backends.as_ref()?;
        if list.iter().any(|b| b == backend.name()) {
            return None;
        }
        let reason = match &self.not_elsewhere {
            Value::String(reason) => Some(reason.as_str()),
            Value::Object(reasons) => reasons.get(backend.name()).and_then(Value::as_str),
            _ => None,
        };
        Some(match reason {
            Some(reason) => reason.to_string(),
            None => format!("runs on {} only", list.join(", ")),
        })
    }

    /// How many adapter processes a run takes.
    pub fn actor_count(&self) -> usize {
        self.actor_names().len()
    }

    /// The actors by name, counts expanded.
    fn actor_names(&self) -> Vec<(String, ActorSpec)> {
        let mut names = Vec::new();
        for (name, spec) in &self.actors {
            match spec.count {
                Some(n) => names.extend((1..=n).map(|i| (format!("{name}{i}"), spec.clone()))),
                None => names.push((name.clone(), spec.clone())),
            }
        }
        names
    }
}

fn validate_steps(steps: &[Value]) -> Result<(), String> {
    for step in steps {
        let op = step
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a step without op: {step}"))?;
        let needs: &[&str] = match op {
            "open" | "acquire" | "release" | "extend" | "token" | "await_lost" | "cancel"
            | "info" | "check" | "guard" | "fence_postgres" | "close" | "campaign" | "resign"
            | "leader" | "observe" => &["actor"],
            "await_leaders" => &["actor", "observer", "leaders"],
            "data" => &["key"],
            "postgres" => &["resource"],
            "await" => &["request"],
            "await_event" | "no_event" => &["actor", "lock"],
            "sleep" => &["ms"],
            "fault" => &["fault"],
            "server" => &["key", "expect"],
            "compare" => &["is"],
            "before" => &["first", "then"],
            "elapsed" => &["from", "to"],
            "repeat" => &["each", "steps"],
            "cycle" => &["name", "actors", "key", "ttl_ms", "hold_ms", "rounds"],
            "await_cycle" => &["name"],
            "constants" => &[],
            other => return Err(format!("unknown op {other:?}")),
        };
        for field in needs {
            if step.get(*field).is_none() {
                return Err(format!("{op} needs {field}: {step}"));
            }
        }
        if let Some(inner) = step.get("steps").and_then(Value::as_array) {
            validate_steps(inner)?;
        }
    }
    Ok(())
}

/// What one cell of the table came to.
#[derive(Debug, Clone)]
pub enum Outcome {
    Passed(Duration),
    Failed(String),
    Skipped(String),
}

/// Everything a run needs besides its servers.
pub struct Context<'a> {
    pub adapter: &'a Adapter,
    pub pool: &'a crate::pool::Pool,
    /// The `acl` backend's user's rules.
    pub acl: &'a [String],
    pub hello: &'a Hello,
    pub protocol: &'a BTreeMap<String, Value>,
    pub logs: PathBuf,
    pub hostname: String,
    /// A timing cell's claim: its steps wait for their turn once the actors are open.
    pub turn: Option<&'a crate::slots::Claim<'a>>,
    /// The run's PostgreSQL, for scenarios that write there.
    pub postgres: Option<&'a redis_lock_testkit::postgres::Postgres>,
}

impl Context<'_> {
    fn constant(&self, name: &str) -> Option<i64> {
        self.protocol.get(name).and_then(Value::as_i64)
    }

    /// The library version just below the oldest the clients accept.
    pub fn old_library_version(&self) -> i64 {
        self.constant("min_library_version").unwrap_or(1) - 1
    }

    /// The library version just above the newest the clients accept.
    pub fn new_library_version(&self) -> i64 {
        self.constant("library_version").unwrap_or(1) + 1
    }
}

/// A request a step sent, by the name the scenario gave it.
struct Sent {
    actor: String,
    id: u64,
}

pub struct Run<'a> {
    ctx: &'a Context<'a>,
    env: &'a mut Env,
    scenario: &'a Scenario,
    actors: BTreeMap<String, Actor>,
    requests: HashMap<String, Sent>,
    /// Named instants: events awaited, server states observed.
    marks: HashMap<String, Instant>,
    cycles: HashMap<String, Cycle>,
    unnamed: u64,
    /// What happened, for a failure's report.
    pub trace: Vec<String>,
    start: Instant,
}

type Step = Map<String, Value>;

/// The default bound of waiting for a reply: a hang guard, not a timing check.
const REPLY_LIMIT: Duration = Duration::from_secs(20);

impl<'a> Run<'a> {
    pub fn new(ctx: &'a Context<'a>, env: &'a mut Env, scenario: &'a Scenario) -> Run<'a> {
        Run {
            ctx,
            env,
            scenario,
            actors: BTreeMap::new(),
            requests: HashMap::new(),
            marks: HashMap::new(),
            cycles: HashMap::new(),
            unnamed: 0,
            trace: Vec::new(),
            start: Instant::now(),
        }
    }

    fn note(&mut self, text: String) {
        let at = self.start.elapsed().as_millis();
        self.trace.push(format!("{at:>6} ms  {text}"));
    }

    /// Starts and opens the actors, then runs the steps.
    pub fn run(&mut self) -> Result<(), String> {
        self.start_actors()?;
        let steps = self.scenario.steps.clone();
        for step in &steps {
            self.step(step, None)?;
        }
        Ok(())
    }

    /// Every actor of the run, its log among them.
    pub fn finish(&mut self) -> Vec<(String, PathBuf, String, Vec<String>)> {
        for (_, cycle) in self.cycles.drain() {
            for mut actor in cycle.stop() {
                actor.finish();
            }
        }
        let mut logs = Vec::new();
        for (name, actor) in &mut self.actors {
            actor.finish();
            logs.push((
                name.clone(),
                actor.log.clone(),
                actor.log_tail(15),
                actor.garbage(),
            ));
        }
        logs
    }

    fn start_actors(&mut self) -> Result<(), String> {
        let names = self.scenario.actor_names();
        let wanted: Vec<String> = names.iter().map(|(name, _)| name.clone()).collect();
        for actor in self.ctx.pool.take(&wanted)? {
            self.note(format!(
                "{} is the process of {}",
                actor.name,
                actor.log.display()
            ));
            self.actors.insert(actor.name.clone(), actor);
        }
        let mut opens = Vec::new();
        for (name, spec) in &names {
            let actor = self.actors.get(name).ok_or("actor vanished")?;
            actor
                .hello(Duration::from_secs(30))
                .map_err(|e| format!("{e}; its log:\n{}", actor.log_tail(15)))?;
            if spec.open == Some(Value::Bool(false)) {
                continue;
            }
            let mut fields = self.env.open_fields(spec.via.as_deref() == Some("proxy"))?;
            if self.scenario.postgres {
                let pg = self.ctx.postgres.ok_or("no PostgreSQL for the run")?;
                fields.insert("postgres".into(), Value::from(pg.url()));
            }
            if let Some(Value::Object(extra)) = &spec.open {
                for (k, v) in extra {
                    fields.insert(k.clone(), v.clone());
                }
            }
            let actor = self.actors.get_mut(name).ok_or("actor vanished")?;
            let id = actor.send("open", &fields)?;
            opens.push((name.clone(), id));
        }
        for (name, id) in opens {
            let actor = self.actors.get(&name).ok_or("actor vanished")?;
            let reply = actor
                .reply(id, REPLY_LIMIT)
                .ok_or_else(|| format!("{name}: no reply to open"))?;
            if reply.value.get("ok").is_none() {
                return Err(format!("{name}: open failed: {}", reply.value));
            }
        }
        self.note(format!("{} actors open", names.len()));
        if let Some(turn) = self.ctx.turn {
            turn.run();
            self.note("the timing cell's turn".to_string());
        }
        Ok(())
    }

    fn actor(&self, name: &str) -> Result<&Actor, String> {
        self.actors
            .get(name)
            .ok_or_else(|| format!("no actor {name:?} (in a cycle, or never declared)"))
    }

    fn vars(&self, i: Option<i64>) -> Vec<(String, String)> {
        let mut vars = vec![
            (
                "{backend}".to_string(),
                self.env.backend.detected().to_string(),
            ),
            ("{hostname}".into(), self.ctx.hostname.clone()),
            (
                "{old_library_version}".into(),
                self.ctx.old_library_version().to_string(),
            ),
            (
                "{new_library_version}".into(),
                self.ctx.new_library_version().to_string(),
            ),
        ];
        for (name, value) in self.ctx.protocol {
            vars.push((format!("{{{name}}}"), value.to_string()));
        }
        if let Some(i) = i {
            vars.push(("{i}".into(), i.to_string()));
            vars.push(("{i-1}".into(), (i - 1).to_string()));
        }
        vars
    }

    fn step(&mut self, step: &Value, i: Option<i64>) -> Result<(), String> {
        let step = substitute(step, &self.vars(i));
        let step = step.as_object().ok_or("a step is not an object")?.clone();
        let op = text(&step, "op")?;
        match op.as_str() {
            "open" | "acquire" | "release" | "extend" | "token" | "await_lost" | "cancel"
            | "info" | "check" | "guard" | "fence_postgres" | "close" | "campaign" | "resign"
            | "leader" | "observe" => self.request(&op, &step),
            "await_leaders" => self.await_leaders(&step),
            "data" => self.data(&step),
            "postgres" => self.postgres(&step),
            "await" => {
                let name = text(&step, "request")?;
                let reply = self.await_reply(&name, limit(&step, REPLY_LIMIT))?;
                self.expect_reply(&name, &step, &reply)
            }
            "await_event" => self.await_event(&step),
            "no_event" => self.no_event(&step),
            "sleep" => {
                let ms = Duration::from_millis(number(&step, "ms")?);
                // `from`: until that long after an instant (a reply, a mark), so that a
                // fault lands at a set time in a lock's life, whatever the steps
                // between took.
                let until = match step.get("from").and_then(Value::as_str) {
                    Some(from) => self.instant(from)? + ms,
                    None => Instant::now() + ms,
                };
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                Ok(())
            }
            "fault" => self.fault(&step),
            "server" => self.server(&step),
            "compare" => self.compare(&step),
            "before" => {
                // `if_acquired`: only when that request was granted (a wait that may
                // end with an error instead, whose answer orders nothing).
                if let Some(request) = step.get("if_acquired").and_then(Value::as_str) {
                    if self.reply_ok(request)?.get("acquired") != Some(&Value::Bool(true)) {
                        self.note(format!("{request} was not granted: no order to check"));
                        return Ok(());
                    }
                }
                let first = self.instant(&text(&step, "first")?)?;
                let then = self.instant(&text(&step, "then")?)?;
                if first >= then {
                    let gap = first.duration_since(then).as_millis();
                    let at = |i: Instant| i.saturating_duration_since(self.start).as_millis();
                    return Err(format!(
                        "{} came {gap} ms after {}, not before it (at {} and {} ms since the start)",
                        text(&step, "first")?,
                        text(&step, "then")?,
                        at(first),
                        at(then)
                    ));
                }
                let gap = then.duration_since(first).as_millis();
                self.note(format!(
                    "{} came {gap} ms before {}",
                    text(&step, "first")?,
                    text(&step, "then")?
                ));
                Ok(())
            }
            "elapsed" => self.elapsed(&step),
            "repeat" => {
                let range = step
                    .get("each")
                    .and_then(Value::as_array)
                    .ok_or("repeat needs each: [from, to]")?;
                let from = range
                    .first()
                    .and_then(Value::as_i64)
                    .ok_or("each: [from, to]")?;
                let to = range
                    .get(1)
                    .and_then(Value::as_i64)
                    .ok_or("each: [from, to]")?;
                let steps = step
                    .get("steps")
                    .and_then(Value::as_array)
                    .ok_or("repeat needs steps")?
                    .clone();
                for i in from..=to {
                    for inner in &steps {
                        self.step(inner, Some(i))?;
                    }
                }
                Ok(())
            }
            "cycle" => self.cycle(&step),
            "await_cycle" => self.await_cycle(&step),
            "constants" => {
                let wrong = self.ctx.hello.disagreements(self.ctx.protocol);
                if wrong.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "constants differ from conformance/protocol.json: {}",
                        wrong.join("; ")
                    ))
                }
            }
            other => Err(format!("unknown step op {other:?}")),
        }
    }

    fn request(&mut self, op: &str, step: &Step) -> Result<(), String> {
        let actor_name = text(step, "actor")?;
        let name = match step.get("name").and_then(Value::as_str) {
            Some(name) => name.to_string(),
            None => {
                self.unnamed += 1;
                format!("#{}", self.unnamed)
            }
        };
        let mut fields = Map::new();
        for (field, value) in step {
            match field.as_str() {
                "op" | "actor" | "name" | "background" | "expect" | "within_ms" => {}
                "key" | "resource" => {
                    let key = value.as_str().ok_or("a key is a string")?;
                    fields.insert(field.clone(), Value::String(self.env.key(key)));
                }
                "target" => {
                    let target = value.as_str().ok_or("target names a request")?;
                    let sent = self
                        .requests
                        .get(target)
                        .ok_or_else(|| format!("no request {target:?} to cancel"))?;
                    fields.insert("target".into(), Value::from(sent.id));
                }
                _ => {
                    fields.insert(field.clone(), value.clone());
                }
            }
        }
        if op == "observe" {
            // The observer's events name it.
            fields.insert("observer".into(), Value::String(name.clone()));
        }
        if op == "open" {
            let via = step.get("via").and_then(Value::as_str) == Some("proxy");
            let mut open = self.env.open_fields(via)?;
            for (k, v) in fields {
                open.insert(k, v);
            }
            fields = open;
        }
        let actor = self
            .actors
            .get_mut(&actor_name)
            .ok_or_else(|| format!("no actor {actor_name:?}"))?;
        let id = actor.send(op, &fields)?;
        self.note(format!(
            "{actor_name} <- {op} {name} {}",
            Value::Object(fields)
        ));
        self.requests.insert(
            name.clone(),
            Sent {
                actor: actor_name,
                id,
            },
        );
        if step.get("background").and_then(Value::as_bool) == Some(true) {
            return Ok(());
        }
        let reply = self.await_reply(&name, limit(step, REPLY_LIMIT))?;
        self.expect_reply(&name, step, &reply)
    }

    fn await_reply(&mut self, name: &str, within: Duration) -> Result<Received, String> {
        let sent = self
            .requests
            .get(name)
            .ok_or_else(|| format!("no request named {name:?}"))?;
        let actor = self.actor(&sent.actor)?;
        let reply = actor.reply(sent.id, within);
        let actor_name = sent.actor.clone();
        match reply {
            Some(reply) => {
                self.note(format!("{actor_name} -> {name} {}", reply.value));
                Ok(reply)
            }
            None if actor.ended() => Err(format!(
                "{actor_name}: the adapter exited before answering {name}; its log:\n{}",
                actor.log_tail(15)
            )),
            None => Err(format!(
                "{actor_name}: no reply to {name} within {within:?}"
            )),
        }
    }

    fn expect_reply(&mut self, name: &str, step: &Step, reply: &Received) -> Result<(), String> {
        let Some(expect) = step.get("expect") else {
            // No expectation: any reply but an error.
            if let Some(error) = reply.value.get("error") {
                return Err(format!("{name} failed: {error}"));
            }
            return Ok(());
        };
        let owner_pid = self
            .requests
            .get(name)
            .and_then(|sent| self.actors.get(&sent.actor))
            .map(Actor::pid);
        check(expect, &reply.value, self, owner_pid)
            .map_err(|e| format!("{name}: {e} (reply {})", reply.value))
    }

    fn await_event(&mut self, step: &Step) -> Result<(), String> {
        let actor_name = text(step, "actor")?;
        let lock = text(step, "lock")?;
        let kind = step
            .get("event")
            .and_then(Value::as_str)
            .unwrap_or("lost")
            .to_string();
        let within = limit(step, REPLY_LIMIT);
        let actor = self.actor(&actor_name)?;
        let event = actor
            .event(within, |e| {
                e.get("event").and_then(Value::as_str) == Some(kind.as_str())
                    && e.get("lock").and_then(Value::as_str) == Some(lock.as_str())
            })
            .ok_or_else(|| format!("{actor_name}: no {kind} event for {lock} within {within:?}"))?;
        self.note(format!("{actor_name} event {}", event.value));
        if let Some(name) = step.get("name").and_then(Value::as_str) {
            self.marks.insert(name.to_string(), event.at);
        }
        if let Some(expect) = step.get("expect") {
            check(expect, &event.value, self, None)
                .map_err(|e| format!("{kind} event of {lock}: {e} ({})", event.value))?;
        }
        Ok(())
    }

    /// An observer's `leader` events: once there are as many as `leaders` names
    /// requests (campaigns), their terms must be those requests' tokens, in that
    /// order, each once; and no other comes within `quiet_ms` (default 300) after.
    fn await_leaders(&mut self, step: &Step) -> Result<(), String> {
        let actor_name = text(step, "actor")?;
        let observer = text(step, "observer")?;
        let names: Vec<String> = step
            .get("leaders")
            .and_then(Value::as_array)
            .ok_or("await_leaders needs leaders: [request names]")?
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        let mut want = Vec::new();
        for name in &names {
            want.push(self.reply_field(name, "token")?);
        }
        let within = limit(step, REPLY_LIMIT);
        let quiet =
            Duration::from_millis(step.get("quiet_ms").and_then(Value::as_u64).unwrap_or(300));
        let seen = |actor: &Actor| -> Vec<Value> {
            actor
                .events()
                .into_iter()
                .map(|e| e.value)
                .filter(|e| {
                    e.get("event").and_then(Value::as_str) == Some("leader")
                        && e.get("observer").and_then(Value::as_str) == Some(observer.as_str())
                })
                .collect()
        };
        let deadline = Instant::now() + within;
        let actor = self.actor(&actor_name)?;
        while seen(actor).len() < want.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(quiet);
        let events = seen(actor);
        let terms: Vec<String> = events
            .iter()
            .map(|e| {
                e.get("term")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string()
            })
            .collect();
        if terms != want {
            return Err(format!(
                "{observer} saw the terms {terms:?}, expected those of {names:?}: {want:?}"
            ));
        }
        self.note(format!("{observer} saw {} leaders in order", terms.len()));
        Ok(())
    }

    fn no_event(&mut self, step: &Step) -> Result<(), String> {
        let actor_name = text(step, "actor")?;
        let lock = text(step, "lock")?;
        std::thread::sleep(Duration::from_millis(number(step, "for_ms")?));
        let actor = self.actor(&actor_name)?;
        let events = actor.events();
        if let Some(event) = events
            .iter()
            .find(|e| e.value.get("lock").and_then(Value::as_str) == Some(lock.as_str()))
        {
            return Err(format!("{actor_name}: unexpected event {}", event.value));
        }
        Ok(())
    }

    fn fault(&mut self, step: &Step) -> Result<(), String> {
        let fault = text(step, "fault")?;
        if fault == "pause_actor" || fault == "resume_actor" {
            let name = text(step, "actor")?;
            let actor = self.actor(&name)?;
            let at = Instant::now();
            let pausing = fault == "pause_actor";
            actor.signal(if pausing { "-STOP" } else { "-CONT" });
            // Acted: the process is stopped (state T), or runs again.
            let deadline = Instant::now() + Duration::from_secs(2);
            while actor.stopped() != pausing {
                if Instant::now() >= deadline {
                    return Err(format!("the fault {fault} did not act on {name}"));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            self.note(format!("fault: {fault} {name}"));
            if let Some(mark) = step.get("name").and_then(Value::as_str) {
                self.marks.insert(mark.to_string(), at);
            }
            return Ok(());
        }
        if fault == "kill_actor" {
            let name = text(step, "actor")?;
            let actor = self
                .actors
                .get_mut(&name)
                .ok_or_else(|| format!("no actor {name:?}"))?;
            actor.kill();
            if !actor.exited() {
                return Err(format!(
                    "the fault kill_actor did not act: {name} still runs"
                ));
            }
            self.note(format!("fault: SIGKILL {name}"));
            return Ok(());
        }
        let key = step
            .get("key")
            .and_then(Value::as_str)
            .map(|k| self.env.key(k));
        let versions = crate::env::Versions {
            old: self.ctx.old_library_version(),
            new: self.ctx.new_library_version(),
        };
        // The mark is the moment before the fault: anything stamped before it came
        // before the fault could have any effect.
        let at = Instant::now();
        let ms = step.get("ms").and_then(Value::as_u64);
        self.env.fault(&fault, key.as_deref(), ms, versions)?;
        self.note(format!("fault: {fault}"));
        if let Some(name) = step.get("name").and_then(Value::as_str) {
            self.marks.insert(name.to_string(), at);
        }
        Ok(())
    }

    /// A data key's value as the server has it (GET on the harness's connection):
    /// `expect` a string, or null for none.
    fn data(&mut self, step: &Step) -> Result<(), String> {
        let key = self.env.key(&text(step, "key")?);
        let found = self.env.get(&key)?;
        let want = step.get("expect").cloned().unwrap_or(Value::Null);
        let found_value = found.clone().map_or(Value::Null, Value::String);
        if found_value != want {
            return Err(format!("data {key}: {found_value}, expected {want}"));
        }
        self.note(format!("data: {key} = {found_value}"));
        Ok(())
    }

    /// A resource's value as PostgreSQL has it (the table the adapters' fenced
    /// writes go to): `expect` a string, or null for no row.
    fn postgres(&mut self, step: &Step) -> Result<(), String> {
        let resource = self.env.key(&text(step, "resource")?);
        let pg = self.ctx.postgres.ok_or("no PostgreSQL for the run")?;
        let quoted = resource.replace('\'', "''");
        let found = pg.sql(&format!(
            "SELECT value FROM {} WHERE resource = '{quoted}'",
            crate::env::WRITES_TABLE
        ))?;
        let found_value = if found.is_empty() {
            Value::Null
        } else {
            Value::String(found)
        };
        let want = step.get("expect").cloned().unwrap_or(Value::Null);
        if found_value != want {
            return Err(format!(
                "postgres {resource}: {found_value}, expected {want}"
            ));
        }
        self.note(format!("postgres: {resource} = {found_value}"));
        Ok(())
    }

    /// Polls the server until `expect` holds (or `within_ms` passes: at once without
    /// it), and marks the moment under `name`.
    fn server(&mut self, step: &Step) -> Result<(), String> {
        let key = self.env.key(&text(step, "key")?);
        let expect = step
            .get("expect")
            .and_then(Value::as_object)
            .ok_or("a server step needs expect")?
            .clone();
        let within = limit(step, Duration::ZERO);
        let deadline = Instant::now() + within;
        loop {
            let found = self.server_state(&key, &expect);
            match found {
                Ok(()) => {
                    self.note(format!("server: {key} {}", Value::Object(expect.clone())));
                    if let Some(name) = step.get("name").and_then(Value::as_str) {
                        self.marks.insert(name.to_string(), Instant::now());
                    }
                    return Ok(());
                }
                Err(why) if Instant::now() >= deadline => {
                    return Err(format!("server, {key}: {why} (within {within:?})"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    fn server_state(&self, key: &str, expect: &Map<String, Value>) -> Result<(), String> {
        let info = self.env.info(key)?;
        let holders = info.as_ref().map_or(0, |i| i.holders.len() as i64);
        let waiters = info.as_ref().map_or(0, |i| i.waiters);
        for (field, want) in expect {
            match field.as_str() {
                "free" => {
                    let free = info.is_none();
                    if Some(free) != want.as_bool() {
                        return Err(format!("free is {free}: {info:?}"));
                    }
                }
                "holders" => {
                    if Some(holders) != integer(want) {
                        return Err(format!("{holders} holders: {info:?}"));
                    }
                }
                "waiters" => {
                    if Some(waiters) != integer(want) {
                        return Err(format!("{waiters} waiters: {info:?}"));
                    }
                }
                "waiters_at_least" => {
                    if waiters < integer(want).unwrap_or(0) {
                        return Err(format!("{waiters} waiters: {info:?}"));
                    }
                }
                "held_by" => {
                    let request = want.as_str().ok_or("held_by names a request")?;
                    let owner = self.reply_field(request, "owner")?;
                    let holds = info
                        .as_ref()
                        .is_some_and(|i| i.holders.iter().any(|(o, _)| *o == owner));
                    if !holds {
                        return Err(format!("not held by {request}'s owner {owner}: {info:?}"));
                    }
                }
                "not_held_by" => {
                    let request = want.as_str().ok_or("not_held_by names a request")?;
                    let owner = self.reply_field(request, "owner")?;
                    let holds = info
                        .as_ref()
                        .is_some_and(|i| i.holders.iter().any(|(o, _)| *o == owner));
                    if holds {
                        return Err(format!("still held by {request}'s owner {owner}: {info:?}"));
                    }
                }
                "free_unless_granted" => {
                    // A request that may have been granted or not (a cancel that
                    // crossed a grant): granted, its owner holds the lock; not
                    // granted, nobody does.
                    let request = want.as_str().ok_or("free_unless_granted names a request")?;
                    let granted =
                        self.reply_ok(request)?.get("acquired") == Some(&Value::Bool(true));
                    if granted {
                        let owner = self.reply_field(request, "owner")?;
                        let holds = info
                            .as_ref()
                            .is_some_and(|i| i.holders.iter().any(|(o, _)| *o == owner));
                        if !holds {
                            return Err(format!(
                                "{request} was granted, but its owner {owner} does not hold it: {info:?}"
                            ));
                        }
                    } else if info.is_some() {
                        return Err(format!(
                            "{request} was not granted, and the lock is not free: {info:?}"
                        ));
                    }
                }
                "no_leftovers" => {
                    let left = self.env.leftovers(key)?;
                    if want.as_bool() == Some(true) && !left.is_empty() {
                        return Err(format!("left in the server: {}", left.join(", ")));
                    }
                }
                other => return Err(format!("unknown server expectation {other:?}")),
            }
        }
        Ok(())
    }

    /// A request's `ok` reply (`null` for an error reply).
    fn reply_ok(&self, request: &str) -> Result<Value, String> {
        let sent = self
            .requests
            .get(request)
            .ok_or_else(|| format!("no request {request:?}"))?;
        let reply = self
            .actor(&sent.actor)?
            .reply_now(sent.id)
            .ok_or_else(|| format!("{request} has no reply yet"))?;
        Ok(reply.value.get("ok").cloned().unwrap_or(Value::Null))
    }

    /// A field of a request's `ok` reply, as text.
    fn reply_field(&self, request: &str, field: &str) -> Result<String, String> {
        let sent = self
            .requests
            .get(request)
            .ok_or_else(|| format!("no request {request:?}"))?;
        let reply = self
            .actor(&sent.actor)?
            .reply_now(sent.id)
            .ok_or_else(|| format!("{request} has no reply yet"))?;
        reply
            .value
            .get("ok")
            .and_then(|ok| ok.get(field))
            .and_then(|v| v.as_str().map(str::to_string))
            .ok_or_else(|| format!("{request}'s reply has no {field}: {}", reply.value))
    }

    fn compare(&mut self, step: &Step) -> Result<(), String> {
        let is = text(step, "is")?;
        let names: Vec<String> = match step.get("tokens").and_then(Value::as_array) {
            Some(list) => list
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            None => vec![text(step, "a")?, text(step, "b")?],
        };
        let field = step.get("field").and_then(Value::as_str).unwrap_or("token");
        let mut values = Vec::new();
        for name in &names {
            let text = self.reply_field(name, field)?;
            // Tokens compare as numbers (decimal strings up to 2^62), the rest as text.
            let number = if field == "token" {
                Some(
                    text.parse::<u128>()
                        .map_err(|_| format!("{name}'s token {text:?} is not a decimal string"))?,
                )
            } else {
                None
            };
            values.push((name.clone(), number, text));
        }
        for pair in values.windows(2) {
            let ((a, x, xs), (b, y, ys)) = (&pair[0], &pair[1]);
            let holds = match is.as_str() {
                "less" | "increasing" => x.is_some() && x < y,
                "equal" => xs == ys,
                "distinct" => xs != ys,
                other => return Err(format!("unknown comparison {other:?}")),
            };
            if !holds {
                return Err(format!("{field}: {a} = {xs}, {b} = {ys}: not {is}"));
            }
        }
        let shown: Vec<String> = values.iter().map(|(n, _, t)| format!("{n}={t}")).collect();
        self.note(format!("{field} {is}: {}", shown.join(", ")));
        Ok(())
    }

    /// An instant by name: a request's reply (`name`) or send (`name.sent`), or a mark.
    fn instant(&self, name: &str) -> Result<Instant, String> {
        if let Some(at) = self.marks.get(name) {
            return Ok(*at);
        }
        let (request, sent) = match name.strip_suffix(".sent") {
            Some(request) => (request, true),
            None => (name, false),
        };
        let found = self
            .requests
            .get(request)
            .ok_or_else(|| format!("no request or mark named {name:?}"))?;
        let actor = self.actor(&found.actor)?;
        if sent {
            return actor
                .sent
                .get(&found.id)
                .copied()
                .ok_or_else(|| format!("{request} was not sent"));
        }
        actor
            .reply_now(found.id)
            .map(|r| r.at)
            .ok_or_else(|| format!("{request} has no reply"))
    }

    fn elapsed(&mut self, step: &Step) -> Result<(), String> {
        let from = text(step, "from")?;
        let to = text(step, "to")?;
        let took = self
            .instant(&to)?
            .saturating_duration_since(self.instant(&from)?);
        let ms = took.as_millis() as i64;
        if let Some(min) = step.get("min_ms") {
            let min = self.amount(min)?;
            if ms < min {
                return Err(format!("{from} to {to}: {ms} ms, less than {min} ms"));
            }
        }
        if let Some(max) = step.get("max_ms") {
            let max = self.amount(max)?;
            if ms > max {
                return Err(format!("{from} to {to}: {ms} ms, more than {max} ms"));
            }
        }
        self.note(format!("{from} to {to}: {ms} ms"));
        Ok(())
    }

    /// A number of ms: an integer, or a sum of integers and protocol.json names.
    fn amount(&self, value: &Value) -> Result<i64, String> {
        if let Some(n) = value.as_i64() {
            return Ok(n);
        }
        let text = value.as_str().ok_or("a time is a number or a sum")?;
        let mut sum = 0;
        for term in text.split('+').map(str::trim) {
            sum += match term.parse::<i64>() {
                Ok(n) => n,
                Err(_) => self
                    .ctx
                    .constant(term)
                    .ok_or_else(|| format!("unknown constant {term:?}"))?,
            };
        }
        Ok(sum)
    }

    fn cycle(&mut self, step: &Step) -> Result<(), String> {
        let spec: CycleSpec = serde_json::from_value(Value::Object(step.clone()))
            .map_err(|e| format!("cycle: {e}"))?;
        let mut actors = Vec::new();
        for name in cycle::expand(&spec.actors)? {
            let actor = self
                .actors
                .remove(&name)
                .ok_or_else(|| format!("no actor {name:?} for the cycle"))?;
            actors.push(actor);
        }
        let key = self.env.key(&spec.key);
        let sampler = self.env.admin(&key)?;
        let name = spec.name.clone();
        let background = spec.background;
        let cycle = Cycle::start(spec, key, actors, sampler, self.env.backend);
        self.note(format!("cycle {name} started"));
        self.cycles.insert(name.clone(), cycle);
        if !background {
            let mut step = step.clone();
            step.insert("name".into(), Value::String(name));
            return self.await_cycle(&step);
        }
        Ok(())
    }

    fn await_cycle(&mut self, step: &Step) -> Result<(), String> {
        let name = text(step, "name")?;
        let cycle = self
            .cycles
            .remove(&name)
            .ok_or_else(|| format!("no cycle {name:?}"))?;
        let (actors, result) = cycle.join(limit(step, Duration::from_secs(60)));
        for actor in actors {
            self.actors.insert(actor.name.clone(), actor);
        }
        let record = result?;
        self.note(format!(
            "cycle {name}: {} grants, at most {} at once seen by the clients, {} in the server",
            record.rounds.len(),
            record.max_overlap(),
            record.server_max
        ));
        let expect = step
            .get("expect")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (field, want) in &expect {
            match field.as_str() {
                "max_overlap" => {
                    let seen = record.max_overlap();
                    if seen as i64 > want.as_i64().unwrap_or(0) {
                        return Err(format!(
                            "{seen} holders at once (the clients' own intervals): {}",
                            record.describe_overlap()
                        ));
                    }
                }
                "server_max_holders" => {
                    if record.server_max > want.as_i64().unwrap_or(0) {
                        return Err(format!(
                            "the server showed {} holders at once",
                            record.server_max
                        ));
                    }
                }
                "server_reached" => {
                    if record.server_max < want.as_i64().unwrap_or(0) {
                        return Err(format!(
                            "the server never showed more than {} holders",
                            record.server_max
                        ));
                    }
                }
                "outside" => {
                    let from = self.instant(
                        want.get("from")
                            .and_then(Value::as_str)
                            .ok_or("outside.from")?,
                    )?;
                    let to =
                        self.instant(want.get("to").and_then(Value::as_str).ok_or("outside.to")?)?;
                    if let Some(inside) = record.overlapping(from, to) {
                        return Err(format!(
                            "a grant of the cycle overlaps the interval: {inside}"
                        ));
                    }
                }
                "none_asked_after_granted_before" => {
                    let after =
                        self.instant(want.get("after").and_then(Value::as_str).ok_or("after")?)?;
                    let before =
                        self.instant(want.get("before").and_then(Value::as_str).ok_or("before")?)?;
                    if let Some(jumped) = record.asked_after_granted_before(after, before) {
                        return Err(format!("a request that came after the queued one was granted before it: {jumped}"));
                    }
                }
                "errors" => {
                    if !record.errors.is_empty() {
                        return Err(format!("cycle errors: {}", record.errors.join("; ")));
                    }
                }
                other => return Err(format!("unknown cycle expectation {other:?}")),
            }
        }
        if !record.errors.is_empty() {
            return Err(format!("cycle errors: {}", record.errors.join("; ")));
        }
        Ok(())
    }
}

/// `expect` against a reply or an event.
fn check(expect: &Value, value: &Value, run: &Run<'_>, pid: Option<u32>) -> Result<(), String> {
    let expect = expect.as_object().ok_or("expect is an object")?;
    if let Some(options) = expect.get("one_of").and_then(Value::as_array) {
        let mut why = Vec::new();
        for option in options {
            match check(option, value, run, pid) {
                Ok(()) => return Ok(()),
                Err(e) => why.push(e),
            }
        }
        return Err(format!(
            "none of the accepted outcomes: {}",
            why.join(" | ")
        ));
    }
    let is_event = value.get("event").is_some();
    let ok = value.get("ok");
    let error = value.get("error");
    if let Some(kinds) = expect.get("error") {
        let Some(error) = error else {
            return Err("expected an error".into());
        };
        let kind = error.get("kind").and_then(Value::as_str).unwrap_or("");
        let accepted: Vec<&str> = match kinds {
            Value::String(k) => vec![k.as_str()],
            Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !accepted.is_empty() && !accepted.contains(&kind) {
            return Err(format!("error kind {kind:?}, expected {accepted:?}"));
        }
    } else if !is_event && ok.is_none() {
        return Err(format!(
            "expected success, got {}",
            error.cloned().unwrap_or_default()
        ));
    }
    if let Some(words) = expect.get("message_contains").and_then(Value::as_array) {
        let message = error
            .and_then(|e| e.get("message"))
            .or_else(|| value.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_lowercase();
        for word in words.iter().filter_map(Value::as_str) {
            if !message.contains(&word.to_lowercase()) {
                return Err(format!("the message does not say {word:?}"));
            }
        }
    }
    let fields = if is_event { Some(value) } else { ok };
    for (field, want) in expect {
        match field.as_str() {
            "error" | "message_contains" | "one_of" => {}
            "cause" => {
                let cause = value.get("cause").and_then(Value::as_str).unwrap_or("");
                let mut accepted: Vec<&str> = match want {
                    Value::String(c) => vec![c.as_str()],
                    Value::Array(list) => list.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if !run.ctx.hello.capabilities.contains("loss_cause") {
                    accepted.push("unknown");
                }
                if !accepted.contains(&cause) {
                    return Err(format!("cause {cause:?}, expected {accepted:?}"));
                }
            }
            "owner" if want.as_str() == Some("default") => {
                let owner = fields
                    .and_then(|f| f.get("owner"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let pid = pid.ok_or("no adapter pid")?;
                default_owner(owner, &run.ctx.hostname, pid)?;
            }
            "leader_of" => {
                // The leader the reply names is the one that request campaigned as.
                let request = want.as_str().ok_or("leader_of names a request")?;
                let term = run.reply_field(request, "token")?;
                let leader = fields.and_then(|f| f.get("leader"));
                let got = leader.and_then(|l| l.get("term")).and_then(Value::as_str);
                if got != Some(term.as_str()) {
                    return Err(format!(
                        "leader {leader:?}, expected the term of {request} ({term})"
                    ));
                }
            }
            "token" if want.as_str() == Some("present") => {
                let token = fields.and_then(|f| f.get("token"));
                match token {
                    Some(Value::String(t))
                        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => {}
                    other => return Err(format!("token {other:?} is not a decimal string")),
                }
            }
            _ => {
                let got = fields.and_then(|f| f.get(field));
                if got != Some(want) {
                    return Err(format!(
                        "{field} is {}, expected {want}",
                        got.cloned().unwrap_or(Value::Null)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `host:pid:` and 16 lower-case hex digits (contract.md "Commands": default owners
/// say who holds).
fn default_owner(owner: &str, hostname: &str, pid: u32) -> Result<(), String> {
    let host: String = hostname.chars().take(64).collect();
    let prefix = format!("{host}:{pid}:");
    let random = owner
        .strip_prefix(&prefix)
        .ok_or_else(|| format!("owner {owner:?} does not start with {prefix:?}"))?;
    if random.len() != 16
        || !random
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(format!(
            "owner {owner:?}: {random:?} is not 16 lower-case hex digits"
        ));
    }
    Ok(())
}

fn substitute(value: &Value, vars: &[(String, String)]) -> Value {
    match value {
        Value::String(s) => {
            let mut s = s.clone();
            for (name, replacement) in vars {
                s = s.replace(name, replacement);
            }
            Value::String(s)
        }
        Value::Array(items) => {
            // A repeat's inner steps keep their {i} for their own expansion.
            Value::Array(items.iter().map(|v| substitute(v, vars)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    if k == "steps" {
                        (k.clone(), v.clone())
                    } else {
                        (k.clone(), substitute(v, vars))
                    }
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A number, or a number written as text (after a `{i}` was substituted).
fn integer(value: &Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_str().and_then(|s| s.trim().parse().ok()))
}

fn text(step: &Step, field: &str) -> Result<String, String> {
    step.get(field)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("the step needs {field}: {}", Value::Object(step.clone())))
}

fn number(step: &Step, field: &str) -> Result<u64, String> {
    step.get(field)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("the step needs {field} (ms)"))
}

/// `within_ms`: a number, or a sum of numbers (`"{release_limit_ms} + 500"` once
/// the constants are substituted).
fn limit(step: &Step, default: Duration) -> Duration {
    let ms = match step.get("within_ms") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(sum)) => sum
            .split('+')
            .map(|term| term.trim().parse::<u64>().ok())
            .sum::<Option<u64>>(),
        _ => None,
    };
    ms.map_or(default, Duration::from_millis)
}

/// The capabilities `scenario` needs on `backend` that `hello` lacks.
pub fn missing(scenario: &Scenario, backend: Backend, hello: &Hello) -> Vec<String> {
    let mut needed: BTreeSet<&str> = scenario.requires.iter().map(String::as_str).collect();
    needed.extend(backend.needs());
    needed
        .into_iter()
        .filter(|c| !hello.capabilities.contains(*c))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenarios() -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
            .collect();
        paths.sort();
        paths
    }

    #[test]
    fn every_scenario_loads_and_is_named_after_its_file() {
        let paths = scenarios();
        assert!(paths.len() >= 20, "{paths:?}");
        for path in paths {
            let scenario = Scenario::load(&path).unwrap();
            assert_eq!(
                Some(scenario.name.as_str()),
                path.file_stem().and_then(|s| s.to_str())
            );
            assert!(!scenario.description.is_empty(), "{}", scenario.name);
        }
    }

    #[test]
    fn a_step_of_an_unknown_op_or_without_its_fields_is_refused() {
        let step = |v: Value| validate_steps(&[v]);
        assert!(step(serde_json::json!({"op": "acquire", "actor": "a"})).is_ok());
        assert!(step(serde_json::json!({"op": "acquire"})).is_err());
        assert!(step(serde_json::json!({"op": "fly"})).is_err());
        assert!(step(
            serde_json::json!({"op": "repeat", "each": [1, 2], "steps": [{"op": "sleep"}]})
        )
        .is_err());
    }

    #[test]
    fn a_default_owner_is_host_pid_and_16_hex_digits() {
        assert!(default_owner("vm:42:0123456789abcdef", "vm", 42).is_ok());
        assert!(default_owner("vm:43:0123456789abcdef", "vm", 42).is_err());
        assert!(default_owner("vm:42:0123456789ABCDEF", "vm", 42).is_err());
        assert!(default_owner("vm:42:0123456789abcdef0", "vm", 42).is_err());
        assert!(default_owner("0b8a5f6e-uuid", "vm", 42).is_err());
    }
}
