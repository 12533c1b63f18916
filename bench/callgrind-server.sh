# Sourced by the callgrind scripts: starts redis-server with the release build of the
# module (or MODULE, a path to another build) under valgrind's callgrind, on a random loopback port, in a temporary
# directory removed on exit. Extra arguments go to redis-server. Sets `dir` (where
# the dumps go, as callgrind.out*), `port` and `vg` (the server's pid).
start_callgrind_server() {
  dir="$(mktemp -d)"
  # A port nothing listens on: other servers (tests, other benches) come and go.
  port=""
  for _ in $(seq 1 50); do
    local candidate=$(( 20000 + RANDOM % 20000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then port=$candidate; break; fi
  done
  [ -n "$port" ] || { echo "no free port found" >&2; exit 1; }
  valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" \
    ${REDIS_BIN:-redis-server} --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
    "$@" --loadmodule "${MODULE:-$PWD/target/release/libredis_lock.so}" >"$dir/valgrind.log" 2>&1 &
  vg=$!
  trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$dir"' EXIT
  for _ in $(seq 1 600); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
