"""Every connection the package opens (waits, renewals, releases, the backend probe)
goes where the user's client goes: a Sentinel-managed master, a Unix socket, TLS,
an ACL user, a database other than 0. Real servers, a real redis-sentinel."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.sentinel
from redis.sentinel import Sentinel

from redis_lock_client import AsyncLock, Lock

from servers import RedisServer, free_port, lock_info, wait_until


def _held_by(server_client: redis.Redis, key: str, owner: str | None) -> bool:
    info = lock_info(server_client, key)
    return info is not None and [h["owner"] for h in info["holders"]] == [owner]


def _hold_renew_release(user_client: Any, server_client: redis.Redis, key: str) -> None:
    """A wait (its own bounded connection), renewals (the renewal thread's), a
    release: each must reach the server the user's client names."""
    rival = Lock(server_client, key, ttl=5.0)
    assert rival.acquire()
    # A TTL that a renewal over a fresh TLS or Sentinel connection meets on a loaded
    # machine (0.6 s lost the lease once beside a callgrind run).
    lock = Lock(user_client, key, ttl=1.5)
    waiting = threading.Thread(target=lock.acquire, kwargs={"timeout": 5.0})
    waiting.start()
    wait_until(lambda: (lock_info(server_client, key) or {}).get("waiters") == 1)
    rival.release()
    waiting.join(5.0)
    assert lock.token is not None, "the wait was granted on the user's server"
    assert _held_by(server_client, key, lock.owner)
    time.sleep(2.0)  # past the TTL: only renewals on the same server keep it
    assert not lock.lost.is_set() and _held_by(server_client, key, lock.owner)
    assert lock.release() is True
    assert lock_info(server_client, key) is None


@contextlib.contextmanager
def sentinel_for(master: RedisServer) -> Iterator[int]:
    """A redis-sentinel watching ``master`` as ``m``; yields its port."""
    with tempfile.TemporaryDirectory(prefix="redis-lock-py-sentinel-") as folder:
        port = free_port()
        conf = Path(folder) / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor m 127.0.0.1 {master.port} 1\n"
            "sentinel down-after-milliseconds m 5000\n"
        )
        log = open(Path(folder) / "sentinel.log", "w")  # noqa: SIM115
        process = subprocess.Popen(["redis-sentinel", str(conf)], stdout=log, stderr=log)
        try:
            probe = redis.Redis(host="127.0.0.1", port=port)
            wait_until(lambda: _sentinel_knows(probe), limit=10.0)
            yield port
        finally:
            process.kill()
            process.wait()
            log.close()


def _sentinel_knows(probe: Any) -> bool:
    try:
        return probe.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m") is not None
    except redis.ConnectionError:
        return False


def test_a_sentinel_managed_master_is_where_the_lock_is_taken() -> None:
    master = RedisServer()
    try:
        with sentinel_for(master) as port:
            sentinel: Any = Sentinel
            user = sentinel([("127.0.0.1", port)], socket_timeout=1.0).master_for("m")
            direct = master.client()
            lock = Lock(user, "job", ttl=10.0)
            assert lock.acquire(blocking=False)
            assert _held_by(direct, "job", lock.owner)
            # A second holder through the same Sentinel is refused by the same master.
            assert Lock(user, "job").acquire(blocking=False) is False
            lock.release()
            _hold_renew_release(user, direct, "job")
    finally:
        master.stop()


def test_an_asyncio_sentinel_managed_master_is_where_the_lock_is_taken() -> None:
    master = RedisServer()

    async def scenario(port: int) -> None:
        sentinel: Any = redis.asyncio.sentinel.Sentinel
        user = sentinel([("127.0.0.1", port)], socket_timeout=1.0).master_for("m")
        lock = AsyncLock(user, "job", ttl=1.5)
        assert await lock.acquire(timeout=2.0)
        assert _held_by(master.client(), "job", lock.owner)
        await asyncio.sleep(2.0)  # past the TTL: renewals keep it, on the same master
        assert not lock.lost.is_set() and _held_by(master.client(), "job", lock.owner)
        assert await lock.release() is True
        assert lock_info(master.client(), "job") is None
        await user.aclose()

    try:
        with sentinel_for(master) as port:
            asyncio.run(scenario(port))
    finally:
        master.stop()


def test_a_unix_socket_is_where_the_lock_is_taken() -> None:
    master = RedisServer(extra=("--unixsocket", "{dir}/redis.sock"))
    try:
        path = str(Path(master.dir.name) / "redis.sock")
        direct = redis.Redis(unix_socket_path=path)
        _hold_renew_release(redis.Redis(unix_socket_path=path), direct, "job")
    finally:
        master.stop()


def test_an_acl_user_and_a_database_are_those_of_the_users_client() -> None:
    master = RedisServer()
    try:
        admin: Any = master.client()
        admin.execute_command("ACL", "SETUSER", "locker", "on", ">s3cret", "~*", "&*", "+@all")
        # The default user off: a connection without the user's credentials fails.
        admin.execute_command("ACL", "SETUSER", "default", "off")
        settings: dict[str, Any] = {"username": "locker", "password": "s3cret", "db": 3}
        direct = master.client(**settings)
        _hold_renew_release(master.client(**settings), direct, "job")
        assert master.client(**{**settings, "db": 0}).dbsize() == 0, "nothing in db 0"
    finally:
        master.stop()


def test_tls_is_used_when_the_users_client_uses_it() -> None:
    with tempfile.TemporaryDirectory(prefix="redis-lock-py-tls-") as folder:
        ca, cert, key = (
            str(Path(folder) / name) for name in ("ca.crt", "server.crt", "server.key")
        )
        _certificates(Path(folder))
        tls_port = free_port()
        master = RedisServer(
            extra=(
                "--tls-port", str(tls_port), "--tls-cert-file", cert, "--tls-key-file", key,
                "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
            )
        )  # fmt: skip
        try:
            user = redis.Redis(host="127.0.0.1", port=tls_port, ssl=True, ssl_ca_certs=ca)
            _hold_renew_release(user, master.client(), "job")
        finally:
            master.stop()


def _certificates(folder: Path) -> None:
    """A CA and a server certificate for 127.0.0.1, by the openssl command."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    openssl("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-days", "2",
            "-subj", "/CN=redis-lock test CA", "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    openssl("req", "-new", "-nodes", "-newkey", "rsa:2048", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    (folder / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf",
            "-out", "server.crt")  # fmt: skip
