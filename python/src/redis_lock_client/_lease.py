"""The holder's side of a holding: a lease with a local deadline.

The server counts a holding's TTL from the moment it runs the acquire or renewal,
which is after the client sent it. So the holding is the server's to keep until at
least *send time + TTL*, whatever happened to the reply. The lease ends a margin
earlier, for the two clocks' drift and for the wake-up of whoever waits on the
signal: :func:`margin` is 10% of the TTL, at least 50 ms. The loss signal fires at
the latest at that deadline, even when no reply ever comes back (a partition, a hung
server), so the holder hears of the loss before the server can grant anyone else.

Which write's TTL counts (the lease rule, in :class:`Lease` alone): the server's
expiry is set by the write it applied last, and writes of one holding with different
TTLs (the acquires of two lock objects sharing an owner, each with its own TTL, and
their renewals) can reach it in another order than they were sent. The lease is
counted from the acknowledged write with the latest send time, V, but no later than
what any write that may still have been applied after V allows (see
:meth:`Lease.valid_until`).

What the deadline cannot cover: a holder whose own process stops (GC pause, swap,
SIGSTOP, a suspended VM) between checking the signal and writing; a local clock
that runs more than 10% slow against the server's. Fencing tokens cover those.

Everything here is plain arithmetic on ``time.monotonic()`` seconds, shared by the
threaded and the asyncio holders.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

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


@dataclass
class Write:
    """One acquire or renewal of a holding, as the lease knows it: when it was sent,
    with which TTL (seconds), on which connection (``None``: a connection no other
    write shares), and when its reply came (``None``: not yet, or never)."""

    sent: float
    ttl: float
    conn: object | None = None
    answered: float | None = None


class Lease:
    """The local view of one holding: the writes that may set its expiry, the
    deadline they allow, and whether it ended. Thread-safe; every method is cheap.

    >>> lease = Lease(30.0)
    >>> first = lease.sending(30.0, now=100.0)
    >>> lease.answered(first, now=100.01)
    True
    >>> lease.valid_until
    127.0
    """

    def __init__(self, ttl: float) -> None:
        self._guard = threading.Lock()
        #: The TTL renewals ask for: the last one the holder asked for.
        self.ttl = ttl
        #: V, the acknowledged write with the latest send time (None: not held yet).
        self.last: Write | None = None
        # Writes other than V that may have been applied after it.
        self._open: list[Write] = []
        self.valid_until = -math.inf
        self._due = math.inf
        self.ended = False
        # A reply came after the deadline: lost for good, whatever it said.
        self._ran_out = False

    @property
    def started(self) -> bool:
        """True once a write was acknowledged (the holding was granted)."""
        return self.last is not None

    def sending(self, ttl: float, now: float, conn: object | None = None) -> Write:
        """Notes a write about to be sent with ``ttl`` (which renewals ask for from
        now on); the deadline may move earlier at once (a shorter TTL in flight)."""
        with self._guard:
            write = Write(now, ttl, conn)
            self.ttl = ttl
            self._open.append(write)
            self._settle()
            return write

    def answered(self, write: Write, now: float) -> bool:
        """``write`` was acknowledged (the server holds it) at ``now``. A reply that
        comes after the lease ran out changes nothing (once lost, a holding stays
        lost, so the work that stopped for it was right to). True if the lease is
        still valid."""
        with self._guard:
            write.answered = now
            if self.ended or self._ran_out:
                return False
            if self.last is not None and now >= self.valid_until:
                self._ran_out = True
                return False
            if self.last is None or write.sent > self.last.sent:
                if self.last is not None:
                    self._open.append(self.last)
                self.last = write
            self._settle()
            if now >= self.valid_until:
                self._ran_out = True  # a TTL at or under the margin: lost at birth
                return False
            return True

    def _known_before(self, write: Write, last: Write) -> bool:
        """``write`` was applied before ``last``: its reply came before ``last`` was
        sent, or it went before ``last`` on the same connection (which keeps order)."""
        if write is last:
            return False
        if write.answered is not None and write.answered <= last.sent:
            return True
        return write.conn is not None and write.conn is last.conn and write.sent < last.sent

    def _settle(self) -> None:
        """The deadline and the next renewal from V and the writes that may have
        been applied after it.

        A write W not known to have been applied before V may have been applied after
        it, and then after both were sent: the expiry is at least
        ``max(sent(W), sent(V)) + ttl(W)``. So the deadline is the earliest of those
        (V's own included), each less its TTL's margin; equal TTLs change nothing
        (a write sent later allows later), only a shorter TTL shortens the lease.
        The next renewal is due a third of the same TTL after the same start."""
        last = self.last
        if last is None:
            self.valid_until, self._due = -math.inf, math.inf
            return
        self._open = [w for w in self._open if w is not last and not self._known_before(w, last)]
        deadline = last.sent + last.ttl - margin(last.ttl)
        due = last.sent + period(last.ttl)
        for write in self._open:
            start = max(write.sent, last.sent)
            deadline = min(deadline, start + write.ttl - margin(write.ttl))
            due = min(due, start + period(write.ttl))
        self.valid_until, self._due = deadline, due

    def end(self) -> bool:
        """The server no longer holds it, or it was released. True the first time."""
        with self._guard:
            first = not self.ended
            self.ended = True
            return first

    def is_lost(self, now: float) -> bool:
        return self.ended or self._ran_out or now >= self.valid_until

    def remaining(self, now: float) -> float:
        """Seconds left of the lease; 0 once lost."""
        if self.is_lost(now):
            return 0.0
        return max(self.valid_until - now, 0.0)

    def next_renewal(self) -> float:
        """When the next renewal is due: a third of the TTL that counts after the
        send that counts (never later than the deadline)."""
        return min(self._due, self.valid_until)
