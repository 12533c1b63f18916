"""The ``redislock`` function library (lua/redislock.lua, docs/PROTOCOL.md) as a
backend, for servers without the module: called by ``FCALL`` where the library is
loaded, or by ``EVALSHA`` of the same file sent by this client (``SCRIPT LOAD``).

Waiting is the protocol of PROTOCOL.md, done by the client: ``lock_wait`` gives a
place in the server's FIFO queue (or the lock), then ``BLPOP`` on the waiter's own
grant list until the wake-up time it named, and again, until granted or the
wait's timeout, when ``lock_cancel`` withdraws the place.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Generator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import redis.exceptions

from ._backend import Arg, Key, Mode, Step, parse_info
from ._errors import LibraryVersionError
from ._protocol import CONTROL_LIMIT, WAIT_MARGIN

# Re-exported: the versions are read from here too.
from ._protocol import LIBRARY_VERSION as LIBRARY_VERSION
from ._protocol import MIN_LIBRARY_VERSION as MIN_LIBRARY_VERSION


def library_source() -> str:
    """The library as ``FUNCTION LOAD`` takes it: lua/redislock.lua, which the build
    puts into the package (hatch_build.py); in a source checkout (an editable
    install) the repository's own file."""
    packaged = resources.files(__package__).joinpath("redislock.lua")
    if packaged.is_file():
        return packaged.read_text("utf-8")
    return (Path(__file__).resolve().parents[3] / "lua" / "redislock.lua").read_text("utf-8")


def library_script() -> str:
    """The library as ``SCRIPT LOAD`` takes it: without its ``#!lua`` line, which
    Lua 5.1 cannot parse."""
    source = library_source()
    first, _, rest = source.partition("\n")
    return rest if first.startswith("#!") else source


def check_version(reply: Any) -> None:
    """Refuses a library outside ``MIN_LIBRARY_VERSION`` to ``LIBRARY_VERSION``."""
    found = int(reply)
    if not MIN_LIBRARY_VERSION <= found <= LIBRARY_VERSION:
        raise LibraryVersionError(found, MIN_LIBRARY_VERSION, LIBRARY_VERSION)


def _bound(deadline: float | None) -> float:
    """How long a call of a wait may take: until its deadline and the margin for
    the reply's way back, so a server that hangs mid-wait cannot stretch it. A wait
    without a deadline bounds each call as an acquire that does not wait: a dead
    path then ends the wait with an error, instead of hanging while its place lapses
    in the server."""
    if deadline is None:
        return CONTROL_LIMIT
    return max(deadline + WAIT_MARGIN - time.monotonic(), 0.01)


def _block_bound(block_ms: int) -> float:
    """How long a ``BLPOP`` of ``block_ms`` in a wait without a deadline may take:
    the server answers it when the block ends (at most a place's lease, 2 s), so
    its time and the margin for the reply's way back."""
    return block_ms / 1000 + WAIT_MARGIN


class _Library:
    """The operations on the library; subclasses say how a function is called."""

    name = "library"

    def call(
        self, function: str, keys: Sequence[Key], *args: Arg, bound: float | None = None
    ) -> Generator[Step, Any, Any]:
        """Calls library ``function``, each reply within ``bound`` seconds."""
        raise NotImplementedError
        yield

    def acquire(
        self, key: str, owner: str, ttl_ms: int, mode: Mode, wait_ms: int | None
    ) -> Generator[Step, Any, int | None]:
        if wait_ms is None:
            reply = yield from self.call("lock_acquire", (key,), owner, ttl_ms, *mode.args())
            return None if reply is None else int(reply)
        deadline = None if wait_ms == 0 else time.monotonic() + wait_ms / 1000
        while True:
            token, wake_ms, grants = yield from self.call(
                "lock_wait", (key,), owner, ttl_ms, *mode.args(), bound=_bound(deadline)
            )
            if int(token) > 0:
                return int(token)
            block = int(wake_ms)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    # Leaves the queue, and ends a grant pushed but not collected.
                    yield from self.call("lock_cancel", (key,), owner, bound=_bound(deadline))
                    return None
                block = min(block, math.ceil(left * 1000))
            # Whatever BLPOP returns (a token, a wake-up, nothing), lock_wait says
            # whether the owner holds: the popped value is not trusted alone.
            # At least 2 ms: Redis 6.2 turns `BLPOP list 0.001` into 0, which blocks
            # without limit (it multiplies the seconds by 1000 in floating point).
            block = max(block, 2)
            bound = _block_bound(block) if deadline is None else _bound(deadline)
            yield Step(("BLPOP", grants, f"{block / 1000:.3f}"), bound)

    def release(self, key: str, owner: str) -> Generator[Step, Any, bool]:
        reply = yield from self.call("lock_release", (key,), owner)
        return int(reply) == 1

    def withdraw(self, key: str, owner: str) -> Generator[Step, Any, None]:
        # The place (or a grant not collected), then a grant already collected.
        yield from self.call("lock_cancel", (key,), owner)
        yield from self.call("lock_release", (key,), owner)

    def extend(self, key: str, owner: str, ttl_ms: int) -> Generator[Step, Any, bool]:
        reply = yield from self.call("lock_extend", (key,), owner, ttl_ms)
        return int(reply) == 1

    def info(self, key: str) -> Generator[Step, Any, dict[str, Any] | None]:
        reply = yield from self.call("lock_info", (key,))
        return parse_info(reply)

    def guard(
        self, key: str, token: int, keys: Sequence[Key], command: Sequence[Arg]
    ) -> Generator[Step, Any, Any]:
        return (yield from self.call("lock_guard", (key, *keys), token, *command))

    def version(self) -> Generator[Step, Any, int]:
        reply = yield from self.call("lock_version", ())
        return int(reply)


