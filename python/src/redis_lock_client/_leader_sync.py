"""Threaded leader election: :class:`Election`, :class:`Leadership`, :class:`Observer`."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Callable, TypeVar

import redis
import redis.exceptions
from redis.cluster import RedisCluster

from . import _election, _io, postgres
from ._backend import Arg, Key
from ._detect import BackendName
from ._election import Leader
from ._errors import FencedError, LockLostError
from ._holding import CONTROL_LIMIT
from ._sync import Lock

T = TypeVar("T")


class Leadership:
    """This process leads: the election's lock, renewed in the background until
    :meth:`resign` (or the end of a ``with`` block). ``lost`` is set when it no
    longer leads, before any other candidate can."""

    def __init__(self, lock: Lock, record: str, value: bytes) -> None:
        self._lock = lock
        self._record = record
        self.value = value
        self.term: int = lock.token or 0
        self._published = False

    @property
    def key(self) -> str:
        return self._lock.key

    @property
    def lost(self) -> Any:
        """Set once leadership is lost; ``is_set()`` reads the clock itself."""
        return self._lock.lost

    def owned(self) -> bool:
        """True while this process leads and its lease has not run out."""
        return self._lock.owned()

    def guard(self, keys: Iterable[Key], *command: Arg) -> Any:
        """A write fenced with the term (:meth:`Lock.guard`): raises
        :class:`FencedError` once another candidate leads, and nothing is written."""
        return self._lock.guard(keys, *command)

    def fence_postgres(self, cursor: postgres.Cursor, resource: str | None = None) -> None:
        """Fences the cursor's transaction with the term (:meth:`Lock.fence_postgres`)."""
        self._lock.fence_postgres(cursor, resource)

    def _record_write(self, command: tuple[Any, ...]) -> None:
        try:
            self._lock.guard([self._record], *command)
        except redis.exceptions.ResponseError as error:
            if not _election.is_written_already(error):
                raise
            last = _io.run_sync(
                _election.top(self._record), _io.on(self._lock._conn(CONTROL_LIMIT))
            )
            if last is None or last[0] != command[5]:
                raise

    def _publish(self) -> None:
        self._record_write(_election.publish(self._record, self.term, self.value))
        self._published = True

    def resign(self) -> bool:
        """Marks the record, stops renewing and releases: the next candidate in the
        queue leads at once. False if leadership was lost already."""
        if self._published and self._lock.owned():
            with contextlib.suppress(FencedError, LockLostError):
                self._record_write(_election.resign(self._record, self.term))
        self._published = False
        try:
            return self._lock.release()
        except RuntimeError:  # holds nothing: released already
            return False
        finally:
            self._lock.close()

    def __enter__(self) -> Leadership:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.resign()


class Observer:
    """Every change of leader, in term order, each once (iterate it): the current
    leader first, then each new one as it takes office. Reads the record with a
    blocking ``XREAD`` (one call a second at most while nothing changes). An error
    (a broken connection) leaves it where it was: iterate on to miss nothing."""

    def __init__(self, election: Election) -> None:
        self._election = election
        self._reader = election._reader()
        self._cursor: _election.Cursor | None = None
        self._pending: deque[Leader] = deque()

    def __iter__(self) -> Observer:
        return self

    def start(self) -> None:
        """Positions the observer now, if it was not yet: the first leader it gives
        is the one leading at this moment, or the first to take office after it.
        Iterating does this itself; call it to observe from a known point."""
        if self._cursor is None:
            # The record's top first (the cursor), then the leader: see Cursor.start.
            last = self._run(_election.top(self._election.record_key), CONTROL_LIMIT)
            current = self._election._leader_on(self._reader)
            cursor = _election.Cursor()
            now = cursor.start(last, current)
            self._cursor = cursor
            if now is not None:
                self._pending.append(now)

    def __next__(self) -> Leader:
        while not self._pending:
            if self._cursor is None:
                self.start()
                continue
            leaders = self._run(
                self._cursor.read(self._election.record_key), _election.OBSERVE_READ_LIMIT
            )
            self._pending.extend(leaders)
        return self._pending.popleft()

    def _run(self, protocol: Any, limit: float) -> Any:
        try:
            return _io.run_sync(protocol, _io.on(self._reader._conn(limit)))
        except BaseException:
            self._reader._drop(limit)
            raise

    def close(self) -> None:
        """Closes the observer's connections."""
        self._reader.close()


