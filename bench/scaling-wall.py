#!/usr/bin/env python3
"""Wall-clock figures of large shared locks, as the scaling issue gave them.

Not a test and asserts nothing (timings on a shared machine are noisy): it prints the
server time of the steps that stalled Redis, for a module build given by path, so
that two builds can be compared on the same machine in the same hour:

    python3 bench/scaling-wall.py target/release/libredis_lock.so
    python3 bench/scaling-wall.py /path/to/an/older/libredis_lock.so

- load: RESTORE of a lock with n shared holdings (n = 20k, 40k, 80k), wall ms;
- hand-off: a writer's LOCK.RELEASE granting N shared waiters (N = 4.5k, 9k, 18k):
  its usec in INFO commandstats, and the longest PING round trip meanwhile; beside
  it RPUSH waking N clients blocked in BLPOP;
- replica: 15k holdings lapsing together, the replica's LOCK.APPLY usec in total;
- acquire at 50k holdings: usec per call (INFO commandstats) of 1,000 more;
- building 100k holdings with pipelined acquires: wall seconds.
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import redis
from redis.retry import Retry
from redis.backoff import NoBackoff

MODULE = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/libredis_lock.so")
SERVER = os.environ.get("REDIS_SERVER", "redis-server")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp()
        self.port = free_port()
        self.proc = subprocess.Popen(
            [SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--maxclients", "19500",
             "--logfile", os.path.join(self.dir, "log"), "--loadmodule", MODULE, *extra])
        self.con = self.connect()
        for _ in range(200):
            try:
                self.con.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)

    def connect(self):
        # No retries, no read timeout: a stalled server must be waited for, not retried.
        return redis.Redis(port=self.port, retry=Retry(NoBackoff(), 0), socket_timeout=None)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def build(con, key, prefix, n, ttl=3_600_000):
    for start in range(0, n, 5000):
        pipe = con.pipeline(transaction=False)
        for i in range(start, min(n, start + 5000)):
            pipe.execute_command("LOCK.ACQUIRE", key, f"{prefix}{i}", ttl, "SHARED")
        pipe.execute()


def cmd_usec(con, name):
    stats = con.info("commandstats").get(f"cmdstat_{name}", {})
    return stats.get("usec", 0), stats.get("calls", 0)


def wait_blocked(con, n):
    while con.info("clients")["blocked_clients"] < n:
        time.sleep(0.05)


def read_all(socks):
    for s in socks:
        if not s.recv(64):
            raise RuntimeError("connection closed without a reply")
        s.close()


def ping_stall(port, stop, out):
    con = redis.Redis(port=port, retry=Retry(NoBackoff(), 0), socket_timeout=None)
    worst = 0.0
    while not stop.is_set():
        t = time.perf_counter()
        con.ping()
        worst = max(worst, time.perf_counter() - t)
        time.sleep(0.001)
    out.append(worst)


def load_figures():
    server = Server()
    con = server.con
    for n in (20_000, 40_000, 80_000):
        con.flushall()
        build(con, "big", "h", n)
        payload = con.dump("big")
        con.delete("big")
        t = time.perf_counter()
        con.restore("big", 0, payload)
        print(f"load: RESTORE of a lock with {n} holdings: {(time.perf_counter() - t) * 1e3:.1f} ms")
    server.stop()


def hand_off_figures():
    server = Server()
    con = server.con
    for n in (4_500, 9_000, 18_000):
        con.flushall()
        con.config_resetstat()
        con.execute_command("LOCK.ACQUIRE", "rw", "writer", 3_600_000)
        readers = []
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", server.port))
            owner = f"r{i}"
            s.sendall((f"*7\r\n$12\r\nLOCK.ACQUIRE\r\n$2\r\nrw\r\n${len(owner)}\r\n{owner}\r\n"
                       "$6\r\n600000\r\n$6\r\nSHARED\r\n$4\r\nWAIT\r\n$1\r\n0\r\n").encode())
            readers.append(s)
        wait_blocked(con, n)
        stop, worst = threading.Event(), []
        pinger = threading.Thread(target=ping_stall, args=(server.port, stop, worst))
        pinger.start()
        time.sleep(0.05)
        con.execute_command("LOCK.RELEASE", "rw", "writer")
        read_all(readers)
        stop.set()
        pinger.join()
        usec, _ = cmd_usec(con, "lock.release")
        print(f"hand-off to {n} shared waiters: LOCK.RELEASE {usec / 1e3:.1f} ms, longest PING {worst[0] * 1e3:.1f} ms")
        con.flushall()
        while con.info("clients")["connected_clients"] > 1:
            time.sleep(0.05)
        con.config_resetstat()
        poppers = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(b"*3\r\n$5\r\nBLPOP\r\n$4\r\nlist\r\n$1\r\n0\r\n")
            poppers.append(s)
        wait_blocked(con, n)
        stop, worst = threading.Event(), []
        pinger = threading.Thread(target=ping_stall, args=(server.port, stop, worst))
        pinger.start()
        time.sleep(0.05)
        con.rpush("list", *[f"e{i}" for i in range(n)])
        read_all(poppers)
        stop.set()
        pinger.join()
        usec, _ = cmd_usec(con, "rpush")
        print(f"  RPUSH waking {n} BLPOP clients: RPUSH {usec / 1e3:.1f} ms, longest PING {worst[0] * 1e3:.1f} ms")
        while con.info("clients")["connected_clients"] > 1:
            time.sleep(0.05)
    server.stop()


def replica_figures():
    master, replica = Server(), Server()
    replica.con.replicaof("127.0.0.1", master.port)
    while replica.con.info("replication").get("master_link_status") != "up":
        time.sleep(0.05)
    n = 15_000
    build(master.con, "lapse", "p", n, ttl=4_000)
    master.con.execute_command("WAIT", 1, 0)
    replica.con.config_resetstat()
    stop, worst = threading.Event(), []
    pinger = threading.Thread(target=ping_stall, args=(replica.port, stop, worst))
    pinger.start()
    while replica.con.exists("lapse"):
        time.sleep(0.05)
    stop.set()
    pinger.join()
    usec, calls = cmd_usec(replica.con, "lock.apply")
    print(f"replica: {n} holdings lapsing together: {calls} LOCK.APPLY, {usec / 1e3:.1f} ms in all, "
          f"longest PING on the replica {worst[0] * 1e3:.1f} ms")
    master.stop()
    replica.stop()


def acquire_and_build_figures():
    server = Server()
    con = server.con
    build(con, "k", "h", 50_000)
    con.config_resetstat()
    build(con, "k", "a", 1_000)
    usec, calls = cmd_usec(con, "lock.acquire")
    print(f"acquire at 50k holdings: {usec / calls:.1f} usec per call")
    con.flushall()
    t = time.perf_counter()
    build(con, "k", "h", 100_000)
    print(f"building 100k holdings (pipelined acquires): {time.perf_counter() - t:.2f} s")
    server.stop()


if __name__ == "__main__":
    print(f"module: {MODULE}")
    which = sys.argv[2:] or ["load", "handoff", "replica", "acquire"]
    for name in which:
        {"load": load_figures, "handoff": hand_off_figures, "replica": replica_figures,
         "acquire": acquire_and_build_figures}[name]()
