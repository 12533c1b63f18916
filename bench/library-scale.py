#!/usr/bin/env python3
"""The function library at scale, measured as the library-cost issue measured it:
the server's time per call (INFO commandstats) and the longest PING of another
client meanwhile, on a lock of n shared holdings and on a queue of n waiters; and
n waiters renewing their places (one lock_wait per waiter per 2 s lease) for a
while, with another client's PING round trips at p50, p99 and longest.

Not a test and asserts nothing (wall times on a shared machine are noisy; the
instruction counts of bench/scaling-library.sh are the assertion):

    target/venv/bin/python bench/library-scale.py                       # this library
    target/venv/bin/python bench/library-scale.py --library tests/fixtures/redislock-v2.lua \\
        --sizes 1000 10000                                               # an older one
    target/venv/bin/python bench/library-scale.py --module target/release/libredis_lock.so

The locks are written in the library's layout with raw commands (building them
through an older library would cost O(n^2)), as bench/scaling-library.sh does.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any

import redis

SERVER = os.environ.get("REDIS_SERVER", "redis-server")
CALLS = 20
LEASE = 2000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, module: str | None) -> None:
        self.dir = tempfile.mkdtemp()
        self.port = free_port()
        extra = ["--loadmodule", module] if module else []
        self.proc = subprocess.Popen(
            [
                SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                self.dir,
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                os.path.join(self.dir, "log"),
                *extra,
            ]
        )
        self.con = self.connect()
        for _ in range(200):
            try:
                self.con.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)

    def connect(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=None)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def build(con: redis.Redis, version: int, n: int) -> None:
    """The lock `s` of n shared holdings (o0 ...) and the queue of n waiters (w0 ...)
    behind a's exclusive holding of `q`, in the layout of `version`."""
    now = int(con.time()[0]) * 1000
    far, later, token = now + 3_600_000, now + 7_200_000, now * 1000
    pipe = con.pipeline(transaction=False)
    if version >= 3:
        pipe.hset("s", "redislock", "3")
        pipe.hset("q", mapping={"redislock": "3", "x": f"3 {token}q a"})
        pipe.hset("q{q}:lockq", mapping={"redislock": "3", "seq": n, "until": later})
        pipe.set("s{s}:lockm", token + n + 1, px=3_600_000)
        pipe.set("q{q}:lockm", token + 1, px=3_600_000)
    else:
        pipe.hset("s", "mode", "shared")
        pipe.hset("s{s}:lockq", mapping={"mark": token + n + 1, "seq": 0})
        pipe.hset("q", mapping={"mode": "exclusive", "h:a": f"{token} {far}"})
        pipe.hset("q{q}:lockq", mapping={"mark": token + 1, "seq": n})
    for start in range(0, n, 1000):
        span = range(start, min(n, start + 1000))
        pipe.hset("s", mapping={f"h:o{i}": f"{token + i + 1} {far}" for i in span})
        if version >= 3:
            pipe.hset(
                "q{q}:lockq",
                mapping={f"w:w{i}": f"{i + 1} {LEASE} 100000 x 0 {now}" for i in span},
            )
            pipe.zadd("s{s}:lockh", {f"o{i}": far for i in span})
            pipe.zadd("q{q}:lockw", {f"w{i}": i + 1 for i in span})
            pipe.zadd("q{q}:lockl", {f"w{i}": far for i in span})
        else:
            pipe.hset(
                "q{q}:lockq",
                mapping={
                    f"w:w{i}": f"{i + 1} {far} {LEASE} 100000 x 0 {now}" for i in span
                },
            )
        pipe.execute()
    for key, at in [
        ("s", far),
        ("q", far),
        ("s{s}:lockh", far),
        ("q{q}:lockq", later),
        ("q{q}:lockw", later),
        ("q{q}:lockl", later),
    ]:
        pipe.pexpireat(key, at)
    pipe.execute()


def build_module(con: redis.Redis, n: int) -> None:
    for start in range(0, n, 5000):
        pipe = con.pipeline(transaction=False)
        for i in range(start, min(n, start + 5000)):
            pipe.execute_command("LOCK.ACQUIRE", "s", f"o{i}", 3_600_000, "SHARED")
        pipe.execute()


