"""Real redis-servers on free loopback ports, each of one kind: with the freshly
built module ("module"), with the function library loaded by FUNCTION LOAD
("functions"), or plain, for the client to send the library as a script
("scripts"); and a TCP proxy that black-holes traffic on demand. No mocks: every
test talks to a real server, as the module's own tests do (testkit/)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import redis

from redis_lock_client._backend import parse_info

ROOT = Path(__file__).resolve().parents[2]

#: The kind of each server started here, by port (see :func:`lock_info`).
KINDS: dict[int, str] = {}


def library_source() -> str:
    """lua/redislock.lua, the one source of the library."""
    return (ROOT / "lua" / "redislock.lua").read_text("utf-8")


def module_path() -> Path:
    """``REDIS_LOCK_MODULE``, else the worktree's debug build (built if missing)."""
    named = os.environ.get("REDIS_LOCK_MODULE")
    if named:
        return Path(named)
    built = ROOT / "target" / "debug" / "libredis_lock.so"
    if not built.exists():
        subprocess.run(["cargo", "build", "--lib", "-p", "redis-lock"], cwd=ROOT, check=True)
    return built


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """A redis-server child on a free port, in a directory of its own; killed by
    :meth:`stop`."""

    def __init__(
        self, with_module: bool = True, extra: tuple[str, ...] = (), kind: str = "module"
    ) -> None:
        with_module = with_module and kind == "module"
        self.kind = kind
        self.dir = tempfile.TemporaryDirectory(prefix="redis-lock-py-")
        binary = os.environ.get("REDIS_SERVER", "redis-server")
        for _ in range(5):
            self.port = free_port()
            args = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
            args += ["--save", "", "--appendonly", "no", "--dir", self.dir.name]
            if with_module:
                args += ["--loadmodule", str(module_path())]
            self.args = args + [arg.replace("{dir}", self.dir.name) for arg in extra]
            self._spawn()
            if self._ready():
                KINDS[self.port] = kind
                if kind == "functions":
                    self.client().function_load(library_source(), replace=True)
                return
            self.stop()
        raise RuntimeError(f"redis-server did not start; see {self.dir.name}/server.log")

    def _spawn(self) -> None:
        log = open(Path(self.dir.name) / "server.log", "a")  # noqa: SIM115
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)

    def restart(self) -> None:
        """Kills the server and starts it again on the same port, without
        persistence: it comes back empty, without the function library."""
        self.stop()
        self._spawn()
        if not self._ready():
            raise RuntimeError(f"redis-server did not restart; see {self.dir.name}/server.log")

    def _ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False  # the port was taken meanwhile, or the load failed
            try:
                info = self.client().info("server")
                return int(info["process_id"]) == self.process.pid
            except redis.ConnectionError:
                time.sleep(0.02)
        return False

    def client(self, **kwargs: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)  # type: ignore[arg-type]

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()


class RedisClusterServers:
    """A Cluster of ``masters`` redis-servers of one kind (the module on every node,
    or the library loaded on every master), made by ``redis-cli --cluster create``,
    as the Go and Rust tests start theirs."""

    def __init__(self, masters: int = 3, kind: str = "module") -> None:
        settings: tuple[str, ...] = ("--cluster-enabled", "yes")
        settings += ("--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
        self.nodes: list[RedisServer] = []
        try:
            for _ in range(masters):
                self.nodes.append(RedisServer(kind=kind, extra=settings))
            created = subprocess.run(
                ["redis-cli", "--cluster", "create"]
                + [f"127.0.0.1:{node.port}" for node in self.nodes]
                + ["--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout}")
            wait_until(self._ok, 30)
        except BaseException:
            self.stop()
            raise

    def _ok(self) -> bool:
        for node in self.nodes:
            raw: Any = node.client()
            info: Any = raw.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text:
                return False
        return True

    def startup_nodes(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", node.port) for node in self.nodes]

    def owner_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot."""
        first: Any = self.nodes[0].client()
        slot = int(first.execute_command("CLUSTER", "KEYSLOT", key))
        for node in self.nodes:
            raw: Any = node.client()
            for entry in raw.execute_command("CLUSTER", "SLOTS"):
                if int(entry[0]) <= slot <= int(entry[1]) and int(entry[2][1]) == node.port:
                    return node
        raise AssertionError(f"no node serves {key!r}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class BlackHoleProxy:
    """Forwards 127.0.0.1:``port`` to the server until :meth:`black_hole`, then
    swallows every byte both ways without closing anything, as a cut network does."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.holed = threading.Event()
        self.replies_dropped = threading.Event()
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def black_hole(self) -> None:
        self.holed.set()

    def drop_replies(self) -> None:
        """From now on what clients send reaches the server, which acts on it, and
        its replies are swallowed (a lost reply)."""
        self.replies_dropped.set()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """``a`` the client's side, ``b`` the server's."""
        peers = {a: b, b: a}
        while not self.closed.is_set():
            try:
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return self._close_pair(a, b)
                    if self.holed.is_set() or (sock is b and self.replies_dropped.is_set()):
                        continue
                    peers[sock].sendall(data)
            except OSError:
                return self._close_pair(a, b)

    def _close_pair(self, a: socket.socket, b: socket.socket) -> None:
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


class PostgresServer:
    """A PostgreSQL server of the tests' own, started by the repository's
    ``tests/postgres/start`` (initdb and pg_ctl as an unprivileged user, a free
    loopback port, a temporary directory) and stopped by ``tests/postgres/stop``.
    :class:`PostgresMissing` when no PostgreSQL is installed."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        started = subprocess.run(
            [str(ROOT / "tests" / "postgres" / "start"), str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if started.returncode != 0:
            if "no PostgreSQL server found" in started.stderr:
                raise PostgresMissing(started.stderr.strip())
            raise RuntimeError(f"tests/postgres/start failed: {started.stderr.strip()}")
        #: ``postgres://postgres@127.0.0.1:PORT/postgres``
        self.url = started.stdout.strip()

    def stop(self) -> None:
        subprocess.run(
            [str(ROOT / "tests" / "postgres" / "stop"), str(self.dir)],
            capture_output=True,
            timeout=60,
        )


class PostgresMissing(Exception):
    """No PostgreSQL server on this machine (``apt-get install postgresql``, or
    ``PG_BIN``)."""


def wait_until(condition: Callable[[], bool], limit: float = 5.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def lock_info(client: redis.Redis, key: str) -> dict[str, Any] | None:
    """The server's LOCK.INFO of ``key`` (or the library's lock_info), read
    directly, not through the package."""
    raw: Any = client
    kind = KINDS.get(client.connection_pool.connection_kwargs.get("port", 0), "module")
    if kind == "functions":
        return parse_info(raw.execute_command("FCALL_RO", "lock_info", 1, key))
    if kind == "scripts":
        script = library_source().partition("\n")[2]
        return parse_info(raw.execute_command("EVAL", script, 1, key, "lock_info"))
    return parse_info(raw.execute_command("LOCK.INFO", key))
