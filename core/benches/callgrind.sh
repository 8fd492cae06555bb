#!/usr/bin/env bash
# Instructions per request over the server path (core/benches/callgrind.rs), counted by
# callgrind inside ServerConnection::on_recv: the run of LONG requests less the run of SHORT,
# divided by their difference, so set-up and warm-up cancel. Deterministic: small deltas
# between two builds show here when wall-clock benches cannot see them.
#
#   core/benches/callgrind.sh [--base REV] [--plant P] [--batch B] WORKLOAD...
#
# WORKLOAD: read, read10, write, browse, read-plant, browse-plant (callgrind.rs says what
# each is). With --base REV the same bench (this checkout's callgrind.rs, copied in) is built
# from REV in a temporary worktree (its own target directory: a full release build of core)
# and measured first, so the two builds are side by side. SHORT and LONG (default 2000 and
# 12000) come from the environment.
set -euo pipefail

cd "$(dirname "$0")/../.."
root=$(pwd)
SHORT=${SHORT:-2000}
LONG=${LONG:-12000}
base=""
extra=()
workloads=()
while [ $# -gt 0 ]; do
    case "$1" in
        --base) base=$2; shift 2 ;;
        --plant | --batch) extra+=("$1" "$2"); shift 2 ;;
        *) workloads+=("$1"); shift ;;
    esac
done
[ ${#workloads[@]} -gt 0 ] || workloads=(read)
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }

# The bench executable of the checkout in $1 (built with its own target dir $2).
build() {
    (cd "$1" && CARGO_TARGET_DIR=$2 cargo bench -p uaring-core --bench callgrind --no-run \
        --message-format=json 2>/dev/null) |
        grep -o '"executable":"[^"]*callgrind[^"]*"' | tail -1 | cut -d'"' -f4
}

# Instructions inside on_recv for one run.
count() {
    local exe=$1 n=$2 w=$3 out
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" \
        --toggle-collect='*ServerConnection*on_recv*' "$exe" "$w" "$n" "${extra[@]}" \
        >/dev/null 2>&1
    awk '/^totals:/ {print $2} /^summary:/ {s=$2} END {if (!NR) print 0}' "$out" | head -1
    rm -f "$out"
}

measure() {
    local label=$1 exe=$2 w a b
    for w in "${workloads[@]}"; do
        a=$(count "$exe" "$SHORT" "$w")
        b=$(count "$exe" "$LONG" "$w")
        awk -v l="$label" -v w="$w" -v a="$a" -v b="$b" -v s="$SHORT" -v L="$LONG" -v x="${extra[*]}" \
            'BEGIN {printf "%-12s %-14s %s  %.1f instructions per request\n", l, w, x, (b - a) / (L - s)}'
    done
}

if [ -n "$base" ]; then
    dir=$(mktemp -d)
    trap 'git -C "$root" worktree remove --force "$dir/src" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
    git worktree add --detach "$dir/src" "$base" >/dev/null 2>&1
    cp core/benches/callgrind.rs "$dir/src/core/benches/"
    cp core/tests/support/alloc_count.rs core/tests/support/net.rs "$dir/src/core/tests/support/"
    grep -q 'name = "callgrind"' "$dir/src/core/Cargo.toml" ||
        printf '\n[[bench]]\nname = "callgrind"\nharness = false\n' >>"$dir/src/core/Cargo.toml"
    exe=$(build "$dir/src" "$dir/target")
    [ -n "$exe" ] || { echo "building $base failed" >&2; exit 1; }
    measure "$(git rev-parse --short "$base")" "$exe"
fi
exe=$(build "$root" "${CARGO_TARGET_DIR:-$root/target}")
[ -n "$exe" ] || { echo "building this checkout failed" >&2; exit 1; }
label=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- core || label="$label+"
measure "$label" "$exe"
