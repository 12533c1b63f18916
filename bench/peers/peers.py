"""`make bench-peers`: our lock against what users would pick instead, on the workload
of python-redis-lock's examples/bench.py. N client processes contend for one lock
for D seconds, each looping acquire (waiting until it holds the lock) -> hold H ms
-> release on a connection of its own, against one redis-server with the module
loaded (and one etcd server for the etcd side).

Every cell of the matrix runs each side once, in an order that rotates from cell to
cell, so that what else the machine does hits every side alike. Results go to
target/peers/results.json as they come; then PEERS.md and the plots are written.

Settings (environment): PEERS_N, PEERS_HOLD_MS, PEERS_SIDES (space-separated
lists), PEERS_SECONDS (shortest run, default 4), PEERS_CYCLES (a run lasts at least
this many trips of the lock around all N clients, so that a fair lock can show it
is fair: default 12), PEERS_OUT (where PEERS.md and the PNGs go, default bench/), PEERS_DEAD (0 skips the
dead-holder cell).

Besides the exclusive locks, two more kinds are compared, each with its own peers:
a semaphore of 3 permits (our `LIMIT 3` against Redisson's RSemaphore) in every
cell, and a read-write lock (N = 16 readers and 2 writers more: our `SHARED` with
exclusive writers against Redisson's RReadWriteLock) in the N = 16 cells only.

The Redisson and Go sides (redsync, bsm/redislock, and this repository's Go client)
are programs of their own (bench/peers/java, bench/peers/go) that run all N clients
of a run in one process and print one report line per client; the protocol is
otherwise the one of clients.py. The Node sides (our Node client, node-redlock,
redis-semaphore) are bench/peers/node/peer.mjs, one process per client as the Python
sides. PEERS_SIDES="$NODE_SIDES" (the list below) with PEERS_OUT=bench/peers-node
runs them alone; `make bench-peers-go` runs the Go sides alone (GO_SIDES) into
bench/peers-go/."""

import atexit
import datetime
import importlib.metadata
import json
import os
import platform
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import base64

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clients  # noqa: E402
import report  # noqa: E402

# The libraries are imported here, once, so that the forked clients start at once.
# (No gRPC channel is opened before the fork: gRPC does not survive one.)
import redis  # noqa: E402,F401
import redis_lock  # noqa: E402,F401
import redis_lock_client  # noqa: E402,F401
import pottery  # noqa: E402,F401
import etcd3  # noqa: E402,F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "target/release/libredis_lock.so")
DRIVER = os.path.join(ROOT, "target/release/lock-bench")
REDISSON = os.path.join(ROOT, "target/peers-java/redisson-peer.jar")
GO_PEER = os.path.join(ROOT, "target/peers-go/go-peer")
NODE_PEER = os.path.join(ROOT, "bench/peers/node/peer.mjs")
KEY = "bench:peers"
OURS = ["ours-rust", "ours-redis-py", "ours-python"]
# The function library, for servers that cannot load the module: the same clients.
FUNCTIONS = ["ours-rust-functions", "ours-python-functions", "ours-node-functions", "ours-go-functions"]
# The Node sides: our client and the Node peers (issue 34).
NODE_SIDES = ["ours-node", "ours-node-redis", "ours-node-functions", "ours-ioredis", "node-redlock",
              "node-redis-semaphore"]
# The Go sides: this repository's Go client (module, library) and its Go peers.
GO_SIDES = ["ours-go", "ours-go-functions", "redsync", "redsync-tuned", "bsm-redislock", "bsm-redislock-1ms"]
LIBRARY = os.path.join(ROOT, "lua/redislock.lua")
ALL_SIDES = OURS + FUNCTIONS + ["redis-py-lock", "redis-py-lock-1ms", "python-redis-lock", "pottery-redlock", "etcd3-lock",
                    "redisson-rlock", "redisson-fairlock", "redsync", "redsync-tuned",
                    "ours-go", "bsm-redislock", "bsm-redislock-1ms",
                    "ours-rust-limit3", "redisson-semaphore", "ours-rust-rw", "redisson-rwlock",
                    "ours-node", "ours-node-redis", "ours-ioredis", "node-redlock", "node-redis-semaphore"]
