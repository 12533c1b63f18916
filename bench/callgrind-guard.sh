#!/usr/bin/env bash
# What a guarded write costs (contract.md "Fenced writes"): instructions per call
# (callgrind, as bench/callgrind.sh counts them: Redis's call(), nested calls
# included) of a SET guarded by a lock's token, against a bare SET and against the
# usual hand-written script that compares the lock's value before the SET. On the
# module (LOCK.GUARD) and through the library (lock_guard by FCALL and EVALSHA), on
# one server with both, in one run. Prints a Markdown table; used by bench/run.sh.
#
#   bench/callgrind-guard.sh
#   N=20000 bench/callgrind-guard.sh
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-20000}"
LIBRARY="${LIBRARY:-lua/redislock.lua}"
OWNER="6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"
VALUE="a-report-row-of-some-sixty-bytes-as-a-worker-would-write-it-x"

cargo build --release --quiet --lib
# redismodule.h as the redis-module crate ships it, for the API floor's module.
header="$(cargo metadata --format-version 1 | python3 -c '
import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "redis-module":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "src", "include"))
        break')"
build="$(mktemp -d)"
gcc -O2 -Wall -Werror -fPIC -shared -I "$header" -o "$build/floor.so" bench/api-floor.c

source bench/callgrind-server.sh
start_callgrind_server --loadmodule "$build/floor.so"
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$dir" "$build"' EXIT

cli() { redis-cli -p "$port" "$@"; }
pipe() { redis-cli -p "$port" --pipe >/dev/null 2>&1; }
cli -x FUNCTION LOAD REPLACE <"$LIBRARY" >/dev/null
lib_sha=$(tail -n +2 "$LIBRARY" | cli -x SCRIPT LOAD)
# The hand-written fence: the lock is a plain key holding the token (SET NX PX),
# compared before the write.
fence_sha=$(cli SCRIPT LOAD "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('SET', KEYS[2], ARGV[2]) end return redis.error_reply('FENCED')")

gen() { seq 0 $((N - 1)) | awk -v f="$1" '{ printf f "\r\n", $1, $1 }'; }

# instructions MEASURED: counts MEASURED (a format for gen) on the locks set up below.
instructions() {
  callgrind_control -z "$vg" >/dev/null 2>&1
  gen "$1" | pipe
  callgrind_control -d "$vg" >/dev/null 2>&1
  local dump
  dump=$(ls -t "$dir"/callgrind.out* | head -1)
  callgrind_annotate --inclusive=yes --auto=no "$dump" 2>/dev/null \
    | awk -v n="$N" '!done && /[:]call \[/ { gsub(",", "", $1); printf "%.0f", $1 / n; done = 1 }'
}

cli FLUSHALL >/dev/null
module_token=$(cli LOCK.ACQUIRE '{m}' "$OWNER" 3600000)
lib_token=$(cli FCALL lock_acquire 1 '{l}' "$OWNER" 3600000)
cli SET '{s}' 17 PX 3600000 >/dev/null

set_bare=$(instructions "SET {b}:%012d $VALUE")
guard=$(instructions "LOCK.GUARD {m} $module_token SET {m}:%012d $VALUE")
floor=$(instructions "FLOOR.CALL {f}:%012d $VALUE")
fcall=$(instructions "FCALL lock_guard 2 {l} {l}:%012d $lib_token SET {l}:%012d $VALUE")
evalsha=$(instructions "EVALSHA $lib_sha 2 {l} {l}:%012d lock_guard $lib_token SET {l}:%012d $VALUE")
script=$(instructions "EVALSHA $fence_sha 2 {s} {s}:%012d 17 $VALUE")
# What any call of this library pays before its own work, and a call that reads the
# lock as lock_guard does and writes as much (lock_extend: HGET, PEXPIRE).
version=$(instructions "FCALL lock_version 0")
extend=$(instructions "FCALL lock_extend 1 {l} $OWNER 3600000")
fenced=$(instructions "LOCK.GUARD {m} 5 SET {m}:%012d $VALUE")

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo "| a SET of a 60-byte value | instructions per call | / bare SET | / the hand-written script | target |"
echo "|---|---|---|---|---|"
echo "| bare SET | $set_bare | 1.00x | $(ratio "$set_bare" "$script") | |"
echo "| hand-written EVALSHA: GET the lock, compare, SET | $script | $(ratio "$script" "$set_bare") | 1.00x | |"
echo "| a module command that only runs the SET as LOCK.GUARD does (the API floor: bench/api-floor.c) | $floor | $(ratio "$floor" "$set_bare") | $(ratio "$floor" "$script") | |"
echo "| LOCK.GUARD (module) | $guard | $(ratio "$guard" "$set_bare") | $(ratio "$guard" "$script") | at most 2x a bare SET, below the script |"
echo "| LOCK.GUARD refused (FENCED) | $fenced | $(ratio "$fenced" "$set_bare") | $(ratio "$fenced" "$script") | |"
echo "| FCALL lock_version (a call of the library that returns at once) | $version | $(ratio "$version" "$set_bare") | $(ratio "$version" "$script") | |"
echo "| FCALL lock_extend (HGET of the lock, then one write) | $extend | $(ratio "$extend" "$set_bare") | $(ratio "$extend" "$script") | |"
echo "| lock_guard through FCALL (library) | $fcall | $(ratio "$fcall" "$set_bare") | $(ratio "$fcall" "$script") | at most 1.3x the script |"
echo "| lock_guard through EVALSHA (library) | $evalsha | $(ratio "$evalsha" "$set_bare") | $(ratio "$evalsha" "$script") | |"
