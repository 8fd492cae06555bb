#!/usr/bin/env bash
# Regenerates docs/Benchmarks.md from the checked-in variant and scenario files.
# Run from anywhere; needs release builds of uaring, uaring-bench and the native
# open62541 peer and, for the older server comparison, .venv with asyncua and o6.
#
#   cargo build --release -p uaring -p uaring-harness -p uaring-peer-open62541 -p uaring-peer-async-opcua
#   (history, push, scale: also `cargo build --release -p uaring --examples` for history_bench and plant)
#   python3 -m venv .venv && .venv/bin/pip install asyncua o6
#   harness/benchmarks/make-tables.sh            # ROUNDS=3 DURATION=5 WARMUP=2
#   TABLES=headline harness/benchmarks/make-tables.sh   # one sweep; the others are re-summarized
#   SKIP_RUN=1 harness/benchmarks/make-tables.sh        # tables from the kept raw results only
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
TABLES=${TABLES:-"headline headline-connect depth placement servers security distribution handshake batching paced floor establishment"}
ALL="headline headline-connect capacity subscriptions events push history library-cost content-move depth placement servers security distribution handshake batching paced floor establishment io-modes io-modes-more recv-bundles ecc scale churn gateway history-peers"

# The ratios of both io-modes tables (the same variants).
IO_MODES_RATIOS=(
    --ratio sqpoll-same/default --ratio sqpoll-cpu1/default --ratio busy-poll-50/default
    --ratio sqpoll-cpu1-busy-50/default --ratio fixed-files/default
    --ratio zc-send-min-4096/default --ratio fixed-files-zc-4096/default
    --ratio sqpoll-same-fixed-files-zc-4096/sqpoll-same
    --ratio zc-send-min-1/default --ratio fixed-bufs-zc-1/zc-send-min-1
    --ratio fixed-bufs-zc-4096/zc-send-min-4096 --ratio fixed-bufs-zc-1/default
    --ratio default-profiled/default --ratio sqpoll-same-profiled/sqpoll-same --sched
)

sweep() { # name variants scenarios [summarize args…]
    local name=$1 variants=$2 scenarios=$3
    shift 3
    local args="--variants harness/benchmarks/$variants --scenarios harness/benchmarks/$scenarios --rounds $ROUNDS --duration $DURATION --warmup $WARMUP $EXTRA"
    local cmd="uaring-bench sweep $args --out $RES/$name.jsonl"
    if [ -z "${SKIP_RUN:-}" ] && [[ " $TABLES " == *" $name "* ]]; then
        # shellcheck disable=SC2086
        "$B" sweep $args --out "$RES/$name.jsonl"
    elif [ -f "$RES/$name.md" ]; then
        # Not re-measured: keep the command that produced the kept raw results.
        local kept
        kept=$(sed -n 's/^Reproduce: `\(.*\)`$/\1/p' "$RES/$name.md" | head -1)
        [ -n "$kept" ] && cmd=$kept
    fi
    "$B" summarize --in "$RES/$name.jsonl" --md "$RES/$name.md" --csv "$RES/$name.csv" \
        --svg "$RES/$name" --svg-link-prefix "../$RES/" --command "$cmd" "$@"
}

# The gateway's table: harness/benchmarks/gateway.sh (not a sweep: a downstream open62541
# plant server, uaring in front of it, the same sessions directly beside), in two shapes: the
# issue's 100,000 variables x 20 sessions at the rate this 2-vCPU VM carries (1 Hz: 2 million
# notifications a second upstream), and 10,000 x 2 at the issue's 10 Hz, where nothing
# saturates and the latency is the gateway's own.
GATEWAY_SHAPES=("VARIABLES=100000 RATE=1 SESSIONS=20" "VARIABLES=10000 RATE=10 SESSIONS=2")
gateway_table() {
    local cmd="" shape
    for shape in "${GATEWAY_SHAPES[@]}"; do
        cmd="${cmd:+$cmd; }$shape ROUNDS=$ROUNDS harness/benchmarks/gateway.sh"
    done
    if [ -z "${SKIP_RUN:-}" ] && [[ " $TABLES " == *" gateway "* ]]; then
        rm -f "$RES/gateway.jsonl"
        for shape in "${GATEWAY_SHAPES[@]}"; do
            # shellcheck disable=SC2086
            env $shape ROUNDS="$ROUNDS" bash harness/benchmarks/gateway.sh
        done
    elif [ -f "$RES/gateway.md" ]; then
        local kept
        kept=$(sed -n 's/^Reproduce: `\(.*\)`$/\1/p' "$RES/gateway.md" | head -1)
        [ -n "$kept" ] && cmd=$kept
    fi
    "$B" summarize --in "$RES/gateway.jsonl" --md "$RES/gateway.md" --csv "$RES/gateway.csv" \
        --svg "$RES/gateway" --svg-link-prefix "../$RES/" --command "$cmd" --ratio gateway/direct
}

