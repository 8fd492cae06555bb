#!/usr/bin/env bash
# Records the `server` fuzz target's seeds from real clients: runs the asyncua interop tests
# (or the pytest arguments given) with scripts/tap-uaring.py standing in for the uaring
# binary, then keeps the distinct recordings under 64 KiB in fuzz/corpus/server/rec-*.bin.
# Needs the .venv of scripts/test-all.sh. docs/Fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p uaring --bin uaring
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
UARING_TAP_REAL_BIN=$PWD/target/debug/uaring UARING_TAP_DIR=$tmp UARING_BIN=$PWD/scripts/tap-uaring.py \
    .venv/bin/python -m pytest -q "${@:-tests/interop/python/test_asyncua_first_light.py}" || true
rm -f fuzz/corpus/server/rec-*.bin
for f in "$tmp"/*.bin; do
    size=$(stat -c %s "$f")
    [ "$size" -gt 0 ] && [ "$size" -le 65536 ] || continue
    cp "$f" "fuzz/corpus/server/rec-$(sha1sum "$f" | cut -c1-12).bin"
done
ls fuzz/corpus/server/rec-*.bin | wc -l
