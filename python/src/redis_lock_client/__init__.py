"""Locks, semaphores and read-write locks on the redis-lock module (or its function
library, on servers without the module), for redis-py.

Fencing tokens, FIFO waiting in the server (no polling), renewal in the background
that tells the holder when it lost the lock, before anyone else can be granted it.

>>> import redis
>>> from redis_lock_client import Lock
>>> with Lock(redis.Redis(), "report:daily", ttl=30.0) as lock:
...     build_report(fence=lock.token)
"""

from ._aio import AsyncLock, AsyncReadLock, AsyncReadWriteLock, AsyncSemaphore
from ._errors import LibraryVersionError, LockError, LockLostError, NoLockBackendError
from ._lease import margin
from ._only_one import only_one
from ._sync import Lock, ReadLock, ReadWriteLock, Semaphore

__all__ = [
    "AsyncLock",
    "AsyncReadLock",
    "AsyncReadWriteLock",
    "AsyncSemaphore",
    "LibraryVersionError",
    "Lock",
    "LockError",
    "LockLostError",
    "NoLockBackendError",
    "ReadLock",
    "ReadWriteLock",
    "Semaphore",
    "margin",
    "only_one",
]
