#!/usr/bin/env bash
# Instructions per release + hand-off with few and with many clients queued on one
# lock, counted by valgrind's callgrind on redis-server (the whole server: the
# release, the hand-off, and both replies). Prints a Markdown table; used by
# bench/run.sh. SHORT and LONG set the queue lengths.
set -euo pipefail
cd "$(dirname "$0")/.."

SHORT="${SHORT:-100}"
LONG="${LONG:-8000}"
DRIVER="$PWD/target/release/lock-bench"

source bench/callgrind-server.sh
start_callgrind_server --maxclients $((LONG + 100))

"$DRIVER" --port "$port" queue --short "$SHORT" --long "$LONG" \
  --callgrind-pid "$vg" --callgrind-out-file "$dir/callgrind.out"
