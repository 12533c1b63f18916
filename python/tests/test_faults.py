"""The lease matrix of the Rust client, for the Python one: a cut network, a hung
server, a killed holder; each on a real server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
import redis.exceptions

from redis_lock_client import Lock
from redis_lock_client._protocol import WAIT_MARGIN, WITHDRAW_AFTER_TIMEOUT

from servers import BlackHoleProxy, RedisServer, lock_info, wait_until
from workers import start

#: How far past its timeout a wait on a stopped server may end.
BOUND = WAIT_MARGIN + WITHDRAW_AFTER_TIMEOUT


def test_through_a_black_hole_the_holder_learns_of_the_loss_before_a_rival_is_granted(
    server: RedisServer, proxy: BlackHoleProxy, client: redis.Redis
) -> None:
    through_proxy = redis.Redis(host="127.0.0.1", port=proxy.port)
    lost_at: list[float] = []
    holder = Lock(through_proxy, "job", ttl=2.0, on_lost=lambda: lost_at.append(time.monotonic()))
    assert holder.acquire()
    time.sleep(0.9)  # at least one renewal went through
    rival = Lock(client, "job", ttl=1.0)
    granted_at: list[float] = []

    def wait() -> None:
        if rival.acquire(timeout=5):
            granted_at.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: (lock_info(client, "job") or {}).get("waiters") == 1)
    proxy.black_hole()
    waiter.join(5)
    assert granted_at, "the rival was never granted"
    assert holder.lost.is_set()
    assert lost_at and lost_at[0] < granted_at[0]
    # Not by luck of scheduling: the signal came at the lease's deadline, the last
    # acknowledged renewal's send time + TTL - margin (200 ms), with at most half the
    # margin of delay; the server could not expire the lock before send time + TTL.
    holding = holder._holding
    assert holding is not None and holding.lease.last is not None
    assert lost_at[0] <= holding.lease.last.sent + 2.0 - 0.2 / 2
    rival.release()


def test_a_stopped_server_loses_the_lock_at_the_lease_deadline(
    server: RedisServer, client: redis.Redis
) -> None:
    holder = Lock(client, "job", ttl=1.0, raise_on_lost=False)
    start = time.monotonic()
    assert holder.acquire()
    server.pause()
    try:
        assert holder.lost.wait(2.0)
        lost = time.monotonic() - start
        # At the latest sent + ttl - margin, whatever the renewals are stuck on.
        assert lost <= 1.0
    finally:
        server.resume()


def test_a_wait_on_a_stopped_server_ends_near_its_timeout(
    server: RedisServer, client: redis.Redis
) -> None:
    holder = Lock(client, "job", ttl=30.0)
    assert holder.acquire()
    server.pause()
    try:
        waiter = Lock(client, "job")
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                waiter.acquire(timeout=0.5)
            except BaseException as error:
                outcome.append(error)

        thread = threading.Thread(target=wait, daemon=True)
        start = time.monotonic()
        thread.start()
        # The timeout, the wait margin and the withdrawal's send.
        thread.join(0.5 + BOUND + 0.3)
        assert not thread.is_alive(), "the wait outlived its timeout on a stopped server"
        assert time.monotonic() - start < 0.5 + BOUND + 0.3
        assert len(outcome) == 1 and isinstance(outcome[0], redis.TimeoutError)
    finally:
        server.resume()
    assert lock_info(client, "job") is not None
    wait_until(lambda: (lock_info(client, "job") or {}).get("waiters") == 0)


def test_a_server_stopped_midway_through_a_wait_ends_it_near_its_timeout(
    server: RedisServer, client: redis.Redis
) -> None:
    # The library's wait is many calls: each is bounded by what is left of the
    # wait, not by the whole timeout again.
    holder = Lock(client, "job", ttl=30.0)
    assert holder.acquire()
    waiter = Lock(client, "job")
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            waiter.acquire(timeout=2.0)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=wait, daemon=True)
    start = time.monotonic()
    thread.start()
    wait_until(lambda: (lock_info(client, "job") or {}).get("waiters") == 1)
    time.sleep(max(1.2 - (time.monotonic() - start), 0))
    server.pause()
    try:
        # The timeout, the wait margin and the withdrawal's send.
        thread.join(2.0 + BOUND + 0.4)
        assert not thread.is_alive(), "the wait outlived its timeout on a stopped server"
        assert time.monotonic() - start < 2.0 + BOUND + 0.4
        assert len(outcome) == 1 and isinstance(outcome[0], redis.TimeoutError)
    finally:
        server.resume()


def test_a_killed_holder_frees_the_lock_at_its_ttl(
    server: RedisServer, client: redis.Redis
) -> None:
    worker = start("hold", server.port, "job", "1.0")
    try:
        wait_until(lambda: client.llen("job:events") == 1, limit=10)
        time.sleep(1.2)  # it renews: the lock outlives its first TTL
        assert lock_info(client, "job") is not None
        worker.kill()
        killed = time.monotonic()
        waiter = Lock(client, "job", ttl=1.0)
        assert waiter.acquire(timeout=5)
        # Granted when its last renewal's TTL ran out: within one TTL of the kill.
        assert time.monotonic() - killed < 1.0 + 0.3
        waiter.release()
    finally:
        worker.kill()
        worker.join()


def test_a_restart_that_lost_the_library_is_heard_of_at_the_next_renewal() -> None:
    """Before: the holder retried `Function not found` as a failed renewal until its
    lease ran out, while a rival, finding no library, took the scripts path and was
    granted at once; and new locks of the same pool raised NoLockBackendError."""
    server = RedisServer(kind="functions")
    try:
        user = server.client()
        lock = Lock(user, "job", ttl=3.0)
        assert lock.acquire(blocking=False)
        acquired = time.monotonic()
        server.restart()
        rival = Lock(server.client(), "job", ttl=10.0)
        assert rival.acquire(blocking=False), "the restart lost the lock"
        # The first renewal (a third of the TTL) hears that it is gone; the lease's
        # deadline would be 2.7 s after the acquire.
        assert lock.lost.wait(2.5)
        assert time.monotonic() - acquired < 2.0
        # A new lock of the same pool works, through the scripts path.
        other = Lock(user, "other", ttl=3.0)
        assert other.acquire(blocking=False)
        assert other.release() is True
        rival.release()
    finally:
        server.stop()


@pytest.mark.scripts
def test_a_grant_refused_for_oom_leaves_the_lock_free(client: redis.Redis) -> None:
    """The release hands the lock to the waiter, whose collecting call is refused
    under OOM: the waiter withdraws, and nobody holds the lock."""
    holder = Lock(client, "job", ttl=10.0)
    assert holder.acquire()
    waiter = Lock(client, "job", ttl=10.0)
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            waiter.acquire(timeout=10.0)
        except redis.exceptions.ResponseError as error:
            failed.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: (lock_info(client, "job") or {}).get("waiters") == 1)
    raw: Any = client
    raw.config_set("maxmemory", 1)  # every write but a release or extend refused
    try:
        assert holder.release() is True
        thread.join(10.0)
        assert not thread.is_alive() and failed, "the waiter got the OOM error"
        assert isinstance(failed[0], redis.exceptions.OutOfMemoryError), failed[0]
        assert lock_info(client, "job") is None, "withdrawn: nobody holds it"
        assert waiter.token is None
    finally:
        raw.config_set("maxmemory", 0)
