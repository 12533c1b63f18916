#!/usr/bin/env bash
# The function library at scale: instructions per call (callgrind, as
# bench/callgrind-library.sh counts them) on a lock of n shared holdings and on a
# queue of n waiters, n = 1k, 10k, 100k, and the growth from the smallest n.
# Fails when a call grows faster than O(log n): more than 1.5x from 1k to 10k, or
# 2x from 1k to 100k (a call that reads the whole lock grows about 10x and 100x).
#
#   bench/scaling-library.sh                                # lua/redislock.lua
#   LIBRARY=tests/fixtures/redislock-v2.lua SIZES="1000 10000" CALLS=3 \
#     bench/scaling-library.sh                              # an older one: fails
#
# The locks are written in the layout of the library's version (its lock_version:
# 3 and up as docs/PROTOCOL.md "Keys" says, else the hashes of versions 1 and 2),
# with raw commands: building them through the library would cost the older
# versions O(n^2). Steps measured, CALLS times each:
#   - extend one of n shared holdings (lock_extend);
#   - a semaphore of n permits, all taken, refusing one more (lock_acquire LIMIT n);
#   - the last of n waiters renewing its place behind an exclusive holder
#     (lock_wait);
#   - the info of a queue of n waiters (lock_info, the first ten shown);
#   - a newcomer taking a place behind n waiters (lock_wait; each call another);
#   - the holder collecting its grant and releasing, which hands the lock to the
#     head of the n waiters (lock_wait and lock_release: each call the next holder).
set -euo pipefail
cd "$(dirname "$0")/.."

LIBRARY="${LIBRARY:-lua/redislock.lua}"
SIZES="${SIZES:-1000 10000 100000}"
CALLS="${CALLS:-50}"

source bench/callgrind-server.sh
start_callgrind_server

cli() { redis-cli -p "$port" "$@"; }
pipe() { redis-cli -p "$port" --pipe >/dev/null; }
cli -x FUNCTION LOAD REPLACE <"$LIBRARY" >/dev/null
version=$(cli FCALL_RO lock_version 0)

now=$(cli TIME | head -1)000
far=$((now + 3600000))
later=$((now + 7200000))
token=$((now * 1000))

# setup N: the lock s of N shared holdings and the queue of N waiters behind h's
# exclusive holding of q (granted to h, not collected yet), as the library of $version stores them, one command a
# line (inline: values with spaces quoted).
setup() {
  awk -v n="$1" -v v="$version" -v now="$now" -v far="$far" -v later="$later" -v t="$token" '
    # Integers as Redis reads them (awk would print these in exponent form).
    function num(x) { return sprintf("%.0f", x) }
    BEGIN {
      batch = 200
      if (v >= 3) {
        print "HSET s redislock 3"
        print "HSET q redislock 3 x \"3 " num(t) "gq h\""
        print "HSET q{q}:lockq redislock 3 seq " n " until " later
        print "SET s{s}:lockm " num(t + n + 1) " PX 3600000"
        print "SET q{q}:lockm " num(t + 1) " PX 3600000"
      } else {
        print "HSET s mode shared"
        print "HSET s{s}:lockq mark " num(t + n + 1) " seq 0"
        print "HSET q mode exclusive h:h \"" num(t) " " far "\""
        print "HSET q{q}:lockq mark " num(t + 1) " seq " n
      }
      for (i = 0; i < n; i += batch) {
        hs = "HSET s"; zs = "ZADD s{s}:lockh"
        hq = "HSET q{q}:lockq"; zw = "ZADD q{q}:lockw"; zl = "ZADD q{q}:lockl"
        for (j = i; j < i + batch && j < n; j++) {
          hs = hs " h:o" j " \"" num(t + j + 1) " " far "\""
          zs = zs " " far " o" j
          if (v >= 3) {
            hq = hq " w:w" j " \"" (j + 1) " 60000 100000 x 0 " now "\""
          } else {
            hq = hq " w:w" j " \"" (j + 1) " " far " 60000 100000 x 0 " now "\""
          }
          zw = zw " " (j + 1) " w" j
          zl = zl " " far " w" j
        }
        print hs; print hq
        if (v >= 3) { print zs; print zw; print zl }
      }
      print "PEXPIREAT s " far; print "PEXPIREAT q " far
      if (v >= 3) {
        print "PEXPIREAT s{s}:lockh " far
        print "PEXPIREAT q{q}:lockq " later; print "PEXPIREAT q{q}:lockw " later
        print "PEXPIREAT q{q}:lockl " later
      }
    }' | awk '{ printf "%s\r\n", $0 }'
}

