//! Hand-offs: who in a key's queue gets the lock when its holdings change, decided
//! in one step, so that no other client can slip in between.
//!
//! Waiters are looked at in arrival order. The first is granted if its request fits
//! the holdings (as they will be after the grants made so far in this step), then
//! the next, and so on; the first that does not fit stops the rest. A writer's
//! release can so grant every reader at the head of the queue at once, and a queued
//! writer is not starved by readers: readers that come after it wait behind it. A
//! waiter whose timeout has passed is answered null, never granted; one whose grant
//! cannot be made is answered with the error; the waiters of an owner that is
//! granted take the same holding (a client that retried its WAIT).

use crate::hashing::HashMap;

use crate::holdings::{holds_at, Kind, Lock, Mode};
use crate::queue::{Queues, Waiter};
use crate::rules::{expires_at, LockError};
use crate::token::TokenMint;

/// A state of the server that refuses every hand-off of a key, as it would refuse
/// an acquire; every waiter gets the matching error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The key now holds a value of another type: `WRONGTYPE`.
    WrongType,
    /// Memory is over `maxmemory`, or Redis just evicted the lock for memory: `OOM`.
    OutOfMemory,
    /// The key's slot is migrating to this node (`ASK slot host:port`).
    Redirect(String),
}

/// What a waiter is answered, besides a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Its WAIT timed out: null.
    TimedOut,
    /// Its grant could not be made.
    Refused(LockError),
    /// The server refused every hand-off of the key.
    Blocked(Refusal),
}

/// One holding granted to waiters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant<W> {
    pub owner: Box<[u8]>,
    pub kind: Kind,
    pub token: i64,
    /// The holding's absolute expiry, Unix ms.
    pub expires_at: i64,
    /// False when the owner already held the key in this mode: its holding keeps its
    /// token and gets the new expiry.
    pub fresh: bool,
    /// The waiters answered with the token (one owner's, oldest first).
    pub waiters: Vec<Waiter<W>>,
}

/// A hand-off step: the holdings to grant, in this order, and the other answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandOff<W> {
    pub grants: Vec<Grant<W>>,
    pub answers: Vec<(Waiter<W>, Answer)>,
}

impl<W> Default for HandOff<W> {
    fn default() -> Self {
        HandOff {
            grants: Vec::new(),
            answers: Vec::new(),
        }
    }
}

/// The holdings of a key as a hand-off step sees them: the live ones of its lock,
/// then those the step grants. The lock is looked up, never copied: a step that
/// grants N waiters costs O(N log n) on a lock of n holdings.
struct Occupancy<'a> {
    lock: Option<&'a Lock>,
    now_ms: i64,
    /// Live shared holdings of `lock`.
    live_shared: usize,
    /// An exclusive holding granted in this step.
    exclusive: Option<(Box<[u8]>, i64)>,
    /// Shared holdings granted in this step.
    shared: HashMap<Box<[u8]>, i64>,
}

impl<'a> Occupancy<'a> {
    fn of(lock: Option<&'a Lock>, now_ms: i64) -> Self {
        let live_shared = match lock {
            Some(Lock::Shared(holdings)) => {
                holdings.len().saturating_sub(holdings.lapsed_count(now_ms))
            }
            _ => 0,
        };
        Occupancy {
            lock,
            now_ms,
            live_shared,
            exclusive: None,
            shared: HashMap::default(),
        }
    }

    /// The mode and token of `owner`'s holding, if it has one.
    fn held_by(&self, owner: &[u8]) -> Option<(Mode, i64)> {
        match self.lock {
            Some(Lock::Exclusive { token, owner: o }) => {
                return (o.as_bytes() == owner).then_some((Mode::Exclusive, *token));
            }
            Some(Lock::Shared(holdings)) => {
                let live = holdings
                    .get(owner)
                    .filter(|h| holds_at(h.expires_at, self.now_ms));
                if let Some(h) = live {
                    return Some((Mode::Shared, h.token));
                }
            }
            None => {}
        }
        if let Some((o, token)) = &self.exclusive {
            return (**o == *owner).then_some((Mode::Exclusive, *token));
        }
        self.shared.get(owner).map(|token| (Mode::Shared, *token))
    }

