"""The asyncio holders against a real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
import redis
import redis.asyncio

from redis_lock_client import (
    AsyncLock,
    AsyncReadWriteLock,
    AsyncSemaphore,
    LockLostError,
)
from redis_lock_client._protocol import WAIT_MARGIN, WITHDRAW_AFTER_TIMEOUT

from servers import BlackHoleProxy, RedisServer, lock_info

#: How far past its timeout a wait on a stopped server may end.
BOUND = WAIT_MARGIN + WITHDRAW_AFTER_TIMEOUT


def run(server: RedisServer, scenario: Callable[[redis.asyncio.Redis], Awaitable[None]]) -> None:
    async def main() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            await scenario(aclient)
        finally:
            await aclient.aclose()

    asyncio.run(main())


def test_an_async_lock_is_granted_waited_for_and_released(
    server: RedisServer, client: redis.Redis
) -> None:
    async def scenario(aclient: redis.asyncio.Redis) -> None:
        first, second = AsyncLock(aclient, "job"), AsyncLock(aclient, "job")
        assert await first.acquire()
        first_token = first.token
        assert first_token is not None
        assert not await second.acquire(blocking=False)
        assert await second.locked()
        waiting = asyncio.create_task(second.acquire(timeout=5))
        await asyncio.sleep(0.2)
        await first.release()
        assert await waiting
        assert second.token is not None and second.token > first_token
        await second.release()
        assert not await second.locked()

    run(server, scenario)
    assert lock_info(client, "job") is None


def test_an_async_renewal_keeps_the_lock_and_a_deletion_is_reported(
    server: RedisServer, client: redis.Redis
) -> None:
    lost_calls: list[str] = []

    async def scenario(aclient: redis.asyncio.Redis) -> None:
        with pytest.raises(LockLostError):
            async with AsyncLock(
                aclient, "job", ttl=1.0, on_lost=lambda: lost_calls.append("lost")
            ) as lock:
                await asyncio.sleep(2.2)
                assert not lock.lost.is_set()
                client.delete("job")
                await asyncio.wait_for(lock.lost.wait(), 2)

    run(server, scenario)
    assert lost_calls == ["lost"]


def test_async_through_a_black_hole_the_loss_comes_before_a_rival_is_granted(
    server: RedisServer, proxy: BlackHoleProxy, client: redis.Redis
) -> None:
    async def scenario(aclient: redis.asyncio.Redis) -> None:
        through_proxy = redis.asyncio.Redis(host="127.0.0.1", port=proxy.port)
        holder = AsyncLock(through_proxy, "job", ttl=2.0)
        assert await holder.acquire()
        await asyncio.sleep(0.9)  # at least one renewal went through
        rival = AsyncLock(aclient, "job", ttl=1.0)
        waiting = asyncio.create_task(rival.acquire(timeout=5))
        lost = asyncio.create_task(holder.lost.wait())
        await asyncio.sleep(0.1)
        proxy.black_hole()
        holding = holder._holding  # the holding's lease, as the renewal task sees it
        lease = holding.lease if holding is not None else None
        await asyncio.wait_for(lost, 5)
        lost_at = time.monotonic()
        assert not waiting.done(), "a rival was granted before the holder knew"
        # At the deadline (send + TTL - margin), not by luck of scheduling.
        assert lease is not None and lease.last is not None
        assert lost_at <= lease.last.sent + 2.0 - 0.2 / 2
        assert await waiting
        await rival.release()

    run(server, scenario)


def test_async_semaphore_and_read_write_lock(server: RedisServer, client: redis.Redis) -> None:
    async def scenario(aclient: redis.asyncio.Redis) -> None:
        permits = [AsyncSemaphore(aclient, "exports", 2) for _ in range(3)]
        assert await permits[0].acquire(blocking=False)
        assert await permits[1].acquire(blocking=False)
        assert not await permits[2].acquire(blocking=False)
        await permits[0].release()
        assert await permits[2].acquire(blocking=False)
        rw = AsyncReadWriteLock(aclient, "catalog")
        async with rw.read(), rw.read():
            info = lock_info(client, "catalog")
            assert info is not None and len(info["holders"]) == 2
            assert not await rw.write().acquire(blocking=False)
        async with rw.write():
            assert not await rw.read().acquire(blocking=False)

    run(server, scenario)


def test_async_a_stopped_server_loses_the_lock_at_the_lease_deadline_and_bounds_a_wait(
    server: RedisServer,
) -> None:
    async def scenario(aclient: redis.asyncio.Redis) -> None:
        holder = AsyncLock(aclient, "job", ttl=1.0, raise_on_lost=False)
        start = time.monotonic()
        assert await holder.acquire()
        server.pause()
        try:
            await asyncio.wait_for(holder.lost.wait(), 2.0)
            assert time.monotonic() - start <= 1.0  # sent + ttl - margin at the latest
            waiter = AsyncLock(aclient, "job")
            start = time.monotonic()
            with pytest.raises(redis.TimeoutError):
                await waiter.acquire(timeout=0.5)
            # The timeout, the wait margin and the withdrawal's send.
            assert time.monotonic() - start < 0.5 + BOUND + 0.3
        finally:
            server.resume()

    run(server, scenario)
