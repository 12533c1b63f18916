from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from servers import BlackHoleProxy, RedisServer


@pytest.fixture
def server() -> Iterator[RedisServer]:
    started = RedisServer()
    yield started
    started.stop()


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    # The user's client with redis-py's defaults: 5 s read timeout, retries on.
    con = server.client()
    yield con
    con.close()


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[BlackHoleProxy]:
    started = BlackHoleProxy(server.port)
    yield started
    started.close()
