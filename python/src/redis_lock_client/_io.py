"""Connections of the holders' own, and the drivers that run a backend's protocol
on them (threaded and asyncio).

A holder never waits, renews or releases on a connection from the user's pool: a
pooled connection has the user's read timeout (redis-py's default is 5 s) and
automatic retries (10 by default in redis-py 6+), and either breaks a blocking
wait: a timeout cuts the wait short, a retry re-queues the waiter at the back. The
connections made here have the user's connection settings (address, TLS, password,
database, protocol) with retries off and a read bound chosen per use.

On a Cluster (``redis.cluster.RedisCluster``, ``redis.asyncio.cluster.RedisCluster``)
they go to the master that serves the lock's key: every call of a lock names that
key, and the library's side keys (its queue, a waiter's grant list) share its slot
by their hash tag (docs/PROTOCOL.md, "Keys"). A ``MOVED`` reply (the slot moved: a
failover, a resharding) means the call did not run: it is sent once more to the
node named.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Generator
from typing import Any, Callable, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection
from redis.retry import Retry

from ._backend import Backend, Step
from ._detect import BackendName, detect

T = TypeVar("T")

SyncClient = redis.Redis
AsyncClient = redis.asyncio.Redis
AsyncConnection = redis.asyncio.connection.AbstractConnection

#: Per connection pool, the backend probed for each ``backend=`` choice; per Cluster
#: client, the same per node name.
_backends: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()


def is_cluster(client: object) -> bool:
    """True for redis-py's Cluster clients (threaded or asyncio)."""
    return isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster))


def check_client(client: object, asyncio_api: bool) -> None:
    """A ``TypeError`` naming what is expected, for a client of the wrong kind."""
    if asyncio_api:
        kinds: tuple[type, ...] = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
        names = "redis.asyncio.Redis or redis.asyncio.cluster.RedisCluster"
    else:
        kinds = (redis.Redis, redis.cluster.RedisCluster)
        names = "redis.Redis or redis.cluster.RedisCluster"
    if not isinstance(client, kinds):
        raise TypeError(f"expected a {names} client, got {type(client).__name__}")


def _node(client: Any, key: str) -> Any:
    """The master that serves ``key`` on a Cluster (redis-py's slot map)."""
    node = client.get_node_from_key(key)
    if node is None:
        raise redis.exceptions.ClusterError(f"no node serves the slot of {key!r}")
    return node


def _settings(client: Any, key: str) -> tuple[Any, dict[str, Any]]:
    """The connection class and settings of the server that serves ``key``."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        node = _node(client, key)
        return node.connection_class, dict(node.connection_kwargs)
    if isinstance(client, redis.cluster.RedisCluster):
        node = _node(client, key)
        if node.redis_connection is None:
            node.redis_connection = client.get_redis_connection(node)
        pool = node.redis_connection.connection_pool
        return pool.connection_class, dict(pool.connection_kwargs)
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        raise TypeError(
            "expected a redis-py client (Redis, or RedisCluster) with a connection pool, "
            f"got {type(client).__name__}"
        )
    return pool.connection_class, dict(pool.connection_kwargs)


def place_of(client: Any, key: str) -> tuple[Any, ...]:
    """Which server a holding of ``key`` is on, for telling holdings apart (see
    ``_held``): its address and database; on a Cluster, the Cluster client (a key
    stays with its slot wherever the slot goes); behind Sentinel, the pool."""
    if is_cluster(client):
        return ("cluster", id(client))
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if kwargs.get("host") is not None or kwargs.get("path") is not None:
        where = (kwargs.get("host"), kwargs.get("port"), kwargs.get("path"))
        return ("server", *where, kwargs.get("db", 0))
    return ("pool", id(pool))


async def ready_async(client: AsyncClient | redis.asyncio.cluster.RedisCluster) -> None:
    """An asyncio Cluster client learns its slot map on first use: now."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        await client.initialize()


#: The longest read bound given to a socket: a wait or a lease of years is
#: effectively unbounded, and a longer one overflows the platform's time_t (a
#: socket's timeout, a thread's wait) with OverflowError.
LONGEST_READ = 1e9


def _capped(limit: float | None) -> float | None:
    return None if limit is None else min(limit, LONGEST_READ)


def _no_retry_kwargs(
    client: Any, read_limit: float | None, key: str, retry: Any = Retry
) -> tuple[Any, dict[str, Any]]:
    read_limit = _capped(read_limit)
    cls, kwargs = _settings(client, key)
    kwargs.update(
        socket_timeout=read_limit,
        retry=retry(NoBackoff(), 0),
        retry_on_timeout=False,
        retry_on_error=[],
    )
    # TCP connections only (a Unix socket's take no such argument); without it
    # redis-py bounds the connect by socket_timeout.
    connect_limit = kwargs.get("socket_connect_timeout")
    if connect_limit is not None and read_limit is not None and connect_limit > read_limit:
        kwargs["socket_connect_timeout"] = read_limit
    return cls, kwargs


def connect(client: Any, read_limit: float | None, key: str) -> AbstractConnection:
    """A connection of our own to the server of ``key``: the client's settings, no
    retries, every read and the connect bounded by ``read_limit`` seconds
    (``None``: unbounded)."""
    cls, kwargs = _no_retry_kwargs(client, read_limit, key)
    conn: AbstractConnection = cls(**kwargs)
    return conn


