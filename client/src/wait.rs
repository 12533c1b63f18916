//! How long an acquire may wait in the server's queue, and the bounds that follow
//! from it: how long its answer may take, and what an unanswered one means.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::limits::{ceil_millis, CONNECT_LIMIT, WAIT_MARGIN};

/// How long an acquire may wait in the server's FIFO queue for a busy lock.
///
/// A [`Duration`] converts into `Wait::For` (so zero is `Wait::No`, never "forever").
///
/// ```
/// use std::time::{Duration, Instant};
/// use redis_lock_client::Wait;
///
/// let _ = Wait::No; // answer at once: the lock, or None if it is busy
/// let _ = Wait::For(Duration::from_secs(10));
/// let _ = Wait::Forever;
/// // What is left of a deadline; `Wait::No` once it has passed.
/// let _ = Wait::until(Instant::now() + Duration::from_secs(3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wait {
    /// Do not wait: `None` at once if the lock is busy.
    #[default]
    No,
    /// Wait up to this long, rounded up to whole milliseconds (so 0.3 ms waits 1 ms).
    /// `Wait::For(Duration::ZERO)` is `Wait::No`.
    For(Duration),
    /// Wait without limit.
    Forever,
}

impl Wait {
    /// The time left until `deadline`; [`Wait::No`] if it has passed.
    pub fn until(deadline: Instant) -> Wait {
        Wait::For(deadline.saturating_duration_since(Instant::now()))
    }

    /// The argument of `WAIT`, if any: `Some(0)` waits forever.
    pub(crate) fn millis(self) -> Result<Option<u64>> {
        match self {
            Wait::No => Ok(None),
            Wait::For(d) if d.is_zero() => Ok(None),
            Wait::For(d) => Ok(Some(ceil_millis(d, "wait")?)),
            Wait::Forever => Ok(Some(0)),
        }
    }

    /// True unless the acquire answers at once.
    pub(crate) fn waits(self) -> bool {
        !matches!(self, Wait::No) && self != Wait::For(Duration::ZERO)
    }

    /// How long the answer to an acquire that waits this long may take: the wait
    /// and [`WAIT_MARGIN`]. `None` for one that does not wait or waits without
    /// limit. The one place a wait's bound is computed.
    pub(crate) fn answer_within(self) -> Option<Duration> {
        match self {
            Wait::For(wait) if self.waits() => Some(wait.saturating_add(WAIT_MARGIN)),
            _ => None,
        }
    }

    /// The response timeout of a connection opened for an acquire that waits this
    /// long: [`Wait::answer_within`]; none for [`Wait::Forever`]; [`CONNECT_LIMIT`]
    /// for an acquire that answers at once.
    pub(crate) fn response_timeout(self) -> Option<Duration> {
        match self {
            Wait::Forever => None,
            wait => Some(wait.answer_within().unwrap_or(CONNECT_LIMIT)),
        }
    }

    /// An acquire's result on a connection whose response timeout is
    /// [`Wait::response_timeout`]: no reply within it means the server hangs or the
    /// network drops everything, [`Error::WaitUnanswered`].
    pub(crate) fn unanswered<T>(self, result: Result<T>) -> Result<T> {
        match (result, self) {
            (Err(Error::ResponseTimeout(_)), Wait::For(wait)) => Err(Error::WaitUnanswered {
                wait,
                margin: WAIT_MARGIN,
            }),
            (result, _) => result,
        }
    }
}

impl From<Duration> for Wait {
    fn from(wait: Duration) -> Wait {
        Wait::For(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_under_a_millisecond_rounds_up_and_never_means_forever() {
        assert_eq!(
            Wait::For(Duration::from_micros(300)).millis().unwrap(),
            Some(1)
        );
        assert_eq!(
            Wait::For(Duration::from_micros(1500)).millis().unwrap(),
            Some(2)
        );
        assert_eq!(Wait::For(Duration::ZERO).millis().unwrap(), None);
        assert_eq!(Wait::No.millis().unwrap(), None);
        assert_eq!(Wait::Forever.millis().unwrap(), Some(0));
        let past = Instant::now() - Duration::from_secs(1);
        assert_eq!(Wait::until(past).millis().unwrap(), None);
        assert!(!Wait::until(past).waits());
        assert_eq!(
            Wait::from(Duration::ZERO).millis().unwrap(),
            None,
            "zero is no wait"
        );
    }

    #[test]
    fn a_wait_is_answered_within_itself_and_the_margin() {
        let wait = Wait::For(Duration::from_millis(250));
        assert_eq!(
            wait.answer_within(),
            Some(Duration::from_millis(250) + WAIT_MARGIN)
        );
        assert_eq!(wait.response_timeout(), wait.answer_within());
        assert_eq!(Wait::No.answer_within(), None);
        assert_eq!(Wait::No.response_timeout(), Some(CONNECT_LIMIT));
        assert_eq!(Wait::Forever.answer_within(), None);
        assert_eq!(Wait::Forever.response_timeout(), None);
        assert_eq!(
            Wait::For(Duration::MAX).answer_within(),
            Some(Duration::MAX),
            "saturates"
        );
        let timeout = std::io::Error::from(std::io::ErrorKind::TimedOut);
        let unanswered = wait.unanswered::<()>(Err(Error::ResponseTimeout(timeout.into())));
        assert!(matches!(
            unanswered,
            Err(Error::WaitUnanswered { margin, .. }) if margin == WAIT_MARGIN
        ));
    }
}
