//! The checker: what one mode's records say about the locks and the fence.
//!
//! - **Overlapping holdings**: two grants of one key whose holders both relied on
//!   the lock at once ([`Grant::held`]). Replication loses grants in a failover, so
//!   these happen; the fence is what must make them harmless.
//! - **Token regressions**: a grant whose token is not greater than that of a grant
//!   of the same key whose reply came before it was asked for (both held something).
//! - **Equal tokens**: one token held by two holders (any key; of the same key on the
//!   function library, whose tokens are per key): two masters minted it. The
//!   resource cannot tell their writes apart. Must be 0.
//! - **Unresolved overlaps**: holders A and B of one key with writes of both accepted
//!   after the other's first accepted write (A's accepted writes span B's first), in
//!   the resource's own order of writes. That is the fence failing. Must be 0.
//! - Waiters: every `ASK` has an answer (a grant, a null or an error).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::records::{Grant, Records};

/// What happened around one fault.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultOutcome {
    pub kind: String,
    /// From the fault's start until the sentinels named another master, if they did.
    pub failover_ms: Option<f64>,
    /// From the fault's start until the first grant by that new master.
    pub first_grant_ms: Option<f64>,
    /// From the fault's end until the faulted master reported itself a replica (a
    /// stopped or cut-off master that Sentinel replaced).
    pub stale_master_ms: Option<f64>,
    /// Grants by the faulted node after the fault ended while the sentinels named
    /// another master.
    pub stale_grants: usize,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    pub grants: usize,
    pub asks: usize,
    pub nones: usize,
    pub errors: BTreeMap<String, usize>,
    pub unanswered: Vec<String>,
    pub failovers: usize,
    pub faults: Vec<FaultOutcome>,
    pub overlaps: Vec<String>,
    pub regressions: Vec<String>,
    pub equal_tokens: Vec<String>,
    pub unresolved: Vec<String>,
    pub accepted_writes: usize,
    pub rejected_writes: usize,
    /// Grants by a node that the sentinels had replaced (see `replaced`).
    pub replaced_master_grants: usize,
}

impl Report {
    /// Every waiter got an answer.
    pub fn waiters_answered(&self) -> bool {
        self.unanswered.is_empty() && self.asks == self.grants_answered()
    }

    /// Answers of any kind: grants, nulls, errors.
    pub fn grants_answered(&self) -> usize {
        self.grants + self.nones + self.errors.values().sum::<usize>()
    }

    /// No two holders shared a token and the fence resolved every overlap.
    pub fn fence_held(&self) -> bool {
        self.unresolved.is_empty() && self.equal_tokens.is_empty()
    }
}

/// The sentinels' master at `t`, as the run saw it.
fn master_at(masters: &[(i128, usize)], t: i128) -> Option<usize> {
    masters
        .iter()
        .take_while(|(since, _)| *since <= t)
        .last()
        .map(|&(_, node)| node)
}

/// True if `node` granted at `t` while the sentinels named another master and were
/// not about to name it: a replaced master. (A promoted replica grants a moment
/// before the sentinels name it; that is not one.)
fn replaced(masters: &[(i128, usize)], node: usize, t: i128) -> bool {
    let next = masters
        .iter()
        .find(|(since, _)| *since > t)
        .map(|&(_, n)| n);
    master_at(masters, t).is_some_and(|m| m != node) && next != Some(node)
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// Where a token must be unique: server-wide (the module's tokens), or per key (the
/// function library's, docs/PROTOCOL.md "Tokens").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenScope {
    Server,
    Key,
}

pub fn check(records: &Records) -> Report {
    check_scoped(records, TokenScope::Server)
}