ecc_certs() { # table: the server's ECC certificates in ./pki before the table runs (the RSA
    # one is made at the first start); the contract's ApplicationUri.
    if [ -z "${SKIP_RUN:-}" ] && [[ " $TABLES " == *" $1 "* ]]; then
        for ty in nistP256 nistP384 brainpoolP256r1 brainpoolP384r1; do
            [ -f "pki/own/certs/uaring_$ty.der" ] || "$TARGET/release/uaring" cert --pki pki generate \
                --type "$ty" --uri urn:o6:benchmark:server >/dev/null
        done
    fi
}

for t in $ALL; do
    [ -f "$RES/$t.jsonl" ] || [[ " $TABLES " == *" $t "* ]] || continue
    case $t in
        headline) sweep headline headline.variants headline.scenarios \
            --ratio uaring-batched/open62541-batched --ratio uaring-per-request/open62541-per-request \
            --ratio uaring-sae-batched/open62541-sae-batched --ratio uaring-sae-per-request/open62541-sae-per-request \
            --ratio uaring-batched/echo-batched --ratio uaring-per-request/echo-per-request \
            --ratio uaring-batched/async-opcua-batched --ratio uaring-per-request/async-opcua-per-request \
            --ratio uaring-sae-batched/async-opcua-sae-batched --ratio uaring-sae-per-request/async-opcua-sae-per-request \
            --ratio open62541-batched/echo-batched --ratio open62541-per-request/echo-per-request ;;
        headline-connect) sweep headline-connect headline-connect.variants headline-connect.scenarios \
            --ratio uaring-none/open62541-none --ratio uaring-sign-encrypt/open62541-sign-encrypt \
            --ratio uaring-none/async-opcua-none --ratio uaring-sign-encrypt/async-opcua-sign-encrypt ;;
        capacity) sweep capacity capacity.variants capacity.scenarios ;;
        push) sweep push push.variants push.scenarios --ratio uaring/open62541 ;;
        # Historical Access on the history_bench example; not in the default TABLES yet:
        # TABLES=history harness/benchmarks/make-tables.sh
        history) sweep history history.variants history.scenarios ;;
        # The same history reads on asyncua's SQLite history and open62541's memory backend;
        # TABLES=history-peers harness/benchmarks/make-tables.sh (needs .venv and the open62541 peer)
        history-peers) sweep history-peers history-peers.variants history-peers.scenarios \
            --ratio open62541-memory/uaring --ratio asyncua-sqlite/uaring ;;
        # Needs the binary of c35c903 in ../before (see library-cost.variants); run on demand:
        # TABLES=library-cost harness/benchmarks/make-tables.sh
        library-cost) sweep library-cost library-cost.variants library-cost.scenarios --ratio after/before ;;
        # Needs the binary of 9f0da14 in ../before/target-9f0 (see content-move.variants):
        # TABLES=content-move harness/benchmarks/make-tables.sh
        content-move) sweep content-move content-move.variants library-cost.scenarios --ratio after/before ;;
        subscriptions) sweep subscriptions subscriptions.variants subscriptions.scenarios ;;
        events) sweep events events.variants events.scenarios ;;
        depth) sweep depth uaring-echo.variants read-depth.scenarios ;;
        placement) sweep placement placement.variants placement.scenarios ;;
        servers) sweep servers servers.variants servers.scenarios ;;
        security) sweep security security.variants security.scenarios ;;
        distribution) sweep distribution distribution.variants placement.scenarios ;;
        handshake) sweep handshake handshake.variants handshake.scenarios ;;
        batching) sweep batching batching.variants batching.scenarios \
            --ratio uaring-wait-0/open62541 --ratio uaring-wait-50/open62541 --ratio uaring-wait-200/open62541 \
            --ratio uaring-wait-50/uaring-wait-0 --ratio uaring-wait-0/echo-floor --ratio uaring-wait-50/echo-floor \
            --ratio uaring-sae-wait-0/open62541-sae --ratio uaring-sae-wait-50/open62541-sae ;;
        paced) sweep paced paced.variants paced.scenarios \
            --ratio uaring/open62541 --ratio uaring-wait-50/open62541 ;;
        establishment)
            # The ECC variants need the server's ECC certificates in ./pki (the RSA one is made
            # at the first start); the contract's ApplicationUri.
            ecc_certs establishment
            sweep establishment establishment.variants establishment.scenarios \
            --ratio uaring-2-shards/open62541 --ratio uaring-1-shard/open62541 --ratio uaring-1-shard/uaring-1-shard-inline \
            --ratio uaring-1-shard-ecc-p256/uaring-1-shard --ratio uaring-1-shard-ecc-p384/uaring-1-shard \
            --ratio uaring-1-shard-ecc-bp256/uaring-1-shard ;;
        # The shard loop's I/O modes; not in the default TABLES yet: TABLES=io-modes harness/benchmarks/make-tables.sh
        io-modes) sweep io-modes io-modes.variants io-modes.scenarios "${IO_MODES_RATIOS[@]}" ;;
        # The same variants in read 4x32, SignAndEncrypt and at a paced load:
        # TABLES=io-modes-more harness/benchmarks/make-tables.sh
        io-modes-more) sweep io-modes-more io-modes.variants io-modes-more.scenarios "${IO_MODES_RATIOS[@]}" ;;
        # SignAndEncrypt Reads per policy, RSA beside ECC; not in the default TABLES yet:
        # TABLES=ecc harness/benchmarks/make-tables.sh
        ecc) ecc_certs ecc
            sweep ecc ecc.variants ecc.scenarios \
            --ratio uaring-p256-sae/uaring-rsa-sae --ratio uaring-p384-sae/uaring-rsa-sae \
            --ratio uaring-p256-sign/uaring-p256-sae --ratio uaring-rsa-sae/open62541-rsa-sae ;;
        # Receive bundles and the receive buffer size; not in the default TABLES yet:
        # TABLES=recv-bundles harness/benchmarks/make-tables.sh
        recv-bundles) sweep recv-bundles recv-bundles.variants recv-bundles.scenarios \
            --ratio buffers-2k/default-16k --ratio buffers-2k-bundles/default-16k \
            --ratio buffers-2k-bundles/buffers-2k --ratio bundles-16k/default-16k ;;
        # Plant scale (issue 29): a million variables, a million monitored items; uaring's plant
        # example beside open62541-plant. Not in the default TABLES (about 25 minutes at
        # ROUNDS=3, longer when open62541 takes minutes to create a million items):
        # TABLES=scale harness/benchmarks/make-tables.sh
        scale) sweep scale scale.variants scale.scenarios --ratio uaring/open62541 ;;
        # Nodes added and deleted while serving (issue 29), with the model writer's placements:
        # TABLES=churn harness/benchmarks/make-tables.sh
        churn) sweep churn churn.variants churn.scenarios --ratio uaring/open62541 --ratio uaring-bg1/uaring ;;
        # The aggregating gateway; not in the default TABLES (about 10 minutes a round):
        # TABLES=gateway harness/benchmarks/make-tables.sh
        gateway) gateway_table ;;
        floor) sweep floor floor.variants floor.scenarios \
            --ratio uaring-batched/echo-batched --ratio uaring-sae-batched/uaring-batched \
            --ratio uaring-sae-batched/open62541-sae-batched ;;
    esac
