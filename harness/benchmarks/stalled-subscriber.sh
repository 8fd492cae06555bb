#!/usr/bin/env bash
# A subscriber that stops reading must not slow the others: the same `sub` run (5 sessions
# on the 100 benchmark variables, 1,000 writes/s) against one uaring shard on CPU 0, once
# with a sixth, suspended subscriber (an asyncua client stopped with SIGSTOP after it
# subscribed: it neither reads its socket nor sends Publish requests) and once without.
# Writes harness/benchmarks/results/stalled-{with,without}.json and prints both rows.
#   cargo build --release -p uaring -p uaring-harness
#   python3 -m venv .venv && .venv/bin/pip install asyncua
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=${CARGO_TARGET_DIR:-target}
B=$TARGET/release/uaring-bench
U=$TARGET/release/uaring
RES=harness/benchmarks/results
DURATION=${DURATION:-10}
mkdir -p "$RES"
tmp=$(mktemp -d)
trap 'kill -CONT $SUB 2>/dev/null || true; kill $SUB $SRV 2>/dev/null || true; rm -rf "$tmp"' EXIT

"$U" serve --listen 127.0.0.1:0 --contract --cpus 0 --pki "$tmp/pki" >"$tmp/out" 2>"$tmp/err" &
SRV=$!
for _ in $(seq 100); do grep -q "listening on" "$tmp/out" && break; sleep 0.1; done
URL=$(sed -n 's/^listening on //p' "$tmp/out")
run() { # name
    "$B" run --scenario sub --url "$URL" --server-pid "$SRV" --server-name uaring \
        --sessions 5 --subscriptions 1 --items 100 --writers 1 --write-rate 1000 \
        --server-cpus 0 --client-cpus 1 --duration "$DURATION" --warmup 2 --json --variant "$1" >"$RES/stalled-$1.json"
}
.venv/bin/python harness/benchmarks/servers/stalled_subscriber.py "$URL" >"$tmp/sub" 2>&1 &
SUB=$!
for _ in $(seq 100); do grep -q subscribed "$tmp/sub" && break; sleep 0.1; done
kill -STOP $SUB
sleep 2
run with-stalled
kill -CONT $SUB; kill $SUB; wait $SUB 2>/dev/null || true
sleep 1
run without
python3 - "$RES" "$DURATION" <<'PY' | tee "$RES/stalled.md"
import json, sys
res, duration = sys.argv[1], sys.argv[2]
print("Five subscribing sessions (1 subscription × 100 items each, 10 ms sampling, 100 ms publishing) and one "
      "writer at 1,000 writes/s against one uaring shard on CPU 0, client on CPU 1, "
      f"{duration} s measured; once with a sixth subscriber (asyncua, 100 items, queue 1000, 20 ms publishing) "
      "stopped with SIGSTOP after it subscribed, once without.\n")
print("| run | delivered share (the five) | notifications/s | server CPU µs/notification | p50 µs | p99 µs | server RSS kB | foreign load, cores |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name in ("with-stalled", "without"):
    d = json.load(open(f"{res}/stalled-{name}.json"))
    print(f"| {name} | {d.get('delivered_ratio')} | {d.get('ops_per_s')} | {d.get('server_cpu_us_per_op')} | "
          f"{d.get('p50_us')} | {d.get('p99_us')} | {d.get('server_rss_kb')} | {d.get('foreign_cores')} |")
print("\nReproduce: `harness/benchmarks/stalled-subscriber.sh` (commit " + str(d.get("commit")) + ")")
PY
