"""The PostgreSQL fence (``redis_lock_client.postgres``, ``lock.fence_postgres``) on a
real PostgreSQL of the tests' own (tests/postgres/start), through psycopg 3 (sync and
asyncio) and psycopg2: the highest token per resource passes, a lower one is refused
and its transaction writes nothing, a newer holder's fence waits for an older
writer's commit, and the statements are the repository's fence/postgresql/*.sql."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg2
import pytest
import redis
import redis.asyncio

from redis_lock_client import (
    AsyncLock,
    FencedError,
    Lock,
    LockLostError,
    ReadWriteLock,
    Semaphore,
    postgres,
)
from redis_lock_client._fence_sql import FENCE_SQL, TABLE_SQL

from servers import ROOT, RedisServer

DRIVERS = ["psycopg", "psycopg2"]


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location(
        "generate_fence_sql", ROOT / "python" / "generate_fence_sql.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_statements_are_fence_postgresql() -> None:
    generated = ROOT / "python" / "src" / "redis_lock_client" / "_fence_sql.py"
    assert generated.read_text("utf-8") == _generator().render(), (
        "_fence_sql.py is stale against fence/postgresql/*.sql: run "
        "target/venv/bin/python python/generate_fence_sql.py"
    )
    # The one statement, placeholders aside; the table as it is.
    source = (ROOT / "fence" / "postgresql" / "fence.sql").read_text("utf-8").strip()
    assert source.replace("$1", "%s").replace("$2", "%s") == FENCE_SQL
    assert (ROOT / "fence" / "postgresql" / "table.sql").read_text("utf-8").strip() == TABLE_SQL


def test_the_generator_refuses_placeholders_it_does_not_know() -> None:
    pyformat = _generator().pyformat
    assert pyformat("SELECT $1, $2 WHERE x LIKE 'a%'", 2) == "SELECT %s, %s WHERE x LIKE 'a%%'"
    for wrong in ("SELECT $2, $1", "SELECT $1", "SELECT $1, $2, $3", "SELECT $1, $1"):
        with pytest.raises(ValueError, match="placeholders"):
            pyformat(wrong, 2)


def _resource() -> str:
    return f"report:{uuid.uuid4().hex[:12]}"


@contextmanager
def _transaction(driver: str, url: str) -> Iterator[Any]:
    """A cursor in a transaction of its own: committed at the end, rolled back on an
    exception, as each driver's users write it."""
    if driver == "psycopg":
        with psycopg.connect(url) as conn, conn.transaction(), conn.cursor() as cur:
            yield cur
        return
    old_conn = psycopg2.connect(url)
    try:
        with old_conn, old_conn.cursor() as cur:
            yield cur
    finally:
        old_conn.close()


def _write(cur: Any, resource: str, body: str) -> None:
    cur.execute(
        "INSERT INTO reports (day, body) VALUES (%s, %s) "
        "ON CONFLICT (day) DO UPDATE SET body = EXCLUDED.body",
        (resource, body),
    )


def _read(url: str, resource: str) -> tuple[str | None, int | None]:
    """The report's body and the fence's token, as committed."""
    with psycopg.connect(url, autocommit=True) as conn:
        body = conn.execute("SELECT body FROM reports WHERE day = %s", (resource,)).fetchone()
        token = conn.execute(
            "SELECT token FROM redis_lock_fence WHERE resource = %s", (resource,)
        ).fetchone()
    return (body[0] if body else None, token[0] if token else None)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_fenced_write_lands_and_the_same_token_writes_again(
    driver: str, postgres_url: str
) -> None:
    resource = _resource()
    for body in ("rows 1-500", "rows 1-1000"):
        with _transaction(driver, postgres_url) as cur:
            postgres.fence(cur, resource, 17)
            _write(cur, resource, body)
        assert _read(postgres_url, resource) == (body, 17)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_lower_token_is_refused_and_its_transaction_writes_nothing(
    driver: str, postgres_url: str
) -> None:
    resource = _resource()
    with _transaction(driver, postgres_url) as cur:
        postgres.fence(cur, resource, 19)
        _write(cur, resource, "newer")
    stale = _transaction(driver, postgres_url)
    with pytest.raises(FencedError, match="refused token 17") as fenced, stale as cur:
        postgres.fence(cur, resource, 17)
        _write(cur, resource, "stale")  # never reached
    assert fenced.value.token == 17 and fenced.value.resource == resource
    assert isinstance(fenced.value, LockLostError)
    assert _read(postgres_url, resource) == ("newer", 19)
    # A greater one passes and moves the fence up.
    with _transaction(driver, postgres_url) as cur:
        postgres.fence(cur, resource, 23)
        _write(cur, resource, "newest")
    assert _read(postgres_url, resource) == ("newest", 23)


def test_a_newer_holders_fence_waits_for_the_older_writers_commit(postgres_url: str) -> None:
    resource = _resource()
    newer_done = threading.Event()
    outcome: list[BaseException | None] = []

    def newer() -> None:
        try:
            with _transaction("psycopg", postgres_url) as cur:
                postgres.fence(cur, resource, 20)  # blocks on the older's fence row
                _write(cur, resource, "newer")
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)
        newer_done.set()

    with _transaction("psycopg2", postgres_url) as cur:
        postgres.fence(cur, resource, 10)
        thread = threading.Thread(target=newer)
        thread.start()
        assert not newer_done.wait(0.5), "the newer fence waits on the row"
        _write(cur, resource, "older")
    thread.join(10)
    assert outcome == [None]
    assert _read(postgres_url, resource) == ("newer", 20)
    # The older holder comes back: refused.
    with pytest.raises(FencedError), _transaction("psycopg2", postgres_url) as cur:
        postgres.fence(cur, resource, 10)


