"""What the threaded and the asyncio holders share: argument checks, bounds, and
the state of one holding."""

from __future__ import annotations

import math
import os
import socket
import uuid

import redis.exceptions

from ._lease import margin, millis
from ._protocol import CONTROL_LIMIT, RELEASE_LIMIT, WAIT_MARGIN, WITHDRAW_AFTER_TIMEOUT

__all__ = ["CONTROL_LIMIT", "RELEASE_LIMIT", "WAIT_MARGIN"]


def withdraw_limit(error: BaseException) -> float:
    """How long the withdrawal of an acquire cut short by ``error`` may take: a hung
    server (a timeout) must not stretch a wait much beyond its timeout and margin,
    so the withdrawal is only sent; after anything else it may take a release's
    time. The holding's TTL ends a grant that could not be withdrawn."""
    if isinstance(error, (redis.exceptions.TimeoutError, TimeoutError)):
        return WITHDRAW_AFTER_TIMEOUT
    return RELEASE_LIMIT


def unanswered(
    key: str, error: BaseException, wait_ms: int | None, read_limit: float | None
) -> BaseException:
    """What an acquire cut short by ``error`` raises: a wait the server left
    unanswered past its timeout and the margin says so (a hung server, a cut
    network), still as redis-py's ``TimeoutError``; anything else as it came."""
    if wait_ms is None:
        return error
    if not isinstance(error, (redis.exceptions.TimeoutError, TimeoutError)):
        return error
    if wait_ms == 0 or read_limit is None:
        return redis.exceptions.TimeoutError(
            f"lock {key!r}: a call of the wait (each has a bound: its place's renewal in "
            f"the server's queue, its blocking pop) got no answer in time ({error}): the "
            "server or the network hangs"
        )
    return redis.exceptions.TimeoutError(
        f"lock {key!r}: the server did not answer the wait within {read_limit:.3f} s "
        f"(its timeout and a {WAIT_MARGIN} s margin): the server or the network hangs"
    )


def new_owner() -> str:
    """A fresh owner id per acquire, that says who holds: ``host:pid:`` and 16 random
    hex digits (``web-3:4121:9f0c2a...``), so ``LOCK.INFO`` and ``redis-lock info``
    name the machine and process. Still unique: a withdrawn or lost holding can
    never be taken for a later one. The host name is cut at 64 characters."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


def check_owner(owner: str | None) -> str | None:
    """A caller-given owner id (``owner=``): a non-empty ``str``; ``None`` gives each
    acquire a fresh one (:func:`new_owner`)."""
    if owner is None:
        return None
    if not isinstance(owner, str):
        raise TypeError(f"owner must be a str, not {type(owner).__name__}")
    if not owner:
        raise ValueError("owner must not be empty")
    return owner


def check_ttl(ttl: float) -> int:
    return millis(ttl, "ttl")


def wait_of(blocking: bool, timeout: float | None) -> tuple[int | None, float | None]:
    """``(wait_ms, read_limit)`` for ``acquire(blocking, timeout)``, as
    ``threading.Lock.acquire`` takes them: ``timeout`` None or -1 waits without
    limit, 0 tries once."""
    if not blocking:
        if timeout is not None and timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking acquire")
        return None, CONTROL_LIMIT
    if timeout is None or timeout == -1:
        return 0, None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be -1, None or a non-negative number: {timeout!r}")
    if timeout == 0:
        return None, CONTROL_LIMIT
    wait_ms = millis(timeout, "timeout")
    return wait_ms, timeout + WAIT_MARGIN


def granted_after_wait(sent: float, now: float, ttl: float) -> bool:
    """The server counts a granted wait's TTL from the grant, the lease from the send:
    an extend right after brings the lease up to date when the wait took long."""
    return now - sent > margin(ttl)


def check_permits(permits: int) -> int:
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise TypeError(f"permits must be an int, not {type(permits).__name__}")
    if not 1 <= permits <= 1 << 31:
        raise ValueError(f"permits must be between 1 and 2^31: {permits}")
    return permits
