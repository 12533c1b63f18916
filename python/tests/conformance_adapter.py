"""The Python client's conformance adapter (conformance/ADAPTER.md).

The harness of ``make conformance`` starts it once per actor
(``target/venv/bin/python python/tests/conformance_adapter.py``) and drives it with
JSON lines on stdin; it uses the client as its users do and says what the client
answered on stdout. Two registrations run it: ``python`` drives the asyncio holders
(their ``on_lost`` callback, a cancelled task to cancel a wait), ``python-sync``
(``--sync``) the threaded ones, a thread per request so that requests overlap as a
user's threads would; the threaded API has no way to cancel a wait from another
thread, so that one claims no ``cancel``. ``fence_postgres`` writes through psycopg 3
(asyncio) and psycopg2 (threads), the test dependencies of requirements-dev.txt. Not a
test module itself (pytest collects ``test_*.py`` only).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from importlib import metadata
from typing import Any, Union
from urllib.parse import urlparse

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions

from redis_lock_client import (
    AsyncElection,
    AsyncLeadership,
    AsyncLock,
    AsyncReadLock,
    AsyncReadWriteLock,
    AsyncSemaphore,
    Election,
    FencedError,
    Leader,
    Leadership,
    LibraryVersionError,
    Lock,
    LockLostError,
    NoLockBackendError,
    ReadLock,
    ReadWriteLock,
    Semaphore,
    _protocol,
    margin,
)
from redis_lock_client._detect import BackendName

AsyncHolder = Union[AsyncLock, AsyncReadLock, AsyncSemaphore]
SyncHolder = Union[Lock, ReadLock, Semaphore]

#: ``--sync``: drive the threaded API (the ``python-sync`` registration).
SYNC = "--sync" in sys.argv[1:]


class Failure(Exception):
    """An error reply: a kind of ADAPTER.md and the client's own text."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_out = threading.Lock()


def write(line: dict[str, Any]) -> None:
    text = json.dumps(line) + "\n"
    with _out:  # whole lines, from any thread
        sys.stdout.write(text)
        sys.stdout.flush()


def hello() -> dict[str, Any]:
    return {
        "hello": {
            "protocol": 1,
            "client": "redis-lock-client (Python, threads)"
            if SYNC
            else "redis-lock-client (Python)",
            "version": metadata.version("redis-lock-client"),
            "capabilities": [
                "module",
                "functions",
                "scripts",
                "force_backend",
                "cluster",
                "auth",
                "shared",
                "limit",
                "wait",
                "wait_forever",
                *([] if SYNC else ["cancel"]),
                "owner",
                "info",
                "leader",
                "check",
                "guard",
                "fence_postgres",
                "loss_events",
            ],
            "constants": {
                "renewal_divisor": _protocol.RENEWAL_DIVISOR,
                # The lease margin as the client computes it: a share of a long TTL,
                # and the floor a short one gets.
                "lease_margin_percent": round(margin(100.0)),
                "lease_margin_min_ms": round(margin(0.1) * 1000),
                "wait_margin_ms": round(_protocol.WAIT_MARGIN * 1000),
                "withdraw_after_timeout_ms": round(_protocol.WITHDRAW_AFTER_TIMEOUT * 1000),
                "release_limit_ms": round(_protocol.RELEASE_LIMIT * 1000),
                "control_limit_ms": round(_protocol.CONTROL_LIMIT * 1000),
                "library_version": _protocol.LIBRARY_VERSION,
                "min_library_version": _protocol.MIN_LIBRARY_VERSION,
            },
        }
    }


def failure_of(error: BaseException, waiting: bool) -> Failure:
    """The kind of ADAPTER.md for what the client raised."""
    if isinstance(error, Failure):
        return error
    message = f"{type(error).__name__}: {error}"
    if isinstance(error, LibraryVersionError):
        newer = error.found > error.maximum
        return Failure("library_too_new" if newer else "library_too_old", message)
    if isinstance(error, NoLockBackendError):
        return Failure("no_backend", message)
    if isinstance(error, FencedError):  # before LockLostError, its base
        return Failure("fenced", message)
    if isinstance(error, LockLostError):
        return Failure("lock_lost", message)
    if isinstance(error, redis.exceptions.ResponseError):
        kind = "wrong_type" if str(error).startswith("WRONGTYPE") else "server"
        return Failure(kind, message)
    if isinstance(error, (redis.exceptions.TimeoutError, asyncio.TimeoutError)):
        # A wait that got no answer in time: what the client says then.
        return Failure("wait_unanswered" if waiting else "connection", message)
    if isinstance(error, redis.exceptions.ConnectionError):
        return Failure("connection", message)
    if isinstance(error, (ValueError, TypeError)):
        return Failure("invalid_argument", message)
    return Failure("other", message)


