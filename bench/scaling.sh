#!/usr/bin/env bash
# Shared locks that scale: instructions per step on a lock of n holdings, per waiter
# of a hand-off to N shared waiters and per lapse applied on a replica, beside RPUSH
# waking N BLPOP clients, counted by callgrind on redis-server (lock-bench scaling).
# Prints a Markdown table and the verdict on each target, writes the log-log plot to
# PLOT (bench/scaling.svg), and fails when a target is missed. Used by bench/run.sh.
#
#   bench/scaling.sh                                  # n = 1k, 10k, 100k; N = 1k, 10k
#   HOLDERS=1000,10000 WAITERS=1000 bench/scaling.sh  # quicker
#
# N stops where file descriptors do: each waiter is a connection, and a process may
# hold `ulimit -n` of them (20,000 on the bench machine), the server as many.
set -euo pipefail
cd "$(dirname "$0")/.."

HOLDERS="${HOLDERS:-1000,10000,100000}"
WAITERS="${WAITERS:-1000,10000}"
PLOT="${PLOT:-bench/scaling.svg}"
DRIVER="$PWD/target/release/lock-bench"
most=$(echo "$WAITERS" | tr ',' '\n' | sort -n | tail -1)

source bench/callgrind-server.sh
start_callgrind_server --maxclients $((most + 100))
replica_dir="$dir" replica_vg="$vg" replica_port="$port"

master_dir="$(mktemp -d)"
master_port=""
for _ in $(seq 1 50); do
  candidate=$(( 20000 + RANDOM % 20000 ))
  if [ "$candidate" != "$replica_port" ] && ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
    master_port=$candidate; break
  fi
done
[ -n "$master_port" ] || { echo "no free port found" >&2; exit 1; }
redis-server --port "$master_port" --bind 127.0.0.1 --dir "$master_dir" --save "" --appendonly no \
  --logfile "$master_dir/redis.log" --loadmodule "${MODULE:-$PWD/target/release/libredis_lock.so}" &
master=$!
trap 'kill $vg $master 2>/dev/null; wait $vg $master 2>/dev/null; rm -rf "$replica_dir" "$master_dir"' EXIT
for _ in $(seq 1 100); do redis-cli -p "$master_port" ping >/dev/null 2>&1 && break; sleep 0.05; done

"$DRIVER" --port "$replica_port" scaling --holders "$HOLDERS" --waiters "$WAITERS" \
  --master-port "$master_port" --callgrind-pid "$replica_vg" \
  --callgrind-out-file "$replica_dir/callgrind.out" --plot "$PLOT"