done

{
    cat harness/benchmarks/Benchmarks.head.md
    section() { # name title
        if [ -f "$RES/$1.md" ]; then
            printf '\n## %s\n\n' "$2"
            cat "$RES/$1.md"
            # A reading of the table written by hand (figures quoted from the kept run).
            if [ -f "harness/benchmarks/$1.note.md" ]; then
                printf '\n*Note, written by hand (harness/benchmarks/%s.note.md): its figures and any table in it are quoted from the kept runs, not generated.*\n\n' "$1"
                cat "harness/benchmarks/$1.note.md"
            fi
        fi
    }
    section headline "Headline: uaring, native open62541, async-opcua and the same-loop echo floor, both send modes, None and SignAndEncrypt"
    section headline-connect "Session establishment: uaring, native open62541 and async-opcua"
    section capacity "Sampling capacity: uaring and native open62541 (counters contract, 10 ms sampling, one server CPU)"
    section library-cost "The uaring binary on the library against the one before it (c35c903), side by side"
    section content-move "The Demo folder and the contracts on the public library API: before (9f0da14) and after, side by side"
    section push "Pushed values: the application pushes, exception-based items receive every change (uaring's plant example and native open62541, one server CPU)"
    section scale "Plant scale: a million variables, a million monitored items (uaring's plant example and native open62541, one server CPU)"
    section churn "Nodes added and deleted while serving: Read latency during a churn of 100,000 nodes, with the model writer beside the shard or on another CPU"
    section history "Historical Access: ingest beside Reads, raw and processed HistoryRead, storage (uaring's history_bench example, one server CPU)"
    section history-peers "Historical Access beside other stacks' own history: asyncua's SQLite history and open62541's memory backend, the same client"
    section gateway "The aggregating gateway: uaring in front of native open62541's plant server, every upstream session watching every variable, beside the same sessions on open62541 directly"
    section subscriptions "Subscriptions: delivered share and server CPU per notification"
    section events "Events: delivery from the cross-shard event bus"
    section handshake "Handshake offload: Read latency beside a SignAndEncrypt connect storm with UserName logins"
    section establishment "Session establishment against the RSA bound measured in the same run"
    section floor "Batched client: uaring against the same-loop echo floor, and SignAndEncrypt against None and native open62541"
    section batching "Batched waiting: clients sending each request on its own, uaring with and without it, native open62541 and the echo floor"
    section paced "Paced per-request clients: latency and CPU at the same offered load (open loop)"
    section io-modes "I/O modes of the shard loop: SQPOLL placements, busy polling, fixed files, zero-copy sends and registered send buffers against the default, every server thread counted, with profiles and scheduler states"
    section io-modes-more "I/O modes of the shard loop, continued: read 4×32, SignAndEncrypt, and a paced load (the same variants)"
    section ecc "SignAndEncrypt Reads per security policy: RSA beside ECC_nistP256 and ECC_nistP384"
    section recv-bundles "Receive bundles: 2 KiB receive buffers with and without bundles against the default 16 KiB"
    if [ -f "$RES/stalled.md" ]; then
        printf '\n## %s\n\n' "A subscriber that stops reading (SIGSTOP)"
        cat "$RES/stalled.md"
    fi
    if [ -f "$RES/soak.md" ]; then
        # `uaring-bench soak --out harness/benchmarks/results/soak` (30 minutes; not re-run here).
        printf '\n## %s\n\n' "Soak: churning sessions, the server's memory and descriptors over time"
        sed 's#](soak.svg)#](../harness/benchmarks/results/soak.svg)#' "$RES/soak.md"
    fi
    cat harness/benchmarks/Benchmarks.older.md
    section depth "Read at several depths, beside the echo floor"
    section placement "Server placement"
    section servers "uaring, open62541 (o6) and asyncua under the same client"
    section security "Security modes: uaring and open62541 (o6)"
    section distribution "Two shards: connection distribution policies"
} > "$DOC"
echo "wrote $DOC"
