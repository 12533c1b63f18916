"""A holding belongs to the process that acquired it: a forked child that leaves
the ``with`` block, releases, or is a ``multiprocessing`` fork worker sends nothing
for it, and never writes on the parent's sockets."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
import redis

from redis_lock_client import Lock

from servers import RedisServer, lock_info


def _child_exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.scripts
def test_a_child_that_leaves_the_with_block_leaves_the_parents_lock_held(
    client: redis.Redis,
) -> None:
    with Lock(client, "job", ttl=1.5) as lock:
        owner, token = lock.owner, lock.token
        pid = os.fork()
        if pid == 0:  # the child: it sees no holding of its own, then leaves the block
            code = 0 if (lock.token, lock.owner, lock.owned()) == (None, None, False) else 3
            try:
                lock.__exit__(None, None, None)
                code = code or (0 if lock.release() is False else 4)
            finally:
                os._exit(code)
        assert _child_exit_code(pid) == 0
        info = lock_info(client, "job")
        assert info is not None and [h["owner"] for h in info["holders"]] == [owner]
        assert Lock(client, "job").acquire(blocking=False) is False, "no rival granted"
        time.sleep(1.2)  # past the TTL: the parent's renewals still keep it
        assert lock.owned() and not lock.lost.is_set() and lock.token == token
    assert lock_info(client, "job") is None, "the parent released it"


def test_a_child_never_writes_on_the_parents_connections(client: redis.Redis) -> None:
    lock = Lock(client, "job", ttl=5.0)
    assert lock.acquire()
    pid = os.fork()
    if pid == 0:
        try:
            # Its own try, on connections of its own: busy, the parent holds it.
            code = 0 if lock.acquire(blocking=False) is False else 5
        finally:
            os._exit(code)
    assert _child_exit_code(pid) == 0
    # A command the child had sent on a shared socket would answer this one.
    assert lock.release() is True
    assert lock_info(client, "job") is None


def _worker_leaves(lock: Lock) -> None:
    lock.__exit__(None, None, None)


def test_a_multiprocessing_fork_worker_does_not_release_the_parents_lock(
    client: redis.Redis,
) -> None:
    context = multiprocessing.get_context("fork")
    with Lock(client, "job", ttl=5.0) as lock:
        worker = context.Process(target=_worker_leaves, args=(lock,))
        worker.start()
        worker.join(10)
        assert worker.exitcode == 0
        info = lock_info(client, "job")
        assert info is not None and [h["owner"] for h in info["holders"]] == [lock.owner]
        assert Lock(client, "job").acquire(blocking=False) is False


def test_an_asyncio_holding_is_not_released_by_a_forked_child(server: RedisServer) -> None:
    import asyncio

    import redis.asyncio

    from redis_lock_client import AsyncLock

    port = server.port

    async def scenario() -> None:
        user = redis.asyncio.Redis(host="127.0.0.1", port=port)
        async with AsyncLock(user, "job", ttl=5.0) as lock:
            pid = os.fork()
            if pid == 0:
                code = 6
                try:
                    done = asyncio.new_event_loop().run_until_complete(lock.release())
                    code = 0 if done is False and lock.token is None else 7
                finally:
                    os._exit(code)
            assert _child_exit_code(pid) == 0
            direct = redis.Redis(host="127.0.0.1", port=port)
            info = lock_info(direct, "job")
            assert info is not None and [h["owner"] for h in info["holders"]] == [lock.owner]
        await user.aclose()

    asyncio.run(scenario())
