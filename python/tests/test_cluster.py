"""On a real 3-master Cluster (the module on every node, or the library loaded on every
master), through redis-py's ``RedisCluster``, threaded and asyncio: keys in every
slot range, tagged and untagged; tries, waits on the key's node, renewals, releases;
a slot moved under a lock object; guarded writes on the node of the lock's slot."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import ClusterCrossSlotError

from redis_lock_client import AsyncLock, FencedError, Lock, LockLostError
from redis_lock_client._guard import same_slot_example

from servers import RedisClusterServers, lock_info, wait_until

KEYS = ["jobs:1", "jobs:2", "jobs:3", "x", "{jobs}:1", "a{b}c"]


@pytest.fixture(scope="module", params=["module", "functions"])
def cluster(request: pytest.FixtureRequest) -> Iterator[RedisClusterServers]:
    started = RedisClusterServers(3, kind=request.param)
    yield started
    started.stop()


def _sync_client(cluster: RedisClusterServers) -> redis.cluster.RedisCluster:
    node: Any = redis.cluster.ClusterNode
    return redis.cluster.RedisCluster(
        startup_nodes=[node(h, p) for h, p in cluster.startup_nodes()]
    )


def _info(cluster: RedisClusterServers, key: str) -> dict[str, Any] | None:
    """The lock as the node that serves the key has it."""
    return lock_info(cluster.owner_of(key).client(), key)


def _has_a_waiter(cluster: RedisClusterServers, key: str) -> bool:
    return (_info(cluster, key) or {}).get("waiters") == 1


def _acquire(lock: Lock, granted: list[bool]) -> None:
    granted.append(lock.acquire(timeout=5))


def test_locks_on_every_node_of_a_cluster(cluster: RedisClusterServers) -> None:
    client = _sync_client(cluster)
    kind = cluster.nodes[0].kind
    for i, key in enumerate(KEYS):
        holder = Lock(client, key, ttl=0.6)
        assert holder.acquire(blocking=False), key
        assert holder._backend is not None and holder._backend.name == kind
        assert not Lock(client, key, ttl=1.0).acquire(blocking=False)
        found = _info(cluster, key)
        assert found is not None and found["holders"][0]["owner"] == holder.owner
        assert holder.info() is not None and holder.locked()
        granted: list[bool] = []
        waiter = Lock(client, key, ttl=1.0)
        thread = threading.Thread(target=_acquire, args=(waiter, granted))
        thread.start()
        wait_until(functools.partial(_has_a_waiter, cluster, key))
        if i == 0:
            time.sleep(0.9)  # renewed past its TTL on its node
            assert holder.owned() and not holder.lost.is_set()
        assert holder.release()
        thread.join(5)
        assert granted == [True], key
        assert waiter.release()
        assert _info(cluster, key) is None
    client.close()


def test_async_locks_on_every_node_of_a_cluster(cluster: RedisClusterServers) -> None:
    async def scenario() -> None:
        node: Any = redis.asyncio.cluster.ClusterNode
        nodes = [node(h, p) for h, p in cluster.startup_nodes()]
        client = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes)
        try:
            for i, key in enumerate(KEYS):
                holder = AsyncLock(client, key, ttl=0.6)
                assert await holder.acquire(blocking=False), key
                assert not await AsyncLock(client, key, ttl=1.0).acquire(blocking=False)
                assert await holder.locked()
                waiter = AsyncLock(client, key, ttl=1.0)
                waiting = asyncio.create_task(waiter.acquire(timeout=5))
                while (await holder.info() or {}).get("waiters") != 1:
                    await asyncio.sleep(0.01)
                if i == 0:
                    await asyncio.sleep(0.9)
                    assert holder.owned() and not holder.lost.is_set()
                assert await holder.release()
                assert await waiting
                assert await waiter.release()
                assert await holder.info() is None
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_a_slot_moved_under_a_lock_object_is_followed(cluster: RedisClusterServers) -> None:
    # An empty slot handed to another master: the user's client still maps it to the
    # old one, which answers MOVED; the lock's calls follow it.
    key = "moved:1"
    client = _sync_client(cluster)
    lock = Lock(client, key, ttl=5.0)
    assert lock.info() is None  # probed, on the old node
    old = cluster.owner_of(key)
    new = next(node for node in cluster.nodes if node is not old)
    raw: Any = new.client()
    slot = int(raw.execute_command("CLUSTER", "KEYSLOT", key))
    new_id = raw.execute_command("CLUSTER", "MYID")
    for node in [new, *(n for n in cluster.nodes if n is not new)]:
        other: Any = node.client()
        other.execute_command("CLUSTER", "SETSLOT", slot, "NODE", new_id)
    wait_until(lambda: cluster.owner_of(key) is new)
    assert lock.acquire(blocking=False)
    assert lock_info(new.client(), key) is not None
    time.sleep(2.0)  # renewed on the new node
    assert lock.owned() and lock.release()
    client.close()


def _slot(cluster: RedisClusterServers, key: str) -> int:
    raw: Any = cluster.nodes[0].client()
    return int(raw.execute_command("CLUSTER", "KEYSLOT", key))


def test_guarded_writes_go_to_the_node_of_the_locks_slot(cluster: RedisClusterServers) -> None:
    client = _sync_client(cluster)
    for key in KEYS:
        out = same_slot_example(key).split()[0]
        assert _slot(cluster, out) == _slot(cluster, key), out
        lock = Lock(client, key, ttl=5.0, raise_on_lost=False)
        assert lock.acquire(blocking=False), key
        assert lock.guard([out], "SET", out, key) in (b"OK", "OK"), key
        node = cluster.owner_of(key).client()
        assert node.get(out) == key.encode()
        elsewhere = next(
            k for k in ("{x}:out", "{y}:out") if _slot(cluster, k) != _slot(cluster, key)
        )
        with pytest.raises(ClusterCrossSlotError, match="in the hash slot of the lock's key"):
            lock.guard([elsewhere], "SET", elsewhere, "v")
        node.delete(key)
        with pytest.raises(FencedError, match="FENCED"):
            lock.guard([out], "SET", out, "stale")
        assert lock.lost.is_set() and node.get(out) == key.encode()
        node.delete(out)
    client.close()


def test_async_guarded_writes_on_a_cluster(cluster: RedisClusterServers) -> None:
    async def scenario() -> None:
        node: Any = redis.asyncio.cluster.ClusterNode
        nodes = [node(h, p) for h, p in cluster.startup_nodes()]
        client = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes)
        try:
            lock = AsyncLock(client, "jobs:9", ttl=5.0, raise_on_lost=False)
            assert await lock.acquire(blocking=False)
            assert await lock.guard(["{jobs:9}:out"], "SET", "{jobs:9}:out", "v") in (b"OK", "OK")
            assert await client.get("{jobs:9}:out") == b"v"
            with pytest.raises(ClusterCrossSlotError, match="give them its hash tag"):
                await lock.guard(["{x}:out", "{y}:out"], "MSET", "{x}:out", "1", "{y}:out", "2")
            assert await lock.release()
            with pytest.raises(LockLostError):
                await lock.guard(["{jobs:9}:out"], "SET", "{jobs:9}:out", "late")
        finally:
            await client.aclose()

    asyncio.run(scenario())
