#!/usr/bin/env bash
# `make bench-peers`: installs what the comparison needs, builds the module and the
# Rust client side, and runs bench/peers/peers.py, which writes bench/PEERS.md and
# its plots (PEERS_SIDES picks sides, PEERS_OUT the folder: `make bench-peers-go` runs
# the Go sides alone into bench/peers-go/). Debian packages (redis-server, etcd-server, python3-venv) come from
# apt-get when run as root; the Python libraries go into a virtualenv of their own,
# target/peers-venv (pinned in requirements.txt), so nothing else on the machine
# changes and a rerun measures the same versions. The Redisson side (bench/peers/java,
# Maven) and the redsync side (bench/peers/go) are built into target/ with the
# versions pinned in their pom.xml and go.mod, from Maven Central and the Go proxy; the
# Node sides (bench/peers/node) with `make js-build`, from js/package-lock.json; the
# Go program also carries bsm/redislock and this repository's Go client (go/).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
VENV="target/peers-venv"

# PEERS_SIDES (space-separated) runs a subset; each side's build runs only when one of
# its sides is asked for (all of them by default).
wants() {
  [ -z "${PEERS_SIDES:-}" ] && return 0
  local side pattern
  for side in $PEERS_SIDES; do
    for pattern in "$@"; do
      # shellcheck disable=SC2254 # the pattern is a glob on purpose
      case "$side" in $pattern) return 0 ;; esac
    done
  done
  return 1
}

missing=""
needed="redis-server redis-tools python3-venv"
if wants 'etcd3-lock'; then needed="$needed etcd-server"; fi
if wants 'redisson-*'; then needed="$needed openjdk-17-jdk-headless maven"; fi
for p in $needed; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing:$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "missing Debian packages:$missing; install them with: sudo apt-get install -y$missing" >&2
    exit 1
  fi
fi

# The virtualenv is made again when requirements.txt changes (a stamp inside it).
if ! cmp -s bench/peers/requirements.txt "$VENV/requirements.txt"; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r bench/peers/requirements.txt
  cp bench/peers/requirements.txt "$VENV/requirements.txt"
fi

cargo build --release --quiet -p redis-lock -p lock-bench
if wants 'ours-node*' 'node-*'; then
  # The Node sides: the client's build and the Node peers (js/package-lock.json).
  make --no-print-directory js-build
fi
if wants 'redisson-*'; then
  mvn -q -f bench/peers/java/pom.xml package
fi
if wants 'redsync*' 'bsm-*' 'ours-go*'; then
  if ! command -v go >/dev/null; then
    echo "the Go sides need Go (the version go.mod in bench/peers/go asks for) on PATH" >&2
    exit 1
  fi
  (cd bench/peers/go && go build -o ../../../target/peers-go/go-peer .)
fi
exec "$VENV/bin/python" bench/peers/peers.py
