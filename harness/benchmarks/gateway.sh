#!/usr/bin/env bash
# The aggregating gateway (docs/Gateway.md), side by side in one run, each ROUNDS times:
#   gateway  uaring serve --gateway in front of open62541's native plant server
#            (open62541-plant: VARIABLES Doubles pushed RATE times a second each); SESSIONS
#            sessions of uaring-bench's push scenario each monitor ALL the variables through
#            the gateway (sampling interval 0)
#   direct   the same sessions against open62541-plant itself (where it survives them)
# What to read: the delivered share and the latency of the push scenario (SourceTimestamp,
# stamped by open62541 at the push, to the client's receipt: through the gateway it includes
# the gateway's downstream publishing interval), the server CPU per notification (gateway:
# the uaring process only, the downstream is not counted; direct: open62541), and the
# monitored items the downstream server holds (uaring_gateway_monitored_items: one per
# variable however many sessions watch it, against SESSIONS x VARIABLES directly).
# Writes harness/benchmarks/results/gateway.jsonl (one JSON object per run, with
# "downstream_items" and "changes_lost" added to the gateway runs: the stores the gateway
# made into the mirrored cells that found the shard's change inbox full over the whole run,
# setup included, uaring_changes_lost_total; their items were brought to the cells' values,
# with the Overflow bit only where an item missed a store).
#   cargo build --release -p uaring -p uaring-harness -p uaring-peer-open62541
#   VARIABLES=100000 RATE=10 SESSIONS=20 harness/benchmarks/gateway.sh      # the issue's shape
#   TABLES=gateway harness/benchmarks/make-tables.sh  # both shapes of the table, into docs/Benchmarks.md
#   PROFILE=debug VARIABLES=1000 SESSIONS=2 DURATION=5 harness/benchmarks/gateway.sh  # a smoke run
# CPUs: the downstream on DOWN_CPUS, the gateway (or, direct, open62541) measured on
# SERVER_CPUS, the client on CLIENT_CPUS (defaults for a two-CPU machine: 0, 1, 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=${CARGO_TARGET_DIR:-target}
PROFILE=${PROFILE:-release}
B=$TARGET/$PROFILE/uaring-bench
U=$TARGET/$PROFILE/uaring
O6=$TARGET/$PROFILE/open62541-plant
VARIABLES=${VARIABLES:-100000}
RATE=${RATE:-10}
SESSIONS=${SESSIONS:-20}
ROUNDS=${ROUNDS:-1}
DURATION=${DURATION:-10}
# Seconds for the sessions to connect and create their items (20 x 100,000 through the
# gateway: two million upstream items before the first window).
READY_TIMEOUT=${READY_TIMEOUT:-300}
WARMUP=${WARMUP:-5}
DOWN_CPUS=${DOWN_CPUS:-0}
SERVER_CPUS=${SERVER_CPUS:-1}
CLIENT_CPUS=${CLIENT_CPUS:-0}
# The gateway's subscription on the downstream (gateway.servers.publishing_interval_ms): the
# values arrive in bursts this often, so it adds up to this much latency over direct.
GW_PUBLISH_MS=${GW_PUBLISH_MS:-10}
# The gateway's subscriptions.change_queue_per_shard (empty: the server's default, 65536):
# each downstream publish stores up to VARIABLES values at once; a smaller inbox shows at a
# small VARIABLES what a burst larger than the default does at the issue's size.
CHANGE_QUEUE=${CHANGE_QUEUE:-}
# DIRECT=0 leaves out the direct runs (a trial of the gateway alone).
DIRECT=${DIRECT:-1}
# NAME: the table's scenario name for this shape (its runs are grouped by it).
NAME=${NAME:-$((VARIABLES / 1000))k-vars-x$SESSIONS-at-${RATE}hz}
# Set KEEP_TMP=1 to keep the run's directory (logs, the gateway's configuration).
RES=harness/benchmarks/results
# OUT: where the lines go (trial runs: another file than the checked-in results).
OUT=${OUT:-$RES/gateway.jsonl}
mkdir -p "$RES"
tmp=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; done
    PIDS=()
}
trap 'cleanup; [ -n "${KEEP_TMP:-}" ] && echo "kept $tmp" >&2 || rm -rf "$tmp"' EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# open62541-plant on DOWN_CPUS -> prints "pid port"
downstream() {
    local port
    port=$(free_port)
    taskset -c "$DOWN_CPUS" "$O6" --listen "127.0.0.1:$port" --variables "$VARIABLES" \
        --rate "$RATE" --log-level 5 >"$tmp/o6.out" 2>"$tmp/o6.err" &
    local pid=$!
    for _ in $(seq 600); do grep -q "listening on" "$tmp/o6.out" && break; sleep 0.05; done
    grep -q "listening on" "$tmp/o6.out" || { cat "$tmp/o6.err" >&2; exit 1; }
    echo "$pid $port"
}