pub fn check_scoped(records: &Records, scope: TokenScope) -> Report {
    let mut report = Report {
        grants: records.grants.len(),
        asks: records.asks,
        nones: records.nones,
        errors: records.errors.clone(),
        unanswered: records.unanswered.clone(),
        failovers: records.masters.len().saturating_sub(1),
        ..Report::default()
    };
    let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for grant in &records.grants {
        by_key.entry(&grant.key).or_default().push(grant);
        for write in &grant.writes {
            if write.accepted {
                report.accepted_writes += 1;
            } else {
                report.rejected_writes += 1;
            }
        }
        if replaced(&records.masters, grant.node, grant.reply) {
            report.replaced_master_grants += 1;
        }
    }
    for (key, grants) in &by_key {
        overlaps(key, grants, &mut report.overlaps);
        regressions(key, grants, &mut report.regressions);
        unresolved(key, grants, &mut report.unresolved);
    }
    report.equal_tokens = equal_tokens(&records.grants, scope);
    report.faults = records
        .faults
        .iter()
        .enumerate()
        .map(|(i, fault)| {
            let next = records.faults.get(i + 1).map_or(i128::MAX, |f| f.start);
            outcome(records, fault, next)
        })
        .collect();
    report
}

fn overlaps(key: &str, grants: &[&Grant], found: &mut Vec<String>) {
    let mut held: Vec<(i128, i128, i64)> = grants
        .iter()
        .map(|g| (g.held().0, g.held().1, g.token))
        .filter(|(start, end, _)| start < end)
        .collect();
    held.sort();
    for (i, &(_, a_end, a_token)) in held.iter().enumerate() {
        for &(b_start, _, b_token) in held[i + 1..].iter().take_while(|b| b.0 < a_end) {
            found.push(format!(
                "{key}: token {a_token} held until {a_end}, token {b_token} from {b_start}"
            ));
        }
    }
}

fn regressions(key: &str, grants: &[&Grant], found: &mut Vec<String>) {
    let mut held: Vec<&Grant> = grants
        .iter()
        .copied()
        .filter(|g| g.held().0 < g.held().1)
        .collect();
    let mut by_reply = held.clone();
    by_reply.sort_by_key(|g| g.reply);
    held.sort_by_key(|g| g.sent);
    // The highest token among grants answered before each one was asked for.
    let (mut next, mut highest): (usize, Option<&Grant>) = (0, None);
    for b in held {
        while next < by_reply.len() && by_reply[next].reply < b.sent {
            let a = by_reply[next];
            if highest.is_none_or(|h| a.token > h.token) {
                highest = Some(a);
            }
            next += 1;
        }
        if let Some(a) = highest.filter(|a| a.token >= b.token) {
            found.push(format!(
                "{key}: token {} (node {}) granted after token {} (node {})",
                b.token, b.node, a.token, a.node
            ));
        }
    }
}

fn unresolved(key: &str, grants: &[&Grant], found: &mut Vec<String>) {
    let accepted = |g: &Grant| -> Vec<i64> {
        let mut seqs: Vec<i64> = g
            .writes
            .iter()
            .filter(|w| w.accepted)
            .map(|w| w.seq)
            .collect();
        seqs.sort();
        seqs
    };
    let firsts: BTreeMap<i64, &Grant> = grants
        .iter()
        .filter_map(|g| accepted(g).first().map(|&seq| (seq, *g)))
        .collect();
    for a in grants {
        let seqs = accepted(a);
        let (Some(&first), Some(&last)) = (seqs.first(), seqs.last()) else {
            continue;
        };
        if last <= first + 1 {
            continue;
        }
        for (&b_first, b) in firsts.range(first + 1..last) {
            found.push(format!(
                "{key}: token {} (node {}) wrote at {first} and {last}, token {} (node {}) first at {b_first}",
                a.token, a.node, b.token, b.node
            ));
        }
    }
}

fn equal_tokens(grants: &[Grant], scope: TokenScope) -> Vec<String> {
    let mut owners: HashMap<(i64, &str), BTreeSet<(&str, usize)>> = HashMap::new();
    for grant in grants {
        let key = if scope == TokenScope::Key {
            grant.key.as_str()
        } else {
            ""
        };
        owners
            .entry((grant.token, key))
            .or_default()
            .insert((&grant.owner, grant.node));
    }
    let mut found: Vec<String> = owners
        .into_iter()
        .filter(|(_, holders)| holders.len() > 1)
        .map(|((token, _), holders)| {
            let nodes: Vec<String> = holders.iter().map(|(_, n)| n.to_string()).collect();
            format!(
                "token {token} held by {} holders (nodes {})",
                holders.len(),
                nodes.join(", ")
            )
        })
        .collect();
    found.sort();
    found
}

