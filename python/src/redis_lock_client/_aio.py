"""asyncio holders over ``redis.asyncio``: :class:`AsyncLock`, :class:`AsyncSemaphore`,
:class:`AsyncReadWriteLock`. The same rules as the threaded ones, with a renewal task
per holding instead of the scheduler thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Callable

import redis.asyncio
import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from . import _io, postgres
from ._backend import EXCLUSIVE, SHARED, Arg, Backend, Key, Mode
from ._detect import BackendName, check_backend_name
from ._errors import FencedError, LockError, LockLostError, backend_missing
from ._guard import check_command, guarded, holding_of, unanswered_guard
from ._held import AsyncMember, Holding, holding_for
from ._holding import (
    CONTROL_LIMIT,
    RELEASE_LIMIT,
    check_owner,
    check_permits,
    check_ttl,
    granted_after_wait,
    new_owner,
    unanswered,
    wait_of,
    withdraw_limit,
)
from ._lease import retry_delay

log = logging.getLogger("redis_lock_client")


class AsyncRenewal:
    """Keeps one holding alive from a task of the holding's event loop (started at
    the first renewal: a short holding costs no task), on a connection of its own
    to the server of its key, and signals its loss at the lease's deadline."""

    def __init__(self, client: Any, holding: Holding, loop: asyncio.AbstractEventLoop) -> None:
        self.client = client
        self.holding = holding
        self.loop = loop
        self.stopped = False
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.changed = asyncio.Event()

    def start(self) -> None:
        self.holding.renewer = self
        lease = self.holding.lease
        delay = max(min(lease.next_renewal(), lease.valid_until) - time.monotonic(), 0)
        self.timer = self.loop.call_later(delay, self._start_task)

    def _start_task(self) -> None:
        self.timer = None
        if not self.stopped:
            self.task = self.loop.create_task(self._run())

    def stop(self) -> None:
        self.stopped = True
        if self.timer is not None:
            self.timer.cancel()
        task = self.task
        if task is not None and task is not _current_task():
            task.cancel()

    def wake(self) -> None:
        """The lease changed (another member's acquire): look at it again now."""
        if self.timer is not None:
            self.timer.cancel()
            self._start_task()
        else:
            self.changed.set()

    async def _run(self) -> None:
        holding, lease = self.holding, self.holding.lease
        conn: _io.AsyncConnection | None = None
        next_at = lease.next_renewal()
        try:
            while not self.stopped:
                pause = max(min(next_at, lease.valid_until) - time.monotonic(), 0)
                if pause > 0:
                    self.changed.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.changed.wait(), pause)
                    if self.changed.is_set():
                        next_at = min(next_at, lease.next_renewal())
                        continue
                start = time.monotonic()
                if lease.is_lost(start):
                    holding.lose("no renewal was acknowledged before the lease's deadline")
                    return
                # Bounded by what is left of the lease: a later answer keeps nothing.
                limit = max(lease.remaining(start), 0.01)
                try:
                    if conn is None:
                        conn = _io.connect_async(self.client, None, holding.key)
                    write = holding.sending(lease.ttl, holding.ttl_ms, time.monotonic())
                    extend = _io.run_async(
                        holding.backend.extend(holding.key, holding.owner, holding.ttl_ms),
                        _io.on_async(conn),
                    )
                    held = await asyncio.wait_for(extend, limit)
                except Exception as error:
                    await _disconnect(conn)
                    conn = None
                    log.warning("renewal of lock %r failed: %s", holding.key, error)
                    next_at = time.monotonic() + retry_delay(lease.ttl)
                    continue
                if not held:
                    holding.lose("a renewal found it gone (expired or deleted)")
                    return
                lease.answered(write, time.monotonic())
                next_at = lease.next_renewal()
        finally:
            await _disconnect(conn)


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class _AsyncHolder:
    """One holding at a time of ``key`` in ``mode``, renewed by a task while held."""

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        ttl: float,
        mode: Mode,
        *,
        on_lost: Callable[[], Any] | None = None,
        raise_on_lost: bool = True,
        backend: BackendName = None,
        owner: str | None = None,
    ) -> None:
        _io.check_client(client, asyncio_api=True)
        self._ttl_ms = check_ttl(ttl)
        self._given_owner = check_owner(owner)
        self._client = client
        self.key = key
        self.ttl = float(ttl)
        self._mode = mode
        self._on_lost = on_lost
        self.raise_on_lost = raise_on_lost
        self._forced = check_backend_name(backend)
        self._holding: Holding | None = None
        self._member: AsyncMember | None = None
        self._backend: Backend | None = None
        self._conns: dict[float | None, _io.AsyncConnection] = {}
        # The process whose holding and connections these are (see ``Lock``).
        self._pid = os.getpid()

    @property
    def token(self) -> int | None:
        """The fencing token of the current holding; None when not held (also in a
        process forked from the holder: the holding is the parent's)."""
        holding = self._holding
        return holding.token if holding is not None and self._pid == os.getpid() else None

    @property
    def owner(self) -> str | None:
        holding = self._holding
        return holding.owner if holding is not None and self._pid == os.getpid() else None

    @property
    def lost(self) -> asyncio.Event:
        """Set when the current holding is lost (see ``Lock.lost``); check it right
        before each write under the lock: ``if lock.lost.is_set(): ...``. Its
        ``is_set()`` reads the clock itself, as ``Lock.lost``'s does."""
        if self._member is None:  # nothing acquired yet: an event never set
            self._member = AsyncMember(self._on_lost, self.key, None)
        return self._member.lost

    def owned(self) -> bool:
        holding = self._holding
        if holding is None or self._pid != os.getpid():
            return False
        return not holding.lease.is_lost(time.monotonic())

    def _forked(self) -> bool:
        """In a process forked from the holder, drops the parent's holding and
        connections without sending anything (as ``Lock._forked``); True if a
        holding was dropped so."""
        if self._pid == os.getpid():
            return False
        self._pid = os.getpid()
        inherited = self._holding is not None
        self._holding = self._member = None
        # The parent's connections: forgotten, never written to here (closing one
        # here closes this process's descriptor only; the parent's stays open).
        self._conns = {}
        return inherited

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Takes the lock, waiting in the server's FIFO queue; True if granted. A
        cancellation during the wait leaves no queue place or holding behind."""
        self._forked()
        if self._holding is not None:
            raise RuntimeError(f"lock {self.key!r} is already held by this object")
        wait_ms, read_limit = wait_of(blocking, timeout)
        backend = await self._probe()
        owner = self._given_owner or new_owner()
        loop = asyncio.get_running_loop()
        holding = holding_for(_io.place_of(self._client, self.key), self.key, owner, loop)
        member = self._member = AsyncMember(self._on_lost, self.key, loop)
        joined = False
        try:
            write = holding.sending(self.ttl, self._ttl_ms, time.monotonic())
            conn = self._conn(read_limit)
            token = await _io.run_async(
                backend.acquire(self.key, owner, self._ttl_ms, self._mode, wait_ms),
                _io.on_async(conn),
            )
            if token is None:
                return False
            holding.lease.answered(write, time.monotonic())
            if granted_after_wait(write.sent, time.monotonic(), self.ttl):
                await self._refresh(backend, holding)
            if holding.granted(member, token, backend):
                AsyncRenewal(self._client, holding, loop).start()
            self._holding = holding
            joined = True
            return True
        except redis.exceptions.ResponseError as refusal:
            # A refusal (WRONGTYPE, a mode conflict, OOM).
            missing = backend_missing(refusal)
            if missing is not None:
                raise missing from refusal
            # Refused mid-wait (OOM when collecting a grant the library pushed):
            # the grant or the queue place must not outlive the refusal.
            if not holding.shared():
                await self._withdraw(backend, owner, withdraw_limit(refusal))
            raise
        except BaseException as cut_short:
            # Cancelled or cut short before the caller learnt of a grant: drop the
            # queue place with the connection, and end a grant by the owner (not one
            # that another lock object of this process holds as the same owner).
            await self._drop(read_limit)
            if not holding.shared():
                await self._withdraw(backend, owner, withdraw_limit(cut_short))
            told = unanswered(self.key, cut_short, wait_ms, read_limit)
            if told is cut_short:
                raise
            raise told from cut_short
        finally:
            if not joined:
                holding.not_granted()

    async def _refresh(self, backend: Backend, holding: Holding) -> None:
        """An extend right after a long wait: the lease counted from the wait's send."""
        try:
            write = holding.sending(self.ttl, self._ttl_ms, time.monotonic())
            conn = self._conn(RELEASE_LIMIT)
            extend = backend.extend(self.key, holding.owner, self._ttl_ms)
            if await _io.run_async(extend, _io.on_async(conn)):
                holding.lease.answered(write, time.monotonic())
        except redis.exceptions.RedisError:
            await self._drop(RELEASE_LIMIT)

    async def release(self) -> bool:
        """Ends the holding; True if the server still had it. Other lock objects of
        this process with the same owner are told they lost it (see
        ``Lock.release``). In a process forked from the holder, nothing is sent and
        the answer is False."""
        if self._forked():
            return False
        holding, backend, member = self._holding, self._backend, self._member
        if holding is None or backend is None or member is None:
            raise RuntimeError(f"release of lock {self.key!r}, which this object does not hold")
        self._holding = None
        holding.released_by(member)
        try:
            conn = self._conn(RELEASE_LIMIT)
            return await _io.run_async(backend.release(self.key, holding.owner), _io.on_async(conn))
        except BaseException:
            await self._drop(RELEASE_LIMIT)
            raise

    async def guard(self, keys: Iterable[Key], *command: Arg) -> Any:
        """Runs ``command`` only while this lock's token holds the lock, checked and
        run by the server in one step, as :meth:`Lock.guard
        <redis_lock_client.Lock.guard>` (the same keys, reply and errors).

        >>> async with AsyncLock(client, "{job:1}", ttl=30.0) as lock:
        ...     await lock.guard(["{job:1}:out"], "SET", "{job:1}:out", result)
        """
        declared, args = check_command(keys, command)
        self._forked()
        holding = holding_of(self.key, self._holding, "the guarded write")
        try:
            conn = self._conn(CONTROL_LIMIT)
            call = _io.on_async(conn)
            return await _io.run_async(guarded(holding.backend, holding, declared, args), call)
        except (redis.exceptions.ResponseError, LockError):
            raise
        except BaseException as cut_short:
            # A cancellation or a lost reply: the connection is never used again.
            await self._drop(CONTROL_LIMIT)
            told = unanswered_guard(self.key, cut_short)
            if told is cut_short:
                raise
            raise told from cut_short

    async def _withdraw(self, backend: Backend, owner: str, limit: float) -> None:
        try:
            conn = self._conn(limit)
            withdraw = _io.run_async(backend.withdraw(self.key, owner), _io.on_async(conn))
            await asyncio.wait_for(withdraw, limit)
        except Exception as error:
            await self._drop(limit)
            log.warning("could not withdraw from lock %r (its TTL ends it): %s", self.key, error)

    async def locked(self) -> bool:
        """True if anyone holds the lock now (asks the server)."""
        return await self.info() is not None

    async def info(self) -> dict[str, Any] | None:
        """The server's view, as ``Lock.info``."""
        backend = await self._probe()
        call = _io.on_client_async(self._client, self.key)
        return await _io.run_async(backend.info(self.key), call)

    async def _probe(self) -> Backend:
        if self._backend is None or _io.stale(self._backend):
            try:
                await _io.ready_async(self._client)
                call = _io.on_async(self._conn(CONTROL_LIMIT))
                self._backend = await _io.backend_for_async(
                    self._client, call, self.key, self._forced
                )
            except BaseException:
                await self._drop(CONTROL_LIMIT)
                raise
        return self._backend

    def _conn(self, read_limit: float | None) -> _io.AsyncConnection:
        self._forked()
        conn = self._conns.get(read_limit)
        if conn is None:
            conn = _io.connect_async(self._client, read_limit, self.key)
            self._conns[read_limit] = conn
        return conn

    async def _drop(self, read_limit: float | None) -> None:
        await _disconnect(self._conns.pop(read_limit, None))

    async def aclose(self) -> None:
        """Closes the holder's own connections (a held lock is released first)."""
        if self._holding is not None:
            await self.release()
        for limit in list(self._conns):
            await self._drop(limit)

    async def __aenter__(self) -> _AsyncHolder:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._forked():
            return  # the parent's holding: the parent releases it
        held = self._holding is not None
        was_lost = held and (self.lost.is_set() or not self.owned())
        if held:
            try:
                await asyncio.wait_for(self.release(), RELEASE_LIMIT)
            except Exception as release_error:
                log.warning("release of lock %r failed: %s", self.key, release_error)
        if was_lost and kind is None and self.raise_on_lost:
            raise LockLostError(self.key)


