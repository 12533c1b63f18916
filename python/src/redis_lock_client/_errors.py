"""The exceptions of the package: each says what happened and what to do."""

from __future__ import annotations


class LockError(Exception):
    """Base of every error this package raises itself."""


class LockLostError(LockError):
    """A ``with`` block ended after its lock was lost.

    The lock was found gone by a renewal (expired, deleted) or no renewal was
    acknowledged before the lease's local deadline: another holder may have had it
    while the block ran. Work stamped with ``lock.token`` is refused by a fenced
    resource; anything else the block did after ``lock.lost`` was set must be checked.
    Pass ``raise_on_lost=False`` to the lock to be told only through ``lock.lost``.
    """

    def __init__(self, key: str) -> None:
        super().__init__(
            f"lock {key!r} was lost while the block ran (see lock.lost): another "
            "holder may have had it since; rely on its fencing token, not on the lock"
        )
        self.key = key


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
    newer than ``maximum`` (its format or replies may be unknown to this client)."""

    def __init__(self, found: int, minimum: int, maximum: int) -> None:
        accepted = (
            f"version {minimum}" if minimum == maximum else f"versions {minimum} to {maximum}"
        )
        if found < minimum:
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


def backend_missing(error: Exception) -> NoLockBackendError | None:
    """The error to raise instead of ``error`` when it says the server does not know
    the lock's commands (the module was unloaded, or the library deleted by
    ``FUNCTION DELETE``/``FUNCTION FLUSH``, after the probe)."""
    said = str(error).lower()
    if said.startswith("unknown command") or said.startswith("function not found"):
        return NoLockBackendError(str(error))
    return None
