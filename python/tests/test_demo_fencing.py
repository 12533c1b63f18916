"""``make demo-fencing`` (examples/demo_fencing.py), one round each way, so that the
proof in the README cannot rot: a worker stopped for real (SIGSTOP) past its TTL
while a rival takes over; the stale writes of the usual recipe and of redis-py's
Lock land, redis-lock's guard and PostgreSQL fence refuse theirs."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

from servers import ROOT, module_path


def test_the_demo_shows_the_stale_writes_land_but_not_redis_locks() -> None:
    if not os.environ.get("PG_BIN") and not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        pytest.skip("no PostgreSQL server installed (make deps installs it)")
    demo = subprocess.run(
        [sys.executable, str(ROOT / "python" / "examples" / "demo_fencing.py"), "--rounds", "1"],
        env={**os.environ, "REDIS_LOCK_MODULE": str(module_path())},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = demo.stdout
    assert re.search(r"^SET NX PX \+ owner-checked release +2 of 2 +0$", out, re.M), out
    assert re.search(r"^redis-py Lock \(redis.lock.Lock\) +2 of 2 +0$", out, re.M), out
    assert re.search(r"^redis-lock guard \+ PostgreSQL fence +0 of 2 +2$", out, re.M), out
    assert re.search(r"Redis: FENCED token \d+ does not hold \{demo:redis-lock\}", out), out
    assert "PostgreSQL: the fence of 'demo:redis-lock' in PostgreSQL refused token" in out
