#!/usr/bin/env bash
# Instructions per release + hand-off with few and with many clients queued on one
# lock, counted by valgrind's callgrind on redis-server (the whole server: the
# release, the hand-off, and both replies). Prints a Markdown table; used by
# bench/run.sh. SHORT and LONG set the queue lengths.
set -euo pipefail
cd "$(dirname "$0")/.."

SHORT="${SHORT:-100}"
LONG="${LONG:-8000}"
MODULE="$PWD/target/release/libredis_lock.so"
DRIVER="$PWD/target/release/lock-bench"

dir="$(mktemp -d)"
port=$(( 20000 + RANDOM % 20000 ))
valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
  --maxclients $((LONG + 100)) --loadmodule "$MODULE" >"$dir/valgrind.log" 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done

"$DRIVER" --port "$port" queue --short "$SHORT" --long "$LONG" \
  --callgrind-pid "$vg" --callgrind-out-file "$dir/callgrind.out"
