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
# Go program also carries bsm/redislock and this repository's Go client (go/).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
VENV="target/peers-venv"

missing=""
for p in redis-server redis-tools etcd-server python3-venv openjdk-17-jdk-headless maven; do
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

if ! command -v go >/dev/null; then
  echo "the Go sides need Go (the version go.mod in bench/peers/go asks for) on PATH" >&2
  exit 1
fi

cargo build --release --quiet -p redis-lock -p lock-bench
# The Java side only when a Redisson side runs (all of them, unless PEERS_SIDES says).
if [ -z "${PEERS_SIDES:-}" ] || [[ "$PEERS_SIDES" == *redisson* ]]; then
  mvn -q -f bench/peers/java/pom.xml package
fi
(cd bench/peers/go && go build -o ../../../target/peers-go/go-peer .)
exec "$VENV/bin/python" bench/peers/peers.py