# The read-write rows: this many readers, and RW_WRITERS writers beside them.
RW_READERS, RW_WRITERS = 16, 2
RW_SIDES = ["ours-rust-rw", "redisson-rwlock"]
# The dead-holder cell: a holder killed mid-hold, and how long until the next grant.
DEAD_SIDES = ["ours-rust", "redisson-rlock", "redisson-fairlock", "redsync", "ours-go", "bsm-redislock"]
# The dead-waiter cell: the fair locks, whose queue a waiter killed in it could hold up.
DEAD_WAITER_SIDES = ["ours-rust", "redisson-fairlock", "ours-go"]


def env_list(name, default):
    return os.environ.get(name, default).split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- processes we started, ended on every way out --------------------------------
STARTED = []  # pids


def cleanup():
    for pid in reversed(STARTED):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
    STARTED.clear()


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


class Server:
    """A server process in a temporary directory of its own."""

    def __init__(self, name, argv_for, ready):
        self.dir = tempfile.mkdtemp(prefix=f"peers-{name}-")
        self.port = free_port()
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(argv_for(self), stdout=self.log, stderr=subprocess.STDOUT)
        STARTED.append(self.proc.pid)
        deadline = time.time() + 30
        while not ready(self):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{name} did not start; see {self.dir}/log")
            time.sleep(0.05)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        STARTED.remove(self.proc.pid)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def process_cpu_s(self):
        """CPU time of the server process (all its threads), from /proc."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RedisServer(Server):
    def __init__(self):
        def argv(s):
            return ["redis-server", "--port", str(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
                    "--save", "", "--appendonly", "no", "--loadmodule", MODULE]

        def ready(s):
            try:
                s.con = redis.Redis(port=s.port)
                return s.con.ping()
            except redis.ConnectionError:
                return False

        super().__init__("redis", argv, ready)

    def reset(self):
        self.con.flushall()

    def stats(self):
        """(CPU seconds, commands processed); the INFO itself counts as one."""
        info = self.con.execute_command("INFO", "cpu", "stats")
        return info["used_cpu_sys"] + info["used_cpu_user"], info["total_commands_processed"] - 1

    def version(self):
        return self.con.info("server")["redis_version"]


class EtcdServer(Server):
    """Debian's etcd-server, one member, defaults but for ports and data dir."""

    def __init__(self):
        def argv(s):
            s.peer_port = free_port()
            client, peer = f"http://127.0.0.1:{s.port}", f"http://127.0.0.1:{s.peer_port}"
            return ["etcd", "--name", "bench", "--data-dir", os.path.join(s.dir, "data"),
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"bench={peer}"]

        def ready(s):
            try:
                return b"true" in self.http("GET", "/health")
            except OSError:
                return False

        super().__init__("etcd", argv, ready)

    def http(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.read()

    def reset(self):
        """Deletes the locks and revokes the leases earlier runs left (python-etcd3's
        Lock takes a fresh lease for every try and leaves those of failed tries)."""
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        self.http("POST", "/v3/kv/deleterange", {"key": b64("/locks/"), "range_end": b64("/locks0")})
        leases = json.loads(self.http("POST", "/v3/lease/leases", {})).get("leases") or []
        for lease in leases:
            self.http("POST", "/v3/lease/revoke", {"ID": lease["ID"]})

    def stats(self):
        """(CPU seconds, gRPC messages received): the requests of the clients."""
        received = 0.0
        for line in self.http("GET", "/metrics").decode().splitlines():
            if line.startswith("grpc_server_msg_received_total"):
                received += float(line.rsplit(" ", 1)[1])
        return self.process_cpu_s(), received

    def version(self):
        return json.loads(self.http("GET", "/version"))["etcdserver"]


# --- clients -------------------------------------------------------------------
class Client:
    """One client process: a pid, a pipe to it and a pipe from it."""

    def __init__(self, pid, to_fd, from_fd, proc=None, count=1):
        self.pid, self.to_fd, self.from_fd, self.buffer = pid, to_fd, from_fd, b""
        # How many clients the process runs: it says `ready` once, reports `count` lines.
        self.count = count
        # A Popen must reap its own process: subprocess reaps abandoned ones itself.
        self.proc = proc
        STARTED.append(pid)

    @classmethod
    def program(cls, argv, count=1):
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return cls(proc.pid, proc.stdin.fileno(), proc.stdout.fileno(), proc, count)

    @classmethod
    def rust(cls, port, hold_ms, *options):
        return cls.program([DRIVER, "--port", str(port), "peer", "--key", KEY, "--hold-ms", str(hold_ms), *options])

    @classmethod
    def python(cls, side, port, key, hold_ms):
        control_r, control_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(control_w)
                os.close(out_r)
                clients.run_client(side, "127.0.0.1", port, key, hold_ms / 1000, control_r, out_w)
                status = 0
            finally:
                os._exit(status)
        os.close(control_r)
        os.close(out_w)
        return cls(pid, control_w, out_r)

    def send(self, line):
        os.write(self.to_fd, line.encode())

    def readline(self, timeout):
        deadline = time.time() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.time()
            if left <= 0 or not select.select([self.from_fd], [], [], left)[0]:
                raise TimeoutError(f"client {self.pid} said nothing for {timeout} s")
            chunk = os.read(self.from_fd, 1 << 20)
            if not chunk:
                raise EOFError(f"client {self.pid} exited without a word")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def end(self):
        """Reaps the process (killing it if it is still there after a second)."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
        else:
            for _ in range(50):
                if os.waitpid(self.pid, os.WNOHANG)[0]:
                    break
                time.sleep(0.02)
            else:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            os.close(self.to_fd)
            os.close(self.from_fd)
        STARTED.remove(self.pid)


def spawners(side, n, hold_ms, redis_server, etcd_server):
    """The processes of one run of `side` with N clients: a list of functions that
    each start one (a Client)."""
    port = redis_server.port
    if side in FUNCTIONS:
        load_library(port)
    if side == "ours-rust":
        return [lambda: Client.rust(port, hold_ms)] * n
    if side == "ours-rust-functions":
        return [lambda: Client.rust(port, hold_ms, "--backend", "functions")] * n
    if side == "ours-rust-limit3":
        return [lambda: Client.rust(port, hold_ms, "--limit", "3")] * n
    if side == "ours-rust-rw":
        return ([lambda: Client.rust(port, hold_ms, "--shared", "--role", "reader")] * n
                + [lambda: Client.rust(port, hold_ms, "--role", "writer")] * RW_WRITERS)
    if side.startswith("redisson-"):
        kind = side.split("-", 1)[1]
        writers = RW_WRITERS if kind == "rwlock" else 0
        argv = ["java", "-jar", REDISSON, "--port", str(port), "--key", KEY, "--hold-ms", str(hold_ms),
                "--kind", kind, "--clients", str(n), "--writers", str(writers)]
        return [lambda: Client.program(argv, n + writers)]
    if side in NODE_SIDES:
        return [lambda: Client.program(["node", NODE_PEER, side, str(port), KEY, str(hold_ms)])] * n
    if side in GO_SIDES:
        lib = {"ours": "ours", "redsync": "redsync", "bsm": "bsm"}[side.split("-")[0]]
        argv = [GO_PEER, "--port", str(port), "--key", KEY, "--hold-ms", str(hold_ms), "--clients", str(n),
                "--lib", lib]
        if side in ("redsync-tuned", "bsm-redislock-1ms"):
            argv.append("--tuned")
        if side == "ours-go-functions":
            argv += ["--backend", "functions"]
        return [lambda: Client.program(argv, n)]
    if side == "etcd3-lock":
        port = etcd_server.port
    return [lambda: Client.python(side, port, KEY, hold_ms)] * n


def load_library(port):
    """FUNCTION LOAD REPLACE of lua/redislock.lua: the functions sides use the library
    on the same server (the module being there changes nothing for them)."""
    import redis

    with open(LIBRARY, encoding="utf-8") as source:
        redis.Redis(port=port).function_load(source.read(), replace=True)


def start(spawn_all, side):
    """Starts the processes and waits for each to say `ready`."""
    started = []
    try:
        for spawn in spawn_all:
            started.append(spawn())
        for client in started:
            line = client.readline(120)
            if line != "ready":
                raise RuntimeError(f"{side}: client said {line!r}")
    except BaseException:
        for client in started:
            client.end()
        raise
    return started


def run_once(side, n, hold_ms, seconds, redis_server, etcd_server):
    server = etcd_server if side == "etcd3-lock" else redis_server
    server.reset()
    started = start(spawners(side, n, hold_ms, redis_server, etcd_server), side)
    try:
        t0 = time.time() + 0.3
        t1 = t0 + seconds
        for client in started:
            client.send(f"go {t0:.6f} {t1:.6f}\n")
        time.sleep(max(0.0, t0 - time.time()))
        cpu0, commands0 = server.stats()
        time.sleep(max(0.0, t1 - time.time()))
        cpu1, commands1 = server.stats()
        reports = [json.loads(client.readline(30)) for client in started for _ in range(client.count)]
    finally:
        for client in started:
            client.end()
    return report.summarise(side, n, hold_ms, seconds, reports, cpu1 - cpu0, commands1 - commands0)


def dead_holder(side, redis_server, limit_s=75.0):
    """A holder SIGKILLed while it holds the lock, a waiter queued behind it: seconds
    from the kill to the waiter's grant (None: no grant within `limit_s`)."""
    redis_server.reset()
    # Both are started before the lock is taken: a JVM warms up on the lock before
    # it says `ready`, which it could not do behind the holder.
    (holder,) = start(spawners(side, 1, 600_000, redis_server, None), side)
    waiter = None
    try:
        (waiter,) = start(spawners(side, 1, 0, redis_server, None), side)
        t = time.time()
        holder.send(f"go {t:.6f} {t + 600:.6f}\n")
        deadline = time.time() + 30
        while redis_server.con.dbsize() == 0:
            if time.time() > deadline:
                raise RuntimeError(f"{side}: the holder did not take the lock")
            time.sleep(0.01)
        held_at = time.time()
        t0 = time.time() + 0.2
        waiter.send(f"go {t0:.6f} {t0 + limit_s:.6f} first\n")
        time.sleep(max(0.0, t0 + 0.5 - time.time()))
        holder.proc.kill()
        killed = time.time()
        got = json.loads(waiter.readline(limit_s + 30))
    finally:
        holder.end()
        if waiter is not None:
            waiter.end()
    granted = t0 + got["waits_us"][0] / 1e6 if got["waits_us"] else None
    return {"side": side, "held_before_kill_s": killed - held_at,
            "next_grant_s": None if granted is None else granted - killed, "limit_s": limit_s}


def dead_waiter(side, redis_server, hold_ms=2000, limit_s=45.0):
    """A holder that keeps the lock `hold_ms` at a time, a waiter A queued behind it and
    SIGKILLed there, and a waiter B queued behind A: seconds from the kill to B's grant
    (the holder's release comes within `hold_ms` of the kill)."""
    redis_server.reset()
    started = []
    try:
        (holder,) = start(spawners(side, 1, hold_ms, redis_server, None), side)
        started.append(holder)
        (doomed,) = start(spawners(side, 1, 0, redis_server, None), side)
        started.append(doomed)
        (behind,) = start(spawners(side, 1, 0, redis_server, None), side)
        started.append(behind)
        t = time.time() + 0.1
        holder.send(f"go {t:.6f} {t + 600:.6f}\n")
        doomed.send(f"go {t + 0.3:.6f} {t + 600:.6f}\n")
        behind.send(f"go {t + 0.6:.6f} {t + 0.6 + limit_s:.6f} first\n")
        time.sleep(max(0.0, t + 0.9 - time.time()))
        doomed.proc.kill()
        killed = time.time()
        got = json.loads(behind.readline(limit_s + 30))
    finally:
        for client in started:
            client.end()
    granted = t + 0.6 + got["waits_us"][0] / 1e6 if got["waits_us"] else None
    return {"side": side, "hold_ms": hold_ms, "next_grant_s": None if granted is None else granted - killed,
            "limit_s": limit_s}


def pinned_versions():
    """Redisson's and redsync's versions, as pinned in their build files."""
    out = {}
    with open(os.path.join(ROOT, "bench/peers/java/pom.xml")) as f:
        for line in f:
            if "<redisson.version>" in line:
                out["redisson"] = line.split(">", 1)[1].split("<", 1)[0]
    with open(os.path.join(ROOT, "bench/peers/go/go.mod")) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2 and parts[0] in ("github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9",
                                                "github.com/bsm/redislock"):
                name = parts[0].split("/")[2]
                out["bsm/redislock" if name == "redislock" else name] = parts[1]
    out["java"] = platform_java()
    if shutil.which("go"):
        out["go"] = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    # The Node sides' packages, as js/package-lock.json installed them.
    for package in ["ioredis", "redis", "redlock", "redis-semaphore"]:
        try:
            with open(os.path.join(ROOT, "js/node_modules", package, "package.json")) as f:
                out[f"{package} (npm)"] = json.load(f)["version"]
        except OSError:
            pass
    node = shutil.which("node")
    if node:
        out["node"] = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    return out


def platform_java():
    lines = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return lines[0].split('"')[1] if lines and '"' in lines[0] else "unknown"


def machine(redis_server, etcd_server):
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {name: importlib.metadata.version(name)
                for name in ["redis", "python-redis-lock", "pottery", "etcd3", "grpcio", "protobuf", "tenacity"]}
    versions.update(pinned_versions())
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip()
    return {
        "commit": commit or "unknown",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis": redis_server.version(),
        "etcd": etcd_server.version() if etcd_server else "not run",
        "libraries": versions,
    }


def main():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    atexit.register(cleanup)
    ns = [int(n) for n in env_list("PEERS_N", "1 4 16 32")]
    holds = [int(h) for h in env_list("PEERS_HOLD_MS", "0 10 100")]
    sides = env_list("PEERS_SIDES", " ".join(ALL_SIDES))
    shortest = float(os.environ.get("PEERS_SECONDS", "4"))
    cycles = float(os.environ.get("PEERS_CYCLES", "12"))
    out_dir = os.environ.get("PEERS_OUT", os.path.join(ROOT, "bench"))
    work = os.path.join(ROOT, "target/peers")
    os.makedirs(work, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)

    redis_server = RedisServer()
    # etcd only for its side: a subset without it needs no etcd-server.
    etcd_server = EtcdServer() if "etcd3-lock" in sides else None
    try:
        results = {"machine": machine(redis_server, etcd_server), "cycles": cycles, "runs": []}
        cell = 0
        for hold_ms in holds:
            for n in ns:
                seconds = max(shortest, cycles * n * hold_ms / 1000)
                order = sides[cell % len(sides):] + sides[:cell % len(sides)]
                cell += 1
                for side in order:
                    if side in RW_SIDES and n != RW_READERS:
                        continue
                    run = run_once(side, n, hold_ms, seconds, redis_server, etcd_server)
                    results["runs"].append(run)
                    print(report.line(run), flush=True)
                    with open(os.path.join(work, "results.json"), "w") as f:
                        json.dump(results, f, indent=1)
        if os.environ.get("PEERS_DEAD", "1") != "0":
            results["dead_holder"] = []
            for side in [s for s in DEAD_SIDES if s in sides]:
                dead = dead_holder(side, redis_server)
                results["dead_holder"].append(dead)
                print(report.dead_line(dead), flush=True)
                with open(os.path.join(work, "results.json"), "w") as f:
                    json.dump(results, f, indent=1)
            results["dead_waiter"] = []
            for side in [s for s in DEAD_WAITER_SIDES if s in sides]:
                dead = dead_waiter(side, redis_server)
                results["dead_waiter"].append(dead)
                print(report.dead_waiter_line(dead), flush=True)
                with open(os.path.join(work, "results.json"), "w") as f:
                    json.dump(results, f, indent=1)
    finally:
        if etcd_server:
            etcd_server.stop()
        redis_server.stop()
    report.write(results, os.path.join(out_dir, "PEERS.md"))
    import plot  # matplotlib only now: it is slow to import and not needed before

    for path in plot.draw(results, out_dir):
        print("wrote", path)


if __name__ == "__main__":
    main()