# instructions N COMMAND: per call of COMMAND, sent CALLS times on the locks of N;
# in call i (from 0), %I is i and %P the owner that call i - 1 granted (w<i - 1>;
# h in the first).
instructions() {
  cli FLUSHALL >/dev/null
  setup "$1" | pipe
  callgrind_control -z "$vg" >/dev/null 2>&1
  local i command previous
  for i in $(seq 0 $((CALLS - 1))); do
    previous=h
    [ "$i" = 0 ] || previous="w$((i - 1))"
    command=${2//%I/$i}
    printf '%s\r\n' "${command//%P/$previous}"
  done | pipe
  callgrind_control -d "$vg" >/dev/null 2>&1
  local dump
  dump=$(ls -t "$dir"/callgrind.out* | head -1)
  callgrind_annotate --inclusive=yes --auto=no "$dump" 2>/dev/null \
    | awk -v n="$CALLS" '!done && /[:]call \[/ { gsub(",", "", $1); printf "%.0f", $1 / n; done = 1 }'
}

steps=("extend one of n shared holdings" "a semaphore of n permits refusing one more"
  "the last of n waiters renewing its place" "the info of a queue of n waiters"
  "a newcomer taking a place behind n waiters"
  "a grant collected, then the lock handed to the head of n waiters")
command_for() { # step n
  case "$1" in
    0) echo "FCALL lock_extend 1 s o$(($2 / 2)) 3600000" ;;
    1) echo "FCALL lock_acquire 1 s newcomer 3600000 LIMIT $2" ;;
    2) echo "FCALL lock_wait 1 q w$(($2 - 1)) 100000 LEASE 60000" ;;
    3) echo "FCALL_RO lock_info 1 q" ;;
    4) echo "FCALL lock_wait 1 q newcomer%I 100000 LEASE 60000" ;;
    # Two commands a call (inline commands end at a newline).
    5) printf 'FCALL lock_wait 1 q %%P 7200000 LEASE 60000\nFCALL lock_release 1 q %%P\n' ;;
  esac
}

sizes=($SIZES)
header="| step (library version $version) |"
rule="|---|"
for n in "${sizes[@]}"; do header="$header n = $n |"; rule="$rule---|"; done
for n in "${sizes[@]:1}"; do header="$header growth to $n |"; rule="$rule---|"; done
echo "$header"
echo "$rule"
missed=0
for s in "${!steps[@]}"; do
  row="| ${steps[$s]} |"
  costs=()
  for n in "${sizes[@]}"; do
    c=$(instructions "$n" "$(command_for "$s" "$n")")
    costs+=("$c")
    row="$row $c |"
  done
  for i in "${!sizes[@]}"; do
    [ "$i" = 0 ] && continue
    n=${sizes[$i]}
    verdict=$(awk -v a="${costs[0]}" -v b="${costs[$i]}" -v n0="${sizes[0]}" -v n="$n" 'BEGIN {
      growth = b / a; limit = 1 + 0.5 * log(n / n0) / log(10)
      printf "%.2fx%s", growth, (growth <= limit ? "" : " (over " limit "x)") }')
    case "$verdict" in *over*) missed=1 ;; esac
    row="$row $verdict |"
  done
  echo "$row"
done
echo
if [ "$missed" = 1 ]; then
  echo "a call grew faster than O(log n) (limit 1 + 0.5 log10(n / ${sizes[0]}))"
  exit 1
fi
echo "every call within O(log n): at most 1 + 0.5 log10(n / ${sizes[0]}) times its cost at n = ${sizes[0]}"
