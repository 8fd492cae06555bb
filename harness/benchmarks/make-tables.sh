#!/usr/bin/env bash
# Regenerates docs/Benchmarks.md from the checked-in variant and scenario files.
# Run from anywhere; needs release builds of uaring and uaring-bench and, for
# the server comparison, .venv with asyncua and o6 (pip install asyncua o6).
#
#   cargo build --release -p uaring-shards -p uaring-harness
#   python3 -m venv .venv && .venv/bin/pip install asyncua o6
#   harness/benchmarks/make-tables.sh            # ROUNDS=3 DURATION=5 WARMUP=2
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=${CARGO_TARGET_DIR:-target}
B=${UARING_BENCH:-$TARGET/release/uaring-bench}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-2}
EXTRA=${EXTRA:-}
RES=harness/benchmarks/results
mkdir -p "$RES"
DOC=docs/Benchmarks.md
TABLES=${TABLES:-"depth placement servers security distribution"}

sweep() { # name variants scenarios
    local name=$1 variants=$2 scenarios=$3
    local args="--variants harness/benchmarks/$variants --scenarios harness/benchmarks/$scenarios --rounds $ROUNDS --duration $DURATION --warmup $WARMUP $EXTRA"
    local cmd="uaring-bench sweep $args --out $RES/$name.jsonl"
    if [ -z "${SKIP_RUN:-}" ]; then
        # shellcheck disable=SC2086
        "$B" sweep $args --out "$RES/$name.jsonl"
    fi
    "$B" summarize --in "$RES/$name.jsonl" --md "$RES/$name.md" --csv "$RES/$name.csv" \
        --svg "$RES/$name" --svg-link-prefix "../$RES/" --command "$cmd"
}

for t in $TABLES; do
    case $t in
        depth) sweep depth uaring-echo.variants read-depth.scenarios ;;
        placement) sweep placement placement.variants placement.scenarios ;;
        servers) sweep servers servers.variants servers.scenarios ;;
        security) sweep security security.variants security.scenarios ;;
        distribution) sweep distribution distribution.variants placement.scenarios ;;
    esac
done

{
    cat harness/benchmarks/Benchmarks.head.md
    section() { # name title
        if [ -f "$RES/$1.md" ]; then
            printf '\n## %s\n\n' "$2"
            cat "$RES/$1.md"
        fi
    }
    section depth "Read at several depths, beside the echo floor"
    section placement "Server placement"
    section servers "uaring, open62541 (o6) and asyncua under the same client"
    section security "Security modes: uaring and open62541 (o6)"
    section distribution "Two shards: connection distribution policies"
} > "$DOC"
echo "wrote $DOC"
