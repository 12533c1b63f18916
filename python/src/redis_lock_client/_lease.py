"""The holder's side of a holding: a lease with a local deadline.

The server counts a holding's TTL from the moment it runs the acquire or extend,
which is after the client sent it. So the holding is the server's to keep until at
least *send time + TTL*, whatever happened to the reply. The lease ends a margin
earlier, for the two clocks' drift and for the wake-up of whoever waits on the
signal: :func:`margin` is 10% of the TTL, at least 50 ms. The loss signal fires at
the latest at that deadline, even when no reply ever comes back (a partition, a hung
server), so the holder hears of the loss before the server can grant anyone else.

What the deadline cannot cover: a holder whose own process stops (GC pause, swap,
SIGSTOP, a suspended VM) between checking the signal and writing; a local clock
that runs more than 10% slow against the server's. Fencing tokens cover those.

Everything here is plain arithmetic on ``time.monotonic()`` seconds, shared by the
threaded and the asyncio holders.
"""

from __future__ import annotations

import math
import threading

from ._protocol import LEASE_MARGIN_MIN, LEASE_MARGIN_PERCENT, RENEWAL_DIVISOR

#: The longest TTL or wait the server takes, in ms (2^62 - 1, as the module's).
MAX_MILLIS = (1 << 62) - 1


def margin(ttl: float) -> float:
    """How much earlier than *send time + TTL* a lease ends, in seconds.

    >>> margin(30.0)
    3.0
    >>> margin(0.2)
    0.05
    """
    return min(max(ttl * LEASE_MARGIN_PERCENT / 100, LEASE_MARGIN_MIN), ttl)


def period(ttl: float) -> float:
    """How often a holding of ``ttl`` seconds is renewed: a third of its TTL."""
    return max(ttl / RENEWAL_DIVISOR, 0.001)


def retry_delay(ttl: float) -> float:
    """The pause before another try after a failed renewal: short, so that a blip
    costs little of the lease."""
    return min(max(period(ttl) / 4, 0.01), 0.25)


def millis(seconds: float, what: str) -> int:
    """Seconds as whole milliseconds on the wire, rounded up so that a positive
    duration never becomes 0; ``ValueError`` naming ``what`` when out of range."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be a positive, finite number of seconds: {seconds!r}")
    ms = math.ceil(seconds * 1000)
    if ms > MAX_MILLIS:
        raise ValueError(f"{what} out of range: at most {MAX_MILLIS} ms")
    return ms


class Lease:
    """The local view of one holding: since when it is counted, until when it is
    safe, and whether it ended. Thread-safe; every method is cheap."""

    def __init__(self, sent: float, ttl: float) -> None:
        self._guard = threading.Lock()
        self.sent = sent
        self.ttl = ttl
        self.valid_until = sent + ttl - margin(ttl)
        self.ended = False

    def renewed(self, sent: float, now: float) -> bool:
        """An acquire or extend sent at ``sent`` was acknowledged at ``now``. A reply
        to an older request than the one the lease is counted from changes nothing,
        and neither does one that comes after the lease ran out: once lost, a
        holding stays lost, so the work that stopped for it was right to. True if
        the deadline moved."""
        with self._guard:
            if self.ended or sent < self.sent or now >= self.valid_until:
                return False
            self.sent = sent
            self.valid_until = sent + self.ttl - margin(self.ttl)
            return True

    def end(self) -> bool:
        """The server no longer holds it, or it was released. True the first time."""
        with self._guard:
            first = not self.ended
            self.ended = True
            return first

    def is_lost(self, now: float) -> bool:
        return self.ended or now >= self.valid_until

    def remaining(self, now: float) -> float:
        """Seconds left of the lease; 0 once lost."""
        if self.ended:
            return 0.0
        return max(self.valid_until - now, 0.0)

    def next_renewal(self) -> float:
        return self.sent + period(self.ttl)
