"""Many holders on one key: FIFO grants, a semaphore's bound, a writer among
readers. Workers are separate processes (workers.py) except where threads say more."""

from __future__ import annotations

import threading
import time
from functools import partial

import redis

from redis_lock_client import Lock, ReadWriteLock, Semaphore

from servers import RedisServer, lock_info, wait_until
from workers import start


def waiters(client: redis.Redis, key: str) -> int:
    info = lock_info(client, key)
    return 0 if info is None else int(info["waiters"])


def queued(client: redis.Redis, count: int) -> bool:
    return waiters(client, "job") == count


def test_ten_processes_are_granted_in_arrival_order(
    server: RedisServer, client: redis.Redis
) -> None:
    holder = Lock(client, "job")
    assert holder.acquire()
    workers = []
    try:
        for index in range(10):
            workers.append(start("queue", server.port, "job", str(index)))
            # Arrival order is the order of the queue: the next one starts once
            # this one is in it.
            wait_until(partial(queued, client, index + 1), limit=10)
        holder.release()
        for worker in workers:
            worker.join(20)
            assert worker.exitcode == 0
    finally:
        for worker in workers:
            worker.kill()
    assert client.lrange("job:order", 0, -1) == [str(i).encode() for i in range(10)]


def test_a_semaphore_of_three_under_ten_processes_never_has_more_than_three(
    server: RedisServer, client: redis.Redis
) -> None:
    workers = [start("permit", server.port, "exports", "3") for _ in range(10)]
    try:
        for worker in workers:
            worker.join(30)
            assert worker.exitcode == 0
    finally:
        for worker in workers:
            worker.kill()
    seen = [int(n) for n in client.lrange("exports:seen", 0, -1)]
    assert len(seen) == 10
    assert max(seen) <= 3
    assert max(seen) == 3, "the permits were never used together"


def test_a_writer_is_not_starved_by_a_stream_of_readers(client: redis.Redis) -> None:
    rw = ReadWriteLock(client, "catalog", ttl=5.0)
    stop = threading.Event()
    readers_together = [0]
    inside = [0]
    guard = threading.Lock()

    def reader() -> None:
        while not stop.is_set():
            with rw.read():
                with guard:
                    inside[0] += 1
                    readers_together[0] = max(readers_together[0], inside[0])
                time.sleep(0.1)
                with guard:
                    inside[0] -= 1

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for index, thread in enumerate(threads):
        thread.start()
        time.sleep(0.03 * index)  # staggered: some reader holds it at every moment
    time.sleep(0.3)
    try:
        writer = rw.write()
        start = time.monotonic()
        assert writer.acquire(timeout=3), "the writer starved"
        # Granted once the readers ahead of it were done, not after all readers.
        assert time.monotonic() - start < 1.0
        info = lock_info(client, "catalog")
        assert info is not None and info["mode"] == "exclusive"
        assert len(info["holders"]) == 1 and inside[0] == 0
        writer.release()
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
    assert readers_together[0] >= 2, "the readers never held it together"


def _calls(client: redis.Redis, *commands: str) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{command}", {}).get("calls", 0)) for command in commands)


def test_a_waiter_on_the_library_sends_at_most_one_command_a_second() -> None:
    # contract.md "Without the module": while the lock stays held, a waiter only renews its
    # place, at most one command a second. The client follows the library's wake_ms.
    server = RedisServer(kind="functions")
    try:
        client = server.client()
        holder = Lock(client, "job", ttl=60.0)  # renewed at 20 s: not in the window
        assert holder.acquire()
        waiter = Lock(client, "job", ttl=60.0)
        thread = threading.Thread(target=waiter.acquire)
        thread.start()
        wait_until(partial(queued, client, 1), limit=10)
        time.sleep(2.5)  # past the first renewal
        before, start_at = _calls(client, "fcall", "blpop"), time.monotonic()
        time.sleep(6.0)
        sent = _calls(client, "fcall", "blpop") - before
        elapsed = time.monotonic() - start_at
        # One command a second, and a renewal (two commands) more for a window whose
        # ends cut cycles (a cycle can last 2 s and a few microseconds).
        assert sent <= int(elapsed) + 2, f"{sent} commands in {elapsed:.1f} s"
        assert waiter.token is None and thread.is_alive()
        holder.release()
        thread.join(timeout=10)
        assert waiter.token is not None
        waiter.release()
    finally:
        server.stop()


def test_info_lists_the_waiters_with_their_mode_limit_and_wait(
    server: RedisServer, client: redis.Redis
) -> None:
    holder = Lock(client, "job")
    assert holder.acquire()
    waiter = Semaphore(server.client(), "job", permits=3)
    got = threading.Thread(target=lambda: waiter.acquire(timeout=10))
    got.start()
    try:
        wait_until(partial(queued, client, 1), limit=10)
        time.sleep(0.05)
        info = holder.info()
        assert info is not None
        [queued_waiter] = info["queue"]
        assert queued_waiter["mode"] == "shared"
        assert queued_waiter["limit"] == 3
        assert queued_waiter["owner"]
        assert 0.04 <= queued_waiter["waited"] < 10
    finally:
        holder.release()
        got.join(10)
        waiter.release()
