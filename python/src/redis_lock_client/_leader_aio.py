"""asyncio leader election: :class:`AsyncElection`, :class:`AsyncLeadership`,
:class:`AsyncObserver` (the threaded API's twins, in ``_leader_sync``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Iterable
from types import TracebackType
from typing import Any, Callable, TypeVar

import redis
import redis.asyncio
import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from . import _election, _io, postgres
from ._aio import AsyncLock as Lock
from ._backend import Arg, Key
from ._detect import BackendName
from ._election import Leader
from ._errors import FencedError, LockLostError
from ._holding import CONTROL_LIMIT

T = TypeVar("T")


class AsyncLeadership:
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

    async def guard(self, keys: Iterable[Key], *command: Arg) -> Any:
        """A write fenced with the term (:meth:`Lock.guard`): raises
        :class:`FencedError` once another candidate leads, and nothing is written."""
        return await self._lock.guard(keys, *command)

    async def fence_postgres(
        self, cursor: postgres.AsyncCursor, resource: str | None = None
    ) -> None:
        """Fences the cursor's transaction with the term (:meth:`AsyncLock.fence_postgres`)."""
        await self._lock.fence_postgres(cursor, resource)

    async def _record_write(self, command: tuple[Any, ...]) -> None:
        try:
            await self._lock.guard([self._record], *command)
        except redis.exceptions.ResponseError as error:
            if not _election.is_written_already(error):
                raise
            last = await _io.run_async(
                _election.top(self._record), _io.on_async(self._lock._conn(CONTROL_LIMIT))
            )
            if last is None or last[0] != command[5]:
                raise

    async def _publish(self) -> None:
        await self._record_write(_election.publish(self._record, self.term, self.value))
        self._published = True

    async def resign(self) -> bool:
        """Marks the record, stops renewing and releases: the next candidate in the
        queue leads at once. False if leadership was lost already."""
        if self._published and self._lock.owned():
            with contextlib.suppress(FencedError, LockLostError):
                await self._record_write(_election.resign(self._record, self.term))
        self._published = False
        try:
            return await self._lock.release()
        except RuntimeError:  # holds nothing: released already
            return False
        finally:
            await self._lock.aclose()

    async def __aenter__(self) -> AsyncLeadership:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.resign()


class AsyncObserver:
    """Every change of leader, in term order, each once (iterate it): the current
    leader first, then each new one as it takes office. Reads the record with a
    blocking ``XREAD`` (one call a second at most while nothing changes). An error
    (a broken connection) leaves it where it was: iterate on to miss nothing."""

    def __init__(self, election: AsyncElection) -> None:
        self._election = election
        self._reader = election._reader()
        self._cursor: _election.Cursor | None = None
        self._pending: deque[Leader] = deque()

    def __aiter__(self) -> AsyncObserver:
        return self

    async def start(self) -> None:
        """Positions the observer now, if it was not yet: the first leader it gives
        is the one leading at this moment, or the first to take office after it.
        Iterating does this itself; call it to observe from a known point."""
        if self._cursor is None:
            # The record's top first (the cursor), then the leader: see Cursor.start.
            last = await self._run(_election.top(self._election.record_key), CONTROL_LIMIT)
            current = await self._election._leader_on(self._reader)
            cursor = _election.Cursor()
            now = cursor.start(last, current)
            self._cursor = cursor
            if now is not None:
                self._pending.append(now)

    async def __anext__(self) -> Leader:
        while not self._pending:
            if self._cursor is None:
                await self.start()
                continue
            leaders = await self._run(
                self._cursor.read(self._election.record_key), _election.OBSERVE_READ_LIMIT
            )
            self._pending.extend(leaders)
        return self._pending.popleft()

    async def _run(self, protocol: Any, limit: float) -> Any:
        try:
            return await _io.run_async(protocol, _io.on_async(self._reader._conn(limit)))
        except BaseException:
            await self._reader._drop(limit)
            raise

    async def aclose(self) -> None:
        """Closes the observer's connections."""
        await self._reader.aclose()


class AsyncElection:
    """Leader election at ``key``, with terms that fence.

    >>> election = AsyncElection(redis.asyncio.Redis(), "{scheduler}", ttl=10.0)
    >>> async with await election.campaign("10.0.0.7:8080") as leadership:
    ...     while not leadership.lost.is_set():
    ...         await leadership.guard(["{scheduler}:plan"], "SET", "{scheduler}:plan", plan())

    The term (``leadership.term``) is the fencing token of the leader's holding:
    terms only grow. The value is published in ``{key}:leader`` (a stream in the
    key's slot) with the guard; :meth:`leader` and :meth:`observe` read it."""

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
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

    async def campaign(
        self,
        value: str | bytes,
        timeout: float | None = None,
        *,
        on_lost: Callable[[], Any] | None = None,
    ) -> AsyncLeadership | None:
        """Waits in the server's FIFO queue (without polling) until this process
        leads, then publishes ``value`` (at most 1 KiB) with the guard. ``None`` if
        ``timeout`` seconds pass first. ``on_lost`` is called when leadership is lost
        (as a lock's, from the renewal's thread or task)."""
        raw = _election.check_value(value)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            lock = self._reader(on_lost)
            if not await lock.acquire(blocking=True, timeout=left):
                await lock.aclose()
                return None
            leadership = AsyncLeadership(lock, self.record_key, raw)
            try:
                await leadership._publish()
            except (FencedError, LockLostError):
                await leadership.resign()  # lost before it could publish: campaign again
                continue
            except BaseException:
                await asyncio.shield(leadership.resign())
                raise
            return leadership

    async def leader(self) -> Leader | None:
        """The current leader, or None while nobody leads (free, not published yet,
        or resigned)."""
        reader = self._reader()
        try:
            return await self._leader_on(reader)
        finally:
            await reader.aclose()

    async def _leader_on(self, reader: Lock) -> Leader | None:
        backend = await reader._probe()
        try:
            call = _io.on_async(reader._conn(CONTROL_LIMIT))
            return await _io.run_async(_election.leader(backend, self.key, self.record_key), call)
        except BaseException:
            await reader._drop(CONTROL_LIMIT)
            raise

    def observe(self) -> AsyncObserver:
        """Every change of leader from now on, in term order, each once."""
        return AsyncObserver(self)

    async def run_while_leader(
        self,
        value: str | bytes,
        work: Callable[[AsyncLeadership], Awaitable[T]],
        *,
        again: bool = False,
    ) -> T | None:
        """Campaigns, runs ``work(leadership)`` while leading, and resigns when it
        returns: its result. When leadership is lost the work's task is cancelled
        (before any rival can lead); then, with ``again``, this campaigns anew, else
        returns None."""
        while True:
            leadership = await self.campaign(value)
            if leadership is None:  # pragma: no cover - no timeout given
                continue
            task = asyncio.ensure_future(work(leadership))
            lost = asyncio.ensure_future(leadership.lost.wait())
            try:
                await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                lost.cancel()
                if not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                held = leadership.owned() and not task.cancelled()
                await asyncio.shield(leadership.resign())
            if held:
                return task.result()
            if not again:
                return None