async def _disconnect(conn: _io.AsyncConnection | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.disconnect()


class AsyncLock(_AsyncHolder):
    """The asyncio twin of :class:`redis_lock_client.Lock` (``backend`` as there).

    >>> async with AsyncLock(redis.asyncio.Redis(), "report:daily") as lock:
    ...     await write_report(fence=lock.token)
    """

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        ttl: float = 30.0,
        *,
        on_lost: Callable[[], Any] | None = None,
        raise_on_lost: bool = True,
        backend: BackendName = None,
        owner: str | None = None,
    ) -> None:
        super().__init__(
            client,
            key,
            ttl,
            EXCLUSIVE,
            on_lost=on_lost,
            raise_on_lost=raise_on_lost,
            backend=backend,
            owner=owner,
        )

    async def __aenter__(self) -> AsyncLock:
        await self.acquire()
        return self

    async def fence_postgres(
        self, cursor: postgres.AsyncCursor, resource: str | None = None
    ) -> None:
        """Fences the asyncio cursor's transaction (psycopg 3's ``AsyncCursor``) with
        this lock's token for ``resource`` (the lock's key by default), as
        :meth:`Lock.fence_postgres <redis_lock_client.Lock.fence_postgres>`.

        >>> async with conn.transaction(), conn.cursor() as cur:
        ...     await lock.fence_postgres(cur)
        ...     await cur.execute("UPDATE reports SET body = %s WHERE day = %s", (body, day))
        """
        self._forked()
        holding = holding_of(self.key, self._holding, "the fence")
        assert holding.token is not None
        try:
            resource = self.key if resource is None else resource
            await postgres.fence_async(cursor, resource, holding.token)
        except FencedError as fenced:
            holding.lose(f"its fence in PostgreSQL was refused: {fenced}")
            raise