def field(request: dict[str, Any], name: str) -> Any:
    if name not in request:
        raise Failure("bad_request", f"{name} is missing")
    return request[name]


def seeds(urls: list[str]) -> list[tuple[str, int]]:
    """A Cluster's seed URLs as (host, port)."""
    found = []
    for url in urls:
        parsed = urlparse(url)
        found.append((parsed.hostname or "127.0.0.1", parsed.port or 6379))
    return found


def kind_of(request: dict[str, Any]) -> str:
    kind = str(request.get("kind", "exclusive"))
    if kind not in ("exclusive", "shared", "limit"):
        raise Failure("bad_request", f"kind {kind!r}")
    if "owner" in request and kind == "shared":
        raise Failure("unsupported", "a read lock takes no owner of the caller's")
    return kind


def info_reply(found: dict[str, Any] | None) -> dict[str, Any]:
    if found is None:
        return {"info": None}
    holders = [
        {"owner": holder["owner"], "token": str(holder["token"])} for holder in found["holders"]
    ]
    return {"info": {"mode": found["mode"], "waiters": found["waiters"], "holders": holders}}


def leader_reply(found: Leader | None) -> dict[str, Any]:
    if found is None:
        return {"leader": None}
    return {"leader": {"term": str(found.term), "value": found.value.decode(errors="replace")}}


def leader_event(observer: str, found: Leader) -> None:
    write(
        {
            "event": "leader",
            "observer": observer,
            "term": str(found.term),
            "value": found.value.decode(errors="replace"),
        }
    )


#: Elections made for a request: any TTL serves one that only reads.
READ_TTL = 1.0


#: The fenced write of ``fence_postgres`` after the fence (the harness made the table).
WRITE_SQL = (
    "INSERT INTO conformance_writes (resource, value) VALUES (%s, %s) "
    "ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value"
)


def postgres_url(url: str | None) -> str:
    if url is None:
        raise Failure("bad_request", "no postgres URL came with open")
    return url


def lost_event(name: str) -> Any:
    def on_lost() -> None:
        write({"event": "lost", "lock": name, "cause": "unknown", "message": "lock.lost"})

    return on_lost


