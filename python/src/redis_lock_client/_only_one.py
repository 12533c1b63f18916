"""``@only_one``: run a job only if nobody else is running it, skip it otherwise."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable
from typing import Any, Callable, TypeVar, overload

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from ._aio import AsyncLock
from ._detect import BackendName
from ._sync import Lock

log = logging.getLogger("redis_lock_client")

R = TypeVar("R")


@overload
def only_one(
    client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster,
    key: str,
    ttl: float = 30.0,
    *,
    wait: float | None = None,
    raise_on_lost: bool = True,
    backend: BackendName = None,
) -> Callable[[Callable[..., Awaitable[R]]], Callable[..., Awaitable[R | None]]]: ...


@overload
def only_one(
    client: redis.Redis | redis.cluster.RedisCluster,
    key: str,
    ttl: float = 30.0,
    *,
    wait: float | None = None,
    raise_on_lost: bool = True,
    backend: BackendName = None,
) -> Callable[[Callable[..., R]], Callable[..., R | None]]: ...


def only_one(
    client: redis.Redis
    | redis.cluster.RedisCluster
    | redis.asyncio.Redis
    | redis.asyncio.cluster.RedisCluster,
    key: str,
    ttl: float = 30.0,
    *,
    wait: float | None = None,
    raise_on_lost: bool = True,
    backend: BackendName = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Runs the decorated function under the lock at ``key``, or skips it (returns
    None, logs at INFO) while someone else holds it. ``wait`` seconds waits in the
    server's queue first. The lock is renewed while the function runs, and released
    after; a loss raises :class:`LockLostError` after the function returns (unless
    ``raise_on_lost=False``). Works on ``async def`` functions with a
    ``redis.asyncio.Redis`` client. ``backend`` as for :class:`Lock`.

    >>> @only_one(redis.Redis(), "cron:cleanup", ttl=60)
    ... def cleanup() -> None:
    ...     ...
    """

    def decorate(job: Callable[..., Any]) -> Callable[..., Any]:
        blocking = wait is not None
        if inspect.iscoroutinefunction(job):
            if not isinstance(client, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)):
                raise TypeError(
                    "an async function needs a redis.asyncio.Redis (or asyncio RedisCluster) client"
                )
            aclient = client

            @functools.wraps(job)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                lock = AsyncLock(aclient, key, ttl, raise_on_lost=raise_on_lost, backend=backend)
                try:
                    if not await lock.acquire(blocking, wait):
                        log.info("skipped %s: lock %r is busy", job.__name__, key)
                        return None
                    async with _held(lock):
                        return await job(*args, **kwargs)
                finally:
                    await lock.aclose()

            return run_async
        if not isinstance(client, (redis.Redis, redis.cluster.RedisCluster)):
            raise TypeError("a plain function needs a redis.Redis (or RedisCluster) client")
        sclient = client

        @functools.wraps(job)
        def run(*args: Any, **kwargs: Any) -> Any:
            lock = Lock(sclient, key, ttl, raise_on_lost=raise_on_lost, backend=backend)
            try:
                if not lock.acquire(blocking, wait):
                    log.info("skipped %s: lock %r is busy", job.__name__, key)
                    return None
                with _Held(lock):
                    return job(*args, **kwargs)
            finally:
                lock.close()

        return run

    return decorate


class _Held:
    """Exits an already acquired lock like its ``with`` block would."""

    def __init__(self, lock: Lock) -> None:
        self.lock = lock

    def __enter__(self) -> Lock:
        return self.lock

    def __exit__(self, *exc: Any) -> None:
        self.lock.__exit__(*exc)


class _held:
    def __init__(self, lock: AsyncLock) -> None:
        self.lock = lock

    async def __aenter__(self) -> AsyncLock:
        return self.lock

    async def __aexit__(self, *exc: Any) -> None:
        await self.lock.__aexit__(*exc)
