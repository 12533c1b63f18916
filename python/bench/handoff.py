"""Hand-off latency of a waiting ``Lock.acquire()``: after the holder's release and
after the holder's expiry, on the function library and, beside it, on the module.

    python bench/handoff.py [--rounds 200] [--expiry-ttl 200]

Each side gets a throwaway redis-server of its own (as the tests start them: a
plain one with the library loaded by ``FUNCTION LOAD``, at the default ``hz 10``
and at ``hz 100``, or one with the module, the worktree's release build if there is
one). In each round a holder takes the lock with a raw command (nothing renews
it), a waiter thread queues with this package's ``Lock.acquire()``, and then:

- after a release: once the waiter is queued and blocked, the holder releases; the
  hand-off is from just before the release is sent to ``acquire()`` returning;
- after an expiry: the holder's TTL runs out; the hand-off is from the expiry (the
  holder's acquire sent, plus its TTL) to ``acquire()`` returning.

Each round starts after a random pause of up to 100 ms, so that expiries fall at
any point of the server's 100 ms cron cycle (on the library, a waiter claims a lapse
when its BLPOP times out, which an idle Redis 7.0 notices at the next tick of its
cron: rounds in step with it would all see the same delay). Prints a Markdown
table: p50, p99 and the largest hand-off in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis

from redis_lock_client import Lock

HERE = Path(__file__).resolve().parent

#: The holder's raw acquire and release, per backend (key, owner and ttl follow).
RAW = {
    "module": (("LOCK.ACQUIRE",), ("LOCK.RELEASE",), ("LOCK.INFO",)),
    "functions": (
        ("FCALL", "lock_acquire", 1),
        ("FCALL", "lock_release", 1),
        ("FCALL_RO", "lock_info", 1),
    ),
}


def waiters(client: redis.Redis, backend: str, key: str) -> int:
    raw: Any = client
    reply = raw.execute_command(*RAW[backend][2], key)
    if reply is None:
        return 0
    fields: dict[Any, Any] = (
        reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))
    )
    return int(fields.get(b"waiters", fields.get("waiters", 0)))


def one_round(client: redis.Redis, backend: str, waiter: Lock, after: str, ttl_ms: int) -> float:
    """One hand-off, in milliseconds."""
    raw: Any = client
    acquire, release, _ = RAW[backend]
    key = waiter.key
    time.sleep(random.uniform(0, 0.1))
    sent = time.perf_counter()
    token = raw.execute_command(*acquire, key, "holder", ttl_ms if after == "expiry" else 60000)
    assert token is not None, "the holder got the lock"
    granted: list[float] = []

    def wait() -> None:
        assert waiter.acquire()
        granted.append(time.perf_counter())

    thread = threading.Thread(target=wait)
    thread.start()
    deadline = time.perf_counter() + 5
    while waiters(client, backend, key) == 0:
        assert time.perf_counter() < deadline, "the waiter never queued"
        time.sleep(0.001)
    if after == "expiry":
        start = sent + ttl_ms / 1000
        assert time.perf_counter() < start, "queued after the expiry: raise --expiry-ttl"
    else:
        time.sleep(0.005)  # the waiter's BLPOP (library) follows its lock_wait
        start = time.perf_counter()
        assert raw.execute_command(*release, key, "holder") == 1
    thread.join(timeout=10)
    assert granted, "the waiter was not granted"
    waiter.release()
    return (granted[0] - start) * 1000


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="hand-offs each way")
    parser.add_argument("--expiry-ttl", type=int, default=200, help="the holder's TTL, ms")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent / "tests"))
    release_build = HERE.parents[1] / "target" / "release" / "libredis_lock.so"
    if "REDIS_LOCK_MODULE" not in os.environ and release_build.exists():
        os.environ["REDIS_LOCK_MODULE"] = str(release_build)
    from servers import RedisServer

    print(f"{args.rounds} hand-offs each way; the holder's TTL {args.expiry_ttl} ms for expiries.")
    print()
    print("| backend | hand-off after | p50 (ms) | p99 (ms) | largest (ms) |")
    print("|---|---|---|---|---|")
    sides = [
        ("function library (FCALL), hz 10", "functions", ()),
        ("function library (FCALL), hz 100", "functions", ("--hz", "100")),
        ("module", "module", ()),
    ]
    for name, backend, extra in sides:
        server = RedisServer(kind=backend, extra=extra)
        try:
            client = redis.Redis(port=server.port)
            for after in ("release", "expiry"):
                waiter = Lock(client, f"handoff:{after}", ttl=60.0)
                one_round(client, backend, waiter, after, args.expiry_ttl)  # warm-up
                times = [
                    one_round(client, backend, waiter, after, args.expiry_ttl)
                    for _ in range(args.rounds)
                ]
                waiter.close()
                print(
                    f"| {name} | {after} | {percentile(times, 50):.2f} | "
                    f"{percentile(times, 99):.2f} | {max(times):.2f} |",
                    flush=True,
                )
            client.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