# uaring mirroring the downstream at port $1 -> prints "pid url metrics-url" once mirrored
gateway() {
    local down=$1
    local n=$((VARIABLES + 16))
    # max_buffered_bytes: the sessions' first values (SESSIONS x VARIABLES notifications, about
    # 30 bytes each) wait unsent at once; the default 64 MiB refused the sessions of a second
    # attempt (ERR BadTcpNotEnoughResources) while the first one's output drained.
    cat >"$tmp/gateway.toml" <<EOF
[runtime]
max_buffered_bytes = $((SESSIONS * VARIABLES * 64 + 67108864))
[metrics]
listen = "127.0.0.1:0"
[subscriptions]
max_monitored_items_per_shard = $((SESSIONS * VARIABLES + 1024))
${CHANGE_QUEUE:+change_queue_per_shard = $CHANGE_QUEUE}
[gateway]
max_nodes = $((n + 1024))
max_items = $n
[[gateway.servers]]
name = "plant"
endpoint = "opc.tcp://127.0.0.1:$down"
max_nodes = $n
publishing_interval_ms = $GW_PUBLISH_MS
EOF
    "$U" serve --listen 127.0.0.1:0 --cpus "$SERVER_CPUS" --config "$tmp/gateway.toml" \
        --pki "$tmp/pki" >"$tmp/gw.out" 2>"$tmp/gw.err" &
    local pid=$!
    for _ in $(seq 600); do grep -q "listening on" "$tmp/gw.out" && break; sleep 0.05; done
    local url metrics
    url=$(sed -n 's/^listening on //p' "$tmp/gw.out" | head -1)
    metrics=$(grep -o 'http://[0-9.:]*/metrics' "$tmp/gw.err" | head -1)
    [ -n "$url" ] && [ -n "$metrics" ] || { cat "$tmp/gw.err" >&2; exit 1; }
    # Mirrored: every variable (and the folder) is a node here.
    for _ in $(seq 1200); do
        local nodes
        nodes=$(curl -s "$metrics" | sed -n 's/^uaring_gateway_nodes{server="plant"} //p')
        [ "${nodes:-0}" -gt "$VARIABLES" ] && break
        sleep 0.1
    done
    echo "$pid $url $metrics"
}

items_of() {
    curl -s "$1" | sed -n 's/^uaring_gateway_monitored_items{server="plant"} //p'
}

lost_of() {
    curl -s "$1" | sed -n 's/^uaring_changes_lost_total //p'
}

run() {
    # variant url pid
    "$B" run --scenario push --json --variant "$1" --url "$2" --server-pid "$3" \
        --server-cpus "$SERVER_CPUS" --client-cpus "$CLIENT_CPUS" \
        --variables "$VARIABLES" --push-rate "$RATE" --sessions "$SESSIONS" --items "$VARIABLES" \
        --duration "$DURATION" --warmup "$WARMUP" --foreign-max "${FOREIGN_MAX:-0.15}" \
        --ready-timeout "$READY_TIMEOUT"
}

for round in $(seq "$ROUNDS"); do
    read -r dpid dport < <(downstream)
    [ -n "${dport:-}" ] || exit 1
    PIDS+=("$dpid")
    read -r gpid gurl murl < <(gateway "$dport")
    [ -n "${murl:-}" ] || exit 1
    PIDS+=("$gpid")
    # The downstream items while the sessions are subscribed: sampled mid-run.
    ( sleep "$((WARMUP + DURATION / 2))"; items_of "$murl" >"$tmp/items" ) &
    sampler=$!
    line=$(run gateway "$gurl" "$gpid")
    wait "$sampler" || true
    items=$(cat "$tmp/items" 2>/dev/null || echo null)
    lost=$(lost_of "$murl")
    echo "$line" | python3 -c 'import json,sys; o=json.loads(sys.stdin.read()); o["scenario_name"]="'"$NAME"'"; o["downstream_items"]='"${items:-null}"'; o["changes_lost"]='"${lost:-null}"'; o["round"]='"$round"'; print(json.dumps(o))' >>"$OUT"
    echo "round $round gateway: downstream items ${items:-?} (sessions x variables = $((SESSIONS * VARIABLES))), changes lost to the inbox ${lost:-?}"
    kill "$gpid"; wait "$gpid" 2>/dev/null || true
    # The same sessions against the downstream directly.
    if [ "$DIRECT" = 0 ]; then
        cleanup
        continue
    fi
    if line=$(run direct "opc.tcp://127.0.0.1:$dport" "$dpid"); then
        echo "$line" | python3 -c 'import json,sys; o=json.loads(sys.stdin.read()); o["scenario_name"]="'"$NAME"'"; o["round"]='"$round"'; print(json.dumps(o))' >>"$OUT"
    else
        echo "round $round direct: open62541-plant did not survive $SESSIONS sessions of $VARIABLES items" >&2
    fi
    cleanup
done
echo "results: $OUT"
