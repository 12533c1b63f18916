"""Client overhead per acquire + release: this package against the same two commands
sent with raw redis-py, on one server, in one run.

    python bench/overhead.py [--url redis://127.0.0.1:6390/] [--iterations 5000]
                             [--backend module|functions]

Without ``--url`` it starts a throwaway redis-server with the module (as the tests
do: ``REDIS_SERVER``, ``REDIS_LOCK_MODULE``, else the worktree's release build if
there is one, else the debug build), or with ``--backend functions`` a plain one
with the function library loaded; the raw side then sends ``FCALL lock_acquire``
and ``FCALL lock_release``. Rounds alternate between the sides and the
median round counts, so a burst of load on a shared machine hits both alike.
Prints microseconds per acquire + release for each side and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import redis
import redis.asyncio

from redis_lock_client import AsyncLock, Lock

HERE = Path(__file__).resolve().parent

#: The raw side's acquire and release, per backend (the key and owner follow).
RAW = {
    "module": (("LOCK.ACQUIRE",), ("LOCK.RELEASE",)),
    "functions": (("FCALL", "lock_acquire", 1), ("FCALL", "lock_release", 1)),
}
ACQUIRE, RELEASE = RAW["module"]


def raw_sync(client: redis.Redis, n: int) -> float:
    raw: Any = client
    start = time.perf_counter()
    for _ in range(n):
        raw.execute_command(*ACQUIRE, "bench:raw", "owner-1", 30000)
        raw.execute_command(*RELEASE, "bench:raw", "owner-1")
    return time.perf_counter() - start


def ours_sync(client: redis.Redis, n: int, blocking: bool) -> float:
    lock = Lock(client, "bench:ours", ttl=30.0)
    start = time.perf_counter()
    for _ in range(n):
        lock.acquire(blocking)
        lock.release()
    elapsed = time.perf_counter() - start
    lock.close()
    return elapsed


async def raw_async(client: redis.asyncio.Redis, n: int) -> float:
    raw: Any = client
    start = time.perf_counter()
    for _ in range(n):
        await raw.execute_command(*ACQUIRE, "bench:raw", "owner-1", 30000)
        await raw.execute_command(*RELEASE, "bench:raw", "owner-1")
    return time.perf_counter() - start


async def ours_async(client: redis.asyncio.Redis, n: int) -> float:
    lock = AsyncLock(client, "bench:ours", ttl=30.0)
    start = time.perf_counter()
    for _ in range(n):
        await lock.acquire()
        await lock.release()
    elapsed = time.perf_counter() - start
    await lock.aclose()
    return elapsed


def median_us(rounds: list[float], n: int) -> float:
    return statistics.median(rounds) / n * 1e6


def compare(name: str, raw: Callable[[], float], ours: Callable[[], float], n: int, k: int) -> None:
    raw(), ours()  # warm-up: connections, the backend probe
    raw_rounds, our_rounds = [], []
    for _ in range(k):
        raw_rounds.append(raw())
        our_rounds.append(ours())
    report(name, median_us(raw_rounds, n), median_us(our_rounds, n))


def report(name: str, raw: float, ours: float) -> None:
    print(f"{name:<30} raw redis-py {raw:7.1f} us   ours {ours:7.1f} us   ratio {ours / raw:4.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a server with the module (default: start one)")
    parser.add_argument("--iterations", type=int, default=5000, help="per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--backend", choices=sorted(RAW), default="module")
    args = parser.parse_args()
    global ACQUIRE, RELEASE
    ACQUIRE, RELEASE = RAW[args.backend]
    server = None
    url = args.url
    if url is None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        release = HERE.parents[1] / "target" / "release" / "libredis_lock.so"
        if "REDIS_LOCK_MODULE" not in os.environ and release.exists():
            os.environ["REDIS_LOCK_MODULE"] = str(release)
        from servers import RedisServer, module_path

        server = RedisServer(kind=args.backend)
        url = f"redis://127.0.0.1:{server.port}/"
        loaded = f"module {module_path()}" if args.backend == "module" else "the function library"
        print(f"server: {os.environ.get('REDIS_SERVER', 'redis-server')}, {loaded}")
    n, k = args.iterations, args.rounds
    print(f"{k} rounds of {n} acquire + release each side, median round")
    try:
        client = redis.Redis.from_url(url)
        raw = lambda: raw_sync(client, n)  # noqa: E731
        compare("sync, acquire()", raw, lambda: ours_sync(client, n, True), n, k)
        compare("sync, acquire(blocking=False)", raw, lambda: ours_sync(client, n, False), n, k)

        async def run_async() -> None:
            aclient = redis.asyncio.Redis.from_url(url)
            loop_raw, loop_ours = [], []
            await raw_async(aclient, n), await ours_async(aclient, n)
            for _ in range(k):
                loop_raw.append(await raw_async(aclient, n))
                loop_ours.append(await ours_async(aclient, n))
            report("asyncio, acquire()", median_us(loop_raw, n), median_us(loop_ours, n))
            await aclient.aclose()

        asyncio.run(run_async())
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
