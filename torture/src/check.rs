//! The checker: reads every worker's records and proves, per key, that no exclusive
//! holding overlapped any other, that no more shared holdings than the limit held at
//! once, and that tokens increase in the order holdings held.
//!
//! Each holding is reduced to the interval in which its holder *certainly* held the
//! lock: from the moment it received the grant to the earlier of the end of its work
//! and the lower bound of the lock's expiry. Any overlap of two such intervals is a
//! real violation, whatever the clocks or pauses did.

use std::collections::HashMap;
use std::path::Path;

/// One holding of one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub token: i64,
    pub granted: i128,
    pub expires: i128,
    pub ended: Option<i128>,
    pub accepted: Option<bool>,
    /// A shared holding (a reader, a semaphore permit).
    pub shared: bool,
}

impl Holding {
    /// The interval in which the lock was certainly held.
    pub fn held(&self) -> (i128, i128) {
        let end = self.ended.map_or(self.expires, |e| e.min(self.expires));
        (self.granted, end.max(self.granted))
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub grants: usize,
    pub completed: usize,
    pub accepted_writes: usize,
    pub rejected_writes: usize,
    /// Grants whose reply came after the lock had moved on: they held nothing.
    pub stale_grants: usize,
    pub overlaps: Vec<String>,
    pub token_regressions: Vec<String>,
    pub duplicate_tokens: Vec<String>,
    /// Instants at which more shared holdings held than the limit allows.
    pub over_limit: Vec<String>,
    /// The most holdings of one key that certainly held at once.
    pub most_at_once: usize,
}

/// Every holding, per key, and the tokens granted twice for one key.
#[derive(Debug, Default)]
pub struct Records {
    pub by_key: HashMap<String, Vec<Holding>>,
    pub duplicate_tokens: Vec<String>,
}

/// Reads `GRANT`/`END` records from every `*.log` in `dir`.
pub fn read(dir: &Path) -> std::io::Result<Records> {
    let mut by_key: HashMap<String, HashMap<i64, Holding>> = HashMap::new();
    let mut duplicate_tokens = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["GRANT", key, token, granted, expires, mode] => {
                    let (Ok(token), Ok(granted), Ok(expires)) =
                        (token.parse(), granted.parse(), expires.parse())
                    else {
                        continue;
                    };
                    let holding = Holding {
                        token,
                        granted,
                        expires,
                        ended: None,
                        accepted: None,
                        shared: *mode == "s",
                    };
                    let holdings = by_key.entry(key.to_string()).or_default();
                    if holdings.insert(token, holding).is_some() {
                        duplicate_tokens.push(format!("{key}: token {token} granted twice"));
                    }
                }
                ["END", key, token, ended, accepted] => {
                    let (Ok(token), Ok(ended)) = (token.parse::<i64>(), ended.parse()) else {
                        continue;
                    };
                    if let Some(h) = by_key.get_mut(*key).and_then(|m| m.get_mut(&token)) {
                        h.ended = Some(ended);
                        h.accepted = match *accepted {
                            "1" => Some(true),
                            "0" => Some(false),
                            _ => None, // a shared holding writes nothing
                        };
                    }
                }
                _ => {} // a line cut short by SIGKILL
            }
        }
    }
    Ok(Records {
        by_key: by_key
            .into_iter()
            .map(|(k, m)| (k, m.into_values().collect()))
            .collect(),
        duplicate_tokens,
    })
}

/// Checks every key's holdings; `limit`: the most shared holdings a key may have
/// at once (a semaphore's permits).
pub fn check(records: &Records, limit: Option<usize>) -> Report {
    let mut report = Report {
        duplicate_tokens: records.duplicate_tokens.clone(),
        ..Report::default()
    };
    for (key, holdings) in &records.by_key {
        report.grants += holdings.len();
        report.completed += holdings.iter().filter(|h| h.ended.is_some()).count();
        report.accepted_writes += holdings.iter().filter(|h| h.accepted == Some(true)).count();
        report.rejected_writes += holdings
            .iter()
            .filter(|h| h.accepted == Some(false))
            .count();
        report.stale_grants += holdings.iter().filter(|h| h.held().0 == h.held().1).count();
        let mut sorted: Vec<&Holding> = holdings.iter().collect();
        sorted.sort_by_key(|h| h.held().0);
        for (i, a) in sorted.iter().enumerate() {
            let (a_start, a_end) = a.held();
            for b in &sorted[i + 1..] {
                let (b_start, b_end) = b.held();
                let exclusive = !(a.shared && b.shared);
                if exclusive && b_start < a_end && a_start < a_end && b_start < b_end {
                    report.overlaps.push(format!(
                        "{key}: token {} held until {a_end}, token {} from {b_start}",
                        a.token, b.token
                    ));
                }
                // Only holdings that certainly held count: a grant whose reply came
                // after its lock had moved on (the worker was paused, or the server
                // restarted, between grant and reply) held nothing, and its older
                // token is no regression.
                //
                // Shared holdings granted in one step are granted together, in token
                // order, but their holders learn of it in any order: between two of
                // them, "ended before the other began" says nothing about grant
                // order. With an exclusive one on either side it does.
                let both_held = a_start < a_end && b_start < b_end;
                if both_held && exclusive && a_end <= b_start && a.token >= b.token {
                    report.token_regressions.push(format!(
                        "{key}: token {} held before token {}",
                        a.token, b.token
                    ));
                }
            }
        }
        let most = most_at_once(&sorted);
        report.most_at_once = report.most_at_once.max(most.0);
        if let Some(n) = limit.filter(|n| most.0 > *n) {
            report.over_limit.push(format!(
                "{key}: {} holdings at {} (limit {n})",
                most.0, most.1
            ));
        }
    }
    report
}

