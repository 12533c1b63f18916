"""Threaded holders: :class:`Lock`, :class:`Semaphore`, :class:`ReadWriteLock`."""

from __future__ import annotations

import logging
import os
import threading
import time
from types import TracebackType
from typing import Any, Callable

import redis
import redis.exceptions
from redis.connection import AbstractConnection

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
from ._lease import Lease
from ._renew import SCHEDULER, Renewal

log = logging.getLogger("redis_lock_client")


class _Holder:
    """One holding at a time of ``key`` in ``mode``, renewed while held."""

    def __init__(
        self,
        client: redis.Redis,
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
        self._lost = threading.Event()
        self._renewal: Renewal | None = None
        self._backend: Backend | None = None
        # The holder's own connections, kept between acquires; each is bounded as
        # its use needs (``_conns[limit]``): a wait's read by the wait, a release's
        # by RELEASE_LIMIT.
        self._conns: dict[float | None, AbstractConnection] = {}
        # The process whose holding and connections these are: a forked child has
        # copies of both, and must neither release nor renew the parent's holding
        # nor write on the parent's sockets (see _forked).
        self._pid = os.getpid()

    @property
    def token(self) -> int | None:
        """The fencing token of the current holding; None when not held (also in a
        process forked from the holder: the holding is the parent's)."""
        return self._token if self._pid == os.getpid() else None

    @property
    def owner(self) -> str | None:
        """The owner id of the current holding (fresh for every acquire)."""
        return self._owner if self._pid == os.getpid() else None

    @property
    def lost(self) -> threading.Event:
        """Set when the current holding is lost: a renewal found it gone, or no
        renewal was acknowledged before the lease's local deadline (a margin before
        the server could grant it to anyone else). A fresh event per acquire."""
        return self._lost

    def owned(self) -> bool:
        """True while this object holds the lock and its lease has not run out."""
        renewal = self._renewal
        if renewal is None or self._pid != os.getpid():
            return False
        return not renewal.lease.is_lost(time.monotonic())

    def _forked(self) -> bool:
        """In a process forked from the one that used this object last, drops what
        it inherited: the parent's holding (which stays the parent's: nothing is
        sent for it) and the parent's connections (their descriptors are closed
        here only; redis-py shuts a socket down only in the process that opened
        it). True if a holding was dropped so."""
        if self._pid == os.getpid():
            return False
        self._pid = os.getpid()
        inherited = self._owner is not None
        # The renewal and its lease are the parent's objects: not stopped or ended
        # from here (the copies would change nothing there, and nothing renews here).
        self._owner = self._token = self._renewal = None
        self._lost = threading.Event()
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            _io.disconnect(conn)
        return inherited

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Takes the lock, waiting in the server's FIFO queue as ``threading.Lock``
        would (``timeout`` None or -1: without limit); True if granted."""
        self._forked()
        if self._owner is not None:
            raise RuntimeError(f"lock {self.key!r} is already held by this object")
        wait_ms, read_limit = wait_of(blocking, timeout)
        backend = self._probe()
        owner = self._given_owner or new_owner()
        sent = time.monotonic()
        try:
            conn = self._conn(read_limit)
            token = _io.run_sync(
                backend.acquire(self.key, owner, self._ttl_ms, self._mode, wait_ms), _io.on(conn)
            )
            if token is None:
                return False
            lease = Lease(sent, self.ttl)
            if granted_after_wait(sent, time.monotonic(), self.ttl):
                lease = self._refresh(backend, owner, lease)
            self._held(backend, owner, token, lease)
            return True
        except redis.exceptions.ResponseError as refusal:
            # A refusal (WRONGTYPE, a mode conflict, OOM).
            missing = backend_missing(refusal)
            if missing is not None:
                raise missing from refusal
            # Refused mid-wait (OOM when collecting a grant the library pushed):
            # the grant or the queue place must not outlive the refusal.
            self._withdraw(backend, owner, withdraw_limit(refusal))
            raise
        except BaseException as cut_short:
            # Cut short (an interrupt, a timeout, a dead connection) before the
            # caller learnt of a grant: the server may have granted it, or still
            # queue it. Closing the connection drops a queued waiter; a release by
            # the fresh owner ends a grant.
            self._drop(read_limit)
            if self._owner == owner:
                self._forget()
            self._withdraw(backend, owner, withdraw_limit(cut_short))
            told = unanswered(self.key, cut_short, wait_ms, read_limit)
            if told is cut_short:
                raise
            raise told from cut_short

    def _held(self, backend: Backend, owner: str, token: int, lease: Lease) -> None:
        self._owner = owner
        self._token = token
        self._lost = threading.Event()
        self._renewal = Renewal(
            self._client, backend, self.key, owner, self._ttl_ms, lease, self._lost, self._on_lost
        )
        SCHEDULER.add(self._renewal, min(lease.next_renewal(), lease.valid_until))

    def _refresh(self, backend: Backend, owner: str, lease: Lease) -> Lease:
        sent = time.monotonic()
        try:
            conn = self._conn(RELEASE_LIMIT)
            if _io.run_sync(backend.extend(self.key, owner, self._ttl_ms), _io.on(conn)):
                return Lease(sent, self.ttl)
        except redis.exceptions.RedisError:
            self._drop(RELEASE_LIMIT)
        return lease

    def release(self) -> bool:
        """Ends the holding; True if the server still had it (False: it had been
        lost). ``RuntimeError`` if this object holds nothing. In a process forked
        from the holder, nothing is sent and the answer is False: the holding is
        the parent's, which goes on holding and renewing it."""
        if self._forked():
            log.debug(
                "release of lock %r in a forked process: the holding is its parent's", self.key
            )
            return False
        owner, renewal, backend = self._owner, self._renewal, self._backend
        if owner is None or renewal is None or backend is None:
            raise RuntimeError(f"release of lock {self.key!r}, which this object does not hold")
        self._forget()
        try:
            conn = self._conn(RELEASE_LIMIT)
            return _io.run_sync(backend.release(self.key, owner), _io.on(conn))
        except BaseException:
            self._drop(RELEASE_LIMIT)
            raise

    def _forget(self) -> None:
        """Stops renewing the holding and drops it locally."""
        if self._renewal is not None:
            self._renewal.stop()
            self._renewal.lease.end()
        self._owner = self._token = self._renewal = None

    def _withdraw(self, backend: Backend, owner: str, limit: float) -> None:
        try:
            conn = self._conn(limit)
            _io.run_sync(backend.withdraw(self.key, owner), _io.on(conn))
        except Exception as error:
            self._drop(limit)
            log.warning("could not withdraw from lock %r (its TTL ends it): %s", self.key, error)

    def locked(self) -> bool:
        """True if anyone holds the lock now (asks the server)."""
        return self.info() is not None

    def info(self) -> dict[str, Any] | None:
        """The server's view: ``{"mode", "waiters", "holders": [{"owner", "ttl",
        "token"}]}`` (ttl in seconds), or None when nothing is held."""
        backend = self._probe()
        return _io.run_sync(backend.info(self.key), _io.on_client(self._client))

    def _probe(self) -> Backend:
        if self._backend is None or _io.stale(self._backend):
            try:
                call = _io.on(self._conn(CONTROL_LIMIT))
                self._backend = _io.backend_for(self._client, call, self._forced)
            except BaseException:
                self._drop(CONTROL_LIMIT)
                raise
        return self._backend

    def _conn(self, read_limit: float | None) -> AbstractConnection:
        self._forked()
        conn = self._conns.get(read_limit)
        if conn is None:
            if len(self._conns) >= 4:  # waits of many different timeouts
                self._close()
            conn = _io.connect(self._client, read_limit)
            self._conns[read_limit] = conn
        return conn

    def _drop(self, read_limit: float | None) -> None:
        _io.disconnect(self._conns.pop(read_limit, None))

    def _close(self) -> None:
        for limit in list(self._conns):
            self._drop(limit)

    def close(self) -> None:
        """Closes the holder's own connections (a held lock is released first)."""
        if self._forked():
            return
        if self._owner is not None:
            self.release()
        self._close()

    def __enter__(self) -> _Holder:
        self.acquire()
        return self

    def __exit__(
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
                self.release()
            except Exception as release_error:
                # Never a second exception from __exit__: the TTL ends the holding.
                log.warning("release of lock %r failed: %s", self.key, release_error)
        if was_lost and kind is None and self.raise_on_lost:
            raise LockLostError(self.key)

    def __del__(self) -> None:
        renewal = getattr(self, "_renewal", None)
        if renewal is not None:
            renewal.stop()
        if hasattr(self, "_conns"):
            self._close()


class Lock(_Holder):
    """An exclusive lock at ``key``, renewed in the background while held.

    ``backend`` forces ``"module"``, ``"functions"`` (the ``redislock`` library by
    ``FCALL``) or ``"scripts"`` (the library sent by ``EVALSHA``); ``None`` picks
    the first the server has, in that order.

    ``owner`` acquires as that owner id instead of a fresh one per acquire: an
    acquire by the owner that holds gets the same token back (a retry after a lost
    reply learns it already holds), and every object with that owner shares the one
    holding (a release or a withdrawn acquire by any of them ends it).

    >>> lock = Lock(redis.Redis(), "report:daily", ttl=30.0)
    >>> with lock:
    ...     write_report(fence=lock.token)
    """

    def __init__(
        self,
        client: redis.Redis,
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

    def __enter__(self) -> Lock:
        self.acquire()
        return self


class Semaphore(_Holder):
    """One of ``permits`` holdings at ``key`` (``LOCK.ACQUIRE … LIMIT permits``).
    Every client of a key should use the same ``permits``.

    >>> with Semaphore(redis.Redis(), "exports", permits=5):
    ...     run_export()
    """

    def __init__(
        self,
        client: redis.Redis,
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

    def __enter__(self) -> Semaphore:
        self.acquire()
        return self


class ReadLock(_Holder):
    """A shared holding at ``key``, beside other readers and never beside a writer;
    made by :meth:`ReadWriteLock.read`."""

    def __enter__(self) -> ReadLock:
        self.acquire()
        return self


class ReadWriteLock:
    """Readers beside each other, a writer alone, in one FIFO queue: a waiting
    writer is not starved by readers that come after it.

    >>> rw = ReadWriteLock(redis.Redis(), "catalog")
    >>> with rw.read():
    ...     load_catalog()
    """

    def __init__(
        self,
        client: redis.Redis,
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

    def read(self) -> ReadLock:
        """A shared holding (a new holder object each call), used like a Lock."""
        return ReadLock(self._client, self.key, self.ttl, SHARED, **self._options)

    def write(self) -> Lock:
        """An exclusive holding (a new Lock each call)."""
        return Lock(self._client, self.key, self.ttl, **self._options)
