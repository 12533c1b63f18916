//! Fencing tokens: minted from one module-wide high-water mark, each node in a
//! class of its own.
//!
//! A token is the least integer at or above `max(last + 1, unix_ms * TOKENS_PER_MS)`
//! whose last decimal digit is the minting node's **digit**. One counter for the
//! whole server is enough for the per-key guarantee (a key's next token is greater
//! than any token minted or seen before, for any key), and needs no side keys. The
//! clock floor keeps tokens increasing even where the high-water mark was lost: a
//! replica promoted before it received the last grants, or an AOF rewritten without
//! its RDB preamble.
//!
//! The digit is what keeps two masters apart. Replication is asynchronous, so after a
//! failover the old master may still be granting (it was stopped or cut off, and
//! Sentinel has not yet turned it into a replica) while the new one grants too. Both
//! sit near the clock floor, so without a digit they would mint the same token in the
//! same millisecond, and a resource that lets a holder write twice with one token
//! (token ≥ the highest it accepted) could not tell their writes apart. A node's
//! digit is the digit of its high-water mark when it first mints (a fresh server: 0;
//! a server restarted from its own RDB or AOF: its own), and a promotion moves it to
//! the first digit after the old master's that no token the node saw since its last
//! promotion ended in. So a promoted replica never shares the digit of the master it
//! followed, nor, while fewer than ten digits were seen, of any earlier one.
//!
//! The cost: a node mints one token in ten, so 100 grants in one millisecond stay on
//! the clock; beyond that tokens run ahead of it by at most ten per grant. At 1000
//! tokens per millisecond, tokens on the clock stay below 2^53 (exact in a
//! JavaScript or JSON number) until the year 2255. A 2-core machine's pipelined peak
//! of 229,000 grants a second runs them 2.3 times as fast as the clock: 2^53 after
//! about 100 years of it without a pause (23 years at a million a second). While the
//! mark is ahead of the clock, the clock floor covers a grant lost in a failover only
//! if the failover takes longer than the mark is ahead.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

/// How many tokens fit in one millisecond of the clock floor.
pub const TOKENS_PER_MS: i64 = 1000;

/// How many digits tell nodes apart: a token's last decimal digit is its minter's.
pub const NODE_DIGITS: i64 = 10;

/// No digit chosen yet: the first mint takes the high-water mark's.
const UNSET: i64 = -1;

/// The source of fencing tokens: remembers the highest token minted or seen, and the
/// digit this node's tokens end in.
#[derive(Debug)]
pub struct TokenMint {
    // Redis runs module code on its main thread only; the atomics just make the
    // static `Sync` without `unsafe`.
    high_water: AtomicI64,
    digit: AtomicI64,
    /// Bit `d` set: a token ending in `d` arrived from elsewhere since the last
    /// promotion.
    seen: AtomicU32,
}

impl Default for TokenMint {
    fn default() -> Self {
        TokenMint::new()
    }
}

/// The last decimal digit of a positive token.
pub fn digit_of(token: i64) -> i64 {
    token.rem_euclid(NODE_DIGITS)
}

/// When the holding with `token` was first granted, in Unix ms, as its token tells:
/// a token is minted at `unix_ms * TOKENS_PER_MS` or just above, so this is exact to
/// the millisecond while the mint follows the clock (fewer than 100 grants in a
/// millisecond on the node that minted it). A mint that ran ahead of the clock in a
/// burst makes its holdings look younger than they are (a hold then reads as
/// shorter, at least 0); a token minted on another node reads that node's clock.
pub fn held_since(token: i64) -> i64 {
    token.div_euclid(TOKENS_PER_MS)
}

impl TokenMint {
    pub const fn new() -> Self {
        TokenMint {
            high_water: AtomicI64::new(0),
            digit: AtomicI64::new(UNSET),
            seen: AtomicU32::new(0),
        }
    }

    /// Mints the next token at `now_ms` (Unix time in ms), or `None` once tokens would
    /// no longer fit in an `i64` (centuries of grants at full speed).
    pub fn mint(&self, now_ms: i64) -> Option<i64> {
        let least = self
            .high_water
            .load(Ordering::Relaxed)
            .checked_add(1)?
            .max(now_ms.saturating_mul(TOKENS_PER_MS));
        let digit = self.digit();
        let token = least.checked_add((digit - least).rem_euclid(NODE_DIGITS))?;
        if token == i64::MAX {
            return None;
        }
        self.high_water.store(token, Ordering::Relaxed);
        Some(token)
    }

