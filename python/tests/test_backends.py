"""Which backend the client picks (module, function library, library as a script),
forcing one, and what it says when a server has none, or a library older or newer
than it accepts."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import redis

from redis_lock_client import LibraryVersionError, Lock, NoLockBackendError
from redis_lock_client._detect import BackendName
from redis_lock_client._library import LIBRARY_VERSION, MIN_LIBRARY_VERSION
from redis_lock_client._library import library_source as library_source_of_client

from servers import ROOT, RedisServer, library_source, lock_info


def _built(project: Path, out: Path, target: str) -> Path:
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", target, "-d", str(out)],
        cwd=project,
        check=True,
        capture_output=True,
    )
    (built,) = out.iterdir()
    return built


def test_the_wheel_and_the_sdist_carry_lua_redislock_lua(tmp_path: Path) -> None:
    # One source of truth: the library goes into the package at build time from
    # lua/redislock.lua (hatch_build.py); the source tree keeps no copy.
    library = (ROOT / "lua" / "redislock.lua").read_bytes()
    assert not (ROOT / "python" / "src" / "redis_lock_client" / "redislock.lua").exists()
    wheel = _built(ROOT / "python", tmp_path / "wheel", "wheel")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("redis_lock_client/redislock.lua") == library
    sdist = _built(ROOT / "python", tmp_path / "sdist", "sdist")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    (project,) = (tmp_path / "unpacked").iterdir()
    # A wheel built from the sdist (pip's way), where no lua/ is beside it.
    again = _built(project, tmp_path / "again", "wheel")
    with zipfile.ZipFile(again) as archive:
        assert archive.read("redis_lock_client/redislock.lua") == library


def test_the_client_sends_lua_redislock_lua() -> None:
    assert library_source_of_client() == (ROOT / "lua" / "redislock.lua").read_text("utf-8")


@pytest.mark.scripts
def test_the_backend_is_the_one_the_server_has(server: RedisServer, client: redis.Redis) -> None:
    lock = Lock(client, "job", ttl=5.0)
    assert lock.acquire(blocking=False)
    assert lock._backend is not None and lock._backend.name == server.kind
    assert lock_info(client, "job") is not None
    assert lock.release()


def test_a_forced_backend_is_used_or_refused(client: redis.Redis) -> None:
    # The module's server runs scripts too; it has no function library.
    lock = Lock(client, "job", ttl=5.0, backend="scripts")
    assert lock.acquire(timeout=1)
    assert lock._backend is not None and lock._backend.name == "scripts"
    assert lock.release()
    with pytest.raises(ValueError, match="backend"):
        Lock(client, "job", backend="lua")  # type: ignore[arg-type]


def test_a_forced_missing_backend_says_what_to_do() -> None:
    server = RedisServer(kind="scripts")
    try:
        forced: BackendName
        for forced in ("module", "functions"):
            with pytest.raises(NoLockBackendError, match="FUNCTION LOAD"):
                Lock(server.client(), "job", backend=forced).acquire()
    finally:
        server.stop()


def test_a_server_without_any_backend_says_what_to_do() -> None:
    server = RedisServer(kind="scripts")
    try:
        # No module, no library, and scripts refused by the ACL.
        server.client().acl_setuser("default", enabled=True, commands=["-@scripting"])
        with pytest.raises(NoLockBackendError, match=r"load the module .* or the function library"):
            Lock(server.client(), "job").acquire()
    finally:
        server.stop()


def test_a_library_older_or_newer_than_the_client_accepts_is_refused() -> None:
    server = RedisServer(kind="scripts")
    try:
        current = f"local VERSION = {LIBRARY_VERSION}\n"
        for found, said in [
            (MIN_LIBRARY_VERSION - 1, "older than this client accepts"),
            (LIBRARY_VERSION + 1, "newer than this client accepts"),
        ]:
            other = library_source().replace(current, f"local VERSION = {found}\n", 1)
            assert other != library_source()
            server.client().function_load(other, replace=True)
            with pytest.raises(LibraryVersionError, match=f"version {found}, {said}"):
                Lock(server.client(), "job").acquire()
    finally:
        server.stop()


def test_the_library_versions_are_cores() -> None:
    # core/src/protocol.rs is where the versions live; this client repeats them.
    protocol = (ROOT / "core" / "src" / "protocol.rs").read_text("utf-8")
    for name, value in [
        ("LIBRARY_VERSION", LIBRARY_VERSION),
        ("MIN_LIBRARY_VERSION", MIN_LIBRARY_VERSION),
    ]:
        found = re.search(rf"^pub const {name}: i64 = (\d+);$", protocol, re.MULTILINE)
        assert found is not None, name
        assert int(found.group(1)) == value, name


def test_a_flushed_script_is_loaded_again() -> None:
    server = RedisServer(kind="scripts")
    try:
        client = server.client()
        lock = Lock(client, "job", ttl=5.0)
        assert lock.acquire(timeout=1)
        client.script_flush()  # as a restart or a failover to a fresh node
        assert lock.release()
        assert lock.acquire(blocking=False)
        assert lock.release()
    finally:
        server.stop()


def test_a_library_deleted_after_the_probe_is_carried_by_the_scripts_path() -> None:
    server = RedisServer(kind="functions")
    try:
        client = server.client()
        lock = Lock(client, "job", ttl=5.0)
        assert lock.acquire(blocking=False)
        client.function_delete("redislock")
        # The holding outlived the library: the same library as a script sees it.
        assert lock.release() is True
        again = Lock(client, "job")
        assert again.acquire(blocking=False)
        assert again.release() is True
    finally:
        server.stop()
