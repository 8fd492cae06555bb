#!/usr/bin/env bash
# Instructions per operation of a whole uaring server process, counted by callgrind: the
# measure for differences smaller than this VM's round-to-round spread (about ±15 % in
# wall-clock sweeps; callgrind's counts repeat to within 0.1 %). It counts user-space
# instructions only (no kernel, no cache misses): it answers "did the code get longer", not
# "is it faster".
#
#   harness/benchmarks/callgrind-serve.sh BIN LABEL SCENARIO DURATION_S [uaring-bench run args]
#
# The server runs under valgrind with one shard on the epoll backend (valgrind does not know
# io_uring), a warm-up run is not counted (`callgrind_control -z`), then the measured run's
# counts are dumped and divided by its operations. SERVE_ARGS goes to `uaring serve`.
# Examples (the two comparisons of docs/Benchmarks.md's "content move" note):
#   SERVE_ARGS=--contract harness/benchmarks/callgrind-serve.sh ../before/target/release/uaring before read 5 \
#       --clients 1 --inflight 32 --send batched
#   SERVE_ARGS="--counters 2000" harness/benchmarks/callgrind-serve.sh target/release/uaring after counters 10 \
#       --start-items 2000 --max-items 2000 --sampling-ms 100 --publishing-ms 1000
# (counters: per operation = per notification; the rate is chosen so that the server keeps up
# under valgrind, every sample delivered, so the count is per delivered notification.)
# Needs valgrind (apt-get install valgrind) and a release build of uaring-bench.
set -euo pipefail
if [ $# -lt 4 ]; then sed -n '2,20p' "$0"; exit 2; fi
BIN=$(realpath "$1"); LABEL=$2; SCENARIO=$3; DURATION=$4; shift 4
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BENCH=${BENCH:-$ROOT/target/release/uaring-bench}
OUT=${OUT:-$ROOT/target/callgrind-serve/$LABEL-$SCENARIO}
rm -rf "$OUT"; mkdir -p "$OUT"
PORT=$((20000 + RANDOM % 20000))
# shellcheck disable=SC2086
valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" --dump-instr=no --collect-jumps=no \
    "$BIN" serve ${SERVE_ARGS:-} --io-backend epoll --shards 1 --listen 127.0.0.1:$PORT \
    --pki "$OUT/pki" >"$OUT/server.out" 2>"$OUT/server.err" &
VG=$!
trap 'kill -TERM $VG 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
    grep -q "listening on" "$OUT/server.out" 2>/dev/null && break
    kill -0 $VG 2>/dev/null || { cat "$OUT/server.err" >&2; exit 1; }
    sleep 0.5
done
URL=opc.tcp://127.0.0.1:$PORT
"$BENCH" run --scenario "$SCENARIO" --url "$URL" --duration 3 --warmup 1 --client-cpus 1 \
    --ready-timeout 300 --foreign-max 4 "$@" --json >"$OUT/warm.json" 2>"$OUT/warm.err"
callgrind_control -z $VG >/dev/null 2>&1
"$BENCH" run --scenario "$SCENARIO" --url "$URL" --duration "$DURATION" --warmup 0 --client-cpus 1 \
    --ready-timeout 300 --foreign-max 4 "$@" --json >"$OUT/run.json" 2>"$OUT/run.err"
callgrind_control -d $VG >/dev/null 2>&1
# The dump is written asynchronously by the valgrind'd process.
for _ in $(seq 1 100); do [ -s "$OUT/cg.out.1" ] && break; sleep 0.2; done
kill -TERM $VG; wait $VG || true
trap - EXIT
INSTRUCTIONS=$(grep -E '^summary:' "$OUT/cg.out.1" | awk '{print $2}')
python3 - "$OUT/run.json" "$INSTRUCTIONS" "$LABEL" "$SCENARIO" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
instructions = int(sys.argv[2])
ops = run["notifications"] if sys.argv[4] == "counters" else run["ops"]
print(f"{sys.argv[3]} {sys.argv[4]}: {instructions} instructions / {ops} "
      f"{'notifications' if sys.argv[4] == 'counters' else 'operations'} = {instructions / ops:.1f}")
EOF