    /// Records a token that arrived from elsewhere (RDB, AOF, replication, RESTORE), so
    /// that every later token is greater, and a later promotion picks another digit.
    pub fn observe(&self, token: i64) {
        self.high_water.fetch_max(token, Ordering::Relaxed);
        if token > 0 {
            self.seen.fetch_or(1 << digit_of(token), Ordering::Relaxed);
        }
    }

    /// This node became a master (a replica promoted): its tokens from now on end in
    /// a digit other than the high-water mark's (the last master's), and, if one is
    /// left, other than every digit seen since the last promotion. Returns the digit.
    pub fn promote(&self) -> i64 {
        let last = digit_of(self.high_water.load(Ordering::Relaxed));
        let taken = self.seen.swap(0, Ordering::Relaxed) | 1 << last;
        let digit = (1..NODE_DIGITS)
            .map(|step| (last + step) % NODE_DIGITS)
            .find(|&d| taken & 1 << d == 0)
            .unwrap_or((last + 1) % NODE_DIGITS);
        self.digit.store(digit, Ordering::Relaxed);
        digit
    }

    /// The digit this node's tokens end in: chosen at the first mint or promotion.
    pub fn digit(&self) -> i64 {
        match self.digit.load(Ordering::Relaxed) {
            UNSET => {
                let digit = digit_of(self.high_water.load(Ordering::Relaxed));
                self.digit.store(digit, Ordering::Relaxed);
                digit
            }
            digit => digit,
        }
    }

