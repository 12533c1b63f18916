"""What 1,000 observers of one election cost the server (docs/leaders.md).

Each observer is what every client's `observe` runs: `XREAD COUNT 16 BLOCK 1000
STREAMS <record> <last id>` in a loop on a connection of its own. Observers read the
record, never the lock, so the module and the library cost the same here. Measured
on a redis-server of its own: its CPU time (utime + stime from /proc) and INFO
commandstats while idle for IDLE seconds, then while a new leader takes office
every second (a guarded XADD as a leader makes), with the delay from each XADD to
each observer's reply.

    target/venv/bin/python bench/leader-observers.py [N] [IDLE]
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import redis.asyncio

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
IDLE = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
CHANGES = 10
RECORD = "{scheduler}:leader"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def commandstats(r: redis.asyncio.Redis) -> dict[str, dict[str, float]]:
    raw = await r.info("commandstats")
    return {k.removeprefix("cmdstat_"): v for k, v in raw.items()}


async def main() -> None:
    port = free_port()
    work = tempfile.mkdtemp()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
         "--maxclients", str(N + 100), "--dir", work],
        stdout=subprocess.DEVNULL,
    )
    try:
        admin = redis.asyncio.Redis(port=port)
        for _ in range(100):
            try:
                await admin.ping()
                break
            except redis.ConnectionError:
                await asyncio.sleep(0.05)
        await admin.xadd(RECORD, {"value": "first"}, id="1-0")
        published: dict[str, float] = {}
        delays: list[float] = []
        stop = asyncio.Event()

        async def observer() -> None:
            con = redis.asyncio.Redis(port=port, socket_timeout=5)
            after = "1-0"
            while not stop.is_set():
                reply = await con.execute_command(
                    "XREAD", "COUNT", 16, "BLOCK", 1000, "STREAMS", RECORD, after
                )
                now = time.monotonic()
                for _, entries in reply or []:
                    for entry_id, _fields in entries:
                        after = entry_id.decode()
                        if after in published:
                            delays.append(now - published[after])
            await con.aclose()

        tasks = [asyncio.ensure_future(observer()) for _ in range(N)]
        await asyncio.sleep(3)  # all connected and blocked
        await admin.config_resetstat()
        cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
        await asyncio.sleep(IDLE)
        cpu1, t1 = cpu_seconds(server.pid), time.monotonic()
        idle = await commandstats(admin)
        await admin.config_resetstat()
        for term in range(2, 2 + CHANGES):
            entry_id = f"{term}-0"
            published[entry_id] = time.monotonic()
            await admin.xadd(RECORD, {"value": f"node-{term}"}, id=entry_id, maxlen=16, approximate=False)
            await asyncio.sleep(1)
        cpu2, t2 = cpu_seconds(server.pid), time.monotonic()
        busy = await commandstats(admin)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        x = idle.get("xread", {})
        print(f"observers: {N}")
        print(f"idle {t1 - t0:.1f} s: {x.get('calls', 0) / (t1 - t0):.0f} XREAD/s, "
              f"{x.get('usec_per_call', 0):.2f} us per call, server CPU {100 * (cpu1 - cpu0) / (t1 - t0):.1f}%")
        xb = busy.get("xread", {})
        delays.sort()
        print(f"a new leader each second ({CHANGES}): {xb.get('calls', 0) / (t2 - t1):.0f} XREAD/s, "
              f"{xb.get('usec_per_call', 0):.2f} us per call, server CPU {100 * (cpu2 - cpu1) / (t2 - t1):.1f}%; "
              f"XADD {busy.get('xadd', {}).get('usec_per_call', 0):.0f} us per call (waking {N})")
        if delays:
            print(f"XADD to observer: {len(delays)} deliveries, median {1000 * statistics.median(delays):.1f} ms, "
                  f"p99 {1000 * delays[int(len(delays) * 0.99) - 1]:.1f} ms, max {1000 * delays[-1]:.1f} ms")
        await admin.aclose()
    finally:
        server.terminate()
        server.wait()


asyncio.run(main())
