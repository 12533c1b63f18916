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
from typing import Any, Callable

import redis
from redis.connection import AbstractConnection

from . import _io
from ._backend import Backend
from ._lease import Lease, retry_delay

log = logging.getLogger("redis_lock_client")


class Renewal:
    """Keeps one holding alive and signals its loss."""

    def __init__(
        self,
        client: redis.Redis,
        backend: Backend,
        key: str,
        owner: str,
        ttl_ms: int,
        lease: Lease,
        lost: threading.Event,
        on_lost: Callable[[], Any] | None,
    ) -> None:
        self.client = client
        self.backend = backend
        self.key = key
        self.owner = owner
        self.ttl_ms = ttl_ms
        self.lease = lease
        self.lost = lost
        self.on_lost = on_lost
        self.stopped = False
        self.busy = False
        self.next = lease.next_renewal()
        # The earliest time the scheduler will call ``due``; guarded by its lock.
        self.wake_at = math.inf
        self.conn: AbstractConnection | None = None
        self.conn_limit = 0.0

    def stop(self) -> None:
        """No renewal after this; one under way finishes within its bound."""
        self.stopped = True

    def due(self, now: float) -> float | None:
        """Called by the scheduler; the next time it wants to be called, or None."""
        if self.stopped:
            self._close()
            return None
        if self.lease.is_lost(now):
            self.signal_lost("no renewal was acknowledged before the lease's deadline")
            return None
        if not self.busy and now >= self.next:
            self.busy = True
            threading.Thread(target=self._renew, name="redis-lock-renew", daemon=True).start()
        if self.busy:
            return self.lease.valid_until
        return min(self.next, self.lease.valid_until)

    def signal_lost(self, why: str) -> None:
        if self.stopped or not self.lease.end():
            return
        self.stopped = True
        log.warning("lock %r lost (owner %s): %s", self.key, self.owner, why)
        self.lost.set()
        if self.on_lost is not None:
            callback = threading.Thread(target=self._call_on_lost, name="redis-lock-on-lost")
            callback.daemon = True
            callback.start()

    def _call_on_lost(self) -> None:
        try:
            if self.on_lost is not None:
                self.on_lost()
        except Exception:
            log.exception("the on_lost callback of lock %r raised", self.key)

    def _renew(self) -> None:
        try:
            self._renew_once()
        finally:
            self.busy = False
            if self.stopped:
                self._close()
            else:
                SCHEDULER.add(self, min(self.next, self.lease.valid_until))

    def _renew_once(self) -> None:
        start = time.monotonic()
        limit = max(self.lease.remaining(start), 0.01)
        try:
            # A connection whose bound is longer than what is left of the lease could
            # answer after the deadline: open one with the shorter bound.
            if self.conn is None or self.conn_limit > limit:
                self._close()
                self.conn = _io.connect(self.client, limit)
                self.conn_limit = limit
            sent = time.monotonic()
            held = _io.run_sync(
                self.backend.extend(self.key, self.owner, self.ttl_ms), _io.on(self.conn)
            )
        except Exception as error:
            self._close()
            log.warning("renewal of lock %r failed: %s", self.key, error)
            self.next = time.monotonic() + retry_delay(self.lease.ttl)
            return
        if not held:
            self.signal_lost("a renewal found it gone (expired or deleted)")
            return
        self.lease.renewed(sent, time.monotonic())
        self.next = self.lease.next_renewal()

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
                    pause = self._heap[0][0] - now if self._heap else None
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