class Pinger:
    """PINGs from a connection of its own until stopped; its round trips in ms."""

    def __init__(self, port: int) -> None:
        self.con = redis.Redis(port=port, socket_timeout=None)
        self.times: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            sent = time.perf_counter()
            self.con.ping()
            self.times.append((time.perf_counter() - sent) * 1000)
            time.sleep(0.001)

    def done(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        ordered = sorted(self.times) or [0.0]
        return {
            "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "max": ordered[-1],
        }


def per_call(server: Server, command: list[Any], stat: str) -> tuple[float, float]:
    """usec per call of CALLS `command`s (commandstats) and the longest PING meanwhile."""
    con = server.con
    con.config_resetstat()
    pinger = Pinger(server.port)
    time.sleep(0.05)
    for _ in range(CALLS):
        con.execute_command(*command)
    time.sleep(0.05)
    pings = pinger.done()
    stats = con.info("commandstats").get(f"cmdstat_{stat}", {})
    return float(stats.get("usec_per_call", 0.0)), pings["max"]


def renewing(
    server: Server, n: int, seconds: float
) -> tuple[float, float, dict[str, float]]:
    """n waiters renewing their places once per lease, for `seconds`: the server's
    usec per renewal, the renewals a second sent (four client threads: at most what
    they manage), and the PINGs of another client meanwhile."""
    con = server.con
    con.config_resetstat()
    rate = n / (LEASE / 1000)  # renewals a second
    threads = 4
    stop = time.monotonic() + seconds

    def renew(part: int) -> None:
        mine = redis.Redis(port=server.port, socket_timeout=None)
        interval = threads / rate
        i, next_at = part, time.monotonic()
        while time.monotonic() < stop:
            mine.execute_command(
                "FCALL", "lock_wait", 1, "q", f"w{i % n}", 100000, "LEASE", LEASE
            )
            i += threads
            next_at += interval
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    pinger = Pinger(server.port)
    workers = [threading.Thread(target=renew, args=(p,)) for p in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    pings = pinger.done()
    stats = con.info("commandstats").get("cmdstat_fcall", {})
    sent = float(stats.get("calls", 0)) / seconds
    return float(stats.get("usec_per_call", 0.0)), sent, pings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", default="lua/redislock.lua")
    parser.add_argument("--module", help="a module build, for its LOCK.EXTEND beside")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="how long n waiters renew (their PING row)",
    )
    args = parser.parse_args()
    with open(args.library, encoding="utf-8") as f:
        source = f.read()
    print(
        "| n | lock_extend of one of n holdings, usec/call | PING max (ms) "
        "| a waiter's renewal among n, usec/call | PING max (ms) "
        "| n waiters renewing every 2 s: usec/renewal | renewals/s sent "
        "| PING p50 / p99 / max (ms) "
        + ("| module LOCK.EXTEND, usec/call |" if args.module else "|")
    )
    print("|---|---|---|---|---|---|---|---|" + ("---|" if args.module else ""))
    for n in args.sizes:
        server = Server(None)
        try:
            server.con.function_load(source, replace=True)
            version = int(server.con.fcall_ro("lock_version", 0))
            build(server.con, version, n)
            extend = per_call(
                server,
                ["FCALL", "lock_extend", 1, "s", f"o{n // 2}", 3_600_000],
                "fcall",
            )
            renew = per_call(
                server,
                ["FCALL", "lock_wait", 1, "q", f"w{n - 1}", 100000, "LEASE", LEASE],
                "fcall",
            )
            load = renewing(server, n, args.seconds)
        finally:
            server.stop()
        row = (
            f"| {n} | {extend[0]:.1f} | {extend[1]:.2f} | {renew[0]:.1f} | {renew[1]:.2f} "
            f"| {load[0]:.1f} | {load[1]:.0f} | {load[2]['p50']:.2f} / {load[2]['p99']:.2f} / "
            f"{load[2]['max']:.2f} |"
        )
        if args.module:
            module = Server(os.path.abspath(args.module))
            try:
                build_module(module.con, n)
                usec, _ = per_call(
                    module, ["LOCK.EXTEND", "s", f"o{n // 2}", 3_600_000], "lock.extend"
                )
            finally:
                module.stop()
            row += f" {usec:.1f} |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
