"""Worker processes for the tests, started by :func:`start` from a fork server that
has imported redis-py once (a fresh interpreter per worker takes seconds to import it
on a busy machine).

Each role takes a lock through the package on the server at PORT and records what it
saw in Redis itself (lists and counters next to the lock), so the test reads the
outcome from the server, not from the worker's word.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.process
import signal
import time

import redis

from redis_lock_client import Lock, Semaphore


def hold(client: redis.Redis, key: str, ttl: float) -> None:
    """Takes the lock, says so, and works until killed."""
    lock = Lock(client, key, ttl=ttl)
    assert lock.acquire(timeout=10)
    client.rpush(f"{key}:events", f"held {lock.token}")
    while True:
        time.sleep(1)


def queue(client: redis.Redis, key: str, index: str) -> None:
    """Waits in the queue, then records its turn."""
    with Lock(client, key, ttl=5.0):
        client.rpush(f"{key}:order", index)
        time.sleep(0.02)


def permit(client: redis.Redis, key: str, permits: str) -> None:
    """Holds one of ``permits`` for a moment, counting who is inside."""
    with Semaphore(client, key, int(permits), ttl=5.0):
        inside = client.incr(f"{key}:inside")
        client.rpush(f"{key}:seen", inside)
        time.sleep(0.15)
        client.decr(f"{key}:inside")


def wait_forever(client: redis.Redis, key: str) -> None:
    """Waits for a lock someone else holds; interrupted by the test. Records the
    exception that reached the top, and lives on (as a service that caught Ctrl-C
    would), so what the lock object left behind stays visible."""
    lock = Lock(client, key, ttl=30.0)
    try:
        lock.acquire()
        client.rpush(f"{key}:events", "granted")
    except BaseException as error:
        client.rpush(f"{key}:events", type(error).__name__)
    time.sleep(60)


def work_in_block(client: redis.Redis, key: str) -> None:
    """Holds the lock in a ``with`` block; interrupted by the test."""
    try:
        with Lock(client, key, ttl=30.0):
            client.rpush(f"{key}:events", "working")
            time.sleep(60)
    except BaseException as error:
        client.rpush(f"{key}:events", type(error).__name__)
        raise


ROLES = {
    "hold": lambda c, k, a: hold(c, k, float(a[0])),
    "queue": lambda c, k, a: queue(c, k, a[0]),
    "permit": lambda c, k, a: permit(c, k, a[0]),
    "wait_forever": lambda c, k, a: wait_forever(c, k),
    "work_in_block": lambda c, k, a: work_in_block(c, k),
}


def run(role: str, port: int, key: str, *args: str) -> None:
    # Ctrl-C as an interactive process gets it: a suite started in the background
    # of a non-interactive shell inherits SIGINT ignored, and Python then installs
    # no KeyboardInterrupt for it (the tests that send SIGINT would see nothing).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ROLES[role](redis.Redis(host="127.0.0.1", port=port), key, list(args))


_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(["redis_lock_client", "workers"])


def start(role: str, port: int, key: str, *args: str) -> multiprocessing.process.BaseProcess:
    """A worker process playing ``role`` against the server at ``port``."""
    process = _context.Process(target=run, args=(role, port, key, *args), daemon=True)
    process.start()
    return process
