//! The lock itself, in plain Rust: what a lock holds and the rules of acquire, release
//! and extend. Nothing here knows about Redis; time comes in as an argument (Unix
//! milliseconds), so every rule is unit-tested without a server.

#![forbid(unsafe_code)]

pub mod owner;
pub mod queue;
pub mod stats;
pub mod timers;
pub mod token;

use owner::Owner;
pub use stats::Stats;
pub use token::TokenMint;

/// A held lock: who holds it and the fencing token of this holding. Its expiry is the
/// key's ordinary Redis expiry, kept by Redis, not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    token: i64,
    owner: Owner,
}

impl Lock {
    pub fn new(owner: &[u8], token: i64) -> Self {
        Lock {
            token,
            owner: Owner::new(owner),
        }
    }

    pub fn owner(&self) -> &[u8] {
        self.owner.as_bytes()
    }

    pub fn token(&self) -> i64 {
        self.token
    }

    pub fn is_held_by(&self, owner: &[u8]) -> bool {
        self.owner.as_bytes() == owner
    }

    /// Heap bytes this lock owns besides the `Lock` itself (for `MEMORY USAGE`).
    pub fn heap_size(&self) -> usize {
        self.owner.heap_size()
    }
}

/// What an acquire does to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquirePlan {
    /// The key was free: store a new lock with this fresh token and expiry.
    Grant { token: i64, expires_at: i64 },
    /// The owner already holds it: keep the token, move the expiry.
    Refresh { token: i64, expires_at: i64 },
    /// Someone else holds it: change nothing.
    Busy,
}

/// Why a rule could not be applied; each maps to an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockError {
    /// `now + ttl` does not fit in Unix milliseconds.
    ExpiryOutOfRange,
    /// The token counter reached the end of `i64`.
    TokensExhausted,
    /// A new holding asked for by an owner longer than `lock.max-owner-len`.
    OwnerTooLong { len: usize, max: usize },
}

/// The absolute expiry (Unix ms) of a lock taken at `now_ms` for `ttl_ms`.
pub fn expires_at(now_ms: i64, ttl_ms: i64) -> Result<i64, LockError> {
    now_ms
        .checked_add(ttl_ms)
        .ok_or(LockError::ExpiryOutOfRange)
}

/// Decides an acquire of a key whose current lock is `current` (`None`: free).
/// A token is minted only for a fresh grant. The clock `now_ms` is read only when
/// the answer needs the time: a miss on a held lock (the common case under
/// contention) does not. An owner longer than `max_owner_len` may only refresh what
/// it holds (the limit may have been lowered since it took the lock); asking for a
/// new holding, granted now or later, it gets an error.
pub fn plan_acquire(
    current: Option<&Lock>,
    owner: &[u8],
    ttl_ms: i64,
    now_ms: impl FnOnce() -> i64,
    mint: &TokenMint,
    max_owner_len: usize,
) -> Result<AcquirePlan, LockError> {
    let holder = current.is_some_and(|lock| lock.is_held_by(owner));
    if !holder && owner.len() > max_owner_len {
        return Err(LockError::OwnerTooLong {
            len: owner.len(),
            max: max_owner_len,
        });
    }
    match current {
        Some(lock) if lock.is_held_by(owner) => Ok(AcquirePlan::Refresh {
            token: lock.token,
            expires_at: expires_at(now_ms(), ttl_ms)?,
        }),
        Some(_) => Ok(AcquirePlan::Busy),
        None => {
            let now_ms = now_ms();
            let expires_at = expires_at(now_ms, ttl_ms)?;
            let token = mint.mint(now_ms).ok_or(LockError::TokensExhausted)?;
            Ok(AcquirePlan::Grant { token, expires_at })
        }
    }
}

/// True when `owner` may release the lock: only its holder can.
pub fn may_release(current: Option<&Lock>, owner: &[u8]) -> bool {
    current.is_some_and(|lock| lock.is_held_by(owner))
}

