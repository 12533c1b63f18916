#!/usr/bin/env bash
# Exclusive locks and semaphore permits against an earlier build of the module:
# callgrind instructions per acquire, miss, extend and release, and per permit taken,
# extended and released (as bench/callgrind.sh counts them), for the
# module at BEFORE (a commit; built in a temporary worktree) and for the working
# tree's release build, on alternating servers, RUNS times each. A server's random
# hash seed moves Redis's own command and key lookups by up to a few percent from
# one start to the next, so the table gives medians. Prints a Markdown table.
#
#   bench/callgrind-versus.sh                 # BEFORE=a7dec23 (before shared holdings)
#   BEFORE=<commit> RUNS=7 N=5000 bench/callgrind-versus.sh
#   BEFORE_MODULE=/path/to/libredis_lock.so bench/callgrind-versus.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BEFORE="${BEFORE:-a7dec23}"
RUNS="${RUNS:-5}"
N="${N:-2000}"
OWNER="6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d"
OTHER="0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

cargo build --release --quiet
now_module="$PWD/target/release/libredis_lock.so"
work="$(mktemp -d)"
cleanup() { git worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
# BEFORE_MODULE: a release build of the earlier module already at hand (a path to its
# .so), instead of building BEFORE in a temporary worktree.
if [ -n "${BEFORE_MODULE:-}" ]; then
  before_module="$BEFORE_MODULE"
else
  git worktree add --detach --quiet "$work/tree" "$BEFORE"
  (cd "$work/tree" && CARGO_TARGET_DIR="$work/target" cargo build --release --quiet --lib)
  before_module="$work/target/release/libredis_lock.so"
fi

gen() { seq 0 $((N - 1)) | awk -v f="$1" '{ printf f "\r\n", $1, $1 }'; }

# counts MODULE: one line "acquire miss extend release" of instructions per call.
counts() (
  MODULE="$1"
  source bench/callgrind-server.sh
  start_callgrind_server
  cli() { redis-cli -p "$port" "$@"; }
  one() {
    cli FLUSHALL >/dev/null
    [ -n "$1" ] && gen "$1" | redis-cli -p "$port" --pipe >/dev/null
    callgrind_control -z "$vg" >/dev/null 2>&1
    gen "$2" | redis-cli -p "$port" --pipe >/dev/null
    callgrind_control -d "$vg" >/dev/null 2>&1
    callgrind_annotate --inclusive=yes --auto=no "$(ls -t "$dir"/callgrind.out* | head -1)" 2>/dev/null \
      | awk -v n="$N" '!done && /[:]call \[/ { gsub(",", "", $1); printf "%.0f", $1 / n; done = 1 }'
  }
  held="LOCK.ACQUIRE lk:x%012d $OWNER 3600000"
  other="LOCK.ACQUIRE sm:x%012d $OTHER 3600000 LIMIT 5"
  both="$other\r\nLOCK.ACQUIRE sm:x%012d $OWNER 3600000 LIMIT 5"
  echo "$(one "" "LOCK.ACQUIRE lk:x%012d $OWNER 100000")" \
    "$(one "$held" "LOCK.ACQUIRE lk:x%012d $OTHER 100000")" \
    "$(one "$held" "LOCK.EXTEND lk:x%012d $OWNER 3600000")" \
    "$(one "$held" "LOCK.RELEASE lk:x%012d $OWNER")" \
    "$(one "" "LOCK.ACQUIRE sm:x%012d $OWNER 100000 LIMIT 5")" \
    "$(one "$other" "LOCK.ACQUIRE sm:x%012d $OWNER 100000 LIMIT 5")" \
    "$(one "$both" "LOCK.EXTEND sm:x%012d $OWNER 3600000")" \
    "$(one "$both" "LOCK.RELEASE sm:x%012d $OWNER")"
)

for _ in $(seq 1 "$RUNS"); do
  counts "$before_module" >>"$work/before"
  counts "$now_module" >>"$work/now"
done

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "Instructions per call, median of $RUNS servers each (N=$N commands per row): the module at ${BEFORE_MODULE:-$(git rev-parse --short "$BEFORE")} against $(git describe --always --dirty)."
echo
echo "| step | before | now | ratio | all runs, now |"
echo "|---|---|---|---|---|"
col=0
for step in "acquire a free key" "acquire a held key (miss)" "extend by the owner" "release by the owner" \
  "permit of a free semaphore (LIMIT 5)" "permit beside another holder" "extend a permit" \
  "release a permit (another remains)"; do
  col=$((col + 1))
  b=$(cut -d' ' -f$col "$work/before" | median)
  n=$(cut -d' ' -f$col "$work/now" | median)
  all=$(cut -d' ' -f$col "$work/now" | paste -sd' ')
  echo "| $step | $b | $n | $(awk -v a="$n" -v b="$b" 'BEGIN { printf "%.3fx", a / b }') | $all |"
done
