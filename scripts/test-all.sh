#!/usr/bin/env bash
# Runs the whole uaring test suite: every Rust test of the workspace, then the interop
# tests of real, independent OPC UA clients (asyncua from PyPI, node-opcua from npm)
# against the real `uaring` binary. Installs what those clients need on first use.
# This is the command README.md names and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

step() { printf '\n=== %s ===\n' "$*"; }

step "Python venv with asyncua and pytest (.venv)"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import asyncua, pytest' 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check -r tests/interop/python/requirements.txt
fi

step "node-opcua-client and node-opcua-server (tests/interop/node/node_modules)"
# The server is the gateway tests' node-opcua downstream (tests/interop/node/downstream_server.js).
if [ ! -d tests/interop/node/node_modules/node-opcua-client ] || [ ! -d tests/interop/node/node_modules/node-opcua-server ]; then
    (cd tests/interop/node && npm install --no-audit --no-fund --loglevel=error)
fi

step "open62541 peer: cmake and libclang (Debian packages) when missing, then cargo build -p uaring-peer-open62541"
# open62541-sys builds open62541 1.5 and Mbed TLS with cmake and runs bindgen (libclang).
# Its interop test (open62541's client against the real uaring binary) runs in the
# workspace tests below.
need=()
command -v cmake >/dev/null || need+=(cmake)
compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null || compgen -G '/usr/lib/*/libclang-[0-9]*.so*' >/dev/null || need+=(libclang-dev)
if [ ${#need[@]} -gt 0 ]; then
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
cargo build -p uaring-peer-open62541

step "haproxy (Debian package) for the scale-out fail-over test, when missing"
if ! command -v haproxy >/dev/null && [ ! -x /usr/sbin/haproxy ]; then
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq haproxy
fi

step "PostgreSQL (Debian package postgresql) for the history database backend's tests, when missing"
# shards/tests/history_postgres.rs runs initdb and postgres of its own in a temporary
# directory (a Unix socket only, as the package's postgres user); no service is started.
if ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql
fi

step "perf (Debian package linux-perf) for uaring-bench --profile and its tests, when missing"
if ! command -v perf >/dev/null; then
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq linux-perf
fi

step "cargo test --workspace (the async-opcua peer is a benchmark peer only: built on demand, not here)"
# Builds the `uaring` binary too (the shards integration tests run it).
cargo test --workspace --exclude uaring-peer-async-opcua --no-fail-fast
# `cargo test` has built the binary (the shards integration tests run it) and the examples.
# A separate `cargo build -p uaring` would build them again with other features (a minute).
for f in target/debug/uaring target/debug/examples/minimal target/debug/examples/plant; do
    [ -x "$f" ] || { echo "test-all: $f was not built by cargo test" >&2; exit 1; }
done
export UARING_BIN="$ROOT/target/debug/uaring"
# The library's examples (minimal, plant), run by the asyncua, node-opcua and open62541 tests.
export UARING_EXAMPLES_DIR="$ROOT/target/debug/examples"

step "cargo fmt --all --check: the tree stays formatted"
cargo fmt --all --check

step "clippy: every crate and target without a warning; no panic reachable from input in core and crypto"
# Every lint clippy warns of by default is an error here (a lint allowed in the code says
# why). Core's and crypto's crate roots also deny clippy::{unwrap_used, expect_used,
# indexing_slicing, panic, unreachable, todo, unimplemented} outside tests (docs/Fuzzing.md).
# The workspace's crates and the open62541 peer (built above), and fuzz/ (a crate of its own).
# The async-opcua peer is a benchmark peer built on demand (its dependencies take minutes to
# build here); `cargo clippy -p uaring-peer-async-opcua --all-targets -- -D warnings` lints it.
cargo clippy --workspace --exclude uaring-peer-async-opcua --all-targets -- -D warnings
(cd fuzz && cargo clippy --all-targets -- -D warnings)

step "fuzz smoke: build the libFuzzer targets on stable (scripts/fuzz.sh) and run each for 5 s"
# Builds fuzz/ (a crate outside the workspace) with coverage instrumentation; a crash fails
# the run and leaves its input in fuzz/artifacts/. docs/Fuzzing.md.
scripts/fuzz.sh smoke

step "asyncua interop (pytest)"
.venv/bin/python -m pytest -q tests/interop/python

step "node-opcua interop (node --test)"
(cd tests/interop/node && node --test --test-concurrency=1)