class Adapter:
    """The asyncio API: a task per request."""

    def __init__(self) -> None:
        self.client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | None = None
        self.backend: BackendName = None
        self.locks: dict[str, AsyncHolder] = {}
        self.leaderships: dict[str, AsyncLeadership] = {}
        self.observers: set[asyncio.Task[None]] = set()
        self.inspectors: dict[str, AsyncLock] = {}
        self.waits: dict[int, asyncio.Task[dict[str, Any]]] = {}
        self.postgres: str | None = None

    def redis(self) -> redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster:
        if self.client is None:
            raise Failure("bad_request", "open first")
        return self.client

    def holder(self, request: dict[str, Any]) -> AsyncHolder:
        name = field(request, "lock")
        held = self.locks.get(name)
        if held is None:
            raise Failure("bad_request", f"no lock named {name!r}")
        return held

    async def handle(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        if op == "open":
            return await self.open(request)
        if op == "acquire":
            return await self.acquire(request)
        if op == "release":
            return {"released": await self.holder(request).release()}
        if op == "token":
            held = self.holder(request)
            lost = held.lost.is_set()
            reply: dict[str, Any] = {"token": str(held.token), "owner": held.owner, "lost": lost}
            if lost:
                reply["cause"] = "unknown"
            return reply
        if op == "await_lost":
            held = self.holder(request)
            try:
                await asyncio.wait_for(held.lost.wait(), field(request, "timeout_ms") / 1000)
            except asyncio.TimeoutError:
                return {"lost": False}
            return {"lost": True, "cause": "unknown"}
        if op == "check":
            held = self.holder(request)
            await asyncio.sleep(request.get("after_ms", 0) / 1000)
            # The check the docs show before a write under the lock.
            return {"held": not held.lost.is_set()}
        if op == "guard":
            held = self.holder(request)
            key, value = field(request, "key"), field(request, "value")
            await asyncio.sleep(request.get("after_ms", 0) / 1000)
            await held.guard([key], "SET", key, value)
            return {"written": True}
        if op == "fence_postgres":
            return await self.fence_postgres(request)
        if op == "cancel":
            task = self.waits.get(int(field(request, "target")))
            if task is not None and not task.done():
                task.cancel()
                # The client's cancellation (its withdrawal) runs in the task.
                await asyncio.wait([task])
            return {}
        if op == "info":
            key = field(request, "key")
            inspector = self.inspectors.get(key)
            if inspector is None:
                inspector = AsyncLock(self.redis(), key, backend=self.backend)
                self.inspectors[key] = inspector
            return info_reply(await inspector.info())
        if op == "campaign":
            name = field(request, "lock")
            election = AsyncElection(
                self.redis(),
                field(request, "key"),
                field(request, "ttl_ms") / 1000,
                backend=self.backend,
            )
            leadership = await election.campaign(field(request, "value"), on_lost=lost_event(name))
            assert leadership is not None  # no timeout: answers when leading
            self.leaderships[name] = leadership
            self.locks[name] = leadership._lock
            return {
                "acquired": True,
                "token": str(leadership.term),
                "owner": leadership._lock.owner,
            }
        if op == "resign":
            name = field(request, "lock")
            leadership = self.leaderships.pop(name, None)
            if leadership is None:
                raise Failure("bad_request", f"no leadership {name!r}")
            return {"resigned": await leadership.resign()}
        if op == "leader":
            election = AsyncElection(
                self.redis(), field(request, "key"), READ_TTL, backend=self.backend
            )
            return leader_reply(await election.leader())
        if op == "observe":
            observer_name = field(request, "observer")
            election = AsyncElection(
                self.redis(), field(request, "key"), READ_TTL, backend=self.backend
            )
            observer = election.observe()
            await observer.start()

            async def watch() -> None:
                while True:
                    try:
                        found = await observer.__anext__()
                    except Exception:  # as a user's loop would: on from where it was
                        await asyncio.sleep(0.1)
                        continue
                    leader_event(observer_name, found)

            watching = asyncio.ensure_future(watch())
            self.observers.add(watching)
            return {}
        raise Failure("unsupported", f"no request {op!r}")

    async def fence_postgres(self, request: dict[str, Any]) -> dict[str, Any]:
        """One transaction on a connection of its own (psycopg 3, asyncio): the
        lock's fence, then the write."""
        held = self.holder(request)
        if not isinstance(held, AsyncLock):
            raise Failure("unsupported", "only an exclusive holding's token fences")
        import psycopg  # a test dependency, loaded by the actors that write there

        resource, value = field(request, "resource"), field(request, "value")
        conn = await psycopg.AsyncConnection.connect(postgres_url(self.postgres), autocommit=True)
        try:
            await asyncio.sleep(request.get("after_ms", 0) / 1000)
            async with conn.transaction(), conn.cursor() as cur:
                await held.fence_postgres(cur, resource)
                await cur.execute(WRITE_SQL, (resource, value))
        finally:
            await conn.close()
        return {"written": True}

    async def open(self, request: dict[str, Any]) -> dict[str, Any]:
        backend = request.get("backend", "auto")
        self.backend = None if backend == "auto" else backend
        self.postgres = request.get("postgres")
        if self.postgres is not None:
            # Loaded now, not inside the first fenced write's lease (a second under load).
            import psycopg  # noqa: F401
        auth: dict[str, Any] = {
            "username": request.get("username"),
            "password": request.get("password"),
        }
        if "cluster" in request:
            node: Any = redis.asyncio.cluster.ClusterNode
            nodes = [node(h, p) for h, p in seeds(request["cluster"])]
            self.client = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **auth)
        else:
            self.client = redis.asyncio.Redis.from_url(field(request, "url"), **auth)
        # The client probes on first use; a holder's probe is that first use.
        probe = AsyncLock(self.client, "conf:probe", backend=self.backend)
        found = await probe._probe()
        return {"backend": found.name}

    async def acquire(self, request: dict[str, Any]) -> dict[str, Any]:
        name = field(request, "lock")
        key = field(request, "key")
        ttl = field(request, "ttl_ms") / 1000
        options: dict[str, Any] = {"on_lost": lost_event(name), "raise_on_lost": False}
        kind = kind_of(request)
        if "owner" in request:
            options["owner"] = field(request, "owner")
        client = self.redis()
        held: AsyncHolder
        if kind == "exclusive":
            held = AsyncLock(client, key, ttl, backend=self.backend, **options)
        elif kind == "shared":
            held = AsyncReadWriteLock(client, key, ttl, backend=self.backend, **options).read()
        else:
            permits = field(request, "limit")
            held = AsyncSemaphore(client, key, permits, ttl, backend=self.backend, **options)
        wait = request.get("wait", "none")
        if wait == "none":
            acquired = await held.acquire(blocking=False)
        elif wait == "forever":
            acquired = await held.acquire()
        elif wait == "ms":
            acquired = await held.acquire(timeout=field(request, "wait_ms") / 1000)
        else:
            raise Failure("bad_request", f"wait {wait!r}")
        if not acquired:
            return {"acquired": False}
        self.locks[name] = held
        return {"acquired": True, "token": str(held.token), "owner": held.owner}

    async def answer(self, request_id: int, op: str, request: dict[str, Any]) -> None:
        try:
            task = asyncio.ensure_future(self.handle(op, request))
            if op in ("acquire", "campaign"):
                self.waits[request_id] = task
            try:
                ok = await task
            finally:
                self.waits.pop(request_id, None)
            write({"id": request_id, "ok": ok})
        except asyncio.CancelledError:
            write(
                {
                    "id": request_id,
                    "error": {"kind": "cancelled", "message": "the wait's task was cancelled"},
                }
            )
        except BaseException as error:
            reply_error(request_id, op, request, error)


