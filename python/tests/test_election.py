"""Leader election (``Election``, ``AsyncElection``) against real servers, on the
module, the library by ``FCALL`` and by ``EVALSHA``: one leader at a time, the value
published and read back, resign hands over through the queue, terms grow, an
observer sees every leader once in term order, a deposed leader's writes are
fenced, and ``run_while_leader`` campaigns again after a loss."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio

from redis_lock_client import (
    AsyncElection,
    AsyncLeadership,
    Election,
    Leader,
    Leadership,
)

from servers import BlackHoleProxy, RedisServer


@pytest.mark.scripts
def test_a_leader_publishes_and_resign_hands_over(client: redis.Redis) -> None:
    election = Election(client, "scheduler", ttl=10.0)
    assert election.record_key == "{scheduler}:leader"
    assert election.leader() is None
    first = election.campaign("node-a")
    assert first is not None
    assert election.leader() == Leader(first.term, b"node-a")
    led: list[tuple[Leadership | None, float]] = []
    rival = threading.Thread(
        target=lambda: led.append((election.campaign("node-b"), time.monotonic()))
    )
    rival.start()
    time.sleep(0.3)
    assert not led, "one leader at a time"
    resigned = time.monotonic()
    assert first.resign()
    rival.join(5)
    second, at = led[0]
    assert second is not None
    assert at - resigned < 2.5, "handed over by the queue, not the TTL"
    assert second.term > first.term
    assert election.leader() == Leader(second.term, b"node-b")
    with second:
        pass
    assert election.leader() is None


@pytest.mark.scripts
def test_an_observer_sees_every_leader_once_in_term_order(client: redis.Redis) -> None:
    election = Election(client, "{svc}:lock", ttl=10.0)
    seen: list[Leader] = []
    observer = election.observe()
    observer.start()  # from here on, before the first campaign

    def watch() -> None:
        for leader in observer:
            seen.append(leader)
            if len(seen) == 6:
                return

    watching = threading.Thread(target=watch)
    watching.start()
    led = []
    for n in range(6):
        leadership = election.campaign(f"node-{n}")
        assert leadership is not None
        led.append(Leader(leadership.term, f"node-{n}".encode()))
        leadership.resign()
    watching.join(10)
    observer.close()
    assert seen == led
    assert all(a.term < b.term for a, b in zip(led, led[1:]))


def test_a_leader_whose_lock_is_gone_is_not_reported(client: redis.Redis) -> None:
    election = Election(client, "gone", ttl=10.0)
    leadership = election.campaign("me")
    assert leadership is not None
    client.delete("gone")
    assert election.leader() is None
    leadership.resign()


def test_a_deposed_leader_is_told_first_and_fenced(server: RedisServer) -> None:
    proxy = BlackHoleProxy(server.port)
    try:
        cut = redis.Redis(port=proxy.port, socket_timeout=5)
        direct = server.client()
        old = Election(cut, "{cut}", ttl=1.5).campaign("old")
        assert old is not None
        proxy.black_hole()
        new = Election(direct, "{cut}", ttl=1.5).campaign("new")
        assert new is not None
        led = time.monotonic()
        assert old.lost.is_set(), "told before the rival led"
        assert new.term > old.term
        # The old term, sent by hand on a path that works: the server refuses it.
        guard = (
            ("LOCK.GUARD", "{cut}", old.term)
            if server.kind == "module"
            else ("FCALL", "lock_guard", 2, "{cut}", "{cut}:out", old.term)
        )
        with pytest.raises(redis.ResponseError, match=r"^FENCED"):
            direct.execute_command(*guard, "SET", "{cut}:out", "old")  # type: ignore[no-untyped-call]
        assert new.guard(["{cut}:out"], "SET", "{cut}:out", "new") in (b"OK", "OK")
        assert direct.get("{cut}:out") == b"new"
        assert time.monotonic() - led < 5
        new.resign()
    finally:
        proxy.close()


def test_run_while_leader_campaigns_again_after_a_loss(client: redis.Redis) -> None:
    election = Election(client, "again", ttl=0.6)
    terms: list[int] = []

    def work(leadership: Leadership) -> int:
        terms.append(leadership.term)
        if len(terms) == 1:
            client.delete("again")
            assert leadership.lost.wait(3)
        return leadership.term

    assert election.run_while_leader("me", work, again=True) == terms[1]
    assert terms[1] > terms[0]
    assert election.leader() is None


def test_bad_keys_and_values_are_refused(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="invalid election key"):
        Election(client, "a}b")
    with pytest.raises(ValueError, match="at most 1024"):
        Election(client, "k").campaign(b"x" * 1025)


def run(server: RedisServer, scenario) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            await scenario(aclient)
        finally:
            await aclient.aclose()

    asyncio.run(main())


@pytest.mark.scripts
def test_asyncio_election_observe_and_resign(server: RedisServer) -> None:
    async def scenario(aclient: redis.asyncio.Redis) -> None:
        election = AsyncElection(aclient, "{a}", ttl=10.0)
        observer = election.observe()
        first = await election.campaign("one")
        assert first is not None
        assert await observer.__anext__() == Leader(first.term, b"one")
        waiting = asyncio.ensure_future(election.campaign("two"))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await first.resign()
        second = await asyncio.wait_for(waiting, 3)
        assert second is not None
        assert await asyncio.wait_for(observer.__anext__(), 3) == Leader(second.term, b"two")
        assert await election.leader() == Leader(second.term, b"two")
        async with second:
            pass
        assert await election.leader() is None
        await observer.aclose()

    run(server, scenario)


def test_asyncio_run_while_leader_cancels_the_work_on_loss(server: RedisServer) -> None:
    async def scenario(aclient: redis.asyncio.Redis) -> None:
        election = AsyncElection(aclient, "again", ttl=0.6)
        terms: list[int] = []
        cancelled = []

        async def work(leadership: AsyncLeadership) -> int:
            terms.append(leadership.term)
            if len(terms) == 1:
                await aclient.delete("again")
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    cancelled.append(leadership.term)
                    raise
            return leadership.term

        assert (
            await asyncio.wait_for(election.run_while_leader("me", work, again=True), 10)
            == terms[1]
        )
        assert cancelled == [terms[0]]
        assert terms[1] > terms[0]

    run(server, scenario)
