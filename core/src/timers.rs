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

/// How often the lock of a key with waiters is looked at while it is held. The
/// module sets the expiry itself in LOCK.ACQUIRE and LOCK.EXTEND and re-arms on the
/// spot; an expiry shortened by hand (`PEXPIRE` and the like) is seen at the next
/// look. Hearing of those at once would mean subscribing to the generic keyspace
/// events, which would make Redis build a context for the module on every `DEL`,
/// `EXPIRE` and `SET … PX` of the server, locks or not (about 11% more instructions
/// for a `SET … PX`, measured with callgrind).
pub const EXPIRY_RECHECK_MS: i64 = 100;

/// A timer the glue created: its id and when it is due (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Armed {
    pub id: u64,
    pub due: i64,
}

/// When to look at a lock that clients wait for, expiring at `expires_at` (Unix ms;
/// `None`: no expiry, as after `PERSIST`): one millisecond after it, as Redis treats
/// a key as expired only once its time is strictly past; and never more than
/// [`EXPIRY_RECHECK_MS`] after `now_ms`.
pub fn expiry_due(now_ms: i64, expires_at: Option<i64>) -> i64 {
    let recheck = now_ms.saturating_add(EXPIRY_RECHECK_MS);
    expires_at.map_or(recheck, |at| at.saturating_add(1).min(recheck))
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
        assert_eq!(expiry_due(NOW, Some(NOW + 50)), NOW + 51);
        assert_eq!(delay_until(NOW, expiry_due(NOW, Some(NOW + 50))), 51);
    }

    #[test]
    fn a_far_or_endless_expiry_is_looked_at_again_soon() {
        for expires_at in [Some(NOW + 500), Some(NOW + (1 << 62)), Some(i64::MAX), None] {
            let due = expiry_due(NOW, expires_at);
            assert_eq!(due, NOW + EXPIRY_RECHECK_MS);
            assert_eq!(delay_until(NOW, due), EXPIRY_RECHECK_MS);
        }
        assert_eq!(expiry_due(i64::MAX, Some(i64::MAX)), i64::MAX);
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