class Election:
    """Leader election at ``key``, with terms that fence.

    >>> election = Election(redis.Redis(), "{scheduler}", ttl=10.0)
    >>> with election.campaign("10.0.0.7:8080") as leadership:   # waits in the queue
    ...     while not leadership.lost.is_set():
    ...         leadership.guard(["{scheduler}:plan"], "SET", "{scheduler}:plan", plan())

    The term (``leadership.term``) is the fencing token of the leader's holding:
    terms only grow. The value is published in ``{key}:leader`` (a stream in the
    key's slot) with the guard; :meth:`leader` and :meth:`observe` read it."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        key: str,
        ttl: float = 10.0,
        *,
        backend: BackendName = None,
    ) -> None:
        self.record_key = _election.record_key(key)
        self._client = client
        self.key = key
        self.ttl = ttl
        self._backend = backend
        Lock(client, key, ttl, backend=backend)  # checks the client, ttl and backend

    def _reader(self, on_lost: Callable[[], Any] | None = None) -> Lock:
        return Lock(
            self._client,
            self.key,
            self.ttl,
            on_lost=on_lost,
            raise_on_lost=False,
            backend=self._backend,
        )

    def campaign(
        self,
        value: str | bytes,
        timeout: float | None = None,
        *,
        on_lost: Callable[[], Any] | None = None,
    ) -> Leadership | None:
        """Waits in the server's FIFO queue (without polling) until this process
        leads, then publishes ``value`` (at most 1 KiB) with the guard. ``None`` if
        ``timeout`` seconds pass first. ``on_lost`` is called when leadership is lost
        (as a lock's, from the renewal's thread or task)."""
        raw = _election.check_value(value)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            lock = self._reader(on_lost)
            if not lock.acquire(blocking=True, timeout=left):
                lock.close()
                return None
            leadership = Leadership(lock, self.record_key, raw)
            try:
                leadership._publish()
            except (FencedError, LockLostError):
                leadership.resign()  # lost before it could publish: campaign again
                continue
            except BaseException:
                leadership.resign()
                raise
            return leadership

    def leader(self) -> Leader | None:
        """The current leader, or None while nobody leads (free, not published yet,
        or resigned)."""
        reader = self._reader()
        try:
            return self._leader_on(reader)
        finally:
            reader.close()

    def _leader_on(self, reader: Lock) -> Leader | None:
        backend = reader._probe()
        try:
            call = _io.on(reader._conn(CONTROL_LIMIT))
            return _io.run_sync(_election.leader(backend, self.key, self.record_key), call)
        except BaseException:
            reader._drop(CONTROL_LIMIT)
            raise

    def observe(self) -> Observer:
        """Every change of leader from now on, in term order, each once."""
        return Observer(self)

    def run_while_leader(
        self, value: str | bytes, work: Callable[[Leadership], T], *, again: bool = False
    ) -> T | None:
        """Campaigns, runs ``work(leadership)`` while leading, and resigns when it
        returns: its result. ``work`` must watch ``leadership.lost`` (a thread cannot
        be stopped from outside) and return when it is set; then, with ``again``,
        this campaigns anew, else returns None."""
        while True:
            leadership = self.campaign(value)
            if leadership is None:  # pragma: no cover - no timeout given
                continue
            try:
                result = work(leadership)
            except BaseException:
                leadership.resign()
                raise
            held = leadership.owned()
            leadership.resign()
            if held:
                return result
            if not again:
                return None
