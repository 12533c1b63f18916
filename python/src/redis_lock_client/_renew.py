"""Renewal of threaded holdings: one scheduler thread per process, and a short-lived
worker thread per renewal.

The scheduler only keeps time: it never does I/O, so a loss signal it owes fires at
the lease's deadline even while a renewal hangs on a black-holed connection. A
renewal runs in a thread of its own, on the holding's own connection, its connect and
read bounded by what is left of the lease. Starting no thread per acquire keeps a
short holding (acquire, a little work, release) as cheap as the two commands.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import threading
import time
from typing import Any

from redis.connection import AbstractConnection

from . import _io
from ._held import Holding
from ._lease import retry_delay

log = logging.getLogger("redis_lock_client")

#: The longest the scheduler sleeps at once (it looks again after).
LONGEST_PAUSE = 3600.0


class Renewal:
    """Keeps one holding alive (on a connection of its own to the server of its
    key) and signals its loss at the lease's deadline."""

    def __init__(self, client: Any, holding: Holding) -> None:
        self.client = client
        self.holding = holding
        self.key = holding.key
        self.stopped = False
        self.busy = False
        self.next = holding.lease.next_renewal()
        # The earliest time the scheduler will call ``due``; guarded by its lock.
        self.wake_at = math.inf
        self.conn: AbstractConnection | None = None
        self.conn_limit = 0.0

    def start(self) -> None:
        self.holding.renewer = self
        self.wake()

    def stop(self) -> None:
        """No renewal after this; one under way finishes within its bound."""
        self.stopped = True

    def wake(self) -> None:
        """The lease changed (another member's acquire): the next renewal and the
        deadline are looked at again."""
        lease = self.holding.lease
        if not self.busy:
            self.next = lease.next_renewal()
        SCHEDULER.add(self, min(self.next, lease.valid_until))

    def due(self, now: float) -> float | None:
        """Called by the scheduler; the next time it wants to be called, or None."""
        lease = self.holding.lease
        if self.stopped:
            self._close()
            return None
        if lease.is_lost(now):
            self.holding.lose("no renewal was acknowledged before the lease's deadline")
            return None
        if not self.busy and now >= self.next:
            self.busy = True
            threading.Thread(target=self._renew, name="redis-lock-renew", daemon=True).start()
        if self.busy:
            return lease.valid_until
        return min(self.next, lease.valid_until)

    def _renew(self) -> None:
        try:
            self._renew_once()
        finally:
            self.busy = False
            if self.stopped:
                self._close()
            else:
                SCHEDULER.add(self, min(self.next, self.holding.lease.valid_until))

    def _renew_once(self) -> None:
        holding, lease = self.holding, self.holding.lease
        start = time.monotonic()
        limit = max(lease.remaining(start), 0.01)
        try:
            # A connection whose bound is longer than what is left of the lease could
            # answer after the deadline: open one with the shorter bound.
            if self.conn is None or self.conn_limit > limit:
                self._close()
                self.conn = _io.connect(self.client, limit, self.key)
                self.conn_limit = limit
            write = holding.sending(lease.ttl, holding.ttl_ms, time.monotonic())
            held = _io.run_sync(
                holding.backend.extend(self.key, holding.owner, holding.ttl_ms),
                _io.on(self.conn),
            )
        except Exception as error:
            self._close()
            log.warning("renewal of lock %r failed: %s", self.key, error)
            self.next = time.monotonic() + retry_delay(lease.ttl)
            return
        if not held:
            holding.lose("a renewal found it gone (expired or deleted)")
            return
        lease.answered(write, time.monotonic())
        self.next = lease.next_renewal()

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        _io.disconnect(conn)


class _Scheduler:
    """Calls each renewal's ``due`` at the time it asked for, from one thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Renewal]] = []
        self._seq = itertools.count()
        self._pid = -1

    def add(self, renewal: Renewal, when: float) -> None:
        """Calls ``renewal.due`` at ``when``, or earlier if it already asked so."""
        with self._cond:
            if self._pid != os.getpid():  # first use, or a fork left the thread behind
                self._pid = os.getpid()
                self._heap = []
                threading.Thread(target=self._run, name="redis-lock-scheduler", daemon=True).start()
            if when >= renewal.wake_at:
                return
            renewal.wake_at = when
            heapq.heappush(self._heap, (when, next(self._seq), renewal))
            if self._heap[0][2] is renewal:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                while not self._heap or self._heap[0][0] > now:
                    # Capped: a TTL of years would put the next call past what a
                    # thread's wait takes (OverflowError), killing the scheduler.
                    pause = min(self._heap[0][0] - now, LONGEST_PAUSE) if self._heap else None
                    self._cond.wait(pause)
                    now = time.monotonic()
                when, _, renewal = heapq.heappop(self._heap)
                if when != renewal.wake_at:
                    continue  # an earlier call was asked for since
                renewal.wake_at = math.inf
            try:
                again = renewal.due(now)
            except Exception:
                log.exception("lock renewal scheduling failed")
                continue
            if again is not None:
                self.add(renewal, again)

    def _after_fork_in_child(self) -> None:
        """A fork copies this object but not its thread, and the condition may have
        been held by that thread at the fork: the child starts afresh (the parent's
        renewals are the parent's)."""
        self._cond = threading.Condition()
        self._heap = []
        self._pid = -1


SCHEDULER = _Scheduler()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SCHEDULER._after_fork_in_child)