    fn fits(&self, kind: Kind) -> bool {
        let exclusive =
            self.exclusive.is_some() || matches!(self.lock, Some(Lock::Exclusive { .. }));
        let shared = self.live_shared.saturating_add(self.shared.len());
        match kind {
            Kind::Exclusive => !exclusive && shared == 0,
            Kind::Shared { limit } => !exclusive && limit.is_none_or(|n| shared < n as usize),
        }
    }

    fn add(&mut self, owner: Box<[u8]>, mode: Mode, token: i64) {
        match mode {
            Mode::Exclusive => self.exclusive = Some((owner, token)),
            Mode::Shared => {
                self.shared.insert(owner, token);
            }
        }
    }
}

/// Decides the hand-off of `key` (in `db`) whose lock is now `lock`, taking the
/// waiters it answers out of `queues`. `refusal`: the server refuses every
/// hand-off of the key now.
pub fn plan_hand_off<W: Copy + Eq + std::hash::Hash>(
    queues: &mut Queues<W>,
    db: i32,
    key: &[u8],
    lock: Option<&Lock>,
    refusal: Option<Refusal>,
    now_ms: i64,
    mint: &TokenMint,
) -> HandOff<W> {
    let mut step = HandOff::default();
    if let Some(refusal) = refusal {
        while let Some(waiter) = queues.pop_front(db, key) {
            let answer = if waiter.has_timed_out(now_ms) {
                Answer::TimedOut
            } else {
                Answer::Blocked(refusal.clone())
            };
            step.answers.push((waiter, answer));
        }
        return step;
    }
    let mut occupancy = Occupancy::of(lock, now_ms);
    while let Some(front) = queues.front(db, key) {
        if front.has_timed_out(now_ms) {
            if let Some(waiter) = queues.pop_front(db, key) {
                step.answers.push((waiter, Answer::TimedOut));
            }
            continue;
        }
        let (kind, ttl) = (front.kind, front.ttl);
        let plan = match occupancy.held_by(&front.owner) {
            Some((mode, _)) if mode != kind.mode() => Err(LockError::ModeConflict { held: mode }),
            Some((_, token)) => expires_at(now_ms, ttl).map(|at| (token, at, false)),
            None if !occupancy.fits(kind) => break,
            None => expires_at(now_ms, ttl).and_then(|at| {
                let token = mint.mint(now_ms).ok_or(LockError::TokensExhausted)?;
                Ok((token, at, true))
            }),
        };
        let Some(first) = queues.pop_front(db, key) else {
            break;
        };
        match plan {
            Err(error) => step.answers.push((first, Answer::Refused(error))),
            Ok((token, at, fresh)) => {
                let owner = first.owner.clone();
                let mut waiters = vec![first];
                for waiter in queues.take_owner(db, key, &owner, kind.mode()) {
                    if waiter.has_timed_out(now_ms) {
                        step.answers.push((waiter, Answer::TimedOut));
                    } else {
                        waiters.push(waiter);
                    }
                }
                if fresh {
                    occupancy.add(owner.clone(), kind.mode(), token);
                }
                step.grants.push(Grant {
                    owner,
                    kind,
                    token,
                    expires_at: at,
                    fresh,
                    waiters,
                });
            }
        }
    }
    step
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn waiter(handle: u32, owner: &str, kind: Kind) -> Waiter<u32> {
        Waiter {
            handle,
            owner: owner.as_bytes().into(),
            ttl: 1000,
            kind,
            deadline: None,
            queued_at: 0,
        }
    }

    const W: Kind = Kind::Exclusive;
    const R: Kind = Kind::Shared { limit: None };

    fn queue(waiters: &[(u32, &str, Kind)]) -> Queues<u32> {
        let mut queues = Queues::new();
        for (handle, owner, kind) in waiters {
            queues.push(0, b"k", waiter(*handle, owner, *kind));
        }
        queues
    }

    fn granted(step: &HandOff<u32>) -> Vec<Vec<u32>> {
        step.grants
            .iter()
            .map(|g| g.waiters.iter().map(|w| w.handle).collect())
            .collect()
    }

    #[test]
    fn a_free_lock_goes_to_the_oldest_writer_alone() {
        let mint = TokenMint::new();
        let mut queues = queue(&[(1, "a", W), (2, "b", W)]);
        let step = plan_hand_off(&mut queues, 0, b"k", None, None, NOW, &mint);
        assert_eq!(granted(&step), [[1]]);
        assert!(step.grants[0].fresh && step.grants[0].expires_at == NOW + 1000);
        assert_eq!(queues.waiting(0, b"k"), 1);
    }

    #[test]
    fn a_writers_release_grants_every_reader_at_the_head_at_once() {
        let mint = TokenMint::new();
        let mut queues = queue(&[
            (1, "r1", R),
            (2, "r2", R),
            (3, "r3", R),
            (4, "w", W),
            (5, "r4", R),
        ]);
        let step = plan_hand_off(&mut queues, 0, b"k", None, None, NOW, &mint);
        assert_eq!(
            granted(&step),
            [[1], [2], [3]],
            "the writer stops the readers behind it"
        );
        let tokens: Vec<i64> = step.grants.iter().map(|g| g.token).collect();
        assert!(
            tokens.windows(2).all(|t| t[0] < t[1]),
            "distinct, in grant order"
        );
        assert_eq!(queues.waiting(0, b"k"), 2);
    }

    #[test]
    fn a_queued_writer_waits_for_the_readers_and_readers_behind_it_wait_for_it() {
        let mint = TokenMint::new();
        let readers = Lock::shared(b"r0", 1, NOW + 5000, None);
        let mut queues = queue(&[(1, "w", W), (2, "r1", R)]);
        let step = plan_hand_off(&mut queues, 0, b"k", Some(&readers), None, NOW, &mint);
        assert!(step.grants.is_empty() && step.answers.is_empty());
        assert_eq!(queues.waiting(0, b"k"), 2);
        // The reader's holding lapses: the writer goes first.
        let step = plan_hand_off(
            &mut queues,
            0,
            b"k",
            Some(&readers),
            None,
            NOW + 5001,
            &mint,
        );
        assert_eq!(granted(&step), [[1]]);
    }

    #[test]
    fn a_limit_grants_as_many_as_there_are_free_permits() {
        let mint = TokenMint::new();
        let three = Kind::Shared { limit: Some(3) };
        let held = Lock::shared(b"p0", 1, NOW + 5000, None);
        let mut queues = queue(&[(1, "p1", three), (2, "p2", three), (3, "p3", three)]);
        let step = plan_hand_off(&mut queues, 0, b"k", Some(&held), None, NOW, &mint);
        assert_eq!(granted(&step), [[1], [2]]);
        assert_eq!(queues.front(0, b"k").map(|w| w.handle), Some(3));
    }

    #[test]
    fn timed_out_waiters_are_answered_and_skipped() {
        let mint = TokenMint::new();
        let mut queues = Queues::new();
        queues.push(
            0,
            b"k",
            Waiter {
                deadline: Some(NOW - 1),
                queued_at: 0,
                ..waiter(1, "late", W)
            },
        );
        queues.push(0, b"k", waiter(2, "b", W));
        let step = plan_hand_off(&mut queues, 0, b"k", None, None, NOW, &mint);
        assert_eq!(granted(&step), [[2]]);
        assert_eq!(step.answers.len(), 1);
        assert_eq!(
            (step.answers[0].0.handle, &step.answers[0].1),
            (1, &Answer::TimedOut)
        );
    }

    #[test]
    fn an_owners_waiters_in_one_mode_share_its_grant() {
        let mint = TokenMint::new();
        let mut queues = queue(&[(1, "a", W), (2, "b", W), (3, "a", W), (4, "a", R)]);
        let step = plan_hand_off(&mut queues, 0, b"k", None, None, NOW, &mint);
        assert_eq!(granted(&step), [[1, 3]]);
        assert_eq!(queues.waiting(0, b"k"), 2, "b, and a's shared request");
    }

    #[test]
    fn a_waiter_of_an_owner_holding_the_other_mode_gets_the_mode_error() {
        let mint = TokenMint::new();
        let held = Lock::shared(b"a", 7, NOW + 5000, None);
        let mut queues = queue(&[(1, "a", W), (2, "b", R)]);
        let step = plan_hand_off(&mut queues, 0, b"k", Some(&held), None, NOW, &mint);
        assert_eq!(
            step.answers
                .iter()
                .map(|(w, a)| (w.handle, a.clone()))
                .collect::<Vec<_>>(),
            [(
                1,
                Answer::Refused(LockError::ModeConflict { held: Mode::Shared })
            )]
        );
        assert_eq!(granted(&step), [[2]]);
    }

    #[test]
    fn a_waiter_whose_owner_holds_it_already_refreshes_its_holding() {
        let mint = TokenMint::new();
        let held = Lock::shared(b"a", 7, NOW + 10, None);
        let mut queues = queue(&[(1, "a", R)]);
        let step = plan_hand_off(&mut queues, 0, b"k", Some(&held), None, NOW, &mint);
        let grant = &step.grants[0];
        assert_eq!(
            (grant.token, grant.fresh, grant.expires_at),
            (7, false, NOW + 1000)
        );
        assert_eq!(mint.high_water(), 0);
    }

    #[test]
    fn a_grant_that_cannot_be_made_is_an_error_and_the_next_is_tried() {
        let mint = TokenMint::new();
        let mut queues = Queues::new();
        queues.push(
            0,
            b"k",
            Waiter {
                ttl: i64::MAX,
                ..waiter(1, "a", W)
            },
        );
        queues.push(0, b"k", waiter(2, "b", W));
        let step = plan_hand_off(&mut queues, 0, b"k", None, None, NOW, &mint);
        assert_eq!(
            step.answers[0].1,
            Answer::Refused(LockError::ExpiryOutOfRange)
        );
        assert_eq!(granted(&step), [[2]]);
        mint.observe(i64::MAX - 1);
        queues.push(0, b"k", waiter(3, "c", W));
        let step = plan_hand_off(&mut queues, 0, b"k", None, None, NOW, &mint);
        assert_eq!(
            step.answers[0].1,
            Answer::Refused(LockError::TokensExhausted)
        );
    }

    #[test]
    fn a_refused_hand_off_answers_every_waiter() {
        let mint = TokenMint::new();
        let mut queues = queue(&[(1, "a", W), (2, "b", R)]);
        queues.push(
            0,
            b"k",
            Waiter {
                deadline: Some(NOW),
                queued_at: 0,
                ..waiter(3, "c", W)
            },
        );
        let step = plan_hand_off(
            &mut queues,
            0,
            b"k",
            None,
            Some(Refusal::OutOfMemory),
            NOW,
            &mint,
        );
        let answers: Vec<_> = step
            .answers
            .iter()
            .map(|(w, a)| (w.handle, a.clone()))
            .collect();
        assert_eq!(
            answers,
            [
                (1, Answer::Blocked(Refusal::OutOfMemory)),
                (2, Answer::Blocked(Refusal::OutOfMemory)),
                (3, Answer::TimedOut)
            ]
        );
        assert!(step.grants.is_empty() && queues.is_empty());
        assert_eq!(mint.high_water(), 0);
    }
}