@pytest.mark.parametrize("driver", DRIVERS)
def test_bad_tokens_and_resources_are_refused_before_anything_runs(
    driver: str, postgres_url: str
) -> None:
    resource = _resource()
    bad: list[tuple[Any, Any, type[Exception]]] = [
        (resource, 0, ValueError),
        (resource, -5, ValueError),
        (resource, 1 << 63, ValueError),
        (resource, True, TypeError),
        (resource, "17", TypeError),
        (resource, 17.0, TypeError),
        ("", 17, ValueError),
        (None, 17, TypeError),
    ]
    with _transaction(driver, postgres_url) as cur:
        for name, token, kind in bad:
            with pytest.raises(kind):
                postgres.fence(cur, name, token)
        postgres.fence(cur, resource, (1 << 63) - 1)  # the largest passes
    assert _read(postgres_url, resource) == (None, (1 << 63) - 1)


@pytest.mark.parametrize("driver", DRIVERS)
def test_create_table_makes_the_fence_table_once(driver: str, postgres_url: str) -> None:
    schema = f"s{uuid.uuid4().hex[:12]}"
    with _transaction(driver, postgres_url) as cur:
        cur.execute(f"CREATE SCHEMA {schema}")
        cur.execute(f"SET LOCAL search_path TO {schema}")
        postgres.create_table(cur)
        postgres.create_table(cur)  # IF NOT EXISTS: setup may run it every start
        postgres.fence(cur, "r", 5)
        cur.execute(f"SELECT token FROM {schema}.redis_lock_fence")
        assert cur.fetchone() == (5,)


def test_without_the_table_the_drivers_error_comes_through(postgres_url: str) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable), _transaction("psycopg", postgres_url) as cur:
        cur.execute("SET LOCAL search_path TO pg_temp")
        postgres.fence(cur, "r", 5)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_lock_fences_with_its_token_and_is_lost_when_a_newer_holder_wrote(
    driver: str, server: RedisServer, postgres_url: str
) -> None:
    client = server.client()
    key = _resource()
    told = threading.Event()
    holder = Lock(client, key, ttl=30.0, on_lost=told.set, raise_on_lost=False)
    assert holder.acquire()
    with _transaction(driver, postgres_url) as cur:
        holder.fence_postgres(cur)  # the lock's key is the resource
        _write(cur, key, "holder")
    assert _read(postgres_url, key) == ("holder", holder.token)
    client.delete(key)  # taken away; a rival is granted a greater token
    rival = Lock(client, key, ttl=30.0)
    assert rival.acquire()
    with _transaction(driver, postgres_url) as cur:
        rival.fence_postgres(cur, key)
        _write(cur, key, "rival")
    with pytest.raises(FencedError), _transaction(driver, postgres_url) as cur:
        holder.fence_postgres(cur)
    assert holder.lost.is_set() and told.wait(1.0)
    assert _read(postgres_url, key) == ("rival", rival.token)
    assert rival.release()
    # Released: not held, nothing runs.
    with pytest.raises(LockLostError, match="not held"), _transaction(driver, postgres_url) as cur:
        rival.fence_postgres(cur)


def test_only_exclusive_holdings_have_a_fence(client: redis.Redis) -> None:
    # The tokens of read locks and permits do not order writers (contract.md "Fenced
    # writes"): their objects have no fence_postgres.
    assert not hasattr(Semaphore(client, "job", 3), "fence_postgres")
    assert not hasattr(ReadWriteLock(client, "job").read(), "fence_postgres")
    assert hasattr(ReadWriteLock(client, "job").write(), "fence_postgres")


def test_the_asyncio_fence(server: RedisServer, postgres_url: str) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(port=server.port)
        key = _resource()
        holder = AsyncLock(client, key, ttl=30.0, raise_on_lost=False)
        assert await holder.acquire()
        assert holder.token is not None
        token = holder.token
        conn = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
        try:
            async with conn.transaction(), conn.cursor() as cur:
                await holder.fence_postgres(cur)
                await cur.execute("INSERT INTO reports VALUES (%s, %s)", (key, "holder"))
            async with conn.transaction(), conn.cursor() as cur:
                await postgres.fence_async(cur, key, token + 1)  # a newer holder
            with pytest.raises(FencedError):
                async with conn.transaction(), conn.cursor() as cur:
                    await holder.fence_postgres(cur)
            assert holder.lost.is_set()
            with pytest.raises(FencedError):
                async with conn.transaction(), conn.cursor() as cur:
                    await postgres.fence_async(cur, key, token)
            async with conn.cursor() as cur:
                await postgres.create_table_async(cur)  # exists: nothing happens
        finally:
            await conn.close()
            await holder.aclose()
            await client.aclose()
        assert _read(postgres_url, key) == ("holder", token + 1)

    start = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - start < 10
