"""Leader election's record, written once for the threaded and the asyncio API
(docs/contract.md "Leaders"): the election is the exclusive lock at its key; the leader's value
lives in a stream beside it, in its hash slot, written only with the guard. One
entry per change: ``<term>-0`` when the term's leader takes office (field
``value``), ``<term>-1`` when it resigns. Ids grow with the terms, so an observer
that reads after the last id it saw gets every leader once, in term order, from a
blocking ``XREAD``. The protocols here yield :class:`Step` s as ``_backend`` does."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple

from ._backend import Backend, Step, text

#: Appended to a key with a hash tag; a key without one is wrapped as the tag.
RECORD_SUFFIX = ":leader"
#: Entries the record keeps (``XADD … MAXLEN = 16``).
RECORD_ENTRIES = 16
#: The longest value a leader may publish, in bytes.
MAX_VALUE_LEN = 1024
#: How long one observer read blocks, in milliseconds: one call a second at most
#: while nothing changes.
OBSERVE_BLOCK_MS = 1000
#: The bound on one observer read's reply, in seconds.
OBSERVE_READ_LIMIT = OBSERVE_BLOCK_MS / 1000 + 2.0


class Leader(NamedTuple):
    """The leader of an election: its term (the fencing token of its holding: terms
    only grow) and the value it published."""

    term: int
    value: bytes


def hash_tag(key: bytes) -> bytes | None:
    """The hash tag of ``key`` as Redis Cluster reads it."""
    start = key.find(b"{")
    if start < 0:
        return None
    end = key.find(b"}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def record_key(key: str) -> str:
    """The stream of the election at ``key``, in ``key``'s slot."""
    if hash_tag(key.encode()) is not None:
        return key + RECORD_SUFFIX
    if "}" in key:
        raise ValueError(
            f"invalid election key {key!r}: without a hash tag it may not contain '}}' "
            "(give it a tag, e.g. {jobs}:leader-lock)"
        )
    return "{" + key + "}" + RECORD_SUFFIX


def check_value(value: str | bytes) -> bytes:
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if len(raw) > MAX_VALUE_LEN:
        raise ValueError(f"invalid value: {len(raw)} bytes, at most {MAX_VALUE_LEN}")
    return raw


def entry(entry_id: Any) -> tuple[str, int]:
    """``("leader", term)``, ``("resigned", term)`` or ``("other", 0)``."""
    term, _, seq = str(text(entry_id)).partition("-")
    if not term.isdigit() or int(term) <= 0:
        return ("other", 0)
    if seq == "0":
        return ("leader", int(term))
    if seq == "1":
        return ("resigned", int(term))
    return ("other", 0)


def publish(record: str, term: int, value: bytes) -> tuple[Any, ...]:
    """The guarded command by which the leader of ``term`` takes office."""
    return ("XADD", record, "MAXLEN", "=", RECORD_ENTRIES, f"{term}-0", "value", value)


def resign(record: str, term: int) -> tuple[Any, ...]:
    """The guarded command by which the leader of ``term`` resigns."""
    return ("XADD", record, "MAXLEN", "=", RECORD_ENTRIES, f"{term}-1", "resigned", 1)


def is_written_already(error: Exception) -> bool:
    """An ``XADD`` refused because its id is there: a write sent again."""
    return "equal or smaller than the target stream top" in str(error)


def _fields(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return {str(text(k)): v for k, v in raw.items()}
    items = list(raw or [])
    return {str(text(items[i])): items[i + 1] for i in range(0, len(items) - 1, 2)}


def _entries(reply: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(str(text(item[0])), _fields(item[1])) for item in reply or []]


def _value(fields: dict[str, Any]) -> bytes:
    value = fields.get("value", b"")
    return value if isinstance(value, bytes) else str(value).encode()


def top(record: str) -> Generator[Step, Any, tuple[str, dict[str, Any]] | None]:
    reply = yield Step(("XREVRANGE", record, "+", "-", "COUNT", 1))
    entries = _entries(reply)
    return entries[0] if entries else None


def leader(backend: Backend, key: str, record: str) -> Generator[Step, Any, Leader | None]:
    """The current leader: the lock's exclusive holding whose term has its entry
    on top of the record. A record newer than the lock read means a new leader
    came in between: both are read again."""
    for _ in range(3):
        info = yield from backend.info(key)
        term = 0
        if info is not None and info.get("mode") == "exclusive" and info.get("holders"):
            term = int(info["holders"][0]["token"])
        last = yield from top(record)
        if last is None:
            return None
        kind, published = entry(last[0])
        if kind == "leader" and published == term and term > 0:
            return Leader(term, _value(last[1]))
        if kind != "other" and published > term:
            continue
        return None
    return None


class Cursor:
    """Where an observer reads on from, and the last term it handed out."""

    def __init__(self) -> None:
        self.after: str | None = None
        self.last_term = 0

    def start(
        self, last: tuple[str, dict[str, Any]] | None, current: Leader | None
    ) -> Leader | None:
        """Positions at ``last`` (the record's top, read first); ``current`` (the
        leader read after it) is handed out now if its entry is at or before the
        cursor, else the first read hands it out. The leader to hand out now."""
        self.after = last[0] if last is not None else "0-0"
        head = self.after.split("-", 1)[0]
        cursor_term = int(head) if head.isdigit() else 0
        if current is not None and current.term <= cursor_term:
            self.last_term = current.term
            return current
        return None

    def read(self, record: str) -> Generator[Step, Any, list[Leader]]:
        """One blocking read after the cursor: the leaders that took office since."""
        reply = yield Step(
            (
                "XREAD",
                "COUNT",
                RECORD_ENTRIES,
                "BLOCK",
                OBSERVE_BLOCK_MS,
                "STREAMS",
                record,
                self.after or "0-0",
            ),
            OBSERVE_READ_LIMIT,
        )
        streams: list[Any]
        if reply is None:
            streams = []
        elif isinstance(reply, dict):
            streams = list(reply.values())
        else:
            streams = [stream[1] for stream in reply]
        leaders = []
        for stream in streams:
            for entry_id, fields in _entries(stream):
                kind, term = entry(entry_id)
                if kind == "leader" and term > self.last_term:
                    self.last_term = term
                    leaders.append(Leader(term, _value(fields)))
                self.after = entry_id
        return leaders
