"""The threaded Lock against a real server: grants, tokens, renewal, loss."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
import redis

from redis_lock_client import Lock, LockLostError, NoLockBackendError
from redis_lock_client._errors import backend_missing

from servers import RedisServer, lock_info, wait_until


@pytest.mark.scripts
def test_a_lock_is_granted_with_a_token_and_released(client: redis.Redis) -> None:
    lock = Lock(client, "job", ttl=5.0)
    assert lock.acquire()
    assert lock.token is not None and lock.token > 0
    info = lock_info(client, "job")
    assert info is not None and info["holders"] == [
        {"owner": lock.owner, "ttl": pytest.approx(5.0, abs=0.5), "token": lock.token}
    ]
    assert lock.release() is True
    assert lock_info(client, "job") is None
    assert lock.token is None


def test_the_default_owner_says_which_host_and_process_holds(client: redis.Redis) -> None:
    lock = Lock(client, "job")
    assert lock.acquire()
    owner = lock.owner
    assert owner is not None
    host, pid, rest = owner.split(":")
    assert host == socket.gethostname()[:64] and pid == str(os.getpid())
    assert len(rest) == 16 and int(rest, 16) >= 0
    lock.release()
    assert lock.acquire()
    assert lock.owner != owner, "a fresh owner per acquire"
    lock.release()


@pytest.mark.scripts
def test_a_given_owner_gets_its_own_token_back_and_shares_the_holding(
    client: redis.Redis,
) -> None:
    first = Lock(client, "job", ttl=5.0, owner="report-run-42")
    assert first.acquire(blocking=False) and first.owner == "report-run-42"
    again = Lock(client, "job", ttl=5.0, owner="report-run-42")
    assert again.acquire(blocking=False), "the owner that holds is granted again"
    assert again.token == first.token
    info = lock_info(client, "job")
    assert info is not None and [h["owner"] for h in info["holders"]] == ["report-run-42"]
    assert not Lock(client, "job", ttl=5.0).acquire(blocking=False)
    assert again.release() is True
    assert lock_info(client, "job") is None, "one holding, ended by either object"
    with pytest.raises(ValueError, match="owner must not be empty"):
        Lock(client, "job", owner="")
    with pytest.raises(TypeError, match="owner must be a str"):
        Lock(client, "job", owner=b"bytes")  # type: ignore[arg-type]


@pytest.mark.scripts
def test_a_busy_lock_is_refused_without_waiting_and_tokens_increase(client: redis.Redis) -> None:
    first, second = Lock(client, "job"), Lock(client, "job")
    assert first.acquire()
    assert second.acquire(blocking=False) is False
    assert second.acquire(timeout=0.2) is False
    assert second.locked()
    token = first.token
    first.release()
    assert second.acquire(blocking=False)
    assert second.token is not None and token is not None and second.token > token
    second.release()
    assert not second.locked()


@pytest.mark.scripts
def test_a_waiter_is_granted_at_release(client: redis.Redis) -> None:
    holder, waiter = Lock(client, "job"), Lock(client, "job")
    holder.acquire()
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=10)))
    thread.start()
    wait_until(lambda: (lock_info(client, "job") or {}).get("waiters") == 1)
    holder.release()
    thread.join(5)
    assert got == [True]
    waiter.release()


@pytest.mark.scripts
def test_a_timed_out_wait_leaves_no_waiter_and_is_never_granted(client: redis.Redis) -> None:
    holder, waiter = Lock(client, "job"), Lock(client, "job")
    holder.acquire()
    start = time.monotonic()
    assert not waiter.acquire(timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 1.0
    # Gone from the queue at once (not at the end of a place's lease), so the
    # release grants nobody.
    assert (lock_info(client, "job") or {}).get("waiters") == 0
    holder.release()
    assert lock_info(client, "job") is None


def test_a_wait_outlives_the_clients_own_read_timeout(server: RedisServer) -> None:
    # redis-py's read timeout (here 0.3 s) and retries would cut a wait short and
    # re-queue it at the back; the holder's own connection has neither.
    client = server.client(socket_timeout=0.3)
    holder, waiter = Lock(client, "job"), Lock(client, "job")
    holder.acquire()
    threading.Timer(1.0, holder.release).start()
    start = time.monotonic()
    assert waiter.acquire(timeout=5)
    assert 0.9 < time.monotonic() - start < 3
    waiter.release()


def test_renewal_keeps_a_lock_past_its_ttl(client: redis.Redis) -> None:
    # A TTL that a loaded machine's scheduling cannot eat up (a renewal late by
    # more than its lease is reported as a loss, rightly).
    with Lock(client, "job", ttl=1.0) as lock:
        token = lock.token
        time.sleep(2.2)
        assert not lock.lost.is_set()
        info = lock_info(client, "job")
        assert info is not None and info["holders"][0]["token"] == token


def test_a_deleted_lock_is_reported_lost_and_the_block_raises(client: redis.Redis) -> None:
    called = threading.Event()
    with pytest.raises(LockLostError), Lock(client, "job", ttl=0.3, on_lost=called.set) as lock:
        client.delete("job")
        assert lock.lost.wait(2)
        assert called.wait(2)
        assert not lock.owned()


def test_a_loss_can_be_left_to_lock_lost(client: redis.Redis) -> None:
    with Lock(client, "job", ttl=0.3, raise_on_lost=False) as lock:
        client.delete("job")
        assert lock.lost.wait(2)


def test_an_exception_in_the_block_releases_and_propagates(client: redis.Redis) -> None:
    with pytest.raises(ZeroDivisionError), Lock(client, "job"):
        _ = 1 / 0
    assert lock_info(client, "job") is None


def test_bad_arguments_are_refused_before_anything_is_sent(client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="ttl"):
        Lock(client, "job", ttl=0)
    with pytest.raises(ValueError, match="timeout"):
        Lock(client, "job").acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError, match="timeout"):
        Lock(client, "job").acquire(timeout=-3)
    lock = Lock(client, "job")
    with pytest.raises(RuntimeError):
        lock.release()
    assert lock_info(client, "job") is None


def test_an_unknown_command_after_the_probe_means_no_module() -> None:
    # What the server answers once the module is gone (MODULE UNLOAD is refused
    # while locks' data type is registered, so the reply is checked directly).
    refusal = redis.ResponseError("unknown command 'LOCK.ACQUIRE', with args beginning with: ")
    assert isinstance(backend_missing(refusal), NoLockBackendError)
    assert backend_missing(redis.ResponseError("WRONGTYPE Operation against a key")) is None


def test_a_key_of_another_type_is_refused(client: redis.Redis) -> None:
    client.set("text", "hello")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        Lock(client, "text").acquire()


def test_a_lock_over_a_unix_socket() -> None:
    server = RedisServer(extra=("--unixsocket", "{dir}/redis.sock"))
    try:
        client = redis.Redis(unix_socket_path=f"{server.dir.name}/redis.sock")
        lock = Lock(client, "job", ttl=5.0)
        assert lock.acquire(timeout=1)
        assert lock_info(client, "job") is not None
        assert lock.release()
    finally:
        server.stop()
