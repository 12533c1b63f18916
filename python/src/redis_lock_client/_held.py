"""A holding as this process knows it: one per (server, key, owner), shared by every
lock object of the process that acquires as that owner.

Lock objects given one ``owner=`` share one holding in the server: an acquire by
the owner that holds gets the same token back and sets the expiry to its own TTL.
Each with a lease of its own, the renewals of one with a 1 s TTL would cut the
server's expiry under the 30 s lease of another, which would go on trusting it
while a rival is granted the lock. So the process keeps one :class:`Holding` per
(server, key, owner): one lease over the writes of all its members (their acquires
and the holding's renewals, by the lease rule of ``_lease``), one renewal (asking
for the TTL last asked for), one loss that reaches every member. A fresh owner (the
default) is unique: its holding has one member.

What a holder checks before a write is ``lock.lost.is_set()``: the events here read
the lease's deadline when asked (:class:`LostEvent`, :class:`AsyncLostEvent`), so a
holder whose own thread or task runs first after a pause (SIGSTOP, swap, a long GC)
is told the truth, not what the renewal thread has had time to say.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
import time
from typing import Any, Callable, Protocol

from ._lease import Lease, Write

log = logging.getLogger("redis_lock_client")

#: on_lost coroutines still running (the event loop keeps only weak references).
_callbacks: set[asyncio.Future[Any]] = set()


class Renewer(Protocol):
    """The driver that renews a holding (a scheduler entry, or a task)."""

    def stop(self) -> None: ...

    def wake(self) -> None:
        """The lease changed (a member's acquire): look at it again now."""
        ...


class LostEvent(threading.Event):
    """``lock.lost`` of a threaded holder: a ``threading.Event`` set when the holding
    is lost, whose :meth:`is_set` first reads the clock: past the lease's deadline
    it sets itself (and signals the loss) before it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.holding: Holding | None = None

    def is_set(self) -> bool:
        return _lost_now(self.holding) or super().is_set()


class AsyncLostEvent(asyncio.Event):
    """``lock.lost`` of an asyncio holder: an ``asyncio.Event`` whose :meth:`is_set`
    reads the clock first, as :class:`LostEvent`'s."""

    def __init__(self) -> None:
        super().__init__()
        self.holding: Holding | None = None

    def is_set(self) -> bool:
        return _lost_now(self.holding) or super().is_set()


def _lost_now(holding: Holding | None) -> bool:
    """True if ``holding`` (the one an event is of, until its member leaves it) is
    lost by the clock now; its loss is signalled if nobody did yet. The answer is
    the lease's own, not whether a signal got through: another thread may be
    signalling it at this moment."""
    if holding is None:
        return False
    now = time.monotonic()
    if not holding.lease.is_lost(now):
        return False
    holding.check(now)
    return True


class Member:
    """One lock object's part in a holding: its loss signal and callback."""

    def __init__(self, on_lost: Callable[[], Any] | None, key: str) -> None:
        self.on_lost = on_lost
        self.key = key
        self.lost = LostEvent()

    def signal(self) -> None:
        """Sets the loss signal and calls ``on_lost`` (in a thread of its own)."""
        threading.Event.set(self.lost)
        self.lost.holding = None
        if self.on_lost is not None:
            threading.Thread(target=self._call, name="redis-lock-on-lost", daemon=True).start()

    def _call(self) -> None:
        try:
            if self.on_lost is not None:
                self.on_lost()
        except Exception:
            log.exception("the on_lost callback of lock %r raised", self.key)


class AsyncMember:
    """An asyncio lock object's part in a holding; its event and callback belong to
    ``loop`` and are set there."""

    def __init__(
        self, on_lost: Callable[[], Any] | None, key: str, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self.on_lost = on_lost
        self.key = key
        self.loop = loop
        self.lost = AsyncLostEvent()

    def signal(self) -> None:
        try:
            here = self.loop is None or asyncio.get_running_loop() is self.loop
        except RuntimeError:
            here = False
        if here:
            self._signal_here()
        elif self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._signal_here)

    def _signal_here(self) -> None:
        asyncio.Event.set(self.lost)
        self.lost.holding = None
        if self.on_lost is None:
            return
        try:
            outcome = self.on_lost()
            if inspect.isawaitable(outcome):
                task = asyncio.ensure_future(outcome)
                _callbacks.add(task)
                task.add_done_callback(_callbacks.discard)
        except Exception:
            log.exception("the on_lost callback of lock %r raised", self.key)


AnyMember = Any  # Member or AsyncMember: both have ``lost`` and ``signal()``


class Holding:
    """One owner's holding of one key on one server, as this process knows it."""

    def __init__(self, place: tuple[Any, ...], key: str, owner: str, flavor: object) -> None:
        self.place = place
        self.key = key
        self.owner = owner
        self.flavor = flavor
        self.lease = Lease(0.0)
        self.ttl_ms = 0
        self.token: int | None = None
        self.backend: Any = None
        self.members: list[AnyMember] = []
        self.renewer: Renewer | None = None
        # Acquires under way that may still join (a holding nobody joined and
        # nobody acquires is forgotten).
        self.pending = 0
        self._guard = threading.Lock()

    # -- writes ---------------------------------------------------------------------

    def sending(self, ttl: float, ttl_ms: int, now: float) -> Write:
        """An acquire or renewal with ``ttl`` is about to be sent: renewals ask for it
        from now on, and the lease counts it (a shorter TTL may shorten it at once)."""
        with self._guard:
            self.ttl_ms = ttl_ms
            write = self.lease.sending(ttl, now)
        self._wake()
        return write

    def _wake(self) -> None:
        renewer = self.renewer
        if renewer is not None:
            renewer.wake()

    def granted(self, member: AnyMember, token: int, backend: Any) -> bool:
        """``member``'s acquire was granted ``token``: it joins. True if it is the
        first member (the caller starts the renewal)."""
        with self._guard:
            self.pending -= 1
            self.token, self.backend = token, backend
            first = not self.members
            self.members.append(member)
            member.lost.holding = self
        self._wake()
        return first

    def not_granted(self) -> None:
        """An acquire under way ended without joining (busy, refused, cut short)."""
        with _registry_guard, self._guard:  # the order of holding_for
            self.pending -= 1
            idle = not self.members and self.pending == 0
            if idle:
                index = (self.place, self.key, self.owner)
                if _holdings.get(index) is self:
                    del _holdings[index]
        if idle:
            self.lease.end()

    # -- the end --------------------------------------------------------------------

    def check(self, now: float) -> None:
        """Signals the loss if the lease ran out (called by whoever reads the
        clock: the renewal, ``lock.lost.is_set()``)."""
        if self.lease.started and not self.lease.ended and self.lease.is_lost(now):
            self.lose("no renewal was acknowledged before the lease's deadline")

    def lose(self, why: str) -> bool:
        """The holding is lost: every member is told, once. True the first time."""
        if not self.lease.end():
            return False
        self._finish()
        log.warning("lock %r lost (owner %s): %s", self.key, self.owner, why)
        with self._guard:
            members, self.members = self.members, []
        for member in members:
            member.signal()
        return True

    def released_by(self, member: AnyMember) -> None:
        """``member`` releases the holding: it ends for every member, and the others
        are told they lost it (the server no longer holds it for them)."""
        with self._guard:
            if member in self.members:
                self.members.remove(member)
            member.lost.holding = None
            others = list(self.members)
        if others:
            self.lose(f"released by another lock object of owner {self.owner!r}")
            return
        self.lease.end()
        self._finish()

    def left_by(self, member: AnyMember) -> None:
        """``member`` was dropped while it held (garbage): the others go on holding;
        after the last, nothing renews it and its TTL ends it."""
        with self._guard:
            if member in self.members:
                self.members.remove(member)
            member.lost.holding = None
            last = not self.members
        if last:
            self.lease.end()
            self._finish()

    def _finish(self) -> None:
        _forget(self)
        renewer = self.renewer
        if renewer is not None:
            renewer.stop()

    def shared(self) -> bool:
        """True while another member holds it (a withdrawal must not end it)."""
        with self._guard:
            return bool(self.members) and not self.lease.ended


#: The holdings of this process by (place, key, owner).
_holdings: dict[tuple[Any, str, str], Holding] = {}
_registry_guard = threading.Lock()


def holding_for(place: tuple[Any, ...], key: str, owner: str, flavor: object) -> Holding:
    """The holding an acquire as ``owner`` of ``key`` at ``place`` (the server, see
    ``_io.place_of``) writes to: the live one of another lock object of this
    process, or a new one. ``RuntimeError`` when the owner holds the key through a
    lock object of the other kind (threaded and asyncio objects, or asyncio objects
    of two event loops, cannot share a renewal)."""
    now = time.monotonic()
    with _registry_guard:
        found = _holdings.get((place, key, owner))
        stale = None
        if found is not None and found.lease.ended:
            found = None  # ending: a new holding
        elif found is not None and found.lease.started and found.lease.is_lost(now):
            found = None  # lost already: it is told so below, outside the guard
            stale = _holdings.pop((place, key, owner))
        if found is not None and found.flavor != flavor:
            raise RuntimeError(
                f"lock {key!r}: owner {owner!r} already holds it in this process through "
                "a lock object of another kind (threaded and asyncio objects, or objects "
                "of two event loops, cannot share one holding's renewal): use objects of "
                "one kind per owner, or another owner"
            )
        if found is None:
            found = Holding(place, key, owner, flavor)
            _holdings[(place, key, owner)] = found
        with found._guard:
            found.pending += 1
    if stale is not None:
        stale.check(now)
    return found


def _forget(holding: Holding) -> None:
    with _registry_guard:
        index = (holding.place, holding.key, holding.owner)
        if _holdings.get(index) is holding:
            del _holdings[index]


def _after_fork_in_child() -> None:
    """The parent's holdings stay the parent's: a child starts with none."""
    global _registry_guard
    _registry_guard = threading.Lock()
    _holdings.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
