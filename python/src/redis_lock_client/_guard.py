"""Fenced writes in Redis (docs/contract.md, "Fenced writes"): a held lock's command,
run by the server only while the lock's token holds it, checked and run in one step
(``LOCK.GUARD key token command …`` on the module, ``lock_guard`` on the library,
with the command's keys declared). What the threaded and the asyncio holders share:
the checks before anything is sent, the protocol, and what a refusal means.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

import redis.exceptions

from ._backend import Arg, Backend, Key, Step
from ._errors import FencedError, LockLostError
from ._held import Holding

#: What a guarded command's arguments may be: what redis-py sends (``bool`` is not:
#: redis-py refuses it too).
ARG_TYPES = (str, bytes, int, float)


def check_command(
    keys: Iterable[Key], command: tuple[Any, ...]
) -> tuple[tuple[Key, ...], tuple[Arg, ...]]:
    """``keys`` and ``command`` as sent, or ``TypeError``/``ValueError`` saying what
    the caller gave, before anything is sent."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(
            "keys must be a list of the keys the command touches, not one string: "
            'lock.guard(["{job:1}:out"], "SET", "{job:1}:out", value)'
        )
    try:
        declared = tuple(keys)
    except TypeError:
        raise TypeError(
            f"keys must be a list of the keys the command touches, not {type(keys).__name__}"
        ) from None
    for key in declared:
        if not isinstance(key, (str, bytes)):
            raise TypeError(f"each key must be a str or bytes, not {type(key).__name__}")
    if not command:
        raise ValueError(
            'a guarded write needs a command: lock.guard(["{job:1}:out"], "SET", '
            '"{job:1}:out", value)'
        )
    if not isinstance(command[0], (str, bytes)) or not command[0]:
        raise TypeError(f"the command's name must be a non-empty str, not {command[0]!r}")
    for arg in command:
        if isinstance(arg, bool) or not isinstance(arg, ARG_TYPES):
            raise TypeError(
                "a guarded command's arguments must be str, bytes, int or float, "
                f"not {type(arg).__name__}"
            )
    return declared, command


def holding_of(key: str, holding: Holding | None, what: str) -> Holding:
    """The holding a fenced write of this lock object is made with: its current one,
    also when the client already found it lost (the server or the database, not the
    client's lease, decides whether the token still fences: a refusal there raises
    :class:`FencedError`). ``LockLostError`` when the object holds nothing (not
    acquired, released, in a forked child): nothing is sent then."""
    if holding is None or holding.token is None:
        raise LockLostError(
            key,
            f"lock {key!r} is not held by this lock object (not acquired, or released): "
            f"{what} was not sent",
        )
    return holding


def guarded(
    backend: Backend, holding: Holding, keys: tuple[Key, ...], command: tuple[Arg, ...]
) -> Generator[Step, Any, Any]:
    """The guarded command's reply, as redis-py reads it (without the reply callbacks
    of the command's own method: ``SET`` gives ``b"OK"``); its own error reply as
    ``redis.ResponseError``. ``FENCED``: the holding is lost at once, for every lock
    object that shares it, and :class:`FencedError` is raised."""
    token = holding.token
    assert token is not None  # holding_of() checked it
    try:
        return (yield from backend.guard(holding.key, token, keys, command))
    except redis.exceptions.ResponseError as refusal:
        said = str(refusal)
        if said.startswith("FENCED"):
            holding.lose(f"a guarded write was refused: {said}")
            raise FencedError(
                holding.key,
                token,
                f"lock {holding.key!r}: the guarded write was refused and did not run "
                f"({said}): the lock is lost, a newer holder may have it; stop",
            ) from refusal
        # redis-py reads ``CROSSSLOT …`` as ClusterCrossSlotError, without the code.
        if isinstance(refusal, redis.exceptions.ClusterCrossSlotError):
            raise redis.exceptions.ClusterCrossSlotError(
                f"{said} (lock {holding.key!r}: the keys of a guarded write must be in the "
                f"hash slot of the lock's key; give them its hash tag, as in "
                f"{same_slot_example(holding.key)})"
            ) from refusal
        if said.lower().startswith("unknown command 'lock.guard'"):
            raise redis.exceptions.ResponseError(
                f"{said} (the server's redis-lock module has no LOCK.GUARD: load the module "
                "of this release; fenced writes came with version 4 of its commands)"
            ) from refusal
        raise


def same_slot_example(key: str) -> str:
    """A data key in the hash slot of lock ``key``: with its hash tag, or the key
    itself as the tag."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return f"{key[start : end + 1]}:out beside the lock {key}"
    if "{" in key or "}" in key:
        return "{job:1}:out beside a lock {job:1}"
    return f"{{{key}}}:out beside the lock {key}"


def unanswered_guard(key: str, error: BaseException) -> BaseException:
    """What a guarded write cut short by ``error`` raises: a lost connection or a
    timeout says that the command may have run (it is not sent again); anything
    else as it came."""
    for kind in (redis.exceptions.TimeoutError, redis.exceptions.ConnectionError):
        if isinstance(error, kind):
            return kind(
                f"lock {key!r}: the guarded write got no answer ({error}): it may have run; "
                "it was not sent again"
            )
    return error