def reply_error(request_id: int, op: str, request: dict[str, Any], error: BaseException) -> None:
    waiting = op == "campaign" or (op == "acquire" and request.get("wait", "none") != "none")
    failed = failure_of(error, waiting)
    write({"id": request_id, "error": {"kind": failed.kind, "message": str(failed)}})


class SyncAdapter:
    """The threaded API: a thread per request, as a user's threads would call it."""

    def __init__(self) -> None:
        self.client: redis.Redis | redis.cluster.RedisCluster | None = None
        self.backend: BackendName = None
        self.locks: dict[str, SyncHolder] = {}
        self.leaderships: dict[str, Leadership] = {}
        self.inspectors: dict[str, Lock] = {}
        self.guard = threading.Lock()
        self.postgres: str | None = None

    def redis(self) -> redis.Redis | redis.cluster.RedisCluster:
        if self.client is None:
            raise Failure("bad_request", "open first")
        return self.client

    def holder(self, request: dict[str, Any]) -> SyncHolder:
        name = field(request, "lock")
        with self.guard:
            held = self.locks.get(name)
        if held is None:
            raise Failure("bad_request", f"no lock named {name!r}")
        return held

    def answer(self, request_id: int, op: str, request: dict[str, Any]) -> None:
        try:
            write({"id": request_id, "ok": self.handle(op, request)})
        except BaseException as error:
            reply_error(request_id, op, request, error)

    def handle(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        if op == "open":
            return self.open(request)
        if op == "acquire":
            return self.acquire(request)
        if op == "release":
            return {"released": self.holder(request).release()}
        if op == "token":
            held = self.holder(request)
            lost = held.lost.is_set()
            reply: dict[str, Any] = {"token": str(held.token), "owner": held.owner, "lost": lost}
            if lost:
                reply["cause"] = "unknown"
            return reply
        if op == "await_lost":
            held = self.holder(request)
            if held.lost.wait(field(request, "timeout_ms") / 1000):
                return {"lost": True, "cause": "unknown"}
            return {"lost": False}
        if op == "check":
            held = self.holder(request)
            time.sleep(request.get("after_ms", 0) / 1000)
            # The check the docs show before a write under the lock.
            return {"held": not held.lost.is_set()}
        if op == "guard":
            held = self.holder(request)
            key, value = field(request, "key"), field(request, "value")
            time.sleep(request.get("after_ms", 0) / 1000)
            held.guard([key], "SET", key, value)
            return {"written": True}
        if op == "fence_postgres":
            return self.fence_postgres(request)
        if op == "info":
            key = field(request, "key")
            with self.guard:
                inspector = self.inspectors.get(key)
                if inspector is None:
                    inspector = Lock(self.redis(), key, backend=self.backend)
                    self.inspectors[key] = inspector
            return info_reply(inspector.info())
        if op == "campaign":
            name = field(request, "lock")
            election = Election(
                self.redis(),
                field(request, "key"),
                field(request, "ttl_ms") / 1000,
                backend=self.backend,
            )
            leadership = election.campaign(field(request, "value"), on_lost=lost_event(name))
            assert leadership is not None  # no timeout: answers when leading
            with self.guard:
                self.leaderships[name] = leadership
                self.locks[name] = leadership._lock
            return {
                "acquired": True,
                "token": str(leadership.term),
                "owner": leadership._lock.owner,
            }
        if op == "resign":
            name = field(request, "lock")
            with self.guard:
                leadership = self.leaderships.pop(name, None)
            if leadership is None:
                raise Failure("bad_request", f"no leadership {name!r}")
            return {"resigned": leadership.resign()}
        if op == "leader":
            election = Election(self.redis(), field(request, "key"), READ_TTL, backend=self.backend)
            return leader_reply(election.leader())
        if op == "observe":
            observer_name = field(request, "observer")
            election = Election(self.redis(), field(request, "key"), READ_TTL, backend=self.backend)
            observer = election.observe()
            observer.start()

            def watch() -> None:
                while True:
                    try:
                        found = next(observer)
                    except Exception:  # as a user's loop would: on from where it was
                        time.sleep(0.1)
                        continue
                    leader_event(observer_name, found)

            threading.Thread(target=watch, daemon=True).start()
            return {}
        raise Failure("unsupported", f"no request {op!r}")

    def fence_postgres(self, request: dict[str, Any]) -> dict[str, Any]:
        """One transaction on a connection of its own (psycopg2: the threaded API
        runs on the other driver): the lock's fence, then the write."""
        held = self.holder(request)
        if not isinstance(held, Lock):
            raise Failure("unsupported", "only an exclusive holding's token fences")
        import psycopg2  # a test dependency, loaded by the actors that write there

        resource, value = field(request, "resource"), field(request, "value")
        conn = psycopg2.connect(postgres_url(self.postgres))
        try:
            time.sleep(request.get("after_ms", 0) / 1000)
            with conn, conn.cursor() as cur:  # commits, or rolls back on an error
                held.fence_postgres(cur, resource)
                cur.execute(WRITE_SQL, (resource, value))
        finally:
            conn.close()
        return {"written": True}

    def open(self, request: dict[str, Any]) -> dict[str, Any]:
        backend = request.get("backend", "auto")
        self.backend = None if backend == "auto" else backend
        self.postgres = request.get("postgres")
        if self.postgres is not None:
            # Loaded now, not inside the first fenced write's lease (a second under load).
            import psycopg2  # noqa: F401
        auth: dict[str, Any] = {
            "username": request.get("username"),
            "password": request.get("password"),
        }
        if "cluster" in request:
            node: Any = redis.cluster.ClusterNode
            nodes = [node(h, p) for h, p in seeds(request["cluster"])]
            self.client = redis.cluster.RedisCluster(startup_nodes=nodes, **auth)
        else:
            self.client = redis.Redis.from_url(field(request, "url"), **auth)
        found = Lock(self.client, "conf:probe", backend=self.backend)._probe()
        return {"backend": found.name}

    def acquire(self, request: dict[str, Any]) -> dict[str, Any]:
        name = field(request, "lock")
        key = field(request, "key")
        ttl = field(request, "ttl_ms") / 1000
        options: dict[str, Any] = {"on_lost": lost_event(name), "raise_on_lost": False}
        kind = kind_of(request)
        if "owner" in request:
            options["owner"] = field(request, "owner")
        client = self.redis()
        held: SyncHolder
        if kind == "exclusive":
            held = Lock(client, key, ttl, backend=self.backend, **options)
        elif kind == "shared":
            held = ReadWriteLock(client, key, ttl, backend=self.backend, **options).read()
        else:
            permits = field(request, "limit")
            held = Semaphore(client, key, permits, ttl, backend=self.backend, **options)
        wait = request.get("wait", "none")
        if wait == "none":
            acquired = held.acquire(blocking=False)
        elif wait == "forever":
            acquired = held.acquire()
        elif wait == "ms":
            acquired = held.acquire(timeout=field(request, "wait_ms") / 1000)
        else:
            raise Failure("bad_request", f"wait {wait!r}")
        if not acquired:
            return {"acquired": False}
        with self.guard:
            self.locks[name] = held
        return {"acquired": True, "token": str(held.token), "owner": held.owner}


async def main() -> None:
    write(hello())
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    adapter = Adapter()
    threaded = SyncAdapter()
    running: set[asyncio.Task[None]] = set()
    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            request = json.loads(line)
        except ValueError as error:
            write({"id": 0, "error": {"kind": "bad_request", "message": str(error)}})
            continue
        request_id = int(request.get("id", 0))
        op = str(request.get("op", ""))
        if op == "close":
            write({"id": request_id, "ok": {}})
            break
        if SYNC:
            threading.Thread(
                target=threaded.answer, args=(request_id, op, request), daemon=True
            ).start()
            continue
        task = asyncio.ensure_future(adapter.answer(request_id, op, request))
        running.add(task)
        task.add_done_callback(running.discard)


if __name__ == "__main__":
    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    sys.stdout.flush()
    # Leave at once, as a process does: renewal tasks and connections end with it.
    os._exit(0)
