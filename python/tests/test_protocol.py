"""The client's protocol constants against ``conformance/protocol.json``, which
``core/src/protocol.rs`` writes: every client of the project uses the same margins,
limits and library versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from redis_lock_client import _protocol
from redis_lock_client._lease import margin, period

PROTOCOL_JSON = Path(__file__).resolve().parents[2] / "conformance" / "protocol.json"


def constants() -> dict[str, Any]:
    """This client's constants in the file's names and units (what the conformance
    adapter reports in its hello)."""
    return {
        "renewal_divisor": _protocol.RENEWAL_DIVISOR,
        "lease_margin_percent": _protocol.LEASE_MARGIN_PERCENT,
        "lease_margin_min_ms": round(_protocol.LEASE_MARGIN_MIN * 1000),
        "wait_margin_ms": round(_protocol.WAIT_MARGIN * 1000),
        "withdraw_after_timeout_ms": round(_protocol.WITHDRAW_AFTER_TIMEOUT * 1000),
        "release_limit_ms": round(_protocol.RELEASE_LIMIT * 1000),
        "control_limit_ms": round(_protocol.CONTROL_LIMIT * 1000),
        "library_version": _protocol.LIBRARY_VERSION,
        "min_library_version": _protocol.MIN_LIBRARY_VERSION,
    }


def test_the_constants_are_the_project_s() -> None:
    expected = json.loads(PROTOCOL_JSON.read_text("utf-8"))
    expected.pop("comment", None)
    assert constants() == expected


def test_the_lease_follows_the_constants() -> None:
    assert margin(30.0) == 30.0 * _protocol.LEASE_MARGIN_PERCENT / 100
    assert margin(0.1) == _protocol.LEASE_MARGIN_MIN
    assert period(30.0) == 30.0 / _protocol.RENEWAL_DIVISOR
