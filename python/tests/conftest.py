from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from servers import BlackHoleProxy, RedisServer


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every test on a server runs on the module and on the function library; those
    # marked ``scripts`` on a plain server too, where the client sends the library.
    if "server" in metafunc.fixturenames:
        kinds = ["module", "functions"]
        if metafunc.definition.get_closest_marker("scripts"):
            kinds.append("scripts")
        metafunc.parametrize("server", kinds, indirect=True)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    started = RedisServer(kind=request.param)
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
