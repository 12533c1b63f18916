#!/usr/bin/env bash
# Instructions per lock step (callgrind, as bench/callgrind.sh counts them) of the
# function library (lua/redislock.lua, through FCALL and through EVALSHA) against
# the module and against what redis-py's `Lock` runs today (SET NX PX to acquire, its
# own Lua scripts to extend and release). All on one server, in one run. Prints a
# Markdown table; used by bench/run.sh. The last rows are the library's own waiting
# protocol, which has no counterpart in one command of the others: a waiter taking
# a place (the first, or behind another), a waiter's renewal of its place (once per
# lease, 2 s, while the lock stays held), a release that hands the lock to a
# queued waiter (the grant pushed to its list), and that waiter collecting it.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-20000}"
# The library measured (another version's file, to compare: LIBRARY=path).
LIBRARY="${LIBRARY:-lua/redislock.lua}"
OWNER="6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"
OTHER="0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
THIRD="5e4d3c2b-1a0f-4e9d-8c7b-6a5f4e3d2c1b"
PYTHON="${PYTHON:-target/venv/bin/python}"

source bench/callgrind-server.sh
start_callgrind_server

cli() { redis-cli -p "$port" "$@"; }
pipe() { redis-cli -p "$port" --pipe >/dev/null; }
cli -x FUNCTION LOAD REPLACE <"$LIBRARY" >/dev/null
lib_sha=$(tail -n +2 "$LIBRARY" | cli -x SCRIPT LOAD)
# redis-py's own scripts, as the installed redis-py has them.
py_script() { "$PYTHON" -c "import redis.lock; print(redis.lock.Lock.$1)"; }
py_release=$(cli SCRIPT LOAD "$(py_script LUA_RELEASE_SCRIPT)")
py_extend=$(cli SCRIPT LOAD "$(py_script LUA_EXTEND_SCRIPT)")

gen() { seq 0 $((N - 1)) | awk -v f="$1" '{ printf f "\r\n", $1, $1, $1, $1 }'; }

# instructions SETUP MEASURED: as in bench/callgrind.sh.
instructions() {
  cli FLUSHALL >/dev/null
  [ -n "$1" ] && gen "$1" | pipe
  callgrind_control -z "$vg" >/dev/null 2>&1
  gen "$2" | pipe
  callgrind_control -d "$vg" >/dev/null 2>&1
  local dump
  dump=$(ls -t "$dir"/callgrind.out* | head -1)
  callgrind_annotate --inclusive=yes --auto=no "$dump" 2>/dev/null \
    | awk -v n="$N" '!done && /[:]call \[/ { gsub(",", "", $1); printf "%.0f", $1 / n; done = 1 }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fx", a / b }'; }

row() { # step module fcall evalsha redis-py
  echo "| $1 | $2 | $3 | $4 | $5 | $(ratio "$3" "$2") | $(ratio "$3" "$5") |"
}

held="LOCK.ACQUIRE k:%012d $OWNER 3600000"
lib_held="FCALL lock_acquire 1 k:%012d $OWNER 3600000"
py_held="SET k:%012d $OWNER NX PX 3600000"

echo "| step | module | library, FCALL | library, EVALSHA | redis-py Lock | library / module | library / redis-py |"
echo "|---|---|---|---|---|---|---|"
row "acquire a free key" \
  "$(instructions "" "LOCK.ACQUIRE k:%012d $OWNER 100000")" \
  "$(instructions "" "FCALL lock_acquire 1 k:%012d $OWNER 100000")" \
  "$(instructions "" "EVALSHA $lib_sha 1 k:%012d lock_acquire $OWNER 100000")" \
  "$(instructions "" "SET k:%012d $OWNER NX PX 100000")"
row "acquire a held key (miss)" \
  "$(instructions "$held" "LOCK.ACQUIRE k:%012d $OTHER 100000")" \
  "$(instructions "$lib_held" "FCALL lock_acquire 1 k:%012d $OTHER 100000")" \
  "$(instructions "$lib_held" "EVALSHA $lib_sha 1 k:%012d lock_acquire $OTHER 100000")" \
  "$(instructions "$py_held" "SET k:%012d $OTHER NX PX 100000")"
row "extend by the owner" \
  "$(instructions "$held" "LOCK.EXTEND k:%012d $OWNER 3600000")" \
  "$(instructions "$lib_held" "FCALL lock_extend 1 k:%012d $OWNER 3600000")" \
  "$(instructions "$lib_held" "EVALSHA $lib_sha 1 k:%012d lock_extend $OWNER 3600000")" \
  "$(instructions "$py_held" "EVALSHA $py_extend 1 k:%012d $OWNER 3600000 1")"
row "release by the owner" \
  "$(instructions "$held" "LOCK.RELEASE k:%012d $OWNER")" \
  "$(instructions "$lib_held" "FCALL lock_release 1 k:%012d $OWNER")" \
  "$(instructions "$lib_held" "EVALSHA $lib_sha 1 k:%012d lock_release $OWNER")" \
  "$(instructions "$py_held" "EVALSHA $py_release 1 k:%012d $OWNER")"

# The waiting protocol: a place queued behind the holder (its LEASE long enough to
# outlive the setup under valgrind).
queued="$lib_held\r\nFCALL lock_wait 1 k:%012d $OTHER 100000 LEASE 60000"
lib_row() { # step fcall evalsha
  echo "| $1 | n/a | $2 | $3 | n/a | | |"
}
lib_row "a waiter takes the first place (lock_wait, held key, no queue)" \
  "$(instructions "$lib_held" "FCALL lock_wait 1 k:%012d $OTHER 100000 LEASE 60000")" \
  "$(instructions "$lib_held" "EVALSHA $lib_sha 1 k:%012d lock_wait $OTHER 100000 LEASE 60000")"
lib_row "a waiter takes a place behind another" \
  "$(instructions "$queued" "FCALL lock_wait 1 k:%012d $THIRD 100000 LEASE 60000")" \
  "$(instructions "$queued" "EVALSHA $lib_sha 1 k:%012d lock_wait $THIRD 100000 LEASE 60000")"
lib_row "a waiter renews its place (lock_wait, held key)" \
  "$(instructions "$queued" "FCALL lock_wait 1 k:%012d $OTHER 100000 LEASE 60000")" \
  "$(instructions "$queued" "EVALSHA $lib_sha 1 k:%012d lock_wait $OTHER 100000 LEASE 60000")"
lib_row "release handing off to a queued waiter" \
  "$(instructions "$queued" "FCALL lock_release 1 k:%012d $OWNER")" \
  "$(instructions "$queued" "EVALSHA $lib_sha 1 k:%012d lock_release $OWNER")"
granted="$queued\r\nFCALL lock_release 1 k:%012d $OWNER"
lib_row "the granted waiter collects its grant (lock_wait)" \
  "$(instructions "$granted" "FCALL lock_wait 1 k:%012d $OTHER 100000 LEASE 60000")" \
  "$(instructions "$granted" "EVALSHA $lib_sha 1 k:%012d lock_wait $OTHER 100000 LEASE 60000")"
