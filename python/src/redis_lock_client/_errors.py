"""The exceptions of the package: each says what happened and what to do."""

from __future__ import annotations


class LockError(Exception):
    """Base of every error this package raises itself."""


class LockLostError(LockError):
    """The lock is lost, or not held: the holder must stop.

    Raised when a ``with`` block ends after its lock was lost (a renewal found it
    gone, expired or deleted, or no renewal was acknowledged before the lease's
    local deadline: another holder may have had it while the block ran; pass
    ``raise_on_lost=False`` to the lock to be told only through ``lock.lost``), and
    by a guarded write or a fence asked of a lock object that holds nothing (not
    acquired, or released: nothing is sent then). Work fenced with the lock's token
    is refused by the resource (:class:`FencedError`); anything else done after
    ``lock.lost`` was set must be checked.
    """

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(
            message
            or f"lock {key!r} was lost while the block ran (see lock.lost): another "
            "holder may have had it since; rely on its fencing token, not on the lock"
        )
        self.key = key


class FencedError(LockLostError):
    """A fenced write was refused, and nothing was written: in Redis, the lock's
    token no longer holds it (``LOCK.GUARD`` or ``lock_guard`` answered ``FENCED``:
    it lapsed, was released or deleted, or another holder has it); in PostgreSQL, a
    holder with a greater token has written to the resource (roll back).

    A lock object that gets it is lost at once (``lock.lost`` set, ``on_lost``
    called): a newer holder may exist, so the holder stops. A
    :class:`LockLostError`, so ``except LockLostError`` catches both.

    ``key`` is the lock's key (for a fence with a bare token, the resource),
    ``token`` the token refused, ``resource`` the PostgreSQL resource (None for a
    write in Redis).
    """

    def __init__(self, key: str, token: int, message: str, resource: str | None = None) -> None:
        super().__init__(key, message)
        self.token = token
        self.resource = resource


class NoLockBackendError(LockError):
    """The server has neither the lock module nor the lock function library, and
    refuses the library as a script (or the backend forced by ``backend=`` is not
    there)."""

    def __init__(self, detail: str = "") -> None:
        suffix = f" ({detail})" if detail else ""
        super().__init__(
            "the server has no lock backend: load the module (`MODULE LOAD "
            "/path/to/libredis_lock.so`, or `loadmodule` in redis.conf), or the function "
            "library (`redis-cli -x FUNCTION LOAD REPLACE < lua/redislock.lua`)"
            f"{suffix}"
        )


class LibraryVersionError(LockError):
    """The server's ``redislock`` library is a version this client does not accept:
    older than ``minimum`` (it may misread what this client's library writes) or
    newer than ``maximum`` (its format or replies may be unknown to this client); or
    one of an accepted version loaded before it had a call this client uses
    (``lacks``: ``lock_guard`` came within version 3)."""

    def __init__(self, found: int, minimum: int, maximum: int, lacks: str | None = None) -> None:
        accepted = (
            f"version {minimum}" if minimum == maximum else f"versions {minimum} to {maximum}"
        )
        if lacks is not None:
            advice = (
                f"loaded before it had {lacks}: load the library of this release "
                "(`redis-lock functions load`, or `redis-cli -x FUNCTION LOAD REPLACE < "
                "lua/redislock.lua` of this release)"
            )
        elif found < minimum:
            advice = (
                f"older than this client accepts ({accepted}): upgrade it with "
                "`redis-lock functions load` (or `redis-cli -x FUNCTION LOAD REPLACE < "
                "lua/redislock.lua` of this release)"
            )
        else:
            advice = (
                f"newer than this client accepts ({accepted}): upgrade this client to "
                f"one made for library version {found}"
            )
        super().__init__(f"the server's redislock library is version {found}, {advice}")
        self.found, self.minimum, self.maximum = found, minimum, maximum
        #: The call the library lacks (``"lock_guard"``), where that is the refusal.
        self.lacks = lacks


def backend_missing(error: Exception) -> NoLockBackendError | None:
    """The error to raise instead of ``error`` when it says the server does not know
    the lock's commands (the module was unloaded, or the library deleted by
    ``FUNCTION DELETE``/``FUNCTION FLUSH``, after the probe)."""
    said = str(error).lower()
    if said.startswith("unknown command") or said.startswith("function not found"):
        return NoLockBackendError(str(error))
    return None
