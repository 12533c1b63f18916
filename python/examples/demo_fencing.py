"""``make demo-fencing``: the seeds' scenario, a worker stopped past its TTL while
another takes over, run three ways side by side on real servers started here (a
redis-server with the module, a PostgreSQL from tests/postgres/start).

Each round: a worker process takes the lock, checks that it still holds it (each
way's own check), and is stopped (SIGSTOP) right before its writes, as a GC pause, a
swap storm or a suspended VM stops it. The lock lapses; a rival takes it and writes.
The worker is continued (SIGCONT) and makes its writes, one to Redis and one to
PostgreSQL. What landed is read from the stores themselves.

1. The usual recipe: ``SET key owner NX PX ttl``, a ``GET`` to check, an
   owner-checked release (compare and ``DEL`` in Lua).
2. redis-py's ``Lock`` (``redis.lock.Lock``): ``owned()`` to check.
3. redis-lock: ``lock.lost.is_set()`` to check, ``lock.guard`` for the write to
   Redis, ``lock.fence_postgres`` in the PostgreSQL transaction.

    target/venv/bin/python python/examples/demo_fencing.py [--rounds 3] [--ttl 0.5]

Exits 0 when redis-lock refused every stale write and the other two let theirs land
(what the demo shows), 1 otherwise, saying what differed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_lock_client import FencedError, Lock, postgres

ROOT = Path(__file__).resolve().parents[2]

UPSERT = (
    "INSERT INTO demo_reports (resource, body) VALUES (%s, %s) "
    "ON CONFLICT (resource) DO UPDATE SET body = EXCLUDED.body"
)

#: The owner-checked release of the usual recipe.
RELEASE_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

PgConnection = psycopg.Connection[tuple[Any, ...]]


def client_for(port: int) -> redis.Redis:
    """A client whose calls are sent once: the demo stops processes on purpose, and
    a retried write would blur what landed."""
    return redis.Redis(port=port, retry=Retry(NoBackoff(), 0), socket_timeout=10)


class Way(Protocol):
    """One way of holding a lock and writing under it."""

    def acquire(self, timeout: float) -> bool: ...

    def still_held(self) -> bool:
        """The check the way's users make before they write."""
        ...

    def write_redis(self, out: str, value: str) -> None: ...

    def write_postgres(self, conn: PgConnection, resource: str, value: str) -> None: ...

    def release(self) -> None: ...


class Recipe:
    """``SET key owner NX PX ttl``, retried until granted; ``GET`` to check; the
    owner-checked ``DEL`` to release."""

    title = "SET NX PX + owner-checked release"

    def __init__(self, client: redis.Redis, key: str, ttl: float) -> None:
        self.client, self.key, self.ttl = client, key, ttl
        self.owner = uuid.uuid4().hex

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.client.set(self.key, self.owner, nx=True, px=round(self.ttl * 1000)):
                return True
            time.sleep(0.01)
        return False

    def still_held(self) -> bool:
        return self.client.get(self.key) == self.owner.encode()

    def write_redis(self, out: str, value: str) -> None:
        self.client.set(out, value)

    def write_postgres(self, conn: PgConnection, resource: str, value: str) -> None:
        with conn.transaction():
            conn.execute(UPSERT, (resource, value))

    def release(self) -> None:
        self.client.eval(RELEASE_IF_OWNER, 1, self.key, self.owner)


class RedisPyLock:
    """redis-py's own ``Lock`` (``client.lock(key, timeout=ttl)``), ``owned()`` to
    check."""

    title = "redis-py Lock (redis.lock.Lock)"

    def __init__(self, client: redis.Redis, key: str, ttl: float) -> None:
        self.client = client
        self.lock = client.lock(key, timeout=ttl)

    def acquire(self, timeout: float) -> bool:
        return bool(self.lock.acquire(blocking=True, blocking_timeout=timeout))

    def still_held(self) -> bool:
        return bool(self.lock.owned())

    def write_redis(self, out: str, value: str) -> None:
        self.client.set(out, value)

    def write_postgres(self, conn: PgConnection, resource: str, value: str) -> None:
        with conn.transaction():
            conn.execute(UPSERT, (resource, value))

    def release(self) -> None:
        # Not its lock any more (LockNotOwnedError): the owner check worked, too late.
        with contextlib.suppress(redis.exceptions.LockError):
            self.lock.release()


