"""The lease arithmetic, without a server (the rules of client/src/lease.rs)."""

from __future__ import annotations

import pytest

from redis_lock_client._holding import wait_of
from redis_lock_client._lease import Lease, margin, millis, period


def test_the_margin_is_a_tenth_of_the_ttl_and_at_least_50_ms() -> None:
    assert margin(10.0) == 1.0
    assert margin(0.3) == 0.05
    assert margin(0.02) == 0.02  # never more than the TTL itself
    assert period(30.0) == 10.0


def test_a_lease_counts_from_the_send_of_the_last_acknowledged_renewal() -> None:
    lease = Lease(100.0, 10.0)
    assert lease.valid_until == 109.0
    assert lease.renewed(103.0, now=103.5)
    assert lease.valid_until == 112.0
    # A late reply to an older extend does not move the deadline back.
    assert not lease.renewed(101.0, now=104.0)
    assert lease.valid_until == 112.0


def test_a_lost_lease_stays_lost() -> None:
    lease = Lease(100.0, 1.0)
    assert lease.is_lost(100.9) and not lease.is_lost(100.8)
    assert not lease.renewed(100.5, now=101.0), "a reply after the deadline revives nothing"
    ended = Lease(100.0, 60.0)
    assert ended.end() and not ended.end()
    assert ended.is_lost(100.0)
    assert not ended.renewed(101.0, now=101.0)


def test_seconds_go_on_the_wire_as_whole_milliseconds_rounded_up() -> None:
    assert millis(30.0, "ttl") == 30000
    assert millis(0.0001, "ttl") == 1
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            millis(bad, "ttl")
    with pytest.raises(ValueError, match="out of range"):
        millis(2.0**62, "timeout")
    # 2^62 ms, one over what the server takes (contract.md "Commands").
    assert millis(2.0**62 / 1000 - 1, "ttl") < 2**62
    with pytest.raises(ValueError, match="out of range"):
        millis(2.0**62 / 1000, "ttl")
    with pytest.raises(TypeError):
        millis(True, "ttl")


def test_waits_take_threadings_arguments() -> None:
    assert wait_of(True, None) == (0, None)
    assert wait_of(True, -1) == (0, None)
    # Read bound: the wait plus the wait margin (conformance/protocol.json).
    assert wait_of(True, 1.5) == (1500, 2.5)
    assert wait_of(True, 0)[0] is None  # tries once
    assert wait_of(False, None)[0] is None
    with pytest.raises(ValueError):
        wait_of(False, 1.0)
