"""``@only_one``: a job runs where the lock is free and is skipped where it is busy."""

from __future__ import annotations

import asyncio

import redis
import redis.asyncio

from redis_lock_client import Lock, only_one

from servers import RedisServer, lock_info


def test_a_job_runs_when_free_and_is_skipped_when_busy(client: redis.Redis) -> None:
    runs: list[int] = []

    @only_one(client, "cron:cleanup", ttl=5.0)
    def cleanup(n: int) -> int:
        runs.append(n)
        assert lock_info(client, "cron:cleanup") is not None
        return n * 2

    assert cleanup(1) == 2
    assert lock_info(client, "cron:cleanup") is None
    other = Lock(client, "cron:cleanup")
    assert other.acquire()
    assert cleanup(2) is None
    other.release()
    assert runs == [1]


def test_an_async_job_is_skipped_when_busy(server: RedisServer, client: redis.Redis) -> None:
    async def scenario() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        runs: list[str] = []

        @only_one(aclient, "beat:report", ttl=5.0)
        async def report() -> str:
            runs.append("ran")
            await asyncio.sleep(0.3)
            return "done"

        first, second = await asyncio.gather(report(), report())
        assert {first, second} == {"done", None}
        assert runs == ["ran"]
        await aclient.aclose()

    asyncio.run(scenario())
    assert lock_info(client, "beat:report") is None
