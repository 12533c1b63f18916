from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import redis

from redis_lock_client import postgres

from servers import BlackHoleProxy, PostgresMissing, PostgresServer, RedisServer


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


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL of the session's own (tests/postgres/start), with the fence
    table made by the client's helper; skipped where PostgreSQL is not installed."""
    try:
        started = PostgresServer(tmp_path_factory.mktemp("postgres") / "pg")
    except PostgresMissing as missing:
        pytest.skip(f"no PostgreSQL: {missing} (make deps installs it)")
    try:
        with psycopg.connect(started.url, autocommit=True) as conn, conn.cursor() as cur:
            postgres.create_table(cur)
            cur.execute("CREATE TABLE reports (day text PRIMARY KEY, body text NOT NULL)")
        yield started.url
    finally:
        started.stop()
