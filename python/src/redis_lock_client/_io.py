"""Connections of the holders' own, and the drivers that run a backend's protocol
on them (threaded and asyncio).

A holder never waits, renews or releases on a connection from the user's pool: a
pooled connection has the user's read timeout (redis-py's default is 5 s) and
automatic retries (10 by default in redis-py 6+), and either breaks a blocking
wait: a timeout cuts the wait short, a retry re-queues the waiter at the back. The
connections made here have the user's connection settings (address, TLS, password,
database, protocol) with retries off and a read bound chosen per use.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Generator
from typing import Any, Callable, TypeVar

import redis
import redis.asyncio
import redis.exceptions
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection
from redis.retry import Retry

from ._backend import Backend, Step
from ._detect import BackendName, detect

T = TypeVar("T")

SyncClient = redis.Redis
AsyncClient = redis.asyncio.Redis
AsyncConnection = redis.asyncio.connection.AbstractConnection

#: Per connection pool, the backend probed for each ``backend=`` choice.
_backends: weakref.WeakKeyDictionary[Any, dict[BackendName, Backend]] = weakref.WeakKeyDictionary()


def _no_retry_kwargs(
    client: SyncClient | AsyncClient, read_limit: float | None
) -> tuple[Any, dict[str, Any]]:
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        raise TypeError(
            "expected a redis.Redis or redis.asyncio.Redis client with a connection pool "
            f"(cluster clients are not supported), got {type(client).__name__}"
        )
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(
        socket_timeout=read_limit,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        retry_on_error=[],
    )
    # TCP connections only (a Unix socket's take no such argument); without it
    # redis-py bounds the connect by socket_timeout.
    connect_limit = kwargs.get("socket_connect_timeout")
    if connect_limit is not None and read_limit is not None and connect_limit > read_limit:
        kwargs["socket_connect_timeout"] = read_limit
    return pool.connection_class, kwargs


def connect(client: SyncClient, read_limit: float | None) -> AbstractConnection:
    """A connection of our own: the client's settings, no retries, every read and the
    connect bounded by ``read_limit`` seconds (``None``: unbounded)."""
    cls, kwargs = _no_retry_kwargs(client, read_limit)
    conn: AbstractConnection = cls(**kwargs)
    return conn


def connect_async(client: AsyncClient, read_limit: float | None) -> AsyncConnection:
    cls, kwargs = _no_retry_kwargs(client, read_limit)
    conn: AsyncConnection = cls(**kwargs)
    return conn


# redis-py's connection and client methods are partly untyped: they are reached
# through ``Any`` here, in one place.


def on(conn: AbstractConnection) -> Callable[[Step], Any]:
    """Steps sent on one of our connections."""
    raw: Any = conn

    def call(step: Step) -> Any:
        # connect() first: a Sentinel-managed connection asks Sentinel for the
        # master there, and send_command alone would connect to its default
        # address (localhost:6379) instead. A no-op once connected.
        raw.connect()
        raw.send_command(*step.args)
        # can_read(timeout) is in every redis-py since 3; read_response's own
        # timeout is not.
        if step.read_limit is not None and not raw.can_read(timeout=step.read_limit):
            raw.disconnect()
            raise redis.exceptions.TimeoutError(f"no reply within {step.read_limit:.3f} s")
        return raw.read_response()

    return call


def on_client(client: SyncClient) -> Callable[[Step], Any]:
    """Steps sent through the user's client (its pool, timeouts and retries)."""
    raw: Any = client
    return lambda step: raw.execute_command(*step.args)


def on_client_async(client: AsyncClient) -> Callable[[Step], Awaitable[Any]]:
    raw: Any = client

    async def call(step: Step) -> Any:
        return await raw.execute_command(*step.args)

    return call


def disconnect(conn: AbstractConnection | None) -> None:
    raw: Any = conn
    if raw is not None:
        with contextlib.suppress(Exception):
            raw.disconnect()


def on_async(conn: AsyncConnection) -> Callable[[Step], Awaitable[Any]]:
    raw: Any = conn

    async def call(step: Step) -> Any:
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


def backend_for(
    client: SyncClient, call: Callable[[Step], Any], forced: BackendName = None
) -> Backend:
    """The client's server's backend (``forced``: that one), probed once per
    connection pool through ``call`` (a connection of our own: redis-py's parsing
    of ``COMMAND INFO`` fails on the null an unknown command gets)."""
    known = _backends.setdefault(client.connection_pool, {})
    backend = known.get(forced)
    if backend is None or stale(backend):
        backend = run_sync(detect(forced), call)
        known[forced] = backend
    return backend


async def backend_for_async(
    client: AsyncClient, call: Callable[[Step], Awaitable[Any]], forced: BackendName = None
) -> Backend:
    known = _backends.setdefault(client.connection_pool, {})
    backend = known.get(forced)
    if backend is None or stale(backend):
        backend = await run_async(detect(forced), call)
        known[forced] = backend
    return backend
