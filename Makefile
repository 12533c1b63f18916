# redis-lock: `make run` starts redis-server with the module; `make test` runs every test.
# Both install what is missing (redis-server, redis-tools, libclang-dev, python3-venv,
# prometheus-redis-exporter for the metrics test, dpkg-dev for make deb and its test,
# postgresql for the fenced writes' tests, which start servers of their own)
# when run as root, and otherwise say what to install; redis-py and the Python tools
# go into the project's own virtual environment, target/venv.
#
# `make install` builds the module and the CLI (`make install-build` only builds) and
# installs them under PREFIX (/usr/local; DESTDIR honoured), `make uninstall` removes
# them, `make deb` builds the Debian package target/redis-lock_<version>_<arch>.deb,
# and `make test-package` (part of `make test`) checks all three (docs/install.md).

CARGO     ?= cargo
MODULE    := target/release/libredis_lock.so
DEBS      := redis-server redis-tools redis-sentinel libclang-dev python3-venv prometheus-redis-exporter dpkg-dev postgresql
PYTHON    ?= python3
VENV      := target/venv

.PHONY: all build run install install-build uninstall deb test test-library test-library-scripts test-package test-servers python-test test-js js-build test-go conformance bench bench-peers bench-peers-go bench-leaders demo demo-fencing memcheck fuzz torture failover deps lint clean

all: build

# --- dependencies ------------------------------------------------------------
# A Debian package is missing when `dpkg -s` does not report it installed. Redis 6.2,
# for the scripts path's tests (Debian has none), is built from source once into
# target/redis-6.2/redis-server (tests/redis62/build: the source from PyPI; 30 s on
# 2 idle cores), unless REDIS62_SERVER names another binary.
REDIS62_DIR    := target/redis-6.2
REDIS62_SERVER ?= $(CURDIR)/$(REDIS62_DIR)/redis-server
deps:
	@missing=""; \
	for p in $(DEBS); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing"; \
	    echo "install them with: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
	@$(MAKE) -s --no-print-directory $(VENV)/.installed
	@if [ "$(REDIS62_SERVER)" = "$(CURDIR)/$(REDIS62_DIR)/redis-server" ]; then tests/redis62/build $(REDIS62_DIR); fi

# --- build -------------------------------------------------------------------
build: deps
	$(CARGO) build --release

# Starts redis-server in the foreground with redis.conf (port 6390, no persistence).
run: build
	redis-server redis.conf

# --- install -----------------------------------------------------------------
# The module as redis-lock.so (modules are loaded by path, not linked: no lib
# prefix, as Debian's redisearch.so), mode 0755 (Redis 7 refuses a module without
# the execute bit), the CLI, and the function library's source (the CLI carries it
# too: `redis-lock functions load`). PROFILE=debug installs the debug build
# instead, which `make test` has built already. `make install-build` builds as
# yourself; `sudo make install NO_BUILD=1` then copies without running cargo (root
# rarely has your toolchain).
PREFIX    ?= /usr/local
DESTDIR   ?=
PROFILE   ?= release
BINDIR    := $(PREFIX)/bin
MODULEDIR := $(PREFIX)/lib/redis/modules
DATADIR   := $(PREFIX)/share/redis-lock
INSTALL   ?= install
CARGO_PROFILE = $(if $(filter debug,$(PROFILE)),dev,$(filter release,$(PROFILE)))

install-build:
	@test -n "$(CARGO_PROFILE)" || { echo "PROFILE must be release or debug, not $(PROFILE)"; exit 1; }
	$(CARGO) build --profile $(CARGO_PROFILE) -p redis-lock -p redis-lock-cli