/// The most holdings that certainly held at once, and when.
fn most_at_once(holdings: &[&Holding]) -> (usize, i128) {
    let mut events: Vec<(i128, i32)> = holdings
        .iter()
        .map(|h| h.held())
        .filter(|(start, end)| start < end)
        .flat_map(|(start, end)| [(start, 1), (end, -1)])
        .collect();
    // An end and a start at one instant: the end first (intervals are half-open).
    events.sort();
    let (mut now, mut most) = (0usize, (0usize, 0i128));
    for (at, step) in events {
        now = now.saturating_add_signed(step as isize);
        if now > most.0 {
            most = (now, at);
        }
    }
    most
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(token: i64, granted: i128, expires: i128, ended: Option<i128>) -> Holding {
        Holding {
            token,
            granted,
            expires,
            ended,
            accepted: Some(true),
            shared: false,
        }
    }

    fn shared(token: i64, granted: i128, expires: i128) -> Holding {
        Holding {
            shared: true,
            accepted: None,
            ..holding(token, granted, expires, None)
        }
    }

    fn check_exclusive(records: &Records) -> Report {
        check(records, None)
    }

    fn one_key(holdings: Vec<Holding>) -> Records {
        Records {
            by_key: HashMap::from([("k".to_string(), holdings)]),
            duplicate_tokens: Vec::new(),
        }
    }

    #[test]
    fn sequential_holdings_pass() {
        let report = check_exclusive(&one_key(vec![
            holding(1, 0, 100, Some(10)),
            holding(2, 20, 120, Some(30)),
            holding(3, 40, 140, None), // killed: held until expiry
            holding(4, 150, 250, Some(160)),
        ]));
        assert!(report.overlaps.is_empty(), "{report:?}");
        assert!(report.token_regressions.is_empty(), "{report:?}");
        assert_eq!((report.grants, report.completed), (4, 3));
    }

    #[test]
    fn a_grant_before_the_previous_expiry_is_an_overlap() {
        let report = check_exclusive(&one_key(vec![
            holding(1, 0, 100, None),
            holding(2, 50, 150, Some(60)),
        ]));
        assert_eq!(report.overlaps.len(), 1);
    }

    #[test]
    fn a_paused_holder_only_counts_until_its_expiry() {
        let report = check_exclusive(&one_key(vec![
            holding(1, 0, 100, Some(500)), // paused past its TTL
            holding(2, 110, 210, Some(120)),
        ]));
        assert!(report.overlaps.is_empty(), "{report:?}");
    }

    #[test]
    fn a_stale_grant_that_held_nothing_is_no_regression() {
        // Token 3's reply arrived at 200, after token 5 came and went; LOCK.INFO then
        // showed another holder, so its interval is empty (expires = granted).
        let report = check_exclusive(&one_key(vec![
            holding(5, 0, 100, Some(10)),
            holding(3, 200, 200, Some(210)),
        ]));
        assert!(report.token_regressions.is_empty(), "{report:?}");
        assert!(report.overlaps.is_empty(), "{report:?}");
        assert_eq!(report.stale_grants, 1);
    }

    #[test]
    fn a_smaller_token_after_a_larger_one_is_a_regression() {
        let report = check_exclusive(&one_key(vec![
            holding(5, 0, 100, Some(10)),
            holding(3, 20, 120, Some(30)),
        ]));
        assert_eq!(report.token_regressions.len(), 1);
    }

    #[test]
    fn readers_may_overlap_but_not_a_writer() {
        let records = one_key(vec![
            shared(1, 0, 100),
            shared(2, 50, 150),
            holding(3, 120, 200, None),
        ]);
        let report = check(&records, None);
        assert_eq!(report.overlaps.len(), 1, "{report:?}");
        assert_eq!(report.most_at_once, 2);
    }

    #[test]
    fn more_permits_at_once_than_the_limit_is_a_violation() {
        let records = one_key(vec![
            shared(1, 0, 100),
            shared(2, 10, 100),
            shared(3, 20, 30),
        ]);
        assert_eq!(check(&records, Some(3)).over_limit.len(), 0);
        assert_eq!(check(&records, Some(2)).over_limit.len(), 1);
        // Back to back is not at once.
        let records = one_key(vec![shared(1, 0, 100), shared(2, 100, 200)]);
        assert_eq!(check(&records, Some(1)).over_limit.len(), 0);
    }

    #[test]
    fn shared_holdings_granted_together_may_be_seen_in_any_order() {
        let records = one_key(vec![shared(5, 0, 10), shared(3, 20, 30)]);
        assert!(check(&records, None).token_regressions.is_empty());
        let records = one_key(vec![shared(5, 0, 10), holding(3, 20, 30, Some(25))]);
        assert_eq!(
            check(&records, None).token_regressions.len(),
            1,
            "a writer's token is a fence"
        );
    }
}