    /// The highest token minted or seen so far (0 before the first).
    pub fn high_water(&self) -> i64 {
        self.high_water.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rand::{Rng, SeedableRng};

    #[test]
    fn tokens_follow_the_clock_floor() {
        let mint = TokenMint::new();
        assert_eq!(mint.mint(5), Some(5 * TOKENS_PER_MS));
        assert_eq!(mint.mint(5), Some(5 * TOKENS_PER_MS + NODE_DIGITS));
        assert_eq!(mint.mint(7), Some(7 * TOKENS_PER_MS));
        assert_eq!(held_since(5 * TOKENS_PER_MS + NODE_DIGITS), 5);
    }

    #[test]
    fn tokens_never_go_back_when_the_clock_does() {
        let mint = TokenMint::new();
        let first = mint.mint(1_000_000).unwrap();
        let after_clock_step_back = mint.mint(10).unwrap();
        assert_eq!(after_clock_step_back, first + NODE_DIGITS);
    }

    #[test]
    fn observed_tokens_raise_the_high_water_mark() {
        let mint = TokenMint::new();
        mint.observe(42_000_000);
        assert_eq!(mint.high_water(), 42_000_000);
        assert_eq!(mint.mint(1), Some(42_000_010));
        mint.observe(3);
        assert_eq!(mint.high_water(), 42_000_010);
    }

    #[test]
    fn a_fresh_node_and_one_restarted_from_its_own_mark_keep_their_digit() {
        assert_eq!(TokenMint::new().mint(5), Some(5000));
        let restarted = TokenMint::new();
        restarted.observe(5_000_003); // its own last token, read back from its RDB
        assert_eq!(restarted.mint(1), Some(5_000_013));
        assert_eq!(restarted.digit(), 3);
    }

    #[test]
    fn minting_stops_before_overflow() {
        // i64::MAX ends in 7: digit 6 has i64::MAX - 1 as its last token.
        let mint = TokenMint::new();
        mint.observe(i64::MAX - 12);
        assert_eq!(mint.digit(), 5);
        assert_eq!(mint.mint(0), Some(i64::MAX - 2));
        assert_eq!(mint.mint(0), None);
        assert_eq!(mint.mint(i64::MAX), None);
        assert_eq!(mint.high_water(), i64::MAX - 2);
        let last = TokenMint::new();
        last.observe(i64::MAX - 11);
        assert_eq!(last.mint(0), Some(i64::MAX - 1));
        assert_eq!(last.mint(0), None);
    }

    #[test]
    fn today_tokens_are_exact_in_a_double_until_2255() {
        let year_2255_ms: i64 = 9_000_000_000_000;
        for digit_before in 0..NODE_DIGITS {
            let mint = TokenMint::new();
            mint.observe(digit_before);
            mint.promote(); // whatever digit it gets
            let token = mint.mint(year_2255_ms).unwrap();
            assert!(token < 1 << 53, "{token}");
        }
    }

    #[test]
    fn a_hundred_grants_a_millisecond_stay_on_the_clock() {
        let mint = TokenMint::new();
        let now = 1_800_000_000_000;
        let tokens: Vec<i64> = (0..100).map(|_| mint.mint(now).unwrap()).collect();
        assert!(tokens.windows(2).all(|w| w[1] > w[0]));
        assert!(*tokens.last().unwrap() < (now + 1) * TOKENS_PER_MS);
        // The 101st runs ahead of the clock, by one step.
        assert_eq!(mint.mint(now), Some((now + 1) * TOKENS_PER_MS));
    }

    #[test]
    fn a_promoted_replica_never_mints_the_old_masters_tokens() {
        // The old master keeps granting after the promotion (stopped, cut off); in
        // the same milliseconds both sit on the clock floor.
        let now = 1_800_000_000_000;
        let master = TokenMint::new();
        let replica = TokenMint::new();
        for _ in 0..5 {
            replica.observe(master.mint(now).unwrap());
        }
        assert_ne!(replica.promote(), master.digit());
        let mut old = Vec::new();
        let mut new = Vec::new();
        for ms in now..now + 50 {
            for _ in 0..3 {
                old.push(master.mint(ms).unwrap());
                new.push(replica.mint(ms).unwrap());
            }
        }
        assert!(old.iter().all(|t| !new.contains(t)));
    }

    #[test]
    fn a_promotion_avoids_every_digit_seen_since_the_last_one() {
        let node = TokenMint::new();
        node.observe(1_000_000); // master A, digit 0
        node.observe(1_000_011); // master B, digit 1, whose tokens it got next
        node.observe(1_000_022); // master C, digit 2
                                 // Next after C's digit, and neither A's nor B's: both may still be granting.
        assert_eq!(node.promote(), 3);
        assert_eq!(node.mint(0), Some(1_000_023));
        // Once every digit was seen, the one after the last master's.
        let crowded = TokenMint::new();
        for d in 0..NODE_DIGITS {
            crowded.observe(2_000_000 + d);
        }
        crowded.observe(2_000_015);
        assert_eq!(crowded.promote(), 6);
    }

    #[test]
    fn a_chain_of_failovers_keeps_concurrent_masters_apart_and_each_node_increasing() {
        // Three nodes; each failover promotes a replica that saw all of the old
        // master's tokens but the last few (asynchronous replication), while the old
        // master goes on granting for a while. Tokens of masters that grant in the
        // same span must differ, and each node's own tokens must increase.
        let mut rng = rand::rngs::StdRng::seed_from_u64(14);
        let nodes: Vec<TokenMint> = (0..3).map(|_| TokenMint::new()).collect();
        let mut last_of = [0i64; 3];
        let mut master = 0;
        let mut now = 1_800_000_000_000;
        for _failover in 0..200 {
            let mut minted = Vec::new();
            for _ in 0..rng.gen_range(1..300) {
                now += rng.gen_range(0..2);
                let token = nodes[master].mint(now).unwrap();
                assert!(token > last_of[master]);
                assert_eq!(digit_of(token), nodes[master].digit());
                last_of[master] = token;
                minted.push(token);
            }
            let lost = rng.gen_range(0..minted.len().min(5) + 1);
            let next = (master + rng.gen_range(1..3)) % 3;
            let replicated = &minted[..minted.len() - lost];
            for (n, node) in nodes.iter().enumerate() {
                if n != master {
                    replicated.iter().for_each(|&token| node.observe(token));
                }
            }
            nodes[next].promote();
            // The split brain: both grant for a while in the same milliseconds.
            let mut stale = Vec::new();
            let mut fresh = Vec::new();
            for _ in 0..rng.gen_range(1..100) {
                now += rng.gen_range(0..2);
                stale.push(nodes[master].mint(now).unwrap());
                fresh.push(nodes[next].mint(now).unwrap());
            }
            assert!(stale.iter().all(|t| !fresh.contains(t)));
            last_of[master] = *stale.last().unwrap();
            last_of[next] = *fresh.last().unwrap();
            // The old master becomes a replica of the new one; both replicas catch up.
            for (n, node) in nodes.iter().enumerate() {
                if n != next {
                    fresh.iter().for_each(|&token| node.observe(token));
                }
            }
            master = next;
        }
        assert!(last_of.iter().all(|&t| t < 1 << 53));
    }
}
