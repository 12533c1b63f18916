"""Which backend a server has, probed once per connection pool (and again after
the library was found gone): the module when ``COMMAND INFO LOCK.ACQUIRE`` names
its command, else the function library when ``FCALL_RO lock_version 0`` answers,
else the same library sent as a script (``SCRIPT LOAD``, then ``EVALSHA``). A
library of a version this client does not accept is refused, naming both."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, Literal, Optional

import redis.exceptions

from ._backend import Backend, ModuleBackend, Step
from ._errors import NoLockBackendError
from ._library import FunctionsBackend, ScriptsBackend, check_version

#: What ``backend=`` takes: one backend forced, or None to pick the first present.
BackendName = Optional[Literal["module", "functions", "scripts"]]

BACKENDS = ("module", "functions", "scripts")


def check_backend_name(name: object) -> BackendName:
    if name is not None and name not in BACKENDS:
        raise ValueError(f"backend must be 'module', 'functions', 'scripts' or None: {name!r}")
    return name  # type: ignore[return-value]


def detect(forced: BackendName = None) -> Generator[Step, Any, Backend]:
    """The server's backend (``forced``: that one or an error);
    :class:`NoLockBackendError` if it has none."""
    why: list[str] = []
    if forced in (None, "module"):
        reply: Any = None
        try:
            reply = yield Step(("COMMAND", "INFO", "LOCK.ACQUIRE"))
        except redis.exceptions.ResponseError as error:
            # A user whose ACL allows the library's calls only (NOPERM here) still
            # finds the library; a module's user is given COMMAND INFO (PROTOCOL.md).
            why.append(f"COMMAND INFO refused ({error})")
        else:
            if _names_a_command(reply):
                return ModuleBackend()
            why.append("no LOCK.ACQUIRE command")
    if forced in (None, "functions"):
        # lock_version itself, not FUNCTION LIST: a user whose ACL allows FCALL and
        # FCALL_RO only (as managed services give) may not list functions.
        version: Any = None
        try:
            version = yield Step(("FCALL_RO", "lock_version", 0))
        except redis.exceptions.ResponseError as error:  # not loaded, Redis 6.2, an ACL
            why.append(f"no redislock library ({error})")
        if version is not None:
            check_version(version)
            return FunctionsBackend()
    if forced in (None, "scripts"):
        scripts = ScriptsBackend()
        try:
            yield from scripts.load()
            version = yield from scripts.version()
        except redis.exceptions.ResponseError as error:  # an ACL without scripts
            why.append(f"scripts refused: {error}")
        else:
            check_version(version)
            return scripts
    raise NoLockBackendError("; ".join(why))


def _names_a_command(reply: Any) -> bool:
    if isinstance(reply, dict):  # redis-py's RESP3 parsing of COMMAND INFO
        return any(value for value in reply.values())
    return _non_empty(reply) and any(entry for entry in reply)


def _non_empty(reply: Any) -> bool:
    return isinstance(reply, Sequence) and not isinstance(reply, (str, bytes)) and len(reply) > 0
