"""Guarded writes (``lock.guard``) against real servers: the module's ``LOCK.GUARD``,
the library's ``lock_guard`` by ``FCALL`` and by ``EVALSHA``: the write lands while
the token holds, is refused (``FencedError``) and fires the loss signal once it does
not, and says what is wrong with a library loaded before ``lock_guard`` existed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_lock_client import (
    AsyncLock,
    FencedError,
    LibraryVersionError,
    Lock,
    LockLostError,
    ReadWriteLock,
    Semaphore,
)

from servers import BlackHoleProxy, RedisServer, library_source

OUT = "{job}:out"


@pytest.mark.scripts
def test_a_guarded_write_lands_while_the_token_holds(client: redis.Redis) -> None:
    lock = Lock(client, "{job}", ttl=5.0)
    assert lock.acquire()
    assert lock.guard([OUT], "SET", OUT, "first") in (b"OK", "OK")
    assert client.get(OUT) == b"first"
    # The same token writes again; a read's reply comes back as redis-py reads it.
    assert lock.guard([OUT], "SET", OUT, "second") in (b"OK", "OK")
    assert lock.guard([OUT], "GET", OUT) == b"second"
    assert lock.guard(["{job}:none"], "GET", "{job}:none") is None
    assert not lock.lost.is_set()
    assert lock.release()


@pytest.mark.scripts
def test_the_commands_own_error_is_raised_and_the_lock_is_kept(client: redis.Redis) -> None:
    lock = Lock(client, "{job}", ttl=5.0)
    assert lock.acquire()
    client.set(OUT, "not a number")
    with pytest.raises(redis.ResponseError, match="not an integer") as refused:
        lock.guard([OUT], "INCR", OUT)
    assert not isinstance(refused.value, FencedError)
    assert not lock.lost.is_set() and lock.owned()
    assert lock.release()


@pytest.mark.scripts
def test_a_write_guarded_by_a_token_that_no_longer_holds_is_fenced_and_fires_the_loss(
    client: redis.Redis,
) -> None:
    told = threading.Event()
    lock = Lock(client, "{job}", ttl=30.0, on_lost=told.set, raise_on_lost=False)
    assert lock.acquire()
    token = lock.token
    client.delete("{job}")  # an operator's force-release
    with pytest.raises(FencedError, match="FENCED") as fenced:
        lock.guard([OUT], "SET", OUT, "stale")
    assert fenced.value.token == token and fenced.value.key == "{job}"
    assert isinstance(fenced.value, LockLostError), "the holder stops on either"
    assert client.get(OUT) is None, "nothing ran"
    # Told at once, not at the next renewal (10 s away).
    assert lock.lost.is_set() and told.wait(1.0)
    assert not lock.owned()


@pytest.mark.scripts
def test_a_holder_that_stopped_past_its_ttl_cannot_overwrite_the_next_holder(
    client: redis.Redis,
) -> None:
    holder = Lock(client, "{job}", ttl=0.3, raise_on_lost=False)
    assert holder.acquire()
    assert holder._holding is not None and holder._holding.renewer is not None
    # Its renewal stops, as a stopped process's would; the server lets it lapse.
    holder._holding.renewer.stop()
    rival = Lock(client, "{job}", ttl=30.0)
    assert rival.acquire(timeout=5)
    assert rival.guard([OUT], "SET", OUT, "rival") in (b"OK", "OK")
    # The lease ran out too, but the server decides: it says FENCED.
    with pytest.raises(FencedError, match=f"held with token {rival.token}"):
        holder.guard([OUT], "SET", OUT, "stale")
    assert client.get(OUT) == b"rival"
    assert rival.release()


def test_a_guarded_write_after_release_is_refused_without_sending(client: redis.Redis) -> None:
    lock = Lock(client, "{job}", ttl=5.0)
    with pytest.raises(LockLostError, match="not held by this lock object"):
        lock.guard([OUT], "SET", OUT, "never")
    assert lock.acquire()
    assert lock.release()
    with pytest.raises(LockLostError, match="not held by this lock object"):
        lock.guard([OUT], "SET", OUT, "late")
    assert client.get(OUT) is None


def test_bad_arguments_are_refused_before_anything_is_sent(client: redis.Redis) -> None:
    lock = Lock(client, "{job}", ttl=5.0)
    assert lock.acquire()
    bad: list[tuple[Any, tuple[Any, ...], type[Exception], str]] = [
        (OUT, ("SET", OUT, "v"), TypeError, "not one string"),
        (None, ("SET", OUT, "v"), TypeError, "list of the keys"),
        ([1], ("SET", OUT, "v"), TypeError, "str or bytes"),
        ([OUT], (), ValueError, "needs a command"),
        ([OUT], ("", OUT), TypeError, "name"),
        ([OUT], ("SET", OUT, True), TypeError, "bool"),
        ([OUT], ("SET", OUT, None), TypeError, "NoneType"),
    ]
    for keys, command, kind, said in bad:
        with pytest.raises(kind, match=said):
            lock.guard(keys, *command)
    assert client.get(OUT) is None
    assert lock.release()


@pytest.mark.scripts
def test_shared_holdings_guard_their_writes_while_they_hold(client: redis.Redis) -> None:
    permit = Semaphore(client, "{job}", 2, ttl=5.0)
    reader = ReadWriteLock(client, "{job}:rw", ttl=5.0).read()
    assert permit.acquire() and reader.acquire()
    assert permit.guard([OUT], "INCR", OUT) == 1
    assert reader.guard(["{job}:rw:n"], "INCR", "{job}:rw:n") == 1
    assert permit.release() and reader.release()


def test_a_lost_reply_says_the_write_may_have_run(
    server: RedisServer, proxy: BlackHoleProxy
) -> None:
    client = redis.Redis(port=proxy.port)
    lock = Lock(client, "{job}", ttl=30.0)
    assert lock.acquire()
    proxy.drop_replies()
    start = time.monotonic()
    with pytest.raises(redis.TimeoutError, match="may have run"):
        lock.guard([OUT], "SET", OUT, "sent")
    assert time.monotonic() - start < 3.0, "bounded by the control limit (2 s)"
    assert server.client().get(OUT) == b"sent", "it ran: the reply alone was lost"


@pytest.fixture
def old_library() -> Iterator[RedisServer]:
    """A server whose library was loaded before lock_guard existed."""
    started = RedisServer(kind="functions")
    entry = "    { name = 'lock_guard', full = lock_guard, flags = {}, own_oom = true },\n"
    source = library_source()
    assert entry in source
    started.client().function_load(source.replace(entry, ""), replace=True)
    yield started
    started.stop()


def test_a_library_without_lock_guard_asks_for_this_releases_library(
    old_library: RedisServer,
) -> None:
    client = old_library.client()
    lock = Lock(client, "{job}", ttl=5.0, backend="functions")
    assert lock.acquire()
    with pytest.raises(LibraryVersionError, match="load the library of this release") as old:
        lock.guard([OUT], "SET", OUT, "v")
    assert old.value.lacks == "lock_guard" and old.value.found == 3
    assert "before it had lock_guard" in str(old.value)
    assert client.get(OUT) is None
    assert not lock.lost.is_set(), "the lock is not lost for it"
    assert lock.release()


def test_a_library_gone_since_the_probe_is_sent_as_a_script() -> None:
    server = RedisServer(kind="functions")
    try:
        client = server.client()
        lock = Lock(client, "{job}", ttl=5.0)
        assert lock.acquire()
        client.function_delete("redislock")  # the lock's key stays
        assert lock.guard([OUT], "SET", OUT, "v") in (b"OK", "OK")
        assert client.get(OUT) == b"v"
        assert lock.release()
    finally:
        server.stop()


@pytest.mark.scripts
def test_the_asyncio_guard_lands_and_is_fenced(server: RedisServer) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(port=server.port)
        told = asyncio.Event()
        lock = AsyncLock(client, "{job}", ttl=30.0, on_lost=told.set, raise_on_lost=False)
        assert await lock.acquire()
        assert await lock.guard([OUT], "SET", OUT, "first") in (b"OK", "OK")
        assert await client.get(OUT) == b"first"
        await client.delete("{job}")
        with pytest.raises(FencedError, match="FENCED"):
            await lock.guard([OUT], "SET", OUT, "stale")
        assert lock.lost.is_set()
        await asyncio.wait_for(told.wait(), 1.0)
        assert await client.get(OUT) == b"first"
        await lock.aclose()
        with pytest.raises(LockLostError, match="not held"):
            await lock.guard([OUT], "SET", OUT, "late")
        await client.aclose()

    asyncio.run(main())
