"""The lease arithmetic, without a server (the rules of client/src/lease.rs)."""

from __future__ import annotations

import math

import pytest

from redis_lock_client._holding import wait_of
from redis_lock_client._lease import Lease, margin, millis, period


def test_the_margin_is_a_tenth_of_the_ttl_and_at_least_50_ms() -> None:
    assert margin(10.0) == 1.0
    assert margin(0.3) == 0.05
    assert margin(0.02) == 0.02  # never more than the TTL itself
    assert period(30.0) == 10.0


def granted(ttl: float, sent: float, answered: float) -> Lease:
    lease = Lease(ttl)
    assert lease.answered(lease.sending(ttl, sent), answered)
    return lease


def test_a_lease_counts_from_the_send_of_the_last_acknowledged_renewal() -> None:
    lease = granted(10.0, 100.0, 100.1)
    assert lease.valid_until == 109.0
    assert lease.next_renewal() == 100.0 + 10.0 / 3
    renewal = lease.sending(10.0, 103.0)
    assert lease.answered(renewal, 103.5)
    assert lease.valid_until == 112.0
    # A late reply to an older renewal does not move the deadline back.
    older = lease.sending(10.0, 103.2)
    assert lease.answered(lease.sending(10.0, 103.4), 103.6)
    assert lease.answered(older, 104.0)
    assert lease.valid_until == 112.4


def test_equal_ttls_in_flight_change_nothing() -> None:
    lease = granted(3.0, 100.0, 100.01)
    before = lease.valid_until
    in_flight = lease.sending(3.0, 101.0)
    assert lease.valid_until == before, "a renewal of the same TTL sent later allows later"
    lease.answered(in_flight, 101.01)
    assert lease.valid_until == 101.0 + 3.0 - 0.3


def test_a_shorter_ttl_in_flight_shortens_the_lease_at_once() -> None:
    # A 30 s holding; another lock object of the same owner acquires with 1 s: until
    # its reply, the server may apply it last, and the expiry is then its send + 1 s.
    lease = granted(30.0, 100.0, 100.01)
    assert lease.valid_until == 127.0
    short = lease.sending(1.0, 105.0)
    assert lease.valid_until == 105.0 + 1.0 - 0.1
    assert lease.next_renewal() == 105.0 + 1.0 / 3
    assert lease.ttl == 1.0, "renewals ask for the TTL last asked for"
    assert lease.answered(short, 105.02)
    assert lease.valid_until == 105.0 + 1.0 - 0.1


def test_a_write_in_flight_when_the_last_was_sent_counts_from_that_send() -> None:
    # The reordered renewal: a 1 s renewal sent before a 30 s write, answered after
    # it, may have been applied last: the lease is the 30 s write's send + 1 s.
    lease = granted(1.0, 100.0, 100.01)
    renewal = lease.sending(1.0, 100.3)
    longer = lease.sending(30.0, 100.4)
    assert lease.answered(longer, 100.5)
    assert lease.valid_until == 100.4 + 1.0 - 0.1
    assert lease.answered(renewal, 100.6), "answered after the longer write was sent"
    assert lease.valid_until == 100.4 + 1.0 - 0.1
    # A write sent after that reply came knows the renewal was applied before it.
    assert lease.answered(lease.sending(30.0, 101.0), 101.1)
    assert lease.valid_until == 101.0 + 30.0 - 3.0


def test_an_abandoned_write_stays_for_the_life_of_the_holding() -> None:
    lease = granted(30.0, 100.0, 100.01)
    lease.sending(2.0, 101.0)  # never answered: its bytes may still reach the server
    for sent in (101.5, 102.5, 103.5):
        assert lease.answered(lease.sending(30.0, sent), sent + 0.01)
        assert lease.valid_until == sent + 2.0 - 0.2
        assert lease.next_renewal() == sent + 2.0 / 3


def test_extend_longer_with_a_short_renewal_in_flight() -> None:
    lease = granted(1.0, 100.0, 100.01)
    lease.sending(1.0, 100.33)  # the renewal, held back in the network
    longer = lease.sending(30.0, 100.5)
    assert lease.answered(longer, 100.52)
    assert lease.valid_until == 100.5 + 1.0 - 0.1, "the 1 s renewal may be applied last"
    assert lease.next_renewal() == 100.5 + 1.0 / 3


def test_extend_shorter_renews_at_a_third_of_the_new_ttl() -> None:
    lease = granted(30.0, 100.0, 100.01)
    assert lease.answered(lease.sending(1.2, 101.0), 101.01)
    assert lease.valid_until == 101.0 + 1.2 - 0.12
    assert lease.next_renewal() == 101.0 + 1.2 / 3


def test_writes_on_one_connection_keep_their_order() -> None:
    lease = granted(30.0, 100.0, 100.01)
    conn = object()
    lease.sending(1.0, 101.0, conn)
    assert lease.answered(lease.sending(30.0, 101.1, conn), 101.2)
    assert lease.valid_until == 101.1 + 30.0 - 3.0, "applied before the later one"


def test_a_lost_lease_stays_lost() -> None:
    lease = granted(1.0, 100.0, 100.01)
    assert lease.is_lost(100.9) and not lease.is_lost(100.8)
    late = lease.sending(1.0, 100.5)
    assert not lease.answered(late, 101.0), "a reply after the deadline revives nothing"
    assert lease.is_lost(101.0)
    assert not lease.answered(lease.sending(1.0, 101.1), 101.2)
    assert lease.is_lost(101.2)
    ended = granted(60.0, 100.0, 100.01)
    assert ended.end() and not ended.end()
    assert ended.is_lost(100.0)
    assert not ended.answered(ended.sending(60.0, 101.0), 101.0)


def test_a_ttl_at_or_under_the_margin_is_lost_at_once() -> None:
    for ttl in (0.001, 0.05):
        lease = Lease(ttl)
        assert not lease.answered(lease.sending(ttl, 100.0), 100.0 + 0.0005)
        assert lease.is_lost(100.001) and lease.started


def test_the_longest_ttl_does_not_overflow() -> None:
    # 2^62 - 1 ms in float seconds rounds to 2^62 ms, one over: the longest TTL the
    # API can express is the float just under it.
    ttl = math.nextafter(((1 << 62) - 1) / 1000, 0.0)
    assert millis(ttl, "ttl") <= (1 << 62) - 1
    lease = granted(ttl, 100.0, 100.01)
    assert not lease.is_lost(1e9) and lease.remaining(100.0) > 1e15
    assert lease.next_renewal() > 1e15


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
