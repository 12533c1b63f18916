//! When the module's timers fire. Plain arithmetic, unit-tested without a server.
//!
//! Every delay handed to Redis is bounded: Redis 7.0 computes a timer's due time as
//! `ustime() + period * 1000` without a check, so a period near `2^62` ms (a lock's
//! TTL may be that long, and `PEXPIREAT` may set the end of time) lands in the past.
//! Such a timer fires at once, finds the lock still held, re-arms, and spins the
//! event loop forever; first in the shared timer tree, it also holds back every
//! other module's timers. A timer is therefore never set further than
//! [`MAX_TIMER_DELAY_MS`] ahead: one that fires early looks again and re-arms.

/// The longest delay any timer of the module is given: a day. A lock that lives
/// longer costs one spurious wake-up a day.
pub const MAX_TIMER_DELAY_MS: i64 = 24 * 60 * 60 * 1000;

/// A timer the glue created: its id and when it is due (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Armed {
    pub id: u64,
    pub due: i64,
}

/// When to look at a lock expiring at `expires_at` (Unix ms): one millisecond after
/// it, as Redis treats a key as expired only once its time is strictly past; never
/// more than [`MAX_TIMER_DELAY_MS`] after `now_ms`.
pub fn expiry_due(now_ms: i64, expires_at: i64) -> i64 {
    expires_at
        .saturating_add(1)
        .min(now_ms.saturating_add(MAX_TIMER_DELAY_MS))
}

/// The delay to give Redis for a timer due at `due`: between 0 and
/// [`MAX_TIMER_DELAY_MS`].
pub fn delay_until(now_ms: i64, due: i64) -> i64 {
    due.saturating_sub(now_ms).clamp(0, MAX_TIMER_DELAY_MS)
}

/// Whether a timer must be (re)created to fire by `wanted`. One already due at or
/// before then is kept: firing early is harmless (the callback looks again and
/// re-arms), and keeping it spares a stop and a create (an allocation each) on every
/// refresh, extend or contended acquire of a key with waiters.
pub fn needs_arming(current: Option<Armed>, wanted: i64) -> bool {
    current.is_none_or(|armed| armed.due > wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn an_expiry_is_looked_at_one_millisecond_after_it() {
        assert_eq!(expiry_due(NOW, NOW + 100), NOW + 101);
        assert_eq!(delay_until(NOW, expiry_due(NOW, NOW + 100)), 101);
    }

    #[test]
    fn a_far_or_endless_expiry_is_looked_at_within_a_day() {
        for expires_at in [NOW + (1 << 62), i64::MAX, NOW + MAX_TIMER_DELAY_MS * 3] {
            let due = expiry_due(NOW, expires_at);
            assert_eq!(due, NOW + MAX_TIMER_DELAY_MS);
            assert_eq!(delay_until(NOW, due), MAX_TIMER_DELAY_MS);
        }
    }

    #[test]
    fn delays_are_never_negative_nor_over_a_day() {
        assert_eq!(delay_until(NOW, NOW - 5), 0);
        assert_eq!(delay_until(NOW, i64::MIN), 0);
        assert_eq!(delay_until(NOW, i64::MAX), MAX_TIMER_DELAY_MS);
        assert_eq!(delay_until(i64::MIN, i64::MAX), MAX_TIMER_DELAY_MS);
        assert_eq!(delay_until(i64::MAX, i64::MIN), 0);
    }

    #[test]
    fn a_timer_is_recreated_only_to_fire_earlier() {
        let armed = Some(Armed { id: 1, due: 500 });
        assert!(needs_arming(None, 500));
        assert!(
            needs_arming(armed, 499),
            "a shortened TTL needs an earlier timer"
        );
        assert!(!needs_arming(armed, 500), "the same due time: keep it");
        assert!(
            !needs_arming(armed, 900),
            "a longer TTL: fire early, look again"
        );
    }
}
