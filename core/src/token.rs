//! Fencing tokens: minted from one module-wide high-water mark.
//!
//! A token is `max(last + 1, unix_ms * TOKENS_PER_MS)`. One counter for the whole
//! server is enough for the per-key guarantee (a key's next token is greater than any
//! token minted or seen before, for any key), and needs no side keys. The clock floor
//! keeps tokens increasing even where the high-water mark was lost: a replica promoted
//! before it received the last grants, or an AOF rewritten without its RDB preamble.
//! With 1000 tokens per millisecond, tokens stay below 2^53 (exact in a JavaScript or
//! JSON number) until the year 2255.

use std::sync::atomic::{AtomicI64, Ordering};

/// How many tokens fit in one millisecond of the clock floor.
pub const TOKENS_PER_MS: i64 = 1000;

/// The source of fencing tokens: remembers the highest token minted or seen.
#[derive(Debug, Default)]
pub struct TokenMint {
    // Redis runs module code on its main thread only; the atomic just makes the
    // static `Sync` without `unsafe`.
    high_water: AtomicI64,
}

impl TokenMint {
    pub const fn new() -> Self {
        TokenMint {
            high_water: AtomicI64::new(0),
        }
    }

    /// Mints the next token at `now_ms` (Unix time in ms), or `None` once tokens would
    /// no longer fit in an `i64` (centuries of grants at full speed).
    pub fn mint(&self, now_ms: i64) -> Option<i64> {
        let next = self.high_water.load(Ordering::Relaxed).checked_add(1)?;
        let floor = now_ms.saturating_mul(TOKENS_PER_MS);
        let token = next.max(floor);
        if token == i64::MAX {
            return None;
        }
        self.high_water.store(token, Ordering::Relaxed);
        Some(token)
    }

    /// Records a token that arrived from elsewhere (RDB, AOF, replication, RESTORE), so
    /// that every later token is greater.
    pub fn observe(&self, token: i64) {
        self.high_water.fetch_max(token, Ordering::Relaxed);
    }

    /// The highest token minted or seen so far (0 before the first).
    pub fn high_water(&self) -> i64 {
        self.high_water.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_follow_the_clock_floor() {
        let mint = TokenMint::new();
        assert_eq!(mint.mint(5), Some(5 * TOKENS_PER_MS));
        assert_eq!(mint.mint(5), Some(5 * TOKENS_PER_MS + 1));
        assert_eq!(mint.mint(7), Some(7 * TOKENS_PER_MS));
    }

    #[test]
    fn tokens_never_go_back_when_the_clock_does() {
        let mint = TokenMint::new();
        let first = mint.mint(1_000_000).unwrap();
        let after_clock_step_back = mint.mint(10).unwrap();
        assert_eq!(after_clock_step_back, first + 1);
    }

    #[test]
    fn observed_tokens_raise_the_high_water_mark() {
        let mint = TokenMint::new();
        mint.observe(42_000_000);
        assert_eq!(mint.high_water(), 42_000_000);
        assert_eq!(mint.mint(1), Some(42_000_001));
        mint.observe(3);
        assert_eq!(mint.high_water(), 42_000_001);
    }

    #[test]
    fn minting_stops_before_overflow() {
        let mint = TokenMint::new();
        mint.observe(i64::MAX - 2);
        assert_eq!(mint.mint(0), Some(i64::MAX - 1));
        assert_eq!(mint.mint(0), None);
        assert_eq!(mint.mint(i64::MAX), None);
        assert_eq!(mint.high_water(), i64::MAX - 1);
    }

    #[test]
    fn today_tokens_are_exact_in_a_double() {
        let year_2255_ms: i64 = 9_000_000_000_000;
        let mint = TokenMint::new();
        let token = mint.mint(year_2255_ms).unwrap();
        assert!(token < 1 << 53);
    }
}
