//! What a mode leaves behind, one line per event, and how it is read back.
//!
//! Each worker appends to its own file, writing each line before its next step:
//! - `ASK key t`: an acquire with `WAIT` is about to be sent;
//! - `GRANT key owner token node sent reply ttl_ms lease_end`: granted by node `node`
//!   (its index), sent at `sent`, reply received at `reply`; the client's lease
//!   ends at `lease_end` (the server keeps the lock at least that long);
//! - `NONE key t`: the wait ended without the lock; `ERROR key t kind`: the acquire
//!   failed (`kind` is one word: `not-replicated`, `readonly`, `noreplicas`,
//!   `connection`, …; the error's text follows, blanks as `_`); `UNANSWERED key t sent`: no reply within the wait and a
//!   grace period (`sent` 1 if the request had reached a server's socket);
//! - `WRITE key owner n seq accepted`: fenced write number `n` of that holding, the
//!   resource's sequence number `seq` of it, accepted (1) or rejected as stale (0);
//! - `END key owner t`: the holder stopped relying on the lock at `t` and releases.
//!
//! The run writes `run.log`: `MASTER t node` whenever the sentinels name another
//! master, `ROLE t node role` whenever a node's own role changes, and
//! `FAULT kind node start end` for each fault.
//!
//! Times are wall-clock nanoseconds (one machine, one clock).

use std::collections::BTreeMap;
use std::path::Path;

/// One fenced write of a holding, as the resource ordered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    pub n: u32,
    pub seq: i64,
    pub accepted: bool,
}

/// One grant a worker received, and what its holder did with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub key: String,
    pub owner: String,
    pub token: i64,
    pub node: usize,
    pub sent: i128,
    pub reply: i128,
    pub ttl_ms: i64,
    /// The end of the client's lease, if recorded.
    pub lease_end: Option<i128>,
    pub ended: Option<i128>,
    pub writes: Vec<Write>,
}

impl Grant {
    /// The span in which the holder relied on the lock and the server that granted
    /// it could not yet have let it lapse: from the reply to the earlier of the end
    /// of the work and the end of the lease (without one, the send time plus the
    /// TTL). Empty for a grant whose reply came after that.
    pub fn held(&self) -> (i128, i128) {
        let lapse = self
            .lease_end
            .unwrap_or(self.sent + i128::from(self.ttl_ms) * 1_000_000);
        let end = self.ended.map_or(lapse, |ended| ended.min(lapse));
        (self.reply, end.max(self.reply))
    }
}

/// A fault the run injected into node `node`, from `start` to `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: String,
    pub node: usize,
    pub start: i128,
    pub end: i128,
}

/// Everything one mode recorded.
#[derive(Debug, Default, Clone)]
pub struct Records {
    pub grants: Vec<Grant>,
    pub asks: usize,
    pub nones: usize,
    /// Failed acquires by kind.
    pub errors: BTreeMap<String, usize>,
    /// `key t sent` of each acquire that got no answer.
    pub unanswered: Vec<String>,
    /// The sentinels' master over time: `(since, node)`.
    pub masters: Vec<(i128, usize)>,
    /// Each node's own role over time: `(since, node, role)`.
    pub roles: Vec<(i128, usize, String)>,
    pub faults: Vec<Fault>,
}

/// Reads `run.log` and every worker's `*.log` in `dir`.
pub fn read(dir: &Path) -> std::io::Result<Records> {
    let mut records = Records::default();
    let mut by_owner: BTreeMap<String, Grant> = BTreeMap::new();
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "log") {
            lines.extend(std::fs::read_to_string(&path)?.lines().map(String::from));
        }
    }
    // Grants first: writes and ends refer to them, from the same file.
    lines.sort_by_key(|line| !line.starts_with("GRANT "));
    for line in &lines {
        read_line(line, &mut records, &mut by_owner);
    }
    records.grants = by_owner.into_values().collect();
    records.masters.sort();
    records.roles.sort();
    records.faults.sort_by_key(|f| f.start);
    Ok(records)
}

fn read_line(line: &str, records: &mut Records, by_owner: &mut BTreeMap<String, Grant>) {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let int = |i: usize| fields.get(i).and_then(|f| f.parse::<i128>().ok());
    match fields.as_slice() {
        ["ASK", ..] => records.asks += 1,
        ["NONE", ..] => records.nones += 1,
        ["ERROR", _, _, kind, ..] => *records.errors.entry(kind.to_string()).or_default() += 1,
        ["UNANSWERED", key, t, sent] => records.unanswered.push(format!("{key} {t} {sent}")),
        ["GRANT", key, owner, ..] if fields.len() >= 8 => {
            let (Some(token), Some(node), Some(sent), Some(reply), Some(ttl)) =
                (int(3), int(4), int(5), int(6), int(7))
            else {
                return;
            };
            by_owner.insert(
                owner.to_string(),
                Grant {
                    key: key.to_string(),
                    owner: owner.to_string(),
                    token: token as i64,
                    node: node as usize,
                    sent,
                    reply,
                    ttl_ms: ttl as i64,
                    lease_end: int(8),
                    ended: None,
                    writes: Vec::new(),
                },
            );
        }
        ["WRITE", _, owner, ..] if fields.len() == 6 => {
            let (Some(n), Some(seq), Some(accepted)) = (int(3), int(4), int(5)) else {
                return;
            };
            if let Some(grant) = by_owner.get_mut(*owner) {
                grant.writes.push(Write {
                    n: n as u32,
                    seq: seq as i64,
                    accepted: accepted == 1,
                });
            }
        }
        ["END", _, owner, _] => {
            if let (Some(grant), Some(t)) = (by_owner.get_mut(*owner), int(3)) {
                grant.ended = Some(t);
            }
        }
        ["MASTER", _, _] => {
            if let (Some(t), Some(node)) = (int(1), int(2)) {
                records.masters.push((t, node as usize));
            }
        }
        ["ROLE", _, _, role] => {
            if let (Some(t), Some(node)) = (int(1), int(2)) {
                records.roles.push((t, node as usize, role.to_string()));
            }
        }
        ["FAULT", kind, ..] if fields.len() == 5 => {
            if let (Some(node), Some(start), Some(end)) = (int(2), int(3), int(4)) {
                records.faults.push(Fault {
                    kind: kind.to_string(),
                    node: node as usize,
                    start,
                    end,
                });
            }
        }
        _ => {} // a line cut short, or one for another reader
    }
}
