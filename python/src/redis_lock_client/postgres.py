"""Fenced writes in PostgreSQL (docs/fencing.md): the resource keeps, per fenced
resource, the highest token it has accepted, and refuses a lower one (an equal one
passes: the holder writes more than once).

The fence is one statement, run in the write's own transaction **before** the write:
no row back means a holder with a greater token has written, and :func:`fence`
raises :class:`~redis_lock_client.FencedError`; roll back. The fence row stays locked
until the transaction ends, so a newer holder's fence waits for an older writer's
commit. The statements are the repository's ``fence/postgresql/*.sql``
(:data:`FENCE_SQL`, :data:`TABLE_SQL`).

The helpers run on the caller's own DB-API cursor (psycopg 3 and psycopg2; the
asyncio ones on psycopg 3's ``AsyncCursor``): nothing here imports a driver.

>>> with psycopg.connect(url) as conn, conn.transaction(), conn.cursor() as cur:
...     lock.fence_postgres(cur, "report:daily")   # or fence(cur, resource, token)
...     cur.execute("UPDATE reports SET body = %s WHERE day = %s", (body, day))

Only an exclusive holding's token fences (``Lock``, ``ReadWriteLock.write()``): the
tokens of read locks and semaphore permits, held side by side, do not order writers.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from ._errors import FencedError
from ._fence_sql import FENCE_SQL, TABLE_SQL

__all__ = [
    "FENCE_SQL",
    "TABLE_SQL",
    "AsyncCursor",
    "Cursor",
    "create_table",
    "create_table_async",
    "fence",
    "fence_async",
]

#: The largest fencing token PostgreSQL's ``bigint`` (and the server) takes.
MAX_TOKEN = (1 << 63) - 1


class Cursor(Protocol):
    """What the helpers need of a DB-API cursor (psycopg 3's ``Cursor``,
    psycopg2's ``cursor``): ``execute`` with ``%s`` parameters, and ``fetchone``."""

    def execute(self, query: str, params: tuple[str, int] = ..., /) -> object: ...

    def fetchone(self) -> Any: ...


class AsyncCursor(Protocol):
    """What the asyncio helpers need of a cursor (psycopg 3's ``AsyncCursor``)."""

    def execute(self, query: str, params: tuple[str, int] = ..., /) -> Awaitable[object]: ...

    def fetchone(self) -> Awaitable[Any]: ...


def fence(cursor: Cursor, resource: str, token: int) -> None:
    """Fences the cursor's transaction for ``resource`` with ``token`` (an exclusive
    holding's fencing token): run it before the writes it fences.
    :class:`~redis_lock_client.FencedError` when a holder with a greater token has
    written (roll back); ``ValueError`` or ``TypeError`` for a token that is not an
    int from 1 to 2^63 - 1, or a resource that is not a non-empty str. Errors of the
    database (no fence table: :func:`create_table`) come as the driver raises them.

    :meth:`Lock.fence_postgres <redis_lock_client.Lock.fence_postgres>` does the same
    with a held lock's token, and tells the lock it is lost when refused."""
    params = check(resource, token)
    cursor.execute(FENCE_SQL, params)
    settle(cursor.fetchone(), resource, token)


async def fence_async(cursor: AsyncCursor, resource: str, token: int) -> None:
    """:func:`fence` on an asyncio cursor (psycopg 3's ``AsyncCursor``)."""
    params = check(resource, token)
    await cursor.execute(FENCE_SQL, params)
    settle(await cursor.fetchone(), resource, token)


def create_table(cursor: Cursor) -> None:
    """Creates the fence table if it does not exist (:data:`TABLE_SQL`): once, at
    setup, by a role that may create tables."""
    cursor.execute(TABLE_SQL)


async def create_table_async(cursor: AsyncCursor) -> None:
    """:func:`create_table` on an asyncio cursor."""
    await cursor.execute(TABLE_SQL)


def check(resource: str, token: int) -> tuple[str, int]:
    """The fence's parameters, checked before anything is sent."""
    if not isinstance(resource, str):
        raise TypeError(f"resource must be a str, not {type(resource).__name__}")
    if not resource:
        raise ValueError("resource must not be empty: the lock's key is the usual name")
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int (a fencing token), not {type(token).__name__}")
    if not 1 <= token <= MAX_TOKEN:
        raise ValueError(f"token must be a fencing token, from 1 to 2^63 - 1: {token}")
    return resource, token


def settle(row: object, resource: str, token: int) -> None:
    """The fence's row, or :class:`~redis_lock_client.FencedError` for none."""
    if row is None:
        raise FencedError(
            resource,
            token,
            f"the fence of {resource!r} in PostgreSQL refused token {token}: a holder "
            "with a greater token has written to it; roll the transaction back",
            resource=resource,
        )