class RedisLock:
    """redis-lock's ``Lock``: ``lock.lost.is_set()`` to check, the write to Redis
    through ``lock.guard``, the PostgreSQL transaction fenced by
    ``lock.fence_postgres``."""

    title = "redis-lock guard + PostgreSQL fence"

    def __init__(self, client: redis.Redis, key: str, ttl: float) -> None:
        self.lock = Lock(client, key, ttl, raise_on_lost=False)

    def acquire(self, timeout: float) -> bool:
        return self.lock.acquire(timeout=timeout)

    def still_held(self) -> bool:
        return not self.lock.lost.is_set()

    def write_redis(self, out: str, value: str) -> None:
        self.lock.guard([out], "SET", out, value)

    def write_postgres(self, conn: PgConnection, resource: str, value: str) -> None:
        with conn.transaction(), conn.cursor() as cur:
            self.lock.fence_postgres(cur, resource)
            cur.execute(UPSERT, (resource, value))

    def release(self) -> None:
        self.lock.release()


WAYS: dict[str, type[Recipe] | type[RedisPyLock] | type[RedisLock]] = {
    "recipe": Recipe,
    "redis-py": RedisPyLock,
    "redis-lock": RedisLock,
}


def keys_of(way: str) -> tuple[str, str, str]:
    """The lock's key, the Redis key written under it (in the lock's hash slot), and
    the PostgreSQL row's resource."""
    return f"{{demo:{way}}}", f"{{demo:{way}}}:out", f"demo:{way}"


STORES = {"redis": "Redis", "postgres": "PostgreSQL"}


# -- the worker: a process of its own, so that it can be stopped ----------------------


