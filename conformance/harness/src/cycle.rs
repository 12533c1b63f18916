//! A workload of several actors: each acquires (waiting), holds for a while, releases,
//! round after round, while the harness samples the server. Each holding's interval
//! as the harness sees it, from the grant's arrival to the moment the release was
//! sent, lies inside the holding's true interval in the server (the grant came
//! before its reply, the release runs after it is sent), so two intervals seen here
//! that overlap overlapped in the server too: the checks need no timing slack.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::Connection;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::actor::Actor;
use crate::env::{lock_info, Backend};

#[derive(Debug, Clone, Deserialize)]
pub struct CycleSpec {
    pub name: String,
    /// `"w1..w10"`, or a list of names.
    pub actors: Value,
    pub key: String,
    pub ttl_ms: u64,
    #[serde(default = "exclusive")]
    pub kind: String,
    #[serde(default)]
    pub limit: Option<u64>,
    pub hold_ms: u64,
    pub rounds: u32,
    /// Between a release's answer and the next acquire.
    #[serde(default)]
    pub pause_ms: u64,
    /// Actor `n` (from 0) starts `n` times this later, so that holdings overlap in a
    /// chain rather than in step.
    #[serde(default)]
    pub stagger_ms: u64,
    #[serde(default)]
    pub background: bool,
}

fn exclusive() -> String {
    "exclusive".into()
}

/// `"w1..w10"` or `["a", "b"]` as names.
pub fn expand(actors: &Value) -> Result<Vec<String>, String> {
    if let Some(list) = actors.as_array() {
        return Ok(list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect());
    }
    let text = actors.as_str().ok_or("actors: a list or \"w1..w10\"")?;
    let Some((first, last)) = text.split_once("..") else {
        return Ok(vec![text.to_string()]);
    };
    let prefix: String = first.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let from: u32 = first[prefix.len()..]
        .parse()
        .map_err(|_| format!("bad range {text}"))?;
    let to: u32 = last
        .trim_start_matches(prefix.as_str())
        .parse()
        .map_err(|_| format!("bad range {text}"))?;
    Ok((from..=to).map(|i| format!("{prefix}{i}")).collect())
}

/// One holding of the workload, as seen here.
#[derive(Debug, Clone)]
pub struct Round {
    pub actor: String,
    pub asked: Instant,
    pub granted: Instant,
    pub token: String,
    pub release_sent: Instant,
}

#[derive(Debug, Default)]
pub struct Record {
    pub rounds: Vec<Round>,
    pub server_max: i64,
    pub errors: Vec<String>,
    start: Option<Instant>,
}

impl Record {
    /// The most holdings at once, from the intervals seen here.
    pub fn max_overlap(&self) -> usize {
        self.peak().0
    }

    fn peak(&self) -> (usize, Option<Instant>) {
        // A grant at the very instant of a release counts as overlapping it.
        let mut points: Vec<(Instant, i32)> = Vec::new();
        for round in &self.rounds {
            points.push((round.granted, 1));
            points.push((round.release_sent, -1));
        }
        points.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let (mut now, mut best, mut at) = (0i32, 0i32, None);
        for (instant, step) in points {
            now += step;
            if now > best {
                best = now;
                at = Some(instant);
            }
        }
        (usize::try_from(best).unwrap_or(0), at)
    }

