"""A wait or a holding cut short (Ctrl-C, asyncio cancellation) leaves nothing behind:
no holder, no waiter, and no late grant to a client that gave up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time

import pytest
import redis
import redis.asyncio

from redis_lock_client import AsyncLock, Lock

from servers import RedisServer, lock_info, wait_until
from workers import start


def waiters(client: redis.Redis, key: str) -> int:
    info = lock_info(client, key)
    return 0 if info is None else int(info["waiters"])


@pytest.mark.scripts
def test_ctrl_c_during_a_wait_leaves_no_waiter_behind(
    server: RedisServer, client: redis.Redis
) -> None:
    holder = Lock(client, "job")
    assert holder.acquire()
    worker = start("wait_forever", server.port, "job")
    try:
        wait_until(lambda: waiters(client, "job") == 1, limit=10)
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGINT)
        wait_until(lambda: client.llen("job:events") == 1)
        # The process lives on: the lock object itself gave up its place, well
        # before the library's place lease (2 s) could have ended it.
        wait_until(lambda: waiters(client, "job") == 0, limit=1.0)
        assert worker.is_alive()
        holder.release()
        time.sleep(0.1)
        assert lock_info(client, "job") is None, "the interrupted waiter was granted"
        assert client.lrange("job:events", 0, -1) == [b"KeyboardInterrupt"]
    finally:
        worker.kill()


def test_ctrl_c_in_a_with_block_releases_at_once_and_raises_once(
    server: RedisServer, client: redis.Redis
) -> None:
    worker = start("work_in_block", server.port, "job")
    try:
        wait_until(lambda: client.llen("job:events") == 1, limit=10)
        assert lock_info(client, "job") is not None
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGINT)
        worker.join(5)
        # Released by __exit__, long before its 30 s TTL; the block's own
        # KeyboardInterrupt is the one exception that left it.
        assert lock_info(client, "job") is None
        assert client.lrange("job:events", 0, -1) == [b"working", b"KeyboardInterrupt"]
    finally:
        worker.kill()


def test_a_failed_release_does_not_replace_the_blocks_exception(
    server: RedisServer, client: redis.Redis
) -> None:
    start = time.monotonic()
    with pytest.raises(ZeroDivisionError), Lock(client, "job", ttl=30.0):
        server.pause()
        try:
            _ = 1 / 0
        finally:
            threading.Timer(5.0, server.resume).start()
    # The release gave up within its bound (2 s) on the stopped server, quietly.
    assert time.monotonic() - start < 3.0


@pytest.mark.scripts
def test_asyncio_cancellation_during_a_wait_leaves_no_waiter_behind(
    server: RedisServer, client: redis.Redis
) -> None:
    async def scenario() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        holder = AsyncLock(aclient, "job")
        assert await holder.acquire()
        waiter = AsyncLock(aclient, "job")
        task = asyncio.create_task(waiter.acquire())
        while waiters(client, "job") != 1:
            await asyncio.sleep(0.01)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        wait_until(lambda: waiters(client, "job") == 0, limit=1.0)
        await holder.release()
        await asyncio.sleep(0.1)
        assert lock_info(client, "job") is None, "the cancelled waiter was granted"
        assert waiter.token is None
        await aclient.aclose()

    asyncio.run(scenario())


def test_asyncio_cancellation_while_holding_releases(
    server: RedisServer, client: redis.Redis
) -> None:
    async def scenario() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        holding = asyncio.Event()

        async def work() -> None:
            async with AsyncLock(aclient, "job", ttl=30.0):
                holding.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(work())
        await holding.wait()
        assert lock_info(client, "job") is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert lock_info(client, "job") is None
        await aclient.aclose()

    asyncio.run(scenario())


def test_an_interrupt_right_after_a_grant_leaves_no_holding(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The grant has come back but the caller has not heard of it yet: the lease's
    # refresh after a long wait is cut short by Ctrl-C.
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Lock, "_refresh", interrupted)
    holder = Lock(client, "job", ttl=0.5)
    assert holder.acquire()
    threading.Timer(0.3, holder.release).start()
    waiter = Lock(client, "job", ttl=2.0)  # a 0.3 s wait is over its margin (0.2 s)
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire(timeout=5)
    assert lock_info(client, "job") is None
    assert waiter.token is None


def test_a_cancellation_right_after_a_grant_leaves_no_holding(
    server: RedisServer, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def cancelled(*args: object) -> None:
        raise asyncio.CancelledError

    monkeypatch.setattr(AsyncLock, "_refresh", cancelled)

    async def scenario() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        holder = AsyncLock(aclient, "job", ttl=0.5)
        assert await holder.acquire()
        asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(holder.release()))
        waiter = AsyncLock(aclient, "job", ttl=2.0)
        with pytest.raises(asyncio.CancelledError):
            await waiter.acquire(timeout=5)
        assert lock_info(client, "job") is None
        await aclient.aclose()

    asyncio.run(scenario())
