//! The rules of acquire, release and extend, decided over a lock's holdings without
//! touching them: each returns a plan that the glue applies. Time comes in as an
//! argument (Unix milliseconds); a miss on an exclusive lock (the common case under
//! contention) does not even read it.
//!
//! Shared holdings whose expiry has passed count as gone in every rule. Before a
//! write to a shared lock the glue removes them ([`Lock::remove_lapsed`]) and says so
//! to replicas, so that a replica, which never judges time, holds what the master
//! holds.

use crate::holdings::{holds_at, Kind, Lock, Mode};
use crate::token::TokenMint;

/// Why a rule could not be applied; each maps to an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    /// `now + ttl` does not fit in Unix milliseconds.
    ExpiryOutOfRange,
    /// The token counter reached the end of `i64`.
    TokensExhausted,
    /// A new holding asked for by an owner longer than `lock.max-owner-len`.
    OwnerTooLong { len: usize, max: usize },
    /// The owner holds the key in the other mode (no upgrade or downgrade).
    ModeConflict { held: Mode },
}

/// An acquire, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub owner: &'a [u8],
    pub ttl: i64,
    pub kind: Kind,
}

/// What an acquire does to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquirePlan {
    /// A new holding with this fresh token and expiry: a new lock when the key was
    /// free, or one more shared holding. The key then expires at `key_expires_at`.
    Grant {
        token: i64,
        expires_at: i64,
        key_expires_at: i64,
    },
    /// The owner already holds it in this mode: its holding keeps its token and now
    /// expires at `expires_at`; the key at `key_expires_at`.
    Refresh {
        token: i64,
        expires_at: i64,
        key_expires_at: i64,
    },
    /// Not granted now: change nothing.
    Busy,
}

/// The absolute expiry (Unix ms) of a holding taken at `now_ms` for `ttl_ms`.
pub fn expires_at(now_ms: i64, ttl_ms: i64) -> Result<i64, LockError> {
    now_ms
        .checked_add(ttl_ms)
        .ok_or(LockError::ExpiryOutOfRange)
}

/// True when a request of `kind` may join `current` (live holdings only) now, queue
/// aside.
pub fn fits(current: Option<&Lock>, kind: Kind, now_ms: i64) -> bool {
    match (current, kind) {
        (None, _) => true,
        (Some(Lock::Exclusive { .. }), _) | (Some(Lock::Shared(_)), Kind::Exclusive) => {
            live_count(current, now_ms) == 0
        }
        (Some(Lock::Shared(_)), Kind::Shared { limit }) => {
            limit.is_none_or(|n| live_count(current, now_ms) < n as usize)
        }
    }
}

/// Holdings of `current` that hold at `now_ms` (an exclusive one while its key
/// exists).
fn live_count(current: Option<&Lock>, now_ms: i64) -> usize {
    match current {
        None => 0,
        Some(Lock::Exclusive { .. }) => 1,
        Some(Lock::Shared(holdings)) => {
            holdings.len().saturating_sub(holdings.lapsed_count(now_ms))
        }
    }
}

/// The key's expiry once `owner`'s shared holding expires at `expires_at` (a new one
/// or a refreshed one), among the live holdings of `current`.
pub(crate) fn shared_key_expiry(
    current: Option<&Lock>,
    owner: &[u8],
    expires_at: i64,
    now_ms: i64,
) -> i64 {
    match current {
        // The latest of the others: if it does not hold, none of them does.
        Some(Lock::Shared(holdings)) => holdings
            .latest_but(owner)
            .filter(|at| holds_at(*at, now_ms))
            .map_or(expires_at, |at| at.max(expires_at)),
        _ => expires_at,
    }
}