class FunctionsBackend(_Library):
    """The library loaded with ``FUNCTION LOAD`` (Redis 7.0+, Valkey): ``FCALL``.

    A call that finds the library gone (``ERR Function not found``: a restart
    without persistence, ``FUNCTION FLUSH`` or ``DELETE``) is made again through the
    scripts path, the same library sent as a script, which answers for what the
    server holds now: a renewal of a holding lost with the restart learns so at once
    (0), rather than retrying until its lease runs out while a rival is granted. The
    backend is then marked :attr:`library_missing`, so new holders probe again."""

    name = "functions"

    def __init__(self) -> None:
        self.library_missing = False
        self._scripts: ScriptsBackend | None = None

    def call(
        self, function: str, keys: Sequence[Key], *args: Arg, bound: float | None = None
    ) -> Generator[Step, Any, Any]:
        command = "FCALL_RO" if function in ("lock_info", "lock_version") else "FCALL"
        try:
            return (yield Step((command, function, len(keys), *keys, *args), bound))
        except redis.exceptions.ResponseError as error:
            if is_wrongtype(error) and function != "lock_version":
                yield from self.refuse_changed_library(error, bound)
            if not function_missing(error):
                raise
            if function != "lock_version":
                yield from self.refuse_library_without(function, error, bound)
        self.library_missing = True
        if self._scripts is None:
            self._scripts = ScriptsBackend()
        return (yield from self._scripts.call(function, keys, *args, bound=bound))

    def refuse_changed_library(
        self, error: Exception, bound: float | None
    ) -> Generator[Step, Any, None]:
        """After ``WRONGTYPE``: a library replaced under this client (an older one
        that cannot read what this one stored, or a newer one) is named by its
        version (docs/PROTOCOL.md, "Versions"), not taken for a key of another
        type. Returns when the version is one this client accepts (the key is of
        another type), and raises the original error when the version cannot be
        asked."""
        # Bounded even where the call was not (a wait): a dead server must not hold
        # the error up.
        limit = CONTROL_LIMIT if bound is None else min(bound, CONTROL_LIMIT)
        try:
            found = int((yield Step(("FCALL_RO", "lock_version", 0), limit)))
        except (redis.exceptions.ResponseError, ValueError, TypeError):
            raise error from None
        check_version(found)

    def refuse_library_without(
        self, function: str, error: Exception, bound: float | None
    ) -> Generator[Step, Any, None]:
        """After ``ERR Function not found``: a library that answers ``lock_version``
        is loaded but lacks ``function`` (loaded before it existed: ``lock_guard``
        came within version 3), which the client names, rather than taking the
        library for gone. Returns when the library is gone (``lock_version`` is not
        found either)."""
        limit = CONTROL_LIMIT if bound is None else min(bound, CONTROL_LIMIT)
        try:
            found = int((yield Step(("FCALL_RO", "lock_version", 0), limit)))
        except (redis.exceptions.ResponseError, ValueError, TypeError):
            return
        raise LibraryVersionError(
            found, MIN_LIBRARY_VERSION, LIBRARY_VERSION, lacks=function
        ) from error


def is_wrongtype(error: Exception) -> bool:
    """``WRONGTYPE …``: the key holds what the called function cannot read."""
    return str(error).startswith("WRONGTYPE")


def function_missing(error: Exception) -> bool:
    """``ERR Function not found``: the library is not (or no longer) loaded."""
    return str(error).lower().startswith("function not found")


class ScriptsBackend(_Library):
    """The library sent by this client as a script (Redis 6.2, or an ACL without
    ``FUNCTION``): ``EVALSHA sha 1 key function args…``, loaded again on
    ``NOSCRIPT`` (a restart, ``SCRIPT FLUSH``, a failover), which means the call
    did not run. The script is the one the client carries (the SHA is its text's),
    so it has every call the client makes: no ``unknown function`` comes back."""

    name = "scripts"

    def __init__(self) -> None:
        self.script = library_script()
        self.sha = hashlib.sha1(self.script.encode("utf-8")).hexdigest()

    def call(
        self, function: str, keys: Sequence[Key], *args: Arg, bound: float | None = None
    ) -> Generator[Step, Any, Any]:
        step = Step(("EVALSHA", self.sha, len(keys), *keys, function, *args), bound)
        try:
            return (yield step)
        except redis.exceptions.NoScriptError:
            pass
        yield from self.load(bound)
        return (yield step)

    def load(self, bound: float | None = None) -> Generator[Step, Any, None]:
        yield Step(("SCRIPT", "LOAD", self.script), bound)
