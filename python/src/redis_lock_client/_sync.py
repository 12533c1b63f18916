"""Threaded holders: :class:`Lock`, :class:`Semaphore`, :class:`ReadWriteLock`."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Callable

import redis
import redis.exceptions
from redis.cluster import RedisCluster
from redis.connection import AbstractConnection

from . import _io, postgres
from ._backend import EXCLUSIVE, SHARED, Arg, Backend, Key, Mode
from ._detect import BackendName, check_backend_name
from ._errors import FencedError, LockError, LockLostError, backend_missing
from ._guard import check_command, guarded, holding_of, unanswered_guard
from ._held import Holding, Member, holding_for
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
from ._renew import Renewal

log = logging.getLogger("redis_lock_client")


class _Holder:
    """One holding at a time of ``key`` in ``mode``, renewed while held."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        key: str,
        ttl: float,
        mode: Mode,
        *,
        on_lost: Callable[[], Any] | None = None,
        raise_on_lost: bool = True,
        backend: BackendName = None,
        owner: str | None = None,
    ) -> None:
        _io.check_client(client, asyncio_api=False)
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
        self._member = Member(on_lost, key)
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
        holding = self._holding
        return holding.token if holding is not None and self._pid == os.getpid() else None

    @property
    def owner(self) -> str | None:
        """The owner id of the current holding (fresh for every acquire, unless
        ``owner=`` names one)."""
        holding = self._holding
        return holding.owner if holding is not None and self._pid == os.getpid() else None

    @property
    def lost(self) -> threading.Event:
        """Set when the current holding is lost: a renewal found it gone, or no
        renewal was acknowledged before the lease's local deadline (a margin before
        the server could grant it to anyone else). A fresh event per acquire.

        Check it right before each write under the lock::

            if lock.lost.is_set():
                raise LockLostError(lock.key)
            write(fence=lock.token)

        ``is_set()`` reads the clock itself: past the deadline it says True even if
        the thread that keeps time has not run yet (after a pause of the process)."""
        return self._member.lost

    def owned(self) -> bool:
        """True while this object holds the lock and its lease has not run out."""
        holding = self._holding
        if holding is None or self._pid != os.getpid():
            return False
        return not holding.lease.is_lost(time.monotonic())

    def _forked(self) -> bool:
        """In a process forked from the one that used this object last, drops what
        it inherited: the parent's holding (which stays the parent's: nothing is
        sent for it) and the parent's connections (their descriptors are closed
        here only; redis-py shuts a socket down only in the process that opened
        it). True if a holding was dropped so."""
        if self._pid == os.getpid():
            return False
        self._pid = os.getpid()
        inherited = self._holding is not None
        # The holding, its renewal and lease are the parent's objects: not stopped or
        # ended from here (the copies would change nothing there, and nothing renews
        # here).
        self._holding = None
        self._member = Member(self._on_lost, self.key)
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            _io.disconnect(conn)
        return inherited

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Takes the lock, waiting in the server's FIFO queue as ``threading.Lock``
        would (``timeout`` None or -1: without limit); True if granted."""
        self._forked()
        if self._holding is not None:
            raise RuntimeError(f"lock {self.key!r} is already held by this object")
        wait_ms, read_limit = wait_of(blocking, timeout)
        backend = self._probe()
        owner = self._given_owner or new_owner()
        holding = holding_for(_io.place_of(self._client, self.key), self.key, owner, "threads")
        member = self._member = Member(self._on_lost, self.key)
        joined = False
        try:
            write = holding.sending(self.ttl, self._ttl_ms, time.monotonic())
            conn = self._conn(read_limit)
            token = _io.run_sync(
                backend.acquire(self.key, owner, self._ttl_ms, self._mode, wait_ms), _io.on(conn)
            )
            if token is None:
                return False
            holding.lease.answered(write, time.monotonic())
            if granted_after_wait(write.sent, time.monotonic(), self.ttl):
                self._refresh(backend, holding)
            if holding.granted(member, token, backend):
                Renewal(self._client, holding).start()
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
                self._withdraw(backend, owner, withdraw_limit(refusal))
            raise
        except BaseException as cut_short:
            # Cut short (an interrupt, a timeout, a dead connection) before the
            # caller learnt of a grant: the server may have granted it, or still
            # queue it. Closing the connection drops a queued waiter; a release by
            # the owner ends a grant (not one that another lock object of this
            # process holds as the same owner: this acquire only refreshed it).
            self._drop(read_limit)
            if not holding.shared():
                self._withdraw(backend, owner, withdraw_limit(cut_short))
            told = unanswered(self.key, cut_short, wait_ms, read_limit)
            if told is cut_short:
                raise
            raise told from cut_short
        finally:
            if not joined:
                holding.not_granted()

    def _refresh(self, backend: Backend, holding: Holding) -> None:
        """An extend right after a long wait: the lease counted from the wait's send."""
        try:
            write = holding.sending(self.ttl, self._ttl_ms, time.monotonic())
            conn = self._conn(RELEASE_LIMIT)
            if _io.run_sync(backend.extend(self.key, holding.owner, self._ttl_ms), _io.on(conn)):
                holding.lease.answered(write, time.monotonic())
        except redis.exceptions.RedisError:
            self._drop(RELEASE_LIMIT)

    def release(self) -> bool:
        """Ends the holding; True if the server still had it (False: it had been
        lost). ``RuntimeError`` if this object holds nothing. Other lock objects of
        this process with the same owner shared the holding: it ends for them too,
        and they are told so (``lost``). In a process forked from the holder,
        nothing is sent and the answer is False: the holding is the parent's, which
        goes on holding and renewing it."""
        if self._forked():
            log.debug(
                "release of lock %r in a forked process: the holding is its parent's", self.key
            )
            return False
        holding, backend = self._holding, self._backend
        if holding is None or backend is None:
            raise RuntimeError(f"release of lock {self.key!r}, which this object does not hold")
        self._holding = None
        holding.released_by(self._member)
        try:
            conn = self._conn(RELEASE_LIMIT)
            return _io.run_sync(backend.release(self.key, holding.owner), _io.on(conn))
        except BaseException:
            self._drop(RELEASE_LIMIT)
            raise

    def guard(self, keys: Iterable[Key], *command: Arg) -> Any:
        """Runs ``command`` only while this lock's token holds the lock, checked and
        run by the server in one step (``LOCK.GUARD`` on the module, ``lock_guard``
        on the library): no expiry, release or grant to another holder comes
        between the check and the write. Returns the command's reply as redis-py
        reads it (``b"OK"`` for a ``SET``: the reply callbacks of redis-py's own
        methods do not apply); the command's own error reply raises
        ``redis.ResponseError``.

        ``keys`` are every key the command touches: the library declares them to the
        server (Cluster routing, ACL key patterns) and refuses a command that
        touches a key not declared; the module finds them itself, but name them on
        every backend so the code runs on each. In a Cluster they share the lock
        key's hash slot: ``{job:1}`` for the lock, ``{job:1}:out`` for the data.

        >>> with Lock(client, "{job:1}", ttl=30.0) as lock:
        ...     lock.guard(["{job:1}:out"], "SET", "{job:1}:out", result)

        Not held with this token any more (it lapsed, was released or deleted, or
        another holder has it): nothing runs, :class:`FencedError` is raised, and
        the lock is lost at once (``lock.lost`` set, ``on_lost`` called). The server
        decides, not the client's lease: a lock already found lost is still asked
        (refused unless the server still holds it with this token). A lock object
        that holds nothing (not acquired, released) raises :class:`LockLostError`
        without sending anything. Sent once, on the holder's own connection,
        bounded at 2 s: a reply lost to a broken connection raises
        ``redis.ConnectionError`` or ``redis.TimeoutError``, and the command may
        have run."""
        declared, args = check_command(keys, command)
        self._forked()
        holding = holding_of(self.key, self._holding, "the guarded write")
        try:
            conn = self._conn(CONTROL_LIMIT)
            return _io.run_sync(guarded(holding.backend, holding, declared, args), _io.on(conn))
        except (redis.exceptions.ResponseError, LockError):
            raise
        except BaseException as cut_short:
            # The connection may hold a reply not read: never used again.
            self._drop(CONTROL_LIMIT)
            told = unanswered_guard(self.key, cut_short)
            if told is cut_short:
                raise
            raise told from cut_short

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
        return _io.run_sync(backend.info(self.key), _io.on_client(self._client, self.key))

    def _probe(self) -> Backend:
        if self._backend is None or _io.stale(self._backend):
            try:
                call = _io.on(self._conn(CONTROL_LIMIT))
                self._backend = _io.backend_for(self._client, call, self.key, self._forced)
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
            conn = _io.connect(self._client, read_limit, self.key)
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
        if self._holding is not None:
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
        held = self._holding is not None
        was_lost = held and (self.lost.is_set() or not self.owned())
        if held:
            try:
                self.release()
            except Exception as release_error:
                # Never a second exception from __exit__: the TTL ends the holding.
                log.warning("release of lock %r failed: %s", self.key, release_error)
        if was_lost and kind is None and self.raise_on_lost:
            raise LockLostError(self.key)

    def __del__(self) -> None:
        holding = getattr(self, "_holding", None)
        if holding is not None and getattr(self, "_pid", None) == os.getpid():
            # Dropped while held: nobody will release it, and nobody hears of its
            # loss; the renewal stops with the last member, and the TTL ends it.
            holding.left_by(self._member)
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
        client: redis.Redis | RedisCluster,
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

    def fence_postgres(self, cursor: postgres.Cursor, resource: str | None = None) -> None:
        """Fences the cursor's transaction with this lock's token for ``resource``
        (the lock's key by default): :func:`redis_lock_client.postgres.fence`, run
        in the write's own transaction before the write. A holder with a greater
        token has written: :class:`FencedError` (roll back), and the lock is lost at
        once (``lock.lost`` set, ``on_lost`` called). The database decides, not the
        client's lease: a lock already found lost still fences while no greater
        token has written. A lock object that holds nothing (not acquired,
        released) raises :class:`LockLostError`, running nothing.

        >>> with conn.transaction(), conn.cursor() as cur:  # psycopg 3; psycopg2 alike
        ...     lock.fence_postgres(cur)
        ...     cur.execute("UPDATE reports SET body = %s WHERE day = %s", (body, day))
        """
        self._forked()
        holding = holding_of(self.key, self._holding, "the fence")
        assert holding.token is not None
        try:
            postgres.fence(cursor, self.key if resource is None else resource, holding.token)
        except FencedError as fenced:
            holding.lose(f"its fence in PostgreSQL was refused: {fenced}")
            raise


class Semaphore(_Holder):
    """One of ``permits`` holdings at ``key`` (``LOCK.ACQUIRE … LIMIT permits``).
    Every client of a key should use the same ``permits``.

    >>> with Semaphore(redis.Redis(), "exports", permits=5):
    ...     run_export()
    """

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
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
        client: redis.Redis | RedisCluster,
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
