"""asyncio holders over ``redis.asyncio``: :class:`AsyncLock`, :class:`AsyncSemaphore`,
:class:`AsyncReadWriteLock`. The same rules as the threaded ones, with a renewal task
per holding instead of the scheduler thread."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from types import TracebackType
from typing import Any, Callable

import redis.asyncio
import redis.exceptions

from . import _io
from ._backend import EXCLUSIVE, SHARED, Backend, Mode
from ._detect import BackendName, check_backend_name
from ._errors import LockLostError, backend_missing
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
from ._lease import Lease, retry_delay

log = logging.getLogger("redis_lock_client")

#: on_lost coroutines still running (the event loop keeps only weak references).
_callbacks: set[asyncio.Future[Any]] = set()


class _AsyncHolder:
    """One holding at a time of ``key`` in ``mode``, renewed by a task while held."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        key: str,
        ttl: float,
        mode: Mode,
        *,
        on_lost: Callable[[], Any] | None = None,
        raise_on_lost: bool = True,
        backend: BackendName = None,
        owner: str | None = None,
    ) -> None:
        self._ttl_ms = check_ttl(ttl)
        self._given_owner = check_owner(owner)
        self._client = client
        self.key = key
        self.ttl = float(ttl)
        self._mode = mode
        self._on_lost = on_lost
        self.raise_on_lost = raise_on_lost
        self._forced = check_backend_name(backend)
        self._owner: str | None = None
        self._token: int | None = None
        self._lease: Lease | None = None
        self._lost = asyncio.Event()
        # The renewal task starts at the first renewal (a third of the TTL): a timer
        # until then, so a short holding costs no task.
        self._renewal_timer: asyncio.TimerHandle | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._backend: Backend | None = None
        self._conns: dict[float | None, _io.AsyncConnection] = {}
        # The process whose holding and connections these are (see ``Lock``).
        self._pid = os.getpid()

    @property
    def token(self) -> int | None:
        """The fencing token of the current holding; None when not held (also in a
        process forked from the holder: the holding is the parent's)."""
        return self._token if self._pid == os.getpid() else None

    @property
    def owner(self) -> str | None:
        return self._owner if self._pid == os.getpid() else None

    @property
    def lost(self) -> asyncio.Event:
        """Set when the current holding is lost (see ``Lock.lost``)."""
        return self._lost

    def owned(self) -> bool:
        lease = self._lease
        if lease is None or self._pid != os.getpid():
            return False
        return not lease.is_lost(time.monotonic())

    def _forked(self) -> bool:
        """In a process forked from the holder, drops the parent's holding and
        connections without sending anything (as ``Lock._forked``); True if a
        holding was dropped so."""
        if self._pid == os.getpid():
            return False
        self._pid = os.getpid()
        inherited = self._owner is not None
        self._owner = self._token = self._lease = self._renewer = self._renewal_timer = None
        self._lost = asyncio.Event()
        # The parent's connections: forgotten, never written to here (closing one
        # here closes this process's descriptor only; the parent's stays open).
        self._conns = {}
        return inherited

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Takes the lock, waiting in the server's FIFO queue; True if granted. A
        cancellation during the wait leaves no queue place or holding behind."""
        self._forked()
        if self._owner is not None:
            raise RuntimeError(f"lock {self.key!r} is already held by this object")
        wait_ms, read_limit = wait_of(blocking, timeout)
        backend = await self._probe()
        owner = self._given_owner or new_owner()
        sent = time.monotonic()
        try:
            conn = self._conn(read_limit)
            token = await _io.run_async(
                backend.acquire(self.key, owner, self._ttl_ms, self._mode, wait_ms),
                _io.on_async(conn),
            )
            if token is None:
                return False
            lease = Lease(sent, self.ttl)
            if granted_after_wait(sent, time.monotonic(), self.ttl):
                lease = await self._refresh(backend, owner, lease)
            self._owner, self._token, self._lease = owner, token, lease
            self._lost = asyncio.Event()
            self._renewal_timer = asyncio.get_running_loop().call_later(
                max(lease.next_renewal() - time.monotonic(), 0),
                self._start_renewer,
                backend,
                owner,
                lease,
                self._lost,
            )
            return True
        except redis.exceptions.ResponseError as refusal:
            # A refusal (WRONGTYPE, a mode conflict, OOM).
            missing = backend_missing(refusal)
            if missing is not None:
                raise missing from refusal
            # Refused mid-wait (OOM when collecting a grant the library pushed):
            # the grant or the queue place must not outlive the refusal.
            await self._withdraw(backend, owner, withdraw_limit(refusal))
            raise
        except BaseException as cut_short:
            # Cancelled or cut short before the caller learnt of a grant: drop the
            # queue place with the connection, and end a grant by the fresh owner.
            await self._drop(read_limit)
            if self._owner == owner:
                self._forget()
            await self._withdraw(backend, owner, withdraw_limit(cut_short))
            told = unanswered(self.key, cut_short, wait_ms, read_limit)
            if told is cut_short:
                raise
            raise told from cut_short

    async def _refresh(self, backend: Backend, owner: str, lease: Lease) -> Lease:
        sent = time.monotonic()
        try:
            conn = self._conn(RELEASE_LIMIT)
            extend = backend.extend(self.key, owner, self._ttl_ms)
            if await _io.run_async(extend, _io.on_async(conn)):
                return Lease(sent, self.ttl)
        except redis.exceptions.RedisError:
            await self._drop(RELEASE_LIMIT)
        return lease

    async def release(self) -> bool:
        """Ends the holding; True if the server still had it. In a process forked
        from the holder, nothing is sent and the answer is False."""
        if self._forked():
            return False
        owner, lease, backend = self._owner, self._lease, self._backend
        if owner is None or lease is None or backend is None:
            raise RuntimeError(f"release of lock {self.key!r}, which this object does not hold")
        self._forget()
        try:
            conn = self._conn(RELEASE_LIMIT)
            return await _io.run_async(backend.release(self.key, owner), _io.on_async(conn))
        except BaseException:
            await self._drop(RELEASE_LIMIT)
            raise

    def _forget(self) -> None:
        """Stops renewing the holding and drops it locally."""
        if self._renewal_timer is not None:
            self._renewal_timer.cancel()
        if self._renewer is not None:
            self._renewer.cancel()
        if self._lease is not None:
            self._lease.end()
        self._owner = self._token = self._lease = self._renewer = self._renewal_timer = None

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
        return await _io.run_async(backend.info(self.key), _io.on_client_async(self._client))

    def _start_renewer(
        self, backend: Backend, owner: str, lease: Lease, lost: asyncio.Event
    ) -> None:
        if self._owner == owner:
            self._renewer = asyncio.ensure_future(self._renew(backend, owner, lease, lost))

    async def _renew(self, backend: Backend, owner: str, lease: Lease, lost: asyncio.Event) -> None:
        conn: _io.AsyncConnection | None = None
        next_at = lease.next_renewal()
        try:
            while True:
                await asyncio.sleep(max(min(next_at, lease.valid_until) - time.monotonic(), 0))
                start = time.monotonic()
                if lease.is_lost(start):
                    return self._signal_lost(lease, lost, "no renewal acknowledged in time")
                # Bounded by what is left of the lease: a later answer keeps nothing.
                limit = max(lease.remaining(start), 0.01)
                try:
                    if conn is None:
                        conn = _io.connect_async(self._client, None)
                    sent = time.monotonic()
                    extend = _io.run_async(
                        backend.extend(self.key, owner, self._ttl_ms), _io.on_async(conn)
                    )
                    held = await asyncio.wait_for(extend, limit)
                except Exception as error:
                    await _disconnect(conn)
                    conn = None
                    log.warning("renewal of lock %r failed: %s", self.key, error)
                    next_at = time.monotonic() + retry_delay(lease.ttl)
                    continue
                if not held:
                    return self._signal_lost(lease, lost, "a renewal found it gone")
                lease.renewed(sent, time.monotonic())
                next_at = lease.next_renewal()
        finally:
            await _disconnect(conn)

    def _signal_lost(self, lease: Lease, lost: asyncio.Event, why: str) -> None:
        if not lease.end():
            return
        log.warning("lock %r lost: %s", self.key, why)
        lost.set()
        if self._on_lost is not None:
            try:
                outcome = self._on_lost()
                if inspect.isawaitable(outcome):
                    task = asyncio.ensure_future(outcome)
                    _callbacks.add(task)
                    task.add_done_callback(_callbacks.discard)
            except Exception:
                log.exception("the on_lost callback of lock %r raised", self.key)

    async def _probe(self) -> Backend:
        if self._backend is None or _io.stale(self._backend):
            try:
                call = _io.on_async(self._conn(CONTROL_LIMIT))
                self._backend = await _io.backend_for_async(self._client, call, self._forced)
            except BaseException:
                await self._drop(CONTROL_LIMIT)
                raise
        return self._backend

    def _conn(self, read_limit: float | None) -> _io.AsyncConnection:
        self._forked()
        conn = self._conns.get(read_limit)
        if conn is None:
            conn = _io.connect_async(self._client, read_limit)
            self._conns[read_limit] = conn
        return conn

    async def _drop(self, read_limit: float | None) -> None:
        await _disconnect(self._conns.pop(read_limit, None))

    async def aclose(self) -> None:
        """Closes the holder's own connections (a held lock is released first)."""
        if self._owner is not None:
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
        held = self._owner is not None
        was_lost = held and (self._lost.is_set() or not self.owned())
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
        client: redis.asyncio.Redis,
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


class AsyncSemaphore(_AsyncHolder):
    """The asyncio twin of :class:`redis_lock_client.Semaphore`."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
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
        client: redis.asyncio.Redis,
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