def connect_async(client: Any, read_limit: float | None, key: str) -> AsyncConnection:
    cls, kwargs = _no_retry_kwargs(client, read_limit, key, AsyncRetry)
    conn: AsyncConnection = cls(**kwargs)
    return conn


def _moved_to(conn: Any, moved: redis.exceptions.MovedError) -> None:
    """Points ``conn`` (disconnected) at the node a ``MOVED`` named: the next send
    connects there, with the same settings."""
    conn.host, conn.port = moved.host, int(moved.port)


# redis-py's connection and client methods are partly untyped: they are reached
# through ``Any`` here, in one place.


def on(conn: AbstractConnection) -> Callable[[Step], Any]:
    """Steps sent on one of our connections."""
    raw: Any = conn

    def send(step: Step) -> Any:
        # connect() first: a Sentinel-managed connection asks Sentinel for the
        # master there, and send_command alone would connect to its default
        # address (localhost:6379) instead. A no-op once connected.
        raw.connect()
        raw.send_command(*step.args)
        # can_read(timeout) is in every redis-py since 3; read_response's own
        # timeout is not.
        limit = _capped(step.read_limit)
        if limit is not None and not raw.can_read(timeout=limit):
            raw.disconnect()
            raise redis.exceptions.TimeoutError(f"no reply within {limit:.3f} s")
        return raw.read_response()

    def call(step: Step) -> Any:
        try:
            return send(step)
        except redis.exceptions.MovedError as moved:
            raw.disconnect()
            _moved_to(raw, moved)
            return send(step)

    return call


def on_client(client: Any, key: str) -> Callable[[Step], Any]:
    """Steps sent through the user's client (its pool, timeouts and retries); on a
    Cluster to the master of ``key``."""
    raw: Any = client
    if is_cluster(client):
        return lambda step: raw.execute_command(*step.args, target_nodes=_node(raw, key))
    return lambda step: raw.execute_command(*step.args)


def on_client_async(client: Any, key: str) -> Callable[[Step], Awaitable[Any]]:
    raw: Any = client
    cluster = is_cluster(client)

    async def call(step: Step) -> Any:
        if cluster:
            return await raw.execute_command(*step.args, target_nodes=_node(raw, key))
        return await raw.execute_command(*step.args)

    return call


def disconnect(conn: AbstractConnection | None) -> None:
    raw: Any = conn
    if raw is not None:
        with contextlib.suppress(Exception):
            raw.disconnect()


def on_async(conn: AsyncConnection) -> Callable[[Step], Awaitable[Any]]:
    raw: Any = conn

    async def send(step: Step) -> Any:
        await raw.connect()  # as in ``on``: Sentinel resolves the master there
        await conn.send_command(*step.args)
        if step.read_limit is None:
            return await conn.read_response()
        try:
            return await asyncio.wait_for(conn.read_response(), step.read_limit)
        except asyncio.TimeoutError:
            await conn.disconnect()
            raise redis.exceptions.TimeoutError(
                f"no reply within {step.read_limit:.3f} s"
            ) from None

    async def call(step: Step) -> Any:
        try:
            return await send(step)
        except redis.exceptions.MovedError as moved:
            await conn.disconnect()
            _moved_to(raw, moved)
            return await send(step)

    return call


def run_sync(protocol: Generator[Step, Any, T], call: Callable[[Step], Any]) -> T:
    """Drives ``protocol`` to its result, each step through ``call``."""
    # A refusal or a failure is thrown into the protocol, which may handle it (a
    # NOSCRIPT) or let it out.
    try:
        step = next(protocol)
        while True:
            try:
                reply = call(step)
            except Exception as error:
                step = protocol.throw(error)
            else:
                step = protocol.send(reply)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        protocol.close()


async def run_async(protocol: Generator[Step, Any, T], call: Callable[[Step], Awaitable[Any]]) -> T:
    try:
        step = next(protocol)
        while True:
            try:
                reply = await call(step)
            except Exception as error:
                step = protocol.throw(error)
            else:
                step = protocol.send(reply)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        protocol.close()


def stale(backend: Backend) -> bool:
    """True for a backend found out of date since it was probed: the function
    library found gone (it is carried by the scripts path meanwhile)."""
    return bool(getattr(backend, "library_missing", False))


def _known(client: Any, key: str) -> dict[BackendName, Backend]:
    """The backends probed on the server of ``key``: per connection pool, on a
    Cluster per node (each node may have the module or not, the script or not)."""
    if is_cluster(client):
        nodes = _backends.setdefault(client, {})
        known: dict[BackendName, Backend] = nodes.setdefault(_node(client, key).name, {})
        return known
    pooled: dict[BackendName, Backend] = _backends.setdefault(client.connection_pool, {})
    return pooled


def backend_for(
    client: Any, call: Callable[[Step], Any], key: str, forced: BackendName = None
) -> Backend:
    """The backend of the server of ``key`` (``forced``: that one), probed once per
    connection pool (on a Cluster, per node) through ``call`` (a connection of our
    own: redis-py's parsing of ``COMMAND INFO`` fails on the null an unknown command
    gets)."""
    known = _known(client, key)
    backend = known.get(forced)
    if backend is None or stale(backend):
        backend = run_sync(detect(forced), call)
        known[forced] = backend
    return backend


async def backend_for_async(
    client: Any, call: Callable[[Step], Awaitable[Any]], key: str, forced: BackendName = None
) -> Backend:
    known = _known(client, key)
    backend = known.get(forced)
    if backend is None or stale(backend):
        backend = await run_async(detect(forced), call)
        known[forced] = backend
    return backend