/// Decides an acquire of a key whose lock is `current` (`None`: free) and whose
/// Redis expiry is `key_expires_at`. `queued`: clients wait for the key, so a new
/// holding is never granted ahead of them (a refresh by a holder is). A token is
/// minted only for a grant. An owner longer than `max_owner_len` may only refresh
/// what it holds (the limit may have been lowered since); asking for a new holding,
/// now or by waiting, it gets an error.
pub fn plan_acquire(
    current: Option<&Lock>,
    request: Acquire<'_>,
    queued: bool,
    now_ms: impl FnOnce() -> i64,
    mint: &TokenMint,
    max_owner_len: usize,
) -> Result<AcquirePlan, LockError> {
    let mode = request.kind.mode();
    // One look for the owner: its holding here, and in which mode.
    let held_token =
        match current.and_then(|lock| Some((lock.mode(), lock.holding_of(request.owner)?))) {
            Some((held, _)) if held != mode => return Err(LockError::ModeConflict { held }),
            Some((_, token)) => Some(token),
            None => None,
        };
    if held_token.is_none() && request.owner.len() > max_owner_len {
        return Err(LockError::OwnerTooLong {
            len: request.owner.len(),
            max: max_owner_len,
        });
    }
    // The fast miss: an exclusive lock held by another owner needs no clock.
    if held_token.is_none() && matches!(current, Some(Lock::Exclusive { .. })) {
        return Ok(AcquirePlan::Busy);
    }
    let now = now_ms();
    let at = expires_at(now, request.ttl)?;
    if let Some(token) = held_token {
        let live = match current {
            Some(Lock::Shared(holdings)) => holdings
                .get(request.owner)
                .is_some_and(|h| holds_at(h.expires_at, now)),
            _ => true,
        };
        if live {
            let key_expires_at = match mode {
                Mode::Exclusive => at,
                Mode::Shared => shared_key_expiry(current, request.owner, at, now),
            };
            return Ok(AcquirePlan::Refresh {
                token,
                expires_at: at,
                key_expires_at,
            });
        }
        // A lapsed holding of this owner: gone, as if never held.
    }
    if queued || !fits(current, request.kind, now) {
        return Ok(AcquirePlan::Busy);
    }
    let token = mint.mint(now).ok_or(LockError::TokensExhausted)?;
    let key_expires_at = match mode {
        Mode::Exclusive => at,
        Mode::Shared => shared_key_expiry(current, request.owner, at, now),
    };
    Ok(AcquirePlan::Grant {
        token,
        expires_at: at,
        key_expires_at,
    })
}

/// What a release does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleasePlan {
    /// `owner` holds nothing here: change nothing.
    NotHeld,
    /// Its holding was the last: delete the key.
    DeleteKey,
    /// Remove its shared holding; the key then expires at `key_expires_at`.
    RemoveHolding { key_expires_at: i64 },
}

/// Decides a release by `owner`. `now_ms` gives the time (read only for shared
/// holdings), or `None` when replaying the master's decision (a replica and AOF
/// loading never judge time: what the master released held there).
pub fn plan_release(
    current: Option<&Lock>,
    owner: &[u8],
    now_ms: impl FnOnce() -> Option<i64>,
) -> ReleasePlan {
    match current {
        Some(Lock::Exclusive { owner: o, .. }) if o.as_bytes() == owner => ReleasePlan::DeleteKey,
        Some(Lock::Shared(holdings)) => {
            let now_ms = now_ms();
            let live = |at: i64| now_ms.is_none_or(|now| holds_at(at, now));
            let mine = holdings.get(owner).is_some_and(|h| live(h.expires_at));
            if !mine {
                return ReleasePlan::NotHeld;
            }
            // The latest of the others: if it does not hold, none of them does.
            let rest = holdings.latest_but(owner).filter(|at| live(*at));
            match rest {
                Some(key_expires_at) => ReleasePlan::RemoveHolding { key_expires_at },
                None => ReleasePlan::DeleteKey,
            }
        }
        _ => ReleasePlan::NotHeld,
    }
}

/// What an extend does: `owner`'s holding now expires at `expires_at`, the key at
/// `key_expires_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtendPlan {
    /// The holding's mode, and the limit it holds with (an extend keeps it).
    pub kind: Kind,
    /// The holding's token (it does not change).
    pub token: i64,
    pub expires_at: i64,
    pub key_expires_at: i64,
}

