"""What a backend says on the wire, without doing any I/O.

Every operation is a *protocol*: a generator that yields :class:`Step` s (a command
to send and how long its reply may take) and is sent each reply back, until it
returns the operation's result. The threaded and the asyncio holders drive the same
generators (``_io.run_sync`` and ``_io.run_async``), so the two cannot drift apart,
and a backend whose wait is a conversation of several calls (the function library's
wait protocol) slots in beside the module's single blocking command.

Backends: the module here; the function library (``FCALL`` or ``EVALSHA``) in
``_library``; which one a server has is probed once per connection pool
(``_detect``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

Arg = Union[str, bytes, int, float]
Key = Union[str, bytes]


@dataclass(frozen=True)
class Step:
    """One command and how long its reply may take: at most ``read_limit`` seconds,
    when that is shorter than the connection's own bound (``None``: as long as the
    connection allows). A wait of several steps bounds each by what is left of it."""

    args: tuple[Arg, ...]
    read_limit: float | None = None


#: An operation: yields steps, is sent their replies, returns its result.
Protocol_ = Generator[Step, Any, Any]


@dataclass(frozen=True)
class Mode:
    """What kind of holding is asked for: exclusive, shared, or one of ``limit``
    permits."""

    shared: bool = False
    limit: int | None = None

    def args(self) -> tuple[Arg, ...]:
        if self.limit is not None:
            return ("LIMIT", self.limit)
        if self.shared:
            return ("SHARED",)
        return ()


EXCLUSIVE = Mode()
SHARED = Mode(shared=True)


class Backend(Protocol):
    """The operations a holder needs. ``wait_ms`` is ``None`` for a try that does
    not wait, 0 to wait without limit, else the longest wait in ms."""

    name: str

    def acquire(
        self, key: str, owner: str, ttl_ms: int, mode: Mode, wait_ms: int | None
    ) -> Generator[Step, Any, int | None]: ...

    def release(self, key: str, owner: str) -> Generator[Step, Any, bool]: ...

    def withdraw(self, key: str, owner: str) -> Generator[Step, Any, None]:
        """Ends whatever an acquire cut short may have left: a queue place, a grant
        not yet heard of by the caller."""
        ...

    def extend(self, key: str, owner: str, ttl_ms: int) -> Generator[Step, Any, bool]: ...

    def info(self, key: str) -> Generator[Step, Any, dict[str, Any] | None]: ...

    def guard(
        self, key: str, token: int, keys: Sequence[Key], command: Sequence[Arg]
    ) -> Generator[Step, Any, Any]:
        """Runs ``command`` while ``token`` holds ``key``: the command's reply, or a
        ``FENCED`` error. ``keys`` are those the command touches (the library
        declares them; the module finds them itself)."""
        ...


class ModuleBackend:
    """The redis-lock module: one native command per operation, waiting done in the
    server (``LOCK.ACQUIRE … WAIT ms``)."""

    name = "module"

    def acquire(
        self, key: str, owner: str, ttl_ms: int, mode: Mode, wait_ms: int | None
    ) -> Generator[Step, Any, int | None]:
        args: tuple[Arg, ...] = ("LOCK.ACQUIRE", key, owner, ttl_ms, *mode.args())
        if wait_ms is not None:
            args = (*args, "WAIT", wait_ms)
        reply = yield Step(args)
        return None if reply is None else int(reply)

    def release(self, key: str, owner: str) -> Generator[Step, Any, bool]:
        reply = yield Step(("LOCK.RELEASE", key, owner))
        return int(reply) == 1

    def withdraw(self, key: str, owner: str) -> Generator[Step, Any, None]:
        # A queued waiter left with its closed connection; a release ends a grant.
        yield from self.release(key, owner)

    def extend(self, key: str, owner: str, ttl_ms: int) -> Generator[Step, Any, bool]:
        reply = yield Step(("LOCK.EXTEND", key, owner, ttl_ms))
        return int(reply) == 1

    def info(self, key: str) -> Generator[Step, Any, dict[str, Any] | None]:
        reply = yield Step(("LOCK.INFO", key))
        return parse_info(reply)

    def guard(
        self, key: str, token: int, keys: Sequence[Key], command: Sequence[Arg]
    ) -> Generator[Step, Any, Any]:
        return (yield Step(("LOCK.GUARD", key, token, *command)))


def text(value: Any) -> Any:
    """Bytes as str, for replies read with or without ``decode_responses``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _pairs(reply: Any) -> dict[str, Any]:
    if isinstance(reply, dict):
        return {text(k): v for k, v in reply.items()}
    items = list(reply)
    return {text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}


def parse_info(reply: Any) -> dict[str, Any] | None:
    """``LOCK.INFO`` in RESP2 or RESP3 as ``{"mode", "waiters", "holders": [{"owner",
    "ttl" (seconds), "token", "limit" (with LIMIT)}], "queue": [{"owner", "mode",
    "limit" (with LIMIT), "waited" (seconds)}]}`` (the first 10 waiters,
    longest-waiting first); ``None`` when nothing is held."""
    if reply is None:
        return None
    fields = _pairs(reply)
    holders = []
    for entry in fields.get("holders") or []:
        holding = _pairs(entry)
        held: dict[str, Any] = {
            "owner": text(holding.get("owner")),
            "ttl": int(holding.get("ttl", 0)) / 1000,
            "token": int(holding.get("token", 0)),
        }
        if holding.get("limit") is not None:
            held["limit"] = int(holding["limit"])
        holders.append(held)
    queue = []
    for entry in fields.get("queue") or []:
        waiter = _pairs(entry)
        queued: dict[str, Any] = {
            "owner": text(waiter.get("owner")),
            "mode": text(waiter.get("mode")),
            "waited": int(waiter.get("waited", 0)) / 1000,
        }
        if waiter.get("limit") is not None:
            queued["limit"] = int(waiter["limit"])
        queue.append(queued)
    return {
        "mode": text(fields.get("mode")),
        "waiters": int(fields.get("waiters", 0)),
        "holders": holders,
        "queue": queue,
    }