class AsyncSemaphore(_AsyncHolder):
    """The asyncio twin of :class:`redis_lock_client.Semaphore`."""

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        permits: int,
        ttl: float = 30.0,
        *,
        on_lost: Callable[[], Any] | None = None,
        raise_on_lost: bool = True,
        backend: BackendName = None,
        owner: str | None = None,
    ) -> None:
        mode = Mode(limit=check_permits(permits))
        super().__init__(
            client,
            key,
            ttl,
            mode,
            on_lost=on_lost,
            raise_on_lost=raise_on_lost,
            backend=backend,
            owner=owner,
        )
        self.permits = permits

    async def __aenter__(self) -> AsyncSemaphore:
        await self.acquire()
        return self


class AsyncReadLock(_AsyncHolder):
    """A shared holding; made by :meth:`AsyncReadWriteLock.read`."""

    async def __aenter__(self) -> AsyncReadLock:
        await self.acquire()
        return self


class AsyncReadWriteLock:
    """The asyncio twin of :class:`redis_lock_client.ReadWriteLock`."""

    def __init__(
        self,
        client: redis.asyncio.Redis | RedisCluster,
        key: str,
        ttl: float = 30.0,
        *,
        on_lost: Callable[[], Any] | None = None,
        raise_on_lost: bool = True,
        backend: BackendName = None,
    ) -> None:
        check_ttl(ttl)
        self._client, self.key, self.ttl = client, key, ttl
        self._options: dict[str, Any] = {
            "on_lost": on_lost,
            "raise_on_lost": raise_on_lost,
            "backend": backend,
        }

    def read(self) -> AsyncReadLock:
        """A shared holding (a new holder object each call), used like a Lock."""
        return AsyncReadLock(self._client, self.key, self.ttl, SHARED, **self._options)

    def write(self) -> AsyncLock:
        return AsyncLock(self._client, self.key, self.ttl, **self._options)