/// Decides an extend by `owner` to `ttl_ms` from `now_ms`; `None` when it holds
/// nothing here (an expired holding is never re-created).
pub fn plan_extend(
    current: Option<&Lock>,
    owner: &[u8],
    ttl_ms: i64,
    now_ms: i64,
) -> Result<Option<ExtendPlan>, LockError> {
    let Some(lock) = current else {
        return Ok(None);
    };
    let mode = lock.mode();
    let live = match lock {
        Lock::Exclusive { owner: o, token } => {
            (o.as_bytes() == owner).then_some((*token, Kind::Exclusive))
        }
        Lock::Shared(holdings) => holdings
            .get(owner)
            .filter(|h| holds_at(h.expires_at, now_ms))
            .map(|h| (h.token, Kind::Shared { limit: h.limit })),
    };
    let Some((token, kind)) = live else {
        return Ok(None);
    };
    let at = expires_at(now_ms, ttl_ms)?;
    let key_expires_at = match mode {
        Mode::Exclusive => at,
        Mode::Shared => shared_key_expiry(current, owner, at, now_ms),
    };
    Ok(Some(ExtendPlan {
        kind,
        token,
        expires_at: at,
        key_expires_at,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::TOKENS_PER_MS;

    const NOW: i64 = 1_000_000;

    fn exclusive(owner: &[u8], ttl: i64) -> Acquire<'_> {
        Acquire {
            owner,
            ttl,
            kind: Kind::Exclusive,
        }
    }

    fn shared(owner: &[u8], ttl: i64, limit: Option<u32>) -> Acquire<'_> {
        Acquire {
            owner,
            ttl,
            kind: Kind::Shared { limit },
        }
    }

    fn plan(current: Option<&Lock>, request: Acquire<'_>, mint: &TokenMint) -> AcquirePlan {
        plan_acquire(current, request, false, || NOW, mint, 64).unwrap()
    }

    #[test]
    fn a_free_key_is_granted_with_a_fresh_token() {
        let mint = TokenMint::new();
        let expected = NOW * TOKENS_PER_MS;
        assert_eq!(
            plan(None, exclusive(b"a", 100), &mint),
            AcquirePlan::Grant {
                token: expected,
                expires_at: NOW + 100,
                key_expires_at: NOW + 100
            }
        );
        assert_eq!(mint.high_water(), expected);
    }

    #[test]
    fn the_holder_refreshes_and_keeps_its_token_even_with_a_queue() {
        let mint = TokenMint::new();
        let lock = Lock::exclusive(b"a", 7);
        assert_eq!(
            plan_acquire(Some(&lock), exclusive(b"a", 500), true, || NOW, &mint, 64),
            Ok(AcquirePlan::Refresh {
                token: 7,
                expires_at: NOW + 500,
                key_expires_at: NOW + 500
            })
        );
        assert_eq!(mint.high_water(), 0, "a refresh mints nothing");
    }

    #[test]
    fn a_miss_on_an_exclusive_lock_reads_no_clock() {
        let mint = TokenMint::new();
        let lock = Lock::exclusive(b"a", 7);
        let read_clock = std::cell::Cell::new(false);
        let clock = || {
            read_clock.set(true);
            NOW
        };
        for request in [exclusive(b"b", 100), shared(b"b", 100, None)] {
            let plan = plan_acquire(Some(&lock), request, false, clock, &mint, 64);
            assert_eq!(plan, Ok(AcquirePlan::Busy));
        }
        assert!(!read_clock.get(), "a miss must not read the clock");
        assert_eq!(mint.high_water(), 0);
    }

    #[test]
    fn readers_share_and_a_writer_waits_for_all_of_them() {
        let mint = TokenMint::new();
        let mut lock = Lock::shared(b"r1", 1, NOW + 100, None);
        let AcquirePlan::Grant {
            token,
            key_expires_at,
            ..
        } = plan(Some(&lock), shared(b"r2", 300, None), &mint)
        else {
            panic!("a second reader shares");
        };
        assert!(token > 1);
        assert_eq!(
            key_expires_at,
            NOW + 300,
            "the key lives with its last holding"
        );
        lock.add_shared(b"r2", token, NOW + 300, None);
        assert_eq!(
            plan(Some(&lock), exclusive(b"w", 100), &mint),
            AcquirePlan::Busy
        );
        let after_one_lapsed = plan_acquire(
            Some(&lock),
            exclusive(b"w", 100),
            false,
            || NOW + 200,
            &mint,
            64,
        );
        assert_eq!(
            after_one_lapsed,
            Ok(AcquirePlan::Busy),
            "one reader still holds"
        );
        let after_both = plan_acquire(
            Some(&lock),
            exclusive(b"w", 100),
            false,
            || NOW + 400,
            &mint,
            64,
        );
        assert!(
            matches!(after_both, Ok(AcquirePlan::Grant { .. })),
            "both lapsed"
        );
    }

    #[test]
    fn a_limit_counts_live_owners_and_belongs_to_the_request() {
        let mint = TokenMint::new();
        let mut lock = Lock::shared(b"p1", 1, NOW + 100, None);
        lock.add_shared(b"p2", 2, NOW + 10, None);
        assert_eq!(
            plan(Some(&lock), shared(b"p3", 100, Some(2)), &mint),
            AcquirePlan::Busy
        );
        assert!(matches!(
            plan(Some(&lock), shared(b"p3", 100, Some(3)), &mint),
            AcquirePlan::Grant { .. }
        ));
        let after_lapse = plan_acquire(
            Some(&lock),
            shared(b"p3", 100, Some(2)),
            false,
            || NOW + 50,
            &mint,
            64,
        );
        assert!(
            matches!(after_lapse, Ok(AcquirePlan::Grant { .. })),
            "p2 lapsed: a permit is free"
        );
    }

    #[test]
    fn a_newcomer_never_goes_ahead_of_the_queue() {
        let mint = TokenMint::new();
        let lock = Lock::shared(b"r1", 1, NOW + 100, None);
        for (current, request) in [
            (None, exclusive(b"n", 100)),
            (Some(&lock), shared(b"n", 100, None)),
        ] {
            let plan = plan_acquire(current, request, true, || NOW, &mint, 64);
            assert_eq!(plan, Ok(AcquirePlan::Busy));
        }
        assert_eq!(mint.high_water(), 0);
    }

    #[test]
    fn the_same_owner_in_the_other_mode_is_an_error_and_changes_nothing() {
        let mint = TokenMint::new();
        let held = Lock::exclusive(b"a", 7);
        let read = Lock::shared(b"a", 7, NOW + 100, None);
        assert_eq!(
            plan_acquire(
                Some(&held),
                shared(b"a", 100, None),
                false,
                || NOW,
                &mint,
                64
            ),
            Err(LockError::ModeConflict {
                held: Mode::Exclusive
            })
        );
        assert_eq!(
            plan_acquire(Some(&read), exclusive(b"a", 100), false, || NOW, &mint, 64),
            Err(LockError::ModeConflict { held: Mode::Shared })
        );
        // SHARED LIMIT n is the shared mode: a refresh.
        assert!(matches!(
            plan_acquire(
                Some(&read),
                shared(b"a", 100, Some(3)),
                false,
                || NOW,
                &mint,
                64
            ),
            Ok(AcquirePlan::Refresh { token: 7, .. })
        ));
        assert_eq!(mint.high_water(), 0);
    }

    #[test]
    fn a_shared_refresh_moves_the_key_expiry_to_the_latest_holding() {
        let mint = TokenMint::new();
        let mut lock = Lock::shared(b"a", 1, NOW + 500, None);
        lock.add_shared(b"b", 2, NOW + 200, None);
        assert_eq!(
            plan(Some(&lock), shared(b"a", 100, None), &mint),
            AcquirePlan::Refresh {
                token: 1,
                expires_at: NOW + 100,
                key_expires_at: NOW + 200
            }
        );
    }

    #[test]
    fn an_over_long_owner_may_refresh_what_it_holds_but_take_nothing_new() {
        let mint = TokenMint::new();
        let long = [b'o'; 100];
        let lock = Lock::exclusive(&long, 7);
        assert!(matches!(
            plan_acquire(Some(&lock), exclusive(&long, 500), false, || NOW, &mint, 10),
            Ok(AcquirePlan::Refresh { token: 7, .. })
        ));
        let too_long = Err(LockError::OwnerTooLong { len: 100, max: 10 });
        assert_eq!(
            plan_acquire(None, exclusive(&long, 500), false, || NOW, &mint, 10),
            too_long
        );
        let other = Lock::exclusive(b"a", 7);
        assert_eq!(
            plan_acquire(
                Some(&other),
                exclusive(&long, 500),
                false,
                || NOW,
                &mint,
                10
            ),
            too_long,
            "waiting for a new holding is refused too"
        );
        assert_eq!(mint.high_water(), 0);
    }

    #[test]
    fn an_expiry_past_the_end_of_time_is_an_error_and_mints_nothing() {
        let mint = TokenMint::new();
        assert_eq!(
            plan_acquire(None, exclusive(b"a", i64::MAX), false, || NOW, &mint, 64),
            Err(LockError::ExpiryOutOfRange)
        );
        assert_eq!(mint.high_water(), 0);
        let lock = Lock::exclusive(b"a", 1);
        assert_eq!(
            plan_extend(Some(&lock), b"a", i64::MAX, NOW),
            Err(LockError::ExpiryOutOfRange)
        );
    }

    #[test]
    fn an_exhausted_counter_is_an_error() {
        let mint = TokenMint::new();
        mint.observe(i64::MAX - 1);
        assert_eq!(
            plan_acquire(None, exclusive(b"a", 1), false, || NOW, &mint, 64),
            Err(LockError::TokensExhausted)
        );
    }

    #[test]
    fn only_a_holder_releases_and_the_last_holding_deletes_the_key() {
        let lock = Lock::exclusive(b"a", 1);
        assert_eq!(
            plan_release(Some(&lock), b"a", || Some(NOW)),
            ReleasePlan::DeleteKey
        );
        assert_eq!(
            plan_release(Some(&lock), b"b", || Some(NOW)),
            ReleasePlan::NotHeld
        );
        assert_eq!(plan_release(None, b"a", || Some(NOW)), ReleasePlan::NotHeld);
        let mut readers = Lock::shared(b"r1", 1, NOW + 100, None);
        readers.add_shared(b"r2", 2, NOW + 300, None);
        assert_eq!(
            plan_release(Some(&readers), b"r2", || Some(NOW)),
            ReleasePlan::RemoveHolding {
                key_expires_at: NOW + 100
            }
        );
        assert_eq!(
            plan_release(Some(&readers), b"r2", || Some(NOW + 200)),
            ReleasePlan::DeleteKey,
            "the other holding has lapsed"
        );
        assert_eq!(
            plan_release(Some(&readers), b"r1", || Some(NOW + 200)),
            ReleasePlan::NotHeld
        );
        assert_eq!(
            plan_release(Some(&readers), b"r1", || None),
            ReleasePlan::RemoveHolding {
                key_expires_at: NOW + 300
            },
            "a replica never judges time"
        );
    }

    #[test]
    fn extend_moves_the_expiry_of_a_live_holding_only() {
        let lock = Lock::exclusive(b"a", 1);
        assert_eq!(
            plan_extend(Some(&lock), b"a", 50, NOW),
            Ok(Some(ExtendPlan {
                kind: Kind::Exclusive,
                token: 1,
                expires_at: NOW + 50,
                key_expires_at: NOW + 50
            }))
        );
        assert_eq!(plan_extend(Some(&lock), b"b", 50, NOW), Ok(None));
        assert_eq!(plan_extend(None, b"a", 50, NOW), Ok(None));
        let mut readers = Lock::shared(b"r1", 1, NOW + 100, None);
        readers.add_shared(b"r2", 2, NOW + 300, None);
        assert_eq!(
            plan_extend(Some(&readers), b"r1", 50, NOW),
            Ok(Some(ExtendPlan {
                kind: Kind::Shared { limit: None },
                token: 1,
                expires_at: NOW + 50,
                key_expires_at: NOW + 300
            }))
        );
        assert_eq!(
            plan_extend(Some(&readers), b"r1", 50, NOW + 101),
            Ok(None),
            "lapsed"
        );
    }

    #[test]
    fn tokens_increase_across_grants_of_one_key() {
        let mint = TokenMint::new();
        let mut last = 0;
        for _ in 0..5 {
            match plan(None, exclusive(b"a", 100), &mint) {
                AcquirePlan::Grant { token, .. } => {
                    assert!(token > last);
                    last = token;
                }
                other => panic!("expected a grant, got {other:?}"),
            }
        }
    }
}
