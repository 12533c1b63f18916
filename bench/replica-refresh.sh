#!/usr/bin/env bash
# What a refresh costs a replica: an exclusive lock's refresh replicates as
# LOCK.APPLY (so the replica sends the same lock.refresh event as its master),
# against PEXPIREAT, the cheaper form it replaced, on the same master/replica pair in
# the same run. Usage: bench/replica-refresh.sh [module.so] (default: the release
# build). Prints the replica's and the master's usec_per_call from INFO commandstats.
set -euo pipefail
so=${1:-$(pwd)/target/release/libredis_lock.so}
dir=$(mktemp -d)
trap 'redis-cli -p 6611 shutdown nosave >/dev/null 2>&1 || true; redis-cli -p 6612 shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/m" "$dir/r"
redis-server --port 6611 --dir "$dir/m" --save "" --loadmodule "$so" --daemonize yes --logfile "$dir/m/log"
redis-server --port 6612 --dir "$dir/r" --save "" --loadmodule "$so" --replicaof 127.0.0.1 6611 --daemonize yes --logfile "$dir/r/log"
sleep 1
"${PYTHON:-$(dirname "$0")/../target/venv/bin/python}" - <<'PY'
import time
import redis
m, r = redis.Redis(port=6611), redis.Redis(port=6612)
N, ROUNDS = 1000, 50
for i in range(N):
    m.execute_command("LOCK.ACQUIRE", f"lk:{i}", f"owner-{i:032d}", 600000)
    m.set(f"sk:{i}", "x", px=600000)
m.execute_command("WAIT", 1, 5000)
for run in range(3):
    r.config_resetstat()
    m.config_resetstat()
    for rnd in range(ROUNDS):
        p = m.pipeline(transaction=False)
        at = int(time.time() * 1000) + 600000 + rnd
        for i in range(N):
            # The holder refreshes its lock; a plain key gets the PEXPIREAT a
            # refresh used to replicate as.
            p.execute_command("LOCK.ACQUIRE", f"lk:{i}", f"owner-{i:032d}", 600000)
            p.execute_command("PEXPIREAT", f"sk:{i}", at)
        p.execute()
    m.execute_command("WAIT", 1, 10000)
    ri, mi = r.info("commandstats"), m.info("commandstats")
    apply, pexp = ri["cmdstat_lock.apply"], ri["cmdstat_pexpireat"]
    print(
        f"run {run}: replica lock.apply {apply['usec_per_call']} us/call ({apply['calls']} calls), "
        f"pexpireat {pexp['usec_per_call']} us/call: {apply['usec_per_call'] / pexp['usec_per_call']:.2f}x; "
        f"master lock.acquire {mi['cmdstat_lock.acquire']['usec_per_call']} us/call"
    )
PY
