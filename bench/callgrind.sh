#!/usr/bin/env bash
# Instructions per command, counted by valgrind's callgrind on redis-server: the
# inclusive instruction count of Redis's call() (the command itself, its keyspace
# work and its propagation; not networking or parsing), divided by the number of
# commands. Instruction counts do not depend on what else the machine is doing.
# Prints a Markdown table; used by bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

N="${N:-20000}"
OWNER="6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"
OTHER="0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

source bench/callgrind-server.sh
start_callgrind_server

cli() { redis-cli -p "$port" "$@"; }
pipe() { redis-cli -p "$port" --pipe >/dev/null; }
release_sha=$(cli SCRIPT LOAD "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0")
fenced_sha=$(cli SCRIPT LOAD "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.call('INCR', KEYS[2]) end return false")
extend_sha=$(cli SCRIPT LOAD "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0")
# The sorted-set semaphore of redis-semaphore and Redisson-style libraries: drop the
# expired holders, count, add. ARGV: limit, owner, ttl, now (the client's clock).
zsem_sha=$(cli SCRIPT LOAD "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[4]) - tonumber(ARGV[3])) if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2]) redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1 end return 0")
NOW=1800000000000

# Inline commands for keys 0..N-1: `gen 'FORMAT with %d'` (each %d is the key number;
# a FORMAT may hold several commands, separated by \r\n).
gen() { seq 0 $((N - 1)) | awk -v f="$1" '{ printf f "\r\n", $1, $1, $1, $1, $1, $1, $1, $1, $1, $1 }'; }

# The first `count` of five semaphore holders of key %d, as commands of `format`
# (whose %s is the holder's number): `holders count format`.
holders() {
  local i out=""
  for i in $(seq 1 "$1"); do
    out+="${out:+\r\n}$(printf "$2" "$i")"
  done
  printf '%s' "$out"
}

# instructions SETUP MEASURED: runs SETUP, then counts MEASURED (both formats for gen).
instructions() {
  cli FLUSHALL >/dev/null
  [ -n "$1" ] && gen "$1" | pipe
  callgrind_control -z "$vg" >/dev/null 2>&1
  gen "$2" | pipe
  callgrind_control -d "$vg" >/dev/null 2>&1
  local dump
  dump=$(ls -t "$dir"/callgrind.out* | head -1)
  # awk reads to the end: exiting at the match would kill callgrind_annotate with
  # SIGPIPE, which pipefail turns into a failed run.
  callgrind_annotate --inclusive=yes --auto=no "$dump" 2>/dev/null \
    | awk -v n="$N" '!done && /[:]call \[/ { gsub(",", "", $1); printf "%.0f", $1 / n; done = 1 }'
}

row() { # name ours theirs target
  local ratio
  ratio=$(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.2f", a / b }')
  echo "| $1 | $2 | $3 | ${ratio}x | $4 |"
}

echo "| step | ours (instructions per call) | plain Redis | ratio | plain Redis command |"
echo "|---|---|---|---|---|"
row "acquire a free key" \
  "$(instructions "" "LOCK.ACQUIRE lk:x%012d $OWNER 100000")" \
  "$(instructions "" "SET sk:x%012d $OWNER NX PX 100000")" "SET NX PX"
row "acquire a free key, with a fencing token" \
  "$(instructions "" "LOCK.ACQUIRE lk:x%012d $OWNER 100000")" \
  "$(instructions "" "EVALSHA $fenced_sha 2 fk:x%012d fk:token:x%012d $OWNER 100000")" "EVALSHA SET NX PX + INCR (fencing token)"
row "acquire a held key (miss)" \
  "$(instructions "LOCK.ACQUIRE lk:x%012d $OWNER 3600000" "LOCK.ACQUIRE lk:x%012d $OTHER 100000")" \
  "$(instructions "SET sk:x%012d $OWNER PX 3600000" "SET sk:x%012d $OTHER NX PX 100000")" "SET NX PX"
row "extend by the owner" \
  "$(instructions "LOCK.ACQUIRE lk:x%012d $OWNER 3600000" "LOCK.EXTEND lk:x%012d $OWNER 3600000")" \
  "$(instructions "SET sk:x%012d $OWNER PX 3600000" "EVALSHA $extend_sha 1 sk:x%012d $OWNER 3600000")" "EVALSHA compare-and-pexpire"
row "release by the owner" \
  "$(instructions "LOCK.ACQUIRE lk:x%012d $OWNER 3600000" "LOCK.RELEASE lk:x%012d $OWNER")" \
  "$(instructions "SET sk:x%012d $OWNER PX 3600000" "EVALSHA $release_sha 1 sk:x%012d $OWNER")" "EVALSHA compare-and-del"
info=$(instructions "LOCK.ACQUIRE lk:x%012d $OWNER 3600000" "LOCK.INFO lk:x%012d")
pttl=$(instructions "SET sk:x%012d $OWNER PX 3600000" "PTTL sk:x%012d")
get=$(instructions "SET sk:x%012d $OWNER PX 3600000" "GET sk:x%012d")
row "read the lock" "$info" "$((pttl + get))" "PTTL ($pttl) + GET ($get)"

# Semaphores: five permits; the step takes or gives back the fifth.
ours_sem="LOCK.ACQUIRE sem:x%%012d permit-%s 3600000 LIMIT 5"
theirs_sem="EVALSHA $zsem_sha 1 zsem:x%%012d 5 permit-%s 3600000 $NOW"
take_ours=$(instructions "$(holders 4 "$ours_sem")" "$(printf "$ours_sem" 5)")
take_theirs=$(instructions "$(holders 4 "$theirs_sem")" "$(printf "$theirs_sem" 5)")
give_ours=$(instructions "$(holders 5 "$ours_sem")" "LOCK.RELEASE sem:x%012d permit-5")
give_theirs=$(instructions "$(holders 5 "$theirs_sem")" "ZREM zsem:x%012d permit-5")
row "semaphore: take the last of 5 permits" "$take_ours" "$take_theirs" "EVALSHA ZREMRANGEBYSCORE + ZCARD + ZADD"
row "semaphore: refused, all 5 permits held" \
  "$(instructions "$(holders 5 "$ours_sem")" "$(printf "$ours_sem" 6)")" \
  "$(instructions "$(holders 5 "$theirs_sem")" "$(printf "$theirs_sem" 6)")" "EVALSHA ZREMRANGEBYSCORE + ZCARD"
row "semaphore: give a permit back" "$give_ours" "$give_theirs" "ZREM"
row "semaphore: one take and give back" "$((take_ours + give_ours))" "$((take_theirs + give_theirs))" "the script, then ZREM"
