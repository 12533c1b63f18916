#!/usr/bin/env bash
# `make bench-peers`: installs what the comparison needs, builds the module and the
# Rust client side, and runs bench/peers/peers.py, which writes bench/PEERS.md and
# its plots. Debian packages (redis-server, etcd-server, python3-venv) come from
# apt-get when run as root; the Python libraries go into a virtualenv of their own,
# target/peers-venv (pinned in requirements.txt), so nothing else on the machine
# changes and a rerun measures the same versions. The Redisson side (bench/peers/java,
# Maven) and the redsync side (bench/peers/go) are built into target/ with the
# versions pinned in their pom.xml and go.mod, from Maven Central and the Go proxy.
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
  echo "the redsync side needs Go (the version go.mod in bench/peers/go asks for) on PATH" >&2
  exit 1
fi

cargo build --release --quiet -p redis-lock -p lock-bench
mvn -q -f bench/peers/java/pom.xml package
(cd bench/peers/go && go build -o ../../../target/peers-go/redsync-peer .)
exec "$VENV/bin/python" bench/peers/peers.py
