"""What a holder can trust (contract.md "Clients"): lock objects sharing an owner share one lease,
the check before a write reads the clock, a wait without a limit on the library
ends on a dead path. Each on a real server, each seen failing without its fix."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.exceptions

from redis_lock_client import AsyncLock, Lock, _held
from redis_lock_client._protocol import CONTROL_LIMIT, WAIT_MARGIN

from servers import BlackHoleProxy, RedisServer, lock_info, wait_until


def _rival(client: redis.Redis, key: str, granted_at: list[float]) -> threading.Thread:
    def wait() -> None:
        rival = Lock(client, key, ttl=5.0)
        if rival.acquire(timeout=20):
            granted_at.append(time.monotonic())
            rival.release()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: (lock_info(client, key) or {}).get("waiters") == 1)
    return thread


def test_lock_objects_of_one_owner_share_one_lease(
    server: RedisServer, proxy: BlackHoleProxy, client: redis.Redis
) -> None:
    # Two objects of one owner, of 30 s and of 1 s. The 1 s object's
    # writes set the server's expiry to 1 s; the 30 s object must not go on trusting
    # 27 s while a rival is granted.
    through_proxy = redis.Redis(host="127.0.0.1", port=proxy.port)
    lost_at: list[float] = []
    long = Lock(through_proxy, "job", 30.0, owner="run-42", on_lost=lambda: lost_at.append(1))
    short = Lock(through_proxy, "job", 1.0, owner="run-42")
    assert long.acquire() and short.acquire()
    assert long.token == short.token
    assert long._holding is short._holding, "one holding in the process"
    granted_at: list[float] = []
    rival = _rival(client, "job", granted_at)
    time.sleep(0.5)  # renewals of the shared holding go through
    assert long.owned() and not long.lost.is_set()
    proxy.black_hole()
    cut = time.monotonic()
    while not granted_at and time.monotonic() - cut < 5:
        if long.lost.is_set():
            break
        time.sleep(0.005)
    assert not granted_at, "a rival was granted while the 30 s object still trusted its lease"
    assert long.lost.is_set() and short.lost.is_set() and not long.owned()
    rival.join(10)
    assert granted_at and lost_at


def test_a_release_by_one_object_of_an_owner_tells_the_others(
    server: RedisServer, client: redis.Redis
) -> None:
    lost: list[str] = []
    first = Lock(client, "job", 5.0, owner="run-7", on_lost=lambda: lost.append("first"))
    second = Lock(client, "job", 5.0, owner="run-7")
    assert first.acquire() and second.acquire()
    assert second.release()
    assert first.lost.is_set() and not first.owned()
    wait_until(lambda: lost == ["first"])
    assert not first.release(), "the server no longer held it"
    assert lock_info(client, "job") is None
    # A fresh holding afterwards is a new one, with a lease of its own.
    assert first.acquire() and not first.lost.is_set()
    first.release()


def test_threaded_and_asyncio_objects_do_not_share_an_owner(
    server: RedisServer, client: redis.Redis
) -> None:
    held = Lock(client, "job", 5.0, owner="run-9")
    assert held.acquire()

    async def other_kind() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            with pytest.raises(RuntimeError, match="another kind"):
                await AsyncLock(aclient, "job", 5.0, owner="run-9").acquire()
        finally:
            await aclient.aclose()

    asyncio.run(other_kind())
    assert held.owned() and held.release()


def test_async_lock_objects_of_one_owner_share_one_lease(
    server: RedisServer, proxy: BlackHoleProxy, client: redis.Redis
) -> None:
    granted_at: list[float] = []

    async def scenario() -> None:
        through_proxy = redis.asyncio.Redis(host="127.0.0.1", port=proxy.port)
        long = AsyncLock(through_proxy, "job", 30.0, owner="run-42")
        short = AsyncLock(through_proxy, "job", 1.0, owner="run-42")
        assert await long.acquire() and await short.acquire()
        assert long._holding is short._holding
        rival = _rival(client, "job", granted_at)
        await asyncio.sleep(0.5)
        assert long.owned() and not long.lost.is_set()
        proxy.black_hole()
        await asyncio.wait_for(long.lost.wait(), 5)
        assert not granted_at, "a rival was granted before the 30 s object was told"
        assert short.lost.is_set()
        await asyncio.get_running_loop().run_in_executor(None, rival.join, 10)
        assert granted_at

    asyncio.run(scenario())


class _Later:
    """``time`` as seen by the holding's events, ``ahead`` seconds later: as after a
    pause of the whole process that no timer of its own has seen yet."""

    def __init__(self, ahead: float) -> None:
        self.ahead = ahead

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead


def test_the_check_before_a_write_reads_the_clock(
    server: RedisServer, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = Lock(client, "job", ttl=1.0)
    assert lock.acquire()
    assert not lock.lost.is_set()
    monkeypatch.setattr(_held, "time", _Later(5.0))
    # The scheduler thread has not run since: the event itself reads the clock.
    assert lock.lost.is_set()
    monkeypatch.undo()
    assert lock.lost.is_set() and lock.lost.wait(0)


def test_the_async_check_before_a_write_reads_the_clock(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    called: list[bool] = []

    async def scenario() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            lock = AsyncLock(aclient, "job", ttl=1.0, on_lost=lambda: called.append(True))
            assert await lock.acquire()
            assert not lock.lost.is_set()
            monkeypatch.setattr(_held, "time", _Later(5.0))
            assert lock.lost.is_set(), "no task of the loop has run since"
            monkeypatch.undo()
            assert called == [True]
            await lock.release()
        finally:
            await aclient.aclose()

    asyncio.run(scenario())


def _wait_ends_on_dead_path(server: RedisServer, proxy: BlackHoleProxy, asyncio_api: bool) -> None:
    if server.kind == "module":
        pytest.skip("the module's wait is one call that the server answers")
    holder = Lock(server.client(), "job", ttl=30.0)
    assert holder.acquire()
    outcome: list[Any] = []

    def wait() -> None:
        try:
            if asyncio_api:

                async def acquire() -> bool:
                    client = redis.asyncio.Redis(host="127.0.0.1", port=proxy.port)
                    return await AsyncLock(client, "job", ttl=5.0).acquire()

                outcome.append(asyncio.run(acquire()))
            else:
                through_proxy = redis.Redis(host="127.0.0.1", port=proxy.port)
                outcome.append(Lock(through_proxy, "job", ttl=5.0).acquire())
        except Exception as error:
            outcome.append(error)
        outcome.append(time.monotonic())

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    wait_until(lambda: (lock_info(server.client(), "job") or {}).get("waiters") == 1)
    cut = time.monotonic()
    proxy.black_hole()
    thread.join(15)
    assert len(outcome) == 2, "the wait still hangs"
    error, ended = outcome
    assert isinstance(error, redis.exceptions.TimeoutError), error
    assert "no answer" in str(error)
    assert ended - cut <= 2.0 + CONTROL_LIMIT + WAIT_MARGIN
    holder.release()


@pytest.mark.scripts
def test_a_wait_without_a_limit_on_the_library_ends_on_a_dead_path(
    server: RedisServer, proxy: BlackHoleProxy
) -> None:
    _wait_ends_on_dead_path(server, proxy, asyncio_api=False)


def test_an_async_wait_without_a_limit_on_the_library_ends_on_a_dead_path(
    server: RedisServer, proxy: BlackHoleProxy
) -> None:
    _wait_ends_on_dead_path(server, proxy, asyncio_api=True)


@pytest.mark.scripts
def test_a_release_whose_reply_is_lost_says_the_connection_failed_not_not_held(
    server: RedisServer, proxy: BlackHoleProxy, client: redis.Redis
) -> None:
    # The release goes once (no retry by the driver: re-sent after a reconnect, it
    # could release a later holding of a reused owner); the server released, and
    # the holder is told the connection failed, never "it was not held".
    through_proxy = redis.Redis(host="127.0.0.1", port=proxy.port)
    lock = Lock(through_proxy, "job", ttl=10.0)
    assert lock.acquire() and lock.release()  # the release's own connection is open
    assert lock.acquire()
    proxy.drop_replies()
    started = time.monotonic()
    with pytest.raises((redis.exceptions.TimeoutError, redis.exceptions.ConnectionError)):
        lock.release()
    assert time.monotonic() - started < 2.0
    assert lock_info(client, "job") is None


#: 2^62 - 1 ms, the longest TTL and wait the contract allows, as float seconds can
#: say it (the float just under: 2^62 - 1 ms itself rounds to 2^62 ms).
LONGEST = math.nextafter(((1 << 62) - 1) / 1000, 0.0)


def test_the_longest_ttl_and_wait_work_and_the_scheduler_keeps_time(
    server: RedisServer, proxy: BlackHoleProxy, client: redis.Redis
) -> None:
    huge = Lock(client, "huge", ttl=LONGEST)
    assert huge.acquire() and huge.owned() and not huge.lost.is_set()
    granted: list[bool] = []

    def wait() -> None:
        waiter = Lock(client, "huge", ttl=5.0)
        granted.append(waiter.acquire(timeout=LONGEST))
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: (lock_info(client, "huge") or {}).get("waiters") == 1)
    time.sleep(0.3)
    assert huge.release()
    thread.join(5)
    assert granted == [True]
    # The renewal scheduler survived a next call years away: a short lease through a
    # black hole is still signalled lost at its deadline.
    short = Lock(redis.Redis(host="127.0.0.1", port=proxy.port), "short", ttl=0.5)
    assert short.acquire()
    proxy.black_hole()
    assert threading.Event.wait(short.lost, 2.0), "nobody keeps time any more"


def test_the_longest_ttl_and_wait_work_in_asyncio(server: RedisServer) -> None:
    async def scenario() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            huge = AsyncLock(aclient, "huge", ttl=LONGEST)
            assert await huge.acquire() and huge.owned()
            waiter = AsyncLock(aclient, "huge", ttl=5.0)
            waiting = asyncio.create_task(waiter.acquire(timeout=LONGEST))
            while (await huge.info() or {}).get("waiters") != 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            assert not huge.lost.is_set()
            assert await huge.release()
            assert await asyncio.wait_for(waiting, 5)
            assert await waiter.release()
            for ttl in (0.001, 0.05):  # at or under the lease's margin: lost at once
                tiny = AsyncLock(aclient, f"tiny:{ttl}", ttl=ttl)
                assert await tiny.acquire()
                assert tiny.lost.is_set()
        finally:
            await aclient.aclose()

    asyncio.run(scenario())
