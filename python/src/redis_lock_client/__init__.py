"""Locks, semaphores and read-write locks on the redis-lock module (or its function
library, on servers without the module), for redis-py.

Fencing tokens, FIFO waiting in the server (no polling), renewal in the background
that tells the holder when it lost the lock, before anyone else can be granted it.

>>> import redis
>>> from redis_lock_client import Lock
>>> with Lock(redis.Redis(), "{report:daily}", ttl=30.0) as lock:
...     rows = build_report()
...     lock.guard(["{report:daily}:out"], "SET", "{report:daily}:out", rows)

Writes fenced by the lock's token: ``lock.guard`` in Redis, ``lock.fence_postgres``
in a PostgreSQL transaction (:mod:`redis_lock_client.postgres`); a refusal raises
:class:`FencedError`, and the lock is lost at once.

Leader election with terms that fence: :class:`Election` (and
:class:`AsyncElection`): ``campaign``, ``leader``, ``observe``,
``run_while_leader``.
"""

from . import postgres
from ._aio import AsyncLock, AsyncReadLock, AsyncReadWriteLock, AsyncSemaphore
from ._election import Leader
from ._errors import (
    FencedError,
    LibraryVersionError,
    LockError,
    LockLostError,
    NoLockBackendError,
)
from ._leader_aio import AsyncElection, AsyncLeadership, AsyncObserver
from ._leader_sync import Election, Leadership, Observer
from ._lease import margin
from ._only_one import only_one
from ._sync import Lock, ReadLock, ReadWriteLock, Semaphore

__all__ = [
    "AsyncElection",
    "AsyncLeadership",
    "AsyncLock",
    "AsyncObserver",
    "AsyncReadLock",
    "AsyncReadWriteLock",
    "AsyncSemaphore",
    "Election",
    "FencedError",
    "Leader",
    "Leadership",
    "LibraryVersionError",
    "Lock",
    "LockError",
    "LockLostError",
    "NoLockBackendError",
    "Observer",
    "ReadLock",
    "ReadWriteLock",
    "Semaphore",
    "margin",
    "only_one",
    "postgres",
]