install: $(if $(NO_BUILD),,install-build)
	@test -f target/$(PROFILE)/libredis_lock.so -a -f target/$(PROFILE)/redis-lock || { \
	  echo "target/$(PROFILE) lacks the module or the CLI: make install-build PROFILE=$(PROFILE)"; exit 1; }
	$(INSTALL) -d $(DESTDIR)$(MODULEDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(DATADIR)
	$(INSTALL) -m 0755 target/$(PROFILE)/libredis_lock.so $(DESTDIR)$(MODULEDIR)/redis-lock.so
	$(INSTALL) -m 0755 target/$(PROFILE)/redis-lock $(DESTDIR)$(BINDIR)/redis-lock
	$(INSTALL) -m 0644 lua/redislock.lua $(DESTDIR)$(DATADIR)/redislock.lua

# Removes what `make install` put there (same PREFIX and DESTDIR), and its
# directories where they are left empty.
uninstall:
	rm -f $(DESTDIR)$(MODULEDIR)/redis-lock.so $(DESTDIR)$(BINDIR)/redis-lock \
	  $(DESTDIR)$(DATADIR)/redislock.lua
	rmdir $(DESTDIR)$(DATADIR) $(DESTDIR)$(MODULEDIR) $(DESTDIR)$(PREFIX)/lib/redis 2>/dev/null || true

# The Debian package: `make install PREFIX=/usr` into a staging tree, then
# packaging/deb/build adds the loadmodule snippet (/etc/redis/modules/redis-lock.conf,
# a conffile), the copyright file and the control file, and runs dpkg-deb.
# Version: the module crate's, with Debian revision DEB_REVISION.
DEB_DIR         ?= target
DEB_REVISION    ?= 1
DEB_VERSION     := $(shell sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)-$(DEB_REVISION)
DEB_ARCH        := $(shell dpkg --print-architecture 2>/dev/null)
DEB_MAINTAINER  ?= redis-lock maintainers <maintainers@redis-lock.invalid>
DEB_COMPRESSION ?= xz
DEB             := $(DEB_DIR)/redis-lock_$(DEB_VERSION)_$(DEB_ARCH).deb

deb:
	@command -v dpkg-deb >/dev/null || { echo "make deb needs dpkg-deb (Debian, Ubuntu)"; exit 1; }
	rm -rf $(DEB_DIR)/deb-root
	$(MAKE) install DESTDIR=$(abspath $(DEB_DIR))/deb-root PREFIX=/usr PROFILE=$(PROFILE)
	DEB_MAINTAINER="$(DEB_MAINTAINER)" DEB_COMPRESSION=$(DEB_COMPRESSION) \
	  packaging/deb/build $(DEB_DIR)/deb-root $(DEB_VERSION) $(DEB)

# --- tests -------------------------------------------------------------------
# Unit tests need no server; integration tests start their own redis-servers on
# free loopback ports with the debug build of the module. The workspace's test
# binaries run two at a time (tests/run-parallel), and the library's client suites
# beside the Python, Node and Go suites, each one's output printed whole when it
# ends: each waits on its servers most of the time (the three clients' suites,
# builds and linters included, took 74 s of CPU over 97 s side by side, against
# 235 s one after another).
test: deps
	$(CARGO) build
	tests/run-parallel --jobs 2
	$(MAKE) -j4 --output-sync=target test-library python-test test-js test-go
	$(MAKE) conformance
	$(MAKE) test-package NO_BUILD=1

# The client's and the CLI's suites again, on a plain redis-server with the
# redislock function library instead of the module (REDIS_LOCK_BACKEND, see
# testkit's lock_server): the test files whose servers follow the backend. Then
# the client's core suites through EVALSHA on Redis 6.2 (REDIS62_SERVER, by default
# target/redis-6.2/redis-server, which `make deps` builds; skipped, saying so, where
# there is none). The whole client matrix on 6.2: `make test-library-scripts`.
# One `cargo test --workspace` with the suites named (their names are unique in the
# workspace): the test binaries `make test` built already, with the workspace's
# features, run again; a `-p` build would compile the client and the CLI anew.
LIBRARY_SUITES := --test client --test demo --test durable --test client_errors --test fork \
	--test client_kinds --test lease --test run_locked --test tracing --test waits
CLI_SUITES := --test cli --test supervision --test list --test messages
test-library: deps
	REDIS_LOCK_BACKEND=functions $(CARGO) test --workspace $(LIBRARY_SUITES) $(CLI_SUITES)
	$(MAKE) test-library-scripts LIBRARY_SUITES="--test client --test client_kinds --test run_locked --test waits"

# `make install` into a temporary DESTDIR and `make deb`, both with the debug build
# that `make test` made; the installed module loaded and the installed CLI run. As
# root, the package is installed with dpkg, used, and purged again
# (tests/package/run). NO_BUILD=1 (as `make test` passes it, whose builds made the
# debug module and CLI already) installs them without running cargo again: its -p
# build would compile the shared dependencies anew for the two crates' features.
test-package: deps
	NO_BUILD=$(NO_BUILD) tests/package/run

test-library-scripts: deps
	@if [ -x "$(REDIS62_SERVER)" ]; then \
	  echo REDIS_LOCK_BACKEND=scripts REDIS62_SERVER=$(REDIS62_SERVER) $(CARGO) test --workspace $(LIBRARY_SUITES); \
	  REDIS_LOCK_BACKEND=scripts REDIS62_SERVER=$(REDIS62_SERVER) $(CARGO) test --workspace $(LIBRARY_SUITES); \
	else \
	  echo "skipped: the scripts backend on Redis 6.2 ($(REDIS62_SERVER) is missing; make deps builds it, or set REDIS62_SERVER)"; \
	fi

# The Python client (python/): ruff, mypy --strict and pytest, in a virtual
# environment of the project's own (target/venv), made and filled when missing or
# when python/pyproject.toml or python/requirements-dev.txt changed. The tests start
# their own redis-servers with the debug build of the module.
$(VENV)/.installed: python/pyproject.toml python/requirements-dev.txt
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV) || { \
	  echo "cannot make a virtual environment: install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r python/requirements-dev.txt -e ./python
	touch $@

python-test: $(VENV)/.installed
	$(CARGO) build --lib -p redis-lock
	cd python && $(abspath $(VENV))/bin/ruff check . && $(abspath $(VENV))/bin/ruff format --check .
	cd python && $(abspath $(VENV))/bin/mypy
	cd python && $(abspath $(VENV))/bin/pytest -q

# The Node client (js/): `npm ci` from the committed lock file when node_modules is
# missing or the lock file changed since, the build (ESM and CommonJS, the library
# bundled from lua/redislock.lua), `tsc --noEmit` strict, eslint with
# typescript-eslint's type-checked rules, and the tests (node:test), which start
# their own redis-servers with the debug build of the module: module, library,
# scripts, a 3-master Cluster, Redis 6.2 where REDIS62_SERVER exists, faults; with
# ioredis 6 and 5 and node-redis 6 and 4. Needs Node.js 20+ and npm on PATH.
# `make js-build` alone builds the package, and the tests and the conformance adapter
# (js/build/conformance/adapter.js, registered in conformance/adapters/node-*.json),
# those emitted without type checking, which `tsc --noEmit` in test-js does once.
JS_INSTALLED := js/node_modules/.installed-lock.json
js-build:
	@command -v npm >/dev/null || { echo "the Node client needs Node.js 20+ and npm on PATH"; exit 1; }
	@if ! cmp -s js/package-lock.json $(JS_INSTALLED); then \
	  echo "cd js && npm ci"; \
	  (cd js && npm ci --no-audit --no-fund --loglevel=error) && cp js/package-lock.json $(JS_INSTALLED); \
	fi
	cd js && npm run --silent build
	cd js && npx tsc -p tsconfig.test.json --noCheck && chmod +x build/conformance/adapter.js

test-js: js-build
	$(CARGO) build --lib -p redis-lock
	cd js && npx tsc --noEmit -p tsconfig.json
	cd js && npx eslint .
	cd js && REDIS62_SERVER=$(REDIS62_SERVER) node --test --test-concurrency=1 build/test/*.test.js

# The Go client (go/): gofmt -l (must print nothing), go vet and go test -race, on
# the Go toolchain found on PATH (or in /usr/local/go/bin); modules come from the Go
# module proxy, as go.mod and go.sum pin them. The tests start their own
# redis-servers with the debug build of the module (REDIS_LOCK_MODULE overrides it).
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
test-go:
	@test -x "$(GO)" || { echo "the Go client's tests need Go 1.22 or newer on PATH (https://go.dev/dl/)"; exit 1; }
	test -n "$$REDIS_LOCK_MODULE" || $(CARGO) build --lib -p redis-lock
	cd go && unformatted="$$($(dir $(GO))gofmt -l .)"; \
	  if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted: $$unformatted"; exit 1; fi
	cd go && $(GO) vet ./...
	cd go && REDIS62_SERVER=$(REDIS62_SERVER) $(GO) test -race -count=1 ./...

# The conformance suite (conformance/, its protocol in conformance/ADAPTER.md): every
# client whose adapter is registered in conformance/adapters/ (built first by its
# registration's build command) against every backend present (the module; the
# library; the scripts path on Redis 6.2, REDIS62_SERVER; a 3-master Cluster; an ACL
# user limited to the library's calls), scenario by scenario; prints the table
# client x backend x scenario and fails on any FAILED cell. CONFORMANCE_ARGS narrows
# it: --clients rust --backends module --scenarios fifo_10 --jobs 2.
CONFORMANCE_ARGS ?=
# The harness and the Rust adapter build with the workspace's features, as `cargo test
# --workspace` built the rest (a `-p` build would compile shared dependencies anew).
conformance: deps
	$(CARGO) build --workspace --examples --bin lock-conformance
	REDIS62_SERVER=$(REDIS62_SERVER) $${CARGO_TARGET_DIR:-target}/debug/lock-conformance --build $(CONFORMANCE_ARGS)

# The module's integration tests against other servers, one after another: SERVERS
# names their binaries (Redis 7.2, 7.4, 8.x, Valkey 8 builds; built apart from this
# repository), e.g. `make test-servers SERVERS="/opt/redis-7.4/redis-server …"`.
test-servers: deps
	@test -n "$(SERVERS)" || { echo 'name the servers: make test-servers SERVERS="/path/redis-server ..."'; exit 1; }
	$(CARGO) build
	@for server in $(SERVERS); do \
	  echo "== $$server: $$($$server --version)"; \
	  REDIS_SERVER=$$server $(CARGO) test -p redis-lock --tests || exit 1; \
	done

# The worker demo (client/examples/workers.rs): worker processes on a throwaway
# server that the demo starts itself with the test launcher; one worker is killed
# mid-job and another takes over.
demo: build
	REDIS_LOCK_MODULE=$(CURDIR)/$(MODULE) $(CARGO) run --release -p redis-lock-client \
	  --example workers -- --kill-one

# Fenced writes, the proof: a worker stopped (SIGSTOP) past its TTL while a rival takes
# over, three ways side by side (SET NX PX, redis-py's Lock, redis-lock's guard and
# PostgreSQL fence) on a redis-server and a PostgreSQL it starts itself; prints what
# landed (python/examples/demo_fencing.py, about 10 s; python/tests/test_demo_fencing.py
# runs it in `make python-test`).
demo-fencing: $(VENV)/.installed
	$(CARGO) build --lib -p redis-lock
	$(VENV)/bin/python python/examples/demo_fencing.py

# Every integration test with redis-server under valgrind memcheck; fails on any
# memory error or definite leak. Slow: timing bounds in the tests widen under it.
MEMCHECK_LOGS ?= target/memcheck
memcheck: deps
	@command -v valgrind >/dev/null || { echo "install valgrind: apt-get install valgrind"; exit 1; }
	$(CARGO) build
	rm -rf $(MEMCHECK_LOGS) && mkdir -p $(MEMCHECK_LOGS)
	MEMCHECK_LOGS=$(CURDIR)/$(MEMCHECK_LOGS) REDIS_SERVER=$(CURDIR)/tests/memcheck/redis-server \
	  $(CARGO) test --workspace --tests --no-fail-fast -- --test-threads=2
	tests/memcheck/check-logs $(MEMCHECK_LOGS)

# Worker processes, killed workers, killed servers, paused holders (torture/), for
# exclusive locks, semaphores and read-write locks in turn, on the module and then on
# the redislock function library (a plain server, FCALL).
TORTURE_SECONDS ?= 60
TORTURE_MODES ?= exclusive semaphore rw
TORTURE_BACKENDS ?= module functions
torture: build
	for backend in $(TORTURE_BACKENDS); do for mode in $(TORTURE_MODES); do \
	  $(CARGO) run --release -p lock-torture -- run --seconds $(TORTURE_SECONDS) \
	    --mode $$mode --backend $$backend --module $(CURDIR)/$(MODULE) || exit 1; \
	done; done

# Locks through real failovers (failover/): a master and two replicas with the module,
# three redis-sentinels, 12 workers through Sentinel; the master killed, stopped and
# partitioned, replicas restarted; plain, durable and bounded (min-replicas-*) modes,
# FAILOVER_SECONDS each. The summary goes to stdout and bench/FAILOVER.md. The module
# is the release build; the harness the debug one, which `make test` has built already
# (its work is waiting on sockets). Then the same on plain servers with the redislock
# function library (bench/FAILOVER-functions.md).
FAILOVER_SECONDS ?= 75
failover: build
	$(CARGO) run -p lock-failover -- run --seconds $(FAILOVER_SECONDS) \
	  --module $(CURDIR)/$(MODULE) --write bench/FAILOVER.md
	$(CARGO) run -p lock-failover -- run --seconds $(FAILOVER_SECONDS) --backend functions \
	  --write bench/FAILOVER-functions.md

# Hostile input: the cargo-fuzz targets in fuzz/ (argument parsing, waiter queues,
# lock rules and tokens; FUZZ_SECONDS each, with AddressSanitizer), then a million
# random argument vectors against a real server (tests/hostile.rs). cargo-fuzz's
# sanitizer flags need RUSTC_BOOTSTRAP on a stable toolchain.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := args queue planner
fuzz: deps
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	for target in $(FUZZ_TARGETS); do \
	  RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run -O $$target -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done
	HOSTILE_CALLS=1000000 $(CARGO) test --release --test hostile -- --nocapture

# Benchmarks against plain Redis on a server of its own; writes bench/RESULTS.md.
bench: deps $(VENV)/.installed
	bench/run.sh

# Against the locks users would pick instead (redis-py's Lock, python-redis-lock,
# pottery, etcd, Redisson, redsync) on one workload; writes bench/PEERS.md and its plots (bench/peers/).
bench-peers: deps
	bench/peers/run.sh

# Leader election's failover (resign, crash, cut) against etcd's concurrency.Election,
# same TTL, three candidate processes each behind a proxy; writes
# bench/leaders/RESULTS.md (etcd from `apt-get install etcd-server`).
bench-leaders: deps
	@command -v etcd >/dev/null || { if [ "$$(id -u)" = 0 ]; then apt-get install -y etcd-server; \
	  else echo "bench-leaders: etcd is missing: sudo apt-get install etcd-server (ours alone is measured without it)"; fi; }
	bench/leaders/run.sh

# The Go sides alone (this repository's Go client on the module and the library,
# redsync and bsm/redislock, each with its defaults and tuned), into bench/peers-go/.
bench-peers-go: deps
	PEERS_SIDES="ours-go ours-go-functions redsync redsync-tuned bsm-redislock bsm-redislock-1ms" \
	  PEERS_OUT=bench/peers-go bench/peers/run.sh

# The workspace, and the fuzz crate (a workspace of its own, for cargo-fuzz).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings

clean:
	$(CARGO) clean