def say(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def work(way: str, port: int, url: str, ttl: float) -> None:
    """A worker's rounds, driven by lines on stdin: ``round N`` takes the lock and
    checks it; ``write`` (sent while the worker is stopped) makes the writes."""
    # The loss the client logs on waking is what the demo shows: the table says it.
    logging.getLogger("redis_lock_client").setLevel(logging.ERROR)
    client = client_for(port)
    key, out, resource = keys_of(way)
    with psycopg.connect(url, autocommit=True) as conn:
        for line in sys.stdin:
            round_ = line.split()[1]
            holder = WAYS[way](client, key, ttl)
            if not holder.acquire(timeout=10):
                say({"error": "not granted in 10 s"})
                return
            say({"checked": holder.still_held()})
            # Stopped here by the parent, after the check, before the writes.
            sys.stdin.readline()
            stale = f"stale write of round {round_}"
            said = {
                "redis": attempt(holder.write_redis, out, stale),
                "postgres": attempt(holder.write_postgres, conn, resource, stale),
            }
            holder.release()
            say({"done": said})


def attempt(write: Callable[..., None], *args: Any) -> str:
    """``written``, or ``refused: `` and the store's own words (Redis's ``FENCED``
    reply, the PostgreSQL fence's refusal)."""
    try:
        write(*args)
    except FencedError as refused:
        return f"refused: {refused.__cause__ or refused}"
    return "written"


# -- the servers ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def module_path() -> Path:
    named = os.environ.get("REDIS_LOCK_MODULE")
    path = Path(named) if named else ROOT / "target" / "debug" / "libredis_lock.so"
    if not path.exists():
        raise SystemExit(f"no module at {path}: run `cargo build --lib -p redis-lock` first")
    return path


@contextmanager
def redis_server(directory: Path) -> Iterator[int]:
    """A redis-server with the module, on a free port, killed at the end."""
    binary = os.environ.get("REDIS_SERVER", "redis-server")
    for _ in range(5):
        port = free_port()
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", str(directory), "--loadmodule", str(module_path())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    client_for(port).ping()
                except redis.exceptions.ConnectionError:
                    time.sleep(0.02)
                    continue
                yield port
                return
        finally:
            process.kill()
            process.wait()
    raise SystemExit("redis-server did not start")


@contextmanager
def postgres_server(directory: Path) -> Iterator[str]:
    """A PostgreSQL of the demo's own (tests/postgres/start), with the fence table
    and the demo's table."""
    started = subprocess.run(
        [str(ROOT / "tests" / "postgres" / "start"), str(directory)],
        capture_output=True,
        text=True,
    )
    if started.returncode != 0:
        raise SystemExit(f"PostgreSQL did not start: {started.stderr.strip()}")
    url = started.stdout.strip()
    try:
        with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
            postgres.create_table(cur)
            cur.execute("CREATE TABLE demo_reports (resource text PRIMARY KEY, body text)")
        yield url
    finally:
        subprocess.run(
            [str(ROOT / "tests" / "postgres" / "stop"), str(directory)], capture_output=True
        )


# -- the rounds -----------------------------------------------------------------------


@dataclass
class Outcome:
    """What one way's rounds did to the stores."""

    title: str
    writes: int = 0
    landed: int = 0
    refused: int = 0
    messages: list[str] = field(default_factory=list)


class Worker:
    def __init__(self, way: str, port: int, url: str, ttl: float) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", way]
        command += ["--port", str(port), "--postgres", url, "--ttl", str(ttl)]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self.selector.register(self.process.stdout, selectors.EVENT_READ)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def expect(self, what: str, timeout: float = 20.0) -> Any:
        assert self.process.stdout is not None
        if not self.selector.select(timeout):
            raise SystemExit(f"the worker said nothing in {timeout} s (waiting for {what})")
        line = self.process.stdout.readline()
        said = json.loads(line) if line else {"error": "the worker ended"}
        if what not in said:
            raise SystemExit(f"the worker said {said}, not {what}")
        return said[what]

    def stop(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        self.resume()
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def run_way(way: str, port: int, url: str, rounds: int, ttl: float) -> Outcome:
    """``rounds`` rounds of one way; what landed is read from Redis and PostgreSQL."""
    key, out, resource = keys_of(way)
    client = client_for(port)
    outcome = Outcome(WAYS[way].title)
    worker = Worker(way, port, url, ttl)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for n in range(1, rounds + 1):
                worker.send(f"round {n}")
                if not worker.expect("checked"):
                    raise SystemExit(f"{way}: the worker's check failed before the pause")
                worker.stop()  # between its check and its writes
                rival = WAYS[way](client, key, 30.0)
                if not rival.acquire(timeout=max(10.0, ttl * 10)):
                    raise SystemExit(f"{way}: the rival was not granted the lock")
                rival.write_redis(out, f"rival of round {n}")
                rival.write_postgres(conn, resource, f"rival of round {n}")
                worker.send("write")
                worker.resume()
                said = worker.expect("done")
                stale = f"stale write of round {n}"
                row = conn.execute(
                    "SELECT body FROM demo_reports WHERE resource = %s", (resource,)
                ).fetchone()
                for store, now in (("redis", client.get(out)), ("postgres", row and row[0])):
                    outcome.writes += 1
                    if now in (stale, stale.encode()):
                        outcome.landed += 1
                    if said[store].startswith("refused"):
                        outcome.refused += 1
                        if n == 1:
                            words = said[store].removeprefix("refused: ")
                            outcome.messages.append(f"{STORES[store]}: {words}")
                rival.release()
    finally:
        worker.close()
    return outcome


def versions(port: int, url: str) -> str:
    info: Any = client_for(port).info("server")
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    postgres_version = str(row[0]).split()[0] if row else "?"
    return f"redis-server {info['redis_version']} with the module, PostgreSQL {postgres_version}"


def run(rounds: int, ttl: float) -> tuple[str, list[Outcome]]:
    """Starts the servers, runs every way, stops the servers: what ran, and what
    each way let land."""
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="redis-lock-demo-")))
        port = stack.enter_context(redis_server(scratch))
        url = stack.enter_context(postgres_server(scratch / "pg"))
        return versions(port, url), [run_way(way, port, url, rounds, ttl) for way in WAYS]


def table(outcomes: list[Outcome]) -> str:
    rows = [("way", "stale writes that landed", "refused")]
    rows += [(o.title, f"{o.landed} of {o.writes}", str(o.refused)) for o in outcomes]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=0.5, help="the lock's TTL, seconds")
    parser.add_argument("--worker", choices=list(WAYS), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--postgres", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        work(options.worker, options.port, options.postgres, options.ttl)
        return 0
    print(
        f"A worker takes the lock (TTL {options.ttl:g} s), checks that it holds it, and is\n"
        "stopped (SIGSTOP) before its writes; the lock lapses, a rival takes it and writes;\n"
        "the worker is continued (SIGCONT) and writes to Redis and to PostgreSQL.",
        flush=True,
    )
    servers, outcomes = run(options.rounds, options.ttl)
    print(f"{options.rounds} rounds each way; {servers}.\n")
    print(table(outcomes))
    ours = outcomes[-1]
    if ours.messages:
        print("\nredis-lock's refusals, first round:")
    for message in ours.messages:
        print(f"  {message}")
    wrong = [o.title for o in outcomes[:-1] if o.landed != o.writes]
    if ours.landed or ours.refused != ours.writes:
        print(f"\nFAILED: {ours.title} let {ours.landed} stale writes land")
        return 1
    if wrong:
        print(f"\nthe pause did not reproduce for: {', '.join(wrong)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