/// What followed `fault`, up to the start of the next one.
fn outcome(records: &Records, fault: &crate::records::Fault, next: i128) -> FaultOutcome {
    let switch = records
        .masters
        .iter()
        .find(|&&(since, node)| since > fault.start && since < next && node != fault.node);
    let first_grant = switch.and_then(|&(_, new)| {
        records
            .grants
            .iter()
            .filter(|g| g.node == new && g.reply > fault.start)
            .map(|g| g.reply)
            .min()
    });
    let demoted = records
        .roles
        .iter()
        .find(|(since, node, role)| *since > fault.end && *node == fault.node && role != "master")
        .map(|&(since, _, _)| since);
    let stale_grants = records
        .grants
        .iter()
        .filter(|g| g.node == fault.node && g.reply > fault.end)
        .filter(|g| replaced(&records.masters, g.node, g.reply))
        .count();
    let replaced = switch.is_some() && fault.kind != "replica-restart";
    FaultOutcome {
        kind: fault.kind.clone(),
        failover_ms: switch.map(|&(since, _)| ms(since - fault.start)),
        first_grant_ms: first_grant.map(|t| ms(t - fault.start)),
        stale_master_ms: demoted
            .filter(|_| replaced && fault.kind != "kill")
            .map(|t| ms(t - fault.end)),
        stale_grants,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Fault, Write};

    const MS: i128 = 1_000_000;

    fn grant(owner: &str, token: i64, node: usize, sent_ms: i128, ended_ms: i128) -> Grant {
        Grant {
            key: "k".into(),
            owner: owner.into(),
            token,
            node,
            sent: sent_ms * MS,
            reply: (sent_ms + 1) * MS,
            ttl_ms: 1000,
            lease_end: None,
            ended: Some(ended_ms * MS),
            writes: Vec::new(),
        }
    }

    fn wrote(mut grant: Grant, writes: &[(i64, bool)]) -> Grant {
        grant.writes = writes
            .iter()
            .enumerate()
            .map(|(i, &(seq, accepted))| Write {
                n: i as u32 + 1,
                seq,
                accepted,
            })
            .collect();
        grant
    }

    fn records(grants: Vec<Grant>) -> Records {
        Records {
            asks: grants.len(),
            grants,
            ..Records::default()
        }
    }

    #[test]
    fn one_holder_after_another_passes_every_check() {
        let report = check(&records(vec![
            wrote(grant("a", 10, 0, 0, 50), &[(1, true), (2, true)]),
            wrote(grant("b", 20, 0, 60, 100), &[(3, true), (4, true)]),
        ]));
        assert!(report.overlaps.is_empty(), "{report:?}");
        assert!(report.regressions.is_empty(), "{report:?}");
        assert!(
            report.fence_held() && report.waiters_answered(),
            "{report:?}"
        );
        assert_eq!((report.grants, report.accepted_writes), (2, 4));
    }

    #[test]
    fn a_lost_grant_regranted_is_an_overlap_the_fence_resolves() {
        // b (new master, greater token) wrote between a's writes: a's second write
        // is rejected.
        let report = check(&records(vec![
            wrote(grant("a", 10, 0, 0, 200), &[(1, true), (3, false)]),
            wrote(grant("b", 21, 1, 50, 250), &[(2, true), (4, true)]),
        ]));
        assert_eq!(report.overlaps.len(), 1);
        assert!(report.fence_held(), "{report:?}");
        assert_eq!(report.rejected_writes, 1);
    }

    #[test]
    fn the_librarys_tokens_are_unique_per_key_only() {
        let mut other_key = grant("b", 10, 0, 300, 400);
        other_key.key = "j".into();
        let grants = records(vec![grant("a", 10, 0, 0, 200), other_key]);
        assert_eq!(
            check_scoped(&grants, TokenScope::Server).equal_tokens.len(),
            1
        );
        assert!(check_scoped(&grants, TokenScope::Key)
            .equal_tokens
            .is_empty());
        let same_key = records(vec![grant("a", 10, 0, 0, 200), grant("b", 10, 0, 300, 400)]);
        assert_eq!(
            check_scoped(&same_key, TokenScope::Key).equal_tokens.len(),
            1
        );
    }

    #[test]
    fn equal_tokens_of_two_masters_are_found_and_leave_the_fence_unresolved() {
        let report = check(&records(vec![
            wrote(grant("a", 10, 0, 0, 200), &[(1, true), (3, true)]),
            wrote(grant("b", 10, 1, 50, 250), &[(2, true), (4, true)]),
        ]));
        assert_eq!(report.equal_tokens.len(), 1, "{report:?}");
        assert_eq!(report.unresolved.len(), 1, "{report:?}");
        assert!(!report.fence_held());
    }

    #[test]
    fn a_smaller_token_asked_for_after_a_greater_one_was_answered_is_a_regression() {
        let report = check(&records(vec![
            grant("a", 20, 1, 0, 10),
            grant("b", 15, 0, 30, 40),
        ]));
        assert_eq!(report.regressions.len(), 1, "{report:?}");
        // Asked for before the greater one was answered: no order between them.
        let concurrent = check(&records(vec![
            grant("a", 20, 1, 0, 10),
            grant("b", 15, 0, 0, 40),
        ]));
        assert!(concurrent.regressions.is_empty(), "{concurrent:?}");
    }

    #[test]
    fn a_grant_answered_after_its_ttl_held_nothing() {
        let mut late = grant("b", 15, 0, 30, 40);
        late.reply = late.sent + 2000 * MS; // past the 1 s TTL
        let report = check(&records(vec![grant("a", 20, 1, 0, 10), late]));
        assert!(report.regressions.is_empty() && report.overlaps.is_empty());
    }

    #[test]
    fn a_grant_renewed_after_a_long_wait_holds_until_its_lease() {
        // Sent at 0, granted at 1500 (past the TTL counted from the send), then
        // extended by the client: its lease runs to 2400.
        let mut waited = grant("a", 10, 0, 0, 2000);
        waited.reply = 1500 * MS;
        waited.lease_end = Some(2400 * MS);
        let report = check(&records(vec![waited, grant("b", 20, 1, 1600, 1700)]));
        assert_eq!(report.overlaps.len(), 1, "{report:?}");
    }

    #[test]
    fn a_waiter_without_an_answer_is_reported() {
        let mut asked = records(vec![grant("a", 10, 0, 0, 50)]);
        asked.asks = 2;
        assert!(!check(&asked).waiters_answered());
        asked.unanswered.push("k 5 1".into());
        asked.asks = 1;
        assert!(!check(&asked).waiters_answered());
    }

    #[test]
    fn a_fault_is_timed_to_the_first_grant_on_the_new_master() {
        let mut run = records(vec![
            grant("a", 10, 0, 0, 10),
            grant("b", 20, 1, 2500, 2600),
            grant("c", 30, 0, 3500, 3600), // the old master, back and replaced
        ]);
        run.masters = vec![(0, 0), (2000 * MS, 1)];
        run.roles = vec![(0, 0, "master".into()), (5000 * MS, 0, "slave".into())];
        run.faults = vec![Fault {
            kind: "stop".into(),
            node: 0,
            start: 1000 * MS,
            end: 3000 * MS,
        }];
        let report = check(&run);
        assert_eq!(report.failovers, 1);
        let fault = &report.faults[0];
        assert_eq!(fault.failover_ms, Some(1000.0));
        assert_eq!(fault.first_grant_ms, Some(1501.0));
        assert_eq!(fault.stale_master_ms, Some(2000.0));
        assert_eq!(fault.stale_grants, 1);
        assert_eq!(report.replaced_master_grants, 1);
        // The new master's grant a moment before the sentinels name it is not one.
        run.grants.push(grant("d", 25, 1, 1900, 1950));
        assert_eq!(check(&run).replaced_master_grants, 1);
    }

    #[test]
    fn a_failover_after_the_next_fault_began_is_not_the_first_ones() {
        let mut run = records(vec![grant("b", 20, 1, 2500, 2600)]);
        run.masters = vec![(0, 0), (2000 * MS, 1)];
        run.faults = vec![
            Fault {
                kind: "replica-restart".into(),
                node: 2,
                start: 500 * MS,
                end: 600 * MS,
            },
            Fault {
                kind: "kill".into(),
                node: 0,
                start: 1000 * MS,
                end: 3000 * MS,
            },
        ];
        let report = check(&run);
        assert_eq!(report.faults[0].failover_ms, None);
        assert_eq!(report.faults[1].failover_ms, Some(1000.0));
    }
}
