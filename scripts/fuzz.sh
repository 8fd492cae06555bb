#!/usr/bin/env bash
# Builds and runs uaring's libFuzzer targets (fuzz/, a crate outside the workspace) on the
# stable toolchain: the coverage instrumentation libFuzzer needs (SanitizerCoverage) is
# turned on with stable codegen flags (-Cpasses=sancov-module and LLVM arguments), the
# same ones `cargo fuzz build --sanitizer none` passes; no nightly, no cargo-fuzz needed.
# AddressSanitizer is not used (it needs nightly): Rust's own bounds and overflow checks
# (debug assertions and overflow checks are on) are what catch memory errors here.
#
#   scripts/fuzz.sh build                       build every target
#   scripts/fuzz.sh run TARGET [SECONDS] [ARGS] run one target (default 60 s) on its corpus
#   scripts/fuzz.sh all [SECONDS]               run every target for SECONDS each (default 60)
#   scripts/fuzz.sh smoke [SECONDS]             build, then every target for 5 s (CI)
#   scripts/fuzz.sh repro TARGET FILE...        run a target on given inputs once
#
# The corpus of each target is fuzz/corpus/TARGET (checked in: the seeds) plus a scratch
# folder fuzz/scratch/TARGET where new inputs go (not checked in); crashes land in
# fuzz/artifacts/TARGET. See docs/Fuzzing.md.
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/../fuzz"

TARGETS=(server secure_channel requests types config)
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_TARGET_DIR=${UARING_FUZZ_TARGET_DIR:-$PWD/target}
BIN=$CARGO_TARGET_DIR/$TRIPLE/fuzz

build() {
    # --target keeps the flags off build scripts and proc-macros (serde_derive).
    RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers=yes ${RUSTFLAGS:-}" \
        cargo build --profile fuzz --target "$TRIPLE" --bins
}

run() {
    local t=$1 secs=${2:-60}
    shift $(( $# < 2 ? $# : 2 ))
    mkdir -p "scratch/$t" "artifacts/$t" "corpus/$t"
    "$BIN/$t" -max_total_time="$secs" -artifact_prefix="artifacts/$t/" -print_final_stats=1 \
        -timeout=10 -rss_limit_mb=2048 "$@" "scratch/$t" "corpus/$t"
}

case "${1:-}" in
    build) build ;;
    run) shift; build; run "$@" ;;
    all) build; for t in "${TARGETS[@]}"; do run "$t" "${2:-60}"; done ;;
    smoke)
        build
        mkdir -p logs
        for t in "${TARGETS[@]}"; do
            if run "$t" "${2:-5}" > "logs/smoke-$t.log" 2>&1; then
                echo "$t: $(sed -n 's/^stat::number_of_executed_units: *//p' "logs/smoke-$t.log") executions, no crash"
            else
                tail -n 60 "logs/smoke-$t.log"
                echo "fuzz target $t failed: fuzz/logs/smoke-$t.log, the input is in fuzz/artifacts/$t/"
                exit 1
            fi
        done ;;
    repro) shift; t=$1; shift; build; "$BIN/$t" "$@" ;;
    *) sed -n '2,18p' "$SELF"; exit 2 ;;
esac
