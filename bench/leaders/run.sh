#!/usr/bin/env bash
# Leader-election failover benchmark: our Go election (module and function library)
# against etcd's concurrency.Election, N = 3 candidates, resign / crash / cut.
# Writes bench/leaders/RESULTS.md (and the raw rounds to bench/leaders/results.jsonl).
#
# Installs nothing. Needs: go, redis-server + redis-cli (7.0+), the module built
# (target/debug or target/release/libredis_lock.so; MODULE=... to choose), and for the
# etcd side the `etcd` binary (Debian: apt-get install -y etcd-server); without it
# only ours is measured.
#
# Settings (environment):
#   LEADERS_CONFIGS  side:ttl_seconds[:rounds] list, in order
#                    (default: "module:5:10 functions:5:10 etcd:5:10 module:1 functions:1 module:10:3 functions:10:3")
#   LEADERS_ROUNDS   rounds where a config gives none (default 5)
#   LEADERS_SCENARIOS (default resign,crash,cut)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CONFIGS=${LEADERS_CONFIGS:-"module:5:10 functions:5:10 etcd:5:10 module:1 functions:1 module:10:3 functions:10:3"}
ROUNDS=${LEADERS_ROUNDS:-5}
SCENARIOS=${LEADERS_SCENARIOS:-resign,crash,cut}

WORK=$(mktemp -d /tmp/leaders-bench.XXXXXX)
PIDS=()
DRIVER=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    if [[ -n "$DRIVER" ]] && kill -0 "$DRIVER" 2>/dev/null; then
        kill -TERM "$DRIVER" 2>/dev/null || true
        wait "$DRIVER" 2>/dev/null || true
    fi
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

need() { command -v "$1" >/dev/null || { echo "run.sh: $1 not found on PATH" >&2; exit 1; }; }
need go
need redis-server
need redis-cli

if [[ -z "${MODULE:-}" ]]; then
    debug=$ROOT/target/debug/libredis_lock.so release=$ROOT/target/release/libredis_lock.so
    if [[ -f $debug && ( ! -f $release || $debug -nt $release ) ]]; then MODULE=$debug; else MODULE=$release; fi
fi
[[ -f $MODULE ]] || { echo "run.sh: no module at $MODULE (cargo build -p redis-lock)" >&2; exit 1; }

HAVE_ETCD=1
if ! command -v etcd >/dev/null; then
    HAVE_ETCD=0
    echo "run.sh: etcd not installed (apt-get install -y etcd-server): measuring ours only" >&2
fi

BIN=$WORK/leaders
(cd "$HERE" && go build -o "$BIN" .)

PORTS=($("$BIN" ports 4))
P_MOD=${PORTS[0]} P_FUN=${PORTS[1]} P_ETCD=${PORTS[2]} P_PEER=${PORTS[3]}

start_redis() { # port dir [module]
    mkdir -p "$2"
    local args=(--port "$1" --bind 127.0.0.1 --dir "$2" --save "" --appendonly no --logfile redis.log)
    [[ -n "${3:-}" ]] && args+=(--loadmodule "$3")
    redis-server "${args[@]}" &
    PIDS+=($!)
}
start_redis "$P_MOD" "$WORK/module" "$MODULE"
start_redis "$P_FUN" "$WORK/functions"
"$BIN" ready -side module -addr "127.0.0.1:$P_MOD"
"$BIN" ready -side functions -addr "127.0.0.1:$P_FUN"
redis-cli -p "$P_FUN" -x FUNCTION LOAD REPLACE < "$ROOT/lua/redislock.lua" >/dev/null
redis-cli -p "$P_MOD" MODULE LIST | grep -q . || { echo "run.sh: module not loaded" >&2; exit 1; }

if [[ $HAVE_ETCD == 1 ]]; then
    client=http://127.0.0.1:$P_ETCD peer=http://127.0.0.1:$P_PEER
    mkdir -p "$WORK/etcd"
    etcd --name bench --data-dir "$WORK/etcd/data" \
        --listen-client-urls "$client" --advertise-client-urls "$client" \
        --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
        --initial-cluster "bench=$peer" >"$WORK/etcd/etcd.log" 2>&1 &
    PIDS+=($!)
    "$BIN" ready -side etcd -addr "127.0.0.1:$P_ETCD" || { tail -20 "$WORK/etcd/etcd.log" >&2; exit 1; }
fi

RESULTS=$HERE/results.jsonl
: >"$RESULTS"
for config in $CONFIGS; do
    IFS=: read -r side ttl rounds <<<"$config"
    rounds=${rounds:-$ROUNDS}
    case $side in
        module) server=127.0.0.1:$P_MOD ;;
        functions) server=127.0.0.1:$P_FUN ;;
        etcd)
            if [[ $HAVE_ETCD == 0 ]]; then continue; fi
            server=127.0.0.1:$P_ETCD ;;
        *) echo "run.sh: unknown side $side" >&2; exit 1 ;;
    esac
    echo "== $side, TTL ${ttl}s, $rounds rounds" >&2
    "$BIN" drive -side "$side" -server "$server" -ttl "${ttl}s" -rounds "$rounds" \
        -scenarios "$SCENARIOS" -out "$RESULTS" &
    DRIVER=$!
    wait "$DRIVER"
    DRIVER=""
done

NOTES=$WORK/notes.md
{
    echo "- Machine: $(nproc) cores, $(uname -sr); shared with other work while measured."
    echo "- $(redis-server --version | cut -d' ' -f1-3); module: \`${MODULE#"$ROOT"/}\`; library: \`lua/redislock.lua\` (FUNCTION LOAD)."
    echo "- Ours: \`redis-lock/go/redislock\` (this repository's \`go/\` at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" status --porcelain -- go 2>/dev/null | grep -q . && echo ', with uncommitted changes in go/')), \`Election.Campaign\` / \`Leadership.Context()\` / \`Resign\`, go-redis v9.18.0."
    if [[ $HAVE_ETCD == 1 ]]; then
        echo "- etcd server: $(etcd --version | head -1) (Debian etcd-server, one member); client: go.etcd.io/etcd/client/v3 $(cd "$HERE" && go list -m -f '{{.Version}}' go.etcd.io/etcd/client/v3), concurrency.NewSession(WithTTL) + NewElection."
    else
        echo "- etcd: not installed, not measured."
    fi
    echo "- Configs: \`$CONFIGS\`; scenarios \`$SCENARIOS\`; raw rounds: \`bench/leaders/results.jsonl\`."
} >"$NOTES"
"$BIN" report -in "$RESULTS" -out "$HERE/RESULTS.md" -notes "$NOTES" -command "bench/leaders/run.sh"
echo "wrote $HERE/RESULTS.md" >&2
