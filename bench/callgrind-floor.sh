#!/usr/bin/env bash
# What the Redis module API alone costs an exclusive acquire of a free key: callgrind
# instructions per call (as bench/callgrind.sh counts them) of FLOOR.ACQUIRE
# (bench/api-floor.c: only the API calls LOCK.ACQUIRE cannot do without), beside
# LOCK.ACQUIRE and SET NX PX, on one server with both modules, RUNS times (a
# server's random hash seed moves Redis's own lookups by a few percent from one
# start to the next). Prints a Markdown table, medians over the runs.
#
#   bench/callgrind-floor.sh
#   RUNS=3 N=20000 bench/callgrind-floor.sh
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-3}"
N="${N:-20000}"
OWNER="6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"

cargo build --release --quiet --lib
# redismodule.h as the redis-module crate ships it (the one the module is built with).
header="$(cargo metadata --format-version 1 | python3 -c '
import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "redis-module":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "src", "include"))
        break')"
build="$(mktemp -d)"
results="$build/results"
trap 'rm -rf "$build"' EXIT
gcc -O2 -Wall -Werror -fPIC -shared -I "$header" -o "$build/floor.so" bench/api-floor.c

source bench/callgrind-server.sh
gen() { seq 0 $((N - 1)) | awk -v f="$1" '{ printf f "\r\n", $1 }'; }
instructions() {
  redis-cli -p "$port" FLUSHALL >/dev/null
  callgrind_control -z "$vg" >/dev/null 2>&1
  gen "$1" | redis-cli -p "$port" --pipe >/dev/null
  callgrind_control -d "$vg" >/dev/null 2>&1
  local dump
  dump=$(ls -t "$dir"/callgrind.out* | head -1)
  callgrind_annotate --inclusive=yes --auto=no "$dump" 2>/dev/null \
    | awk -v n="$N" '!done && /[:]call \[/ { gsub(",", "", $1); printf "%.0f", $1 / n; done = 1 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for _ in $(seq 1 "$RUNS"); do
  (
    start_callgrind_server --loadmodule "$build/floor.so"
    echo "$(instructions "FLOOR.ACQUIRE fk:x%012d $OWNER 100000")" \
      "$(instructions "LOCK.ACQUIRE lk:x%012d $OWNER 100000")" \
      "$(instructions "SET sk:x%012d $OWNER NX PX 100000")"
  ) >>"$results"
done
floor=$(awk '{ print $1 }' "$results" | median)
lock=$(awk '{ print $2 }' "$results" | median)
set=$(awk '{ print $3 }' "$results" | median)

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo "| acquire a free key | instructions per call | / SET NX PX |"
echo "|---|---|---|"
echo "| SET NX PX | $set | 1.00x |"
echo "| FLOOR.ACQUIRE (the module API calls alone) | $floor | $(ratio "$floor" "$set") |"
echo "| LOCK.ACQUIRE | $lock | $(ratio "$lock" "$set") |"