/// The new absolute expiry when `owner` extends its lock by `ttl_ms` from `now_ms`;
/// `None` when it does not hold the lock (a free key is never re-created).
pub fn plan_extend(
    current: Option<&Lock>,
    owner: &[u8],
    ttl_ms: i64,
    now_ms: i64,
) -> Result<Option<i64>, LockError> {
    if may_release(current, owner) {
        expires_at(now_ms, ttl_ms).map(Some)
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    #[test]
    fn a_free_key_is_granted_with_a_fresh_token() {
        let mint = TokenMint::new();
        let plan = plan_acquire(None, b"a", 100, || NOW, &mint, 64).unwrap();
        let expected_token = NOW * token::TOKENS_PER_MS;
        assert_eq!(
            plan,
            AcquirePlan::Grant {
                token: expected_token,
                expires_at: NOW + 100
            }
        );
        assert_eq!(mint.high_water(), expected_token);
    }

    #[test]
    fn the_holder_refreshes_and_keeps_its_token() {
        let mint = TokenMint::new();
        let lock = Lock::new(b"a", 7);
        let plan = plan_acquire(Some(&lock), b"a", 500, || NOW, &mint, 64).unwrap();
        assert_eq!(
            plan,
            AcquirePlan::Refresh {
                token: 7,
                expires_at: NOW + 500
            }
        );
        assert_eq!(mint.high_water(), 0, "a refresh mints nothing");
    }

    #[test]
    fn another_owner_finds_the_lock_busy() {
        let mint = TokenMint::new();
        let lock = Lock::new(b"a", 7);
        let read_clock = std::cell::Cell::new(false);
        let clock = || {
            read_clock.set(true);
            NOW
        };
        let plan = plan_acquire(Some(&lock), b"b", 100, clock, &mint, 64).unwrap();
        assert_eq!(plan, AcquirePlan::Busy);
        assert_eq!(mint.high_water(), 0);
        assert!(!read_clock.get(), "a miss must not read the clock");
    }

    #[test]
    fn a_lock_with_a_uuid_owner_fits_one_48_byte_allocation() {
        assert_eq!(std::mem::size_of::<Lock>(), 48);
    }

    #[test]
    fn owners_compare_as_bytes() {
        let lock = Lock::new(b"owner\0\xff", 1);
        assert!(lock.is_held_by(b"owner\0\xff"));
        assert!(!lock.is_held_by(b"owner\0"));
        assert!(!lock.is_held_by(b"OWNER\0\xff"));
    }

    #[test]
    fn tokens_increase_across_grants_of_one_key() {
        let mint = TokenMint::new();
        let mut last = 0;
        for _ in 0..5 {
            match plan_acquire(None, b"a", 100, || NOW, &mint, 64).unwrap() {
                AcquirePlan::Grant { token, .. } => {
                    assert!(token > last);
                    last = token;
                }
                other => panic!("expected a grant, got {other:?}"),
            }
        }
    }

    #[test]
    fn an_expiry_past_the_end_of_time_is_an_error_and_mints_nothing() {
        let mint = TokenMint::new();
        assert_eq!(
            plan_acquire(None, b"a", i64::MAX, || NOW, &mint, 64),
            Err(LockError::ExpiryOutOfRange)
        );
        assert_eq!(mint.high_water(), 0);
        let lock = Lock::new(b"a", 1);
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
            plan_acquire(None, b"a", 1, || NOW, &mint, 64),
            Err(LockError::TokensExhausted)
        );
    }

    #[test]
    fn an_over_long_owner_may_refresh_what_it_holds_but_take_nothing_new() {
        let mint = TokenMint::new();
        let long = [b'o'; 100];
        let lock = Lock::new(&long, 7);
        assert_eq!(
            plan_acquire(Some(&lock), &long, 500, || NOW, &mint, 10),
            Ok(AcquirePlan::Refresh {
                token: 7,
                expires_at: NOW + 500
            })
        );
        let too_long = Err(LockError::OwnerTooLong { len: 100, max: 10 });
        assert_eq!(plan_acquire(None, &long, 500, || NOW, &mint, 10), too_long);
        let other = Lock::new(b"a", 7);
        assert_eq!(
            plan_acquire(Some(&other), &long, 500, || NOW, &mint, 10),
            too_long,
            "waiting for a new holding is refused too"
        );
        assert_eq!(mint.high_water(), 0);
    }

    #[test]
    fn only_the_holder_may_release() {
        let lock = Lock::new(b"a", 1);
        assert!(may_release(Some(&lock), b"a"));
        assert!(!may_release(Some(&lock), b"b"));
        assert!(!may_release(None, b"a"));
    }

    #[test]
    fn extend_moves_the_expiry_of_the_holder_only() {
        let lock = Lock::new(b"a", 1);
        assert_eq!(plan_extend(Some(&lock), b"a", 50, NOW), Ok(Some(NOW + 50)));
        assert_eq!(plan_extend(Some(&lock), b"b", 50, NOW), Ok(None));
        assert_eq!(plan_extend(None, b"a", 50, NOW), Ok(None));
    }
}