    pub fn describe_overlap(&self) -> String {
        let (_, Some(at)) = self.peak() else {
            return String::new();
        };
        let start = self.start.unwrap_or(at);
        let ms = |i: Instant| i.saturating_duration_since(start).as_millis();
        self.rounds
            .iter()
            .filter(|r| r.granted <= at && at <= r.release_sent)
            .map(|r| {
                format!(
                    "{} held {}..{} ms (token {})",
                    r.actor,
                    ms(r.granted),
                    ms(r.release_sent),
                    r.token
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A holding that overlaps `[from, to]`.
    pub fn overlapping(&self, from: Instant, to: Instant) -> Option<String> {
        self.rounds
            .iter()
            .find(|r| r.granted <= to && from <= r.release_sent)
            .map(|r| format!("{} (token {})", r.actor, r.token))
    }

    /// A request sent after `after` and granted before `before`.
    pub fn asked_after_granted_before(&self, after: Instant, before: Instant) -> Option<String> {
        self.rounds
            .iter()
            .find(|r| r.asked > after && r.granted < before)
            .map(|r| format!("{} (token {})", r.actor, r.token))
    }
}

pub struct Cycle {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Vec<Actor>, Record)>,
}

enum State {
    Ask,
    Asked(u64),
    Holding {
        asked: Instant,
        granted: Instant,
        token: String,
        until: Instant,
    },
    Releasing {
        round: Round,
        id: u64,
    },
    Pausing(Instant),
    Done,
}

impl Cycle {
    pub fn start(
        spec: CycleSpec,
        key: String,
        actors: Vec<Actor>,
        sampler: Connection,
        backend: Backend,
    ) -> Cycle {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let handle =
            std::thread::spawn(move || drive(&spec, &key, actors, sampler, backend, &stopping));
        Cycle { stop, handle }
    }

    /// Waits up to `limit` for every round to end; the actors back, and the record
    /// (an error if the rounds did not end in time).
    pub fn join(self, limit: Duration) -> (Vec<Actor>, Result<Record, String>) {
        let deadline = Instant::now() + limit;
        while !self.handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let timed_out = !self.handle.is_finished();
        self.stop.store(true, Ordering::SeqCst);
        match self.handle.join() {
            Ok((actors, record)) if timed_out => {
                let done = record.rounds.len();
                (
                    actors,
                    Err(format!(
                        "the cycle did not end within {limit:?} ({done} grants; {})",
                        record.errors.join("; ")
                    )),
                )
            }
            Ok((actors, record)) => (actors, Ok(record)),
            Err(_) => (Vec::new(), Err("the cycle's thread panicked".into())),
        }
    }

    /// Stops it now; the actors back.
    pub fn stop(self) -> Vec<Actor> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .join()
            .map(|(actors, _)| actors)
            .unwrap_or_default()
    }
}

fn drive(
    spec: &CycleSpec,
    key: &str,
    mut actors: Vec<Actor>,
    mut sampler: Connection,
    backend: Backend,
    stop: &AtomicBool,
) -> (Vec<Actor>, Record) {
    let mut record = Record {
        start: Some(Instant::now()),
        ..Record::default()
    };
    let start = Instant::now();
    let mut states: Vec<(State, u32, Instant)> = (0..actors.len())
        .map(|n| {
            let offset = Duration::from_millis(spec.stagger_ms.saturating_mul(n as u64));
            (State::Pausing(start + offset), 0, start)
        })
        .collect();
    let mut next_sample = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let mut all_done = true;
        for (actor, (state, round, asked_at)) in actors.iter_mut().zip(states.iter_mut()) {
            let next = match std::mem::replace(state, State::Done) {
                State::Ask => match actor.send("acquire", &acquire_fields(spec, key, *round)) {
                    Ok(id) => {
                        *asked_at = actor.sent.get(&id).copied().unwrap_or_else(Instant::now);
                        State::Asked(id)
                    }
                    Err(e) => {
                        record.errors.push(format!("{}: {e}", actor.name));
                        State::Done
                    }
                },
                State::Asked(id) => match actor.reply_now(id) {
                    None => State::Asked(id),
                    Some(reply) => {
                        let ok = reply.value.get("ok");
                        let token = ok.and_then(|o| o.get("token")).and_then(Value::as_str);
                        match (
                            ok.and_then(|o| o.get("acquired")).and_then(Value::as_bool),
                            token,
                        ) {
                            (Some(true), Some(token)) => State::Holding {
                                asked: *asked_at,
                                granted: reply.at,
                                token: token.to_string(),
                                until: Instant::now() + Duration::from_millis(spec.hold_ms),
                            },
                            _ => {
                                record.errors.push(format!(
                                    "{}: acquire answered {}",
                                    actor.name, reply.value
                                ));
                                State::Done
                            }
                        }
                    }
                },
                State::Holding {
                    asked,
                    granted,
                    token,
                    until,
                } if Instant::now() >= until => {
                    let lock = json!(format!("c{round}"));
                    let mut fields = Map::new();
                    fields.insert("lock".into(), lock);
                    match actor.send("release", &fields) {
                        Ok(id) => {
                            let release_sent =
                                actor.sent.get(&id).copied().unwrap_or_else(Instant::now);
                            State::Releasing {
                                round: Round {
                                    actor: actor.name.clone(),
                                    asked,
                                    granted,
                                    token,
                                    release_sent,
                                },
                                id,
                            }
                        }
                        Err(e) => {
                            record.errors.push(format!("{}: {e}", actor.name));
                            State::Done
                        }
                    }
                }
                holding @ State::Holding { .. } => holding,
                State::Releasing { round: held, id } => match actor.reply_now(id) {
                    None => State::Releasing { round: held, id },
                    Some(reply) => {
                        if reply.value.pointer("/ok/released") != Some(&Value::Bool(true)) {
                            record
                                .errors
                                .push(format!("{}: release answered {}", actor.name, reply.value));
                        }
                        record.rounds.push(held);
                        *round += 1;
                        if *round >= spec.rounds {
                            State::Done
                        } else {
                            State::Pausing(Instant::now() + Duration::from_millis(spec.pause_ms))
                        }
                    }
                },
                State::Pausing(until) if Instant::now() >= until => State::Ask,
                pausing @ State::Pausing(_) => pausing,
                State::Done => State::Done,
            };
            if !matches!(next, State::Done) {
                all_done = false;
            }
            *state = next;
        }
        if Instant::now() >= next_sample {
            if let Ok(Some(info)) = lock_info(backend, &mut sampler, key) {
                record.server_max = record.server_max.max(info.holders.len() as i64);
            }
            next_sample = Instant::now() + Duration::from_millis(15);
        }
        if all_done {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    (actors, record)
}

fn acquire_fields(spec: &CycleSpec, key: &str, round: u32) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("lock".into(), json!(format!("c{round}")));
    fields.insert("key".into(), json!(key));
    fields.insert("ttl_ms".into(), json!(spec.ttl_ms));
    fields.insert("kind".into(), json!(spec.kind));
    if let Some(limit) = spec.limit {
        fields.insert("limit".into(), json!(limit));
    }
    fields.insert("wait".into(), json!("forever"));
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(granted: u64, released: u64, start: Instant) -> Round {
        Round {
            actor: "a".into(),
            asked: start,
            granted: start + Duration::from_millis(granted),
            token: "1".into(),
            release_sent: start + Duration::from_millis(released),
        }
    }

    #[test]
    fn holdings_that_touch_count_as_overlapping_and_those_apart_do_not() {
        let start = Instant::now();
        let record = Record {
            rounds: vec![
                round(0, 10, start),
                round(10, 20, start),
                round(21, 30, start),
            ],
            ..Record::default()
        };
        assert_eq!(record.max_overlap(), 2);
        let apart = Record {
            rounds: vec![round(0, 10, start), round(11, 20, start)],
            ..Record::default()
        };
        assert_eq!(apart.max_overlap(), 1);
    }

    #[test]
    fn actor_ranges_expand() {
        assert_eq!(
            expand(&serde_json::json!("w1..w3")).unwrap(),
            ["w1", "w2", "w3"]
        );
        assert_eq!(expand(&serde_json::json!(["a", "b"])).unwrap(), ["a", "b"]);
    }
}
