#!/usr/bin/env bash
# Scale up against scale out (docs/Deployment.md), on one machine, side by side in one run:
#   1x1-direct    one instance, one shard on CPU 0, clients connect to it
#   1x1-haproxy   the same instance behind HAProxy (TCP mode, one thread on CPU 1): the hop's cost
#   1x2-direct    one instance, two shards on CPUs 0-1 (scale up)
#   2x1-haproxy   two instances, one shard each on CPU 0 and CPU 1, behind HAProxy
#                 (two threads on CPUs 0-1, balance leastconn) (scale out)
# Server CPU counts every process on the server side (instances and HAProxy: uaring-bench
# --server-pid a,b,c). The two-CPU cases share their CPUs with the client, like 1x1 does not:
# compare 1x2-direct with 2x1-haproxy, and 1x1-direct with 1x1-haproxy.
# Writes harness/benchmarks/results/deployment.jsonl, .md and .csv.
#   cargo build --release -p uaring -p uaring-harness     # and haproxy (Debian)
#   ROUNDS=3 DURATION=5 harness/benchmarks/deployment.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=${CARGO_TARGET_DIR:-target}
B=$TARGET/release/uaring-bench
U=$TARGET/release/uaring
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
RES=harness/benchmarks/results
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-2}
OUT=$RES/deployment.jsonl
mkdir -p "$RES"
tmp=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; done
    PIDS=()
}
trap 'cleanup; rm -rf "$tmp"' EXIT

# One uaring instance: name cpus shards -> prints "pid port"
instance() {
    local name=$1 cpus=$2 shards=$3
    mkdir -p "$tmp/$name"
    "$U" serve --listen 127.0.0.1:0 --contract --cpus "$cpus" --shards "$shards" \
        --config harness/benchmarks/servers/uaring-connect.toml --pki "$tmp/pki" \
        >"$tmp/$name/out" 2>"$tmp/$name/err" &
    local pid=$!
    for _ in $(seq 200); do grep -q "listening on" "$tmp/$name/out" && break; sleep 0.05; done
    local url
    url=$(sed -n 's/^listening on //p' "$tmp/$name/out" | head -1)
    [ -n "$url" ] || { cat "$tmp/$name/err" >&2; exit 1; }
    echo "$pid ${url##*:}"
}

# HAProxy in TCP mode in front of ports: cpus threads port… -> prints "pid port"
balancer() {
    local cpus=$1 threads=$2
    shift 2
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    {
        printf 'global\n  maxconn 4000\n  nbthread %s\n' "$threads"
        printf 'defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 10m\n  timeout server 10m\n'
        printf 'frontend opcua\n  bind 127.0.0.1:%s\n  default_backend uaring\n' "$port"
        printf 'backend uaring\n  balance leastconn\n'
        local i=0
        for p in "$@"; do printf '  server s%s 127.0.0.1:%s\n' "$i" "$p"; i=$((i + 1)); done
    } >"$tmp/haproxy.cfg"
    taskset -c "$cpus" "$HAPROXY" -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.out" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
    echo "$pid $port"
}

# Scenarios: name|args (the client CPUs come from the setup)
SCENARIOS=(
    "read-per-request-8x1|--scenario read --clients 8 --inflight 1 --send per-request"
    "read-batched-8x32|--scenario read --clients 8 --inflight 32"
    "connect-sae-2|--scenario connect --clients 2 --security sign-encrypt"
)

measure() { # variant url pids server_cpus client_cpus
    local variant=$1 url=$2 pids=$3 scpus=$4 ccpus=$5
    for s in "${SCENARIOS[@]}"; do
        local sname=${s%%|*} sargs=${s#*|}
        for r in $(seq "$ROUNDS"); do
            # shellcheck disable=SC2086
            "$B" run $sargs --url "$url" --server-pid "$pids" --server-name uaring \
                --server-cpus "$scpus" --client-cpus "$ccpus" --duration "$DURATION" --warmup "$WARMUP" \
                --json --variant "$variant" \
                | python3 -c 'import json,sys; d=json.load(sys.stdin); d.update(scenario_name=sys.argv[1], round=int(sys.argv[2])); print(json.dumps(d))' "$sname" "$r" >>"$OUT" \
                || echo "run failed: $variant $sname round $r" >&2
        done
    done
}

: >"$OUT"
setup() { # name
    cleanup
    case $1 in
        1x1-direct)
            read -r p port < <(instance a 0 1); PIDS+=("$p")
            measure 1x1-direct "opc.tcp://127.0.0.1:$port" "$p" 0 1 ;;
        1x1-haproxy)
            read -r p port < <(instance a 0 1); PIDS+=("$p")
            read -r h hport < <(balancer 1 1 "$port"); PIDS+=("$h")
            measure 1x1-haproxy "opc.tcp://127.0.0.1:$hport" "$p,$h" 0,1 1 ;;
        1x2-direct)
            read -r p port < <(instance a 0-1 2); PIDS+=("$p")
            measure 1x2-direct "opc.tcp://127.0.0.1:$port" "$p" 0-1 0-1 ;;
        2x1-haproxy)
            read -r p1 port1 < <(instance a 0 1); PIDS+=("$p1")
            read -r p2 port2 < <(instance b 1 1); PIDS+=("$p2")
            read -r h hport < <(balancer 0-1 2 "$port1" "$port2"); PIDS+=("$h")
            measure 2x1-haproxy "opc.tcp://127.0.0.1:$hport" "$p1,$p2,$h" 0-1 0-1 ;;
    esac
}
for v in 1x1-direct 1x1-haproxy 1x2-direct 2x1-haproxy; do setup "$v"; done
cleanup

cmd="ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP harness/benchmarks/deployment.sh"
"$B" summarize --in "$OUT" --md "$RES/deployment.md" --csv "$RES/deployment.csv" --command "$cmd" \
    --ratio 1x1-haproxy/1x1-direct --ratio 2x1-haproxy/1x2-direct --ratio 1x2-direct/1x1-direct
cat "$RES/deployment.md"
