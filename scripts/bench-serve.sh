#!/usr/bin/env bash
# Benchmark of the webhook path: `orch ingest` of one delivery and `orch serve` under load.
#
#   bash scripts/bench-serve.sh [--only A|B] [--runs N] [--seconds S] [--connections N]
#                               [--out DIR] [--keep]
#
# A. `orch ingest plane` (release binary) of one correctly signed Plane delivery that is stored
#    and ignored (an issue moved to a state with no action), a fresh delivery id each run:
#    N runs (default 30) after 3 warm-ups, median and max wall time, peak RSS
#    (/usr/bin/time -f %M). Target: median <= 10 ms.
# B. `orch serve --listen 127.0.0.1:0` (release binary) and a load generator on loopback
#    (python3, standard library only, raw sockets): N keep-alive connections (default 16)
#    sending signed deliveries with distinct delivery ids back to back for S seconds (default
#    30). Reports deliveries/s, p50/p99/max latency, the server's peak RSS (VmHWM from
#    /proc/<pid>/status), then stops it with SIGTERM (it must exit 0) and checks that the inbox
#    holds one non-rejected row per accepted answer. Targets: >= 1,000/s, peak RSS <= 40 MB.
#
# It is a report: it exits 0 whether or not the targets are met, and non-zero when a step or a
# correctness check fails. State goes to a temp dir removed at exit unless --keep or --out DIR.
# Needs cargo and python3; no network (only 127.0.0.1). The binary is taken from cargo's target
# directory, so CARGO_TARGET_DIR is honoured.

set -euo pipefail

RUNS=30
SECONDS_B=30
CONNECTIONS=16
ONLY="A,B"
OUT=""
KEEP=0

usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --only) ONLY="${2:?--only needs A or B}"; shift 2 ;;
        --only=*) ONLY="${1#--only=}"; shift ;;
        --runs) RUNS="${2:?--runs needs a number}"; shift 2 ;;
        --runs=*) RUNS="${1#--runs=}"; shift ;;
        --seconds) SECONDS_B="${2:?--seconds needs a number}"; shift 2 ;;
        --seconds=*) SECONDS_B="${1#--seconds=}"; shift ;;
        --connections) CONNECTIONS="${2:?--connections needs a number}"; shift 2 ;;
        --connections=*) CONNECTIONS="${1#--connections=}"; shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "$OUT" ]]; then
    OUT="$(mktemp -d -t orch-bench-serve.XXXXXX)"
    if [[ "$KEEP" == 0 ]]; then
        trap 'rm -rf "$OUT"' EXIT
    fi
else
    mkdir -p "$OUT"
    KEEP=1
fi
: > "$OUT/summary.txt"

echo "building the release binary..." >&2
(cd "$ROOT" && cargo build --release --quiet)
# Where cargo put it: honours CARGO_TARGET_DIR and a `build.target-dir` setting.
TARGET_DIR="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
ORCH="$TARGET_DIR/release/orch"

status=0
if [[ ",$ONLY," == *",A,"* ]]; then
    python3 "$ROOT/scripts/bench_serve.py" a --orch "$ORCH" --out "$OUT" --runs "$RUNS" || status=1
    echo
fi
if [[ ",$ONLY," == *",B,"* ]]; then
    python3 "$ROOT/scripts/bench_serve.py" b --orch "$ORCH" --out "$OUT" \
        --seconds "$SECONDS_B" --connections "$CONNECTIONS" || status=1
    echo
fi
echo "summary:"
cat "$OUT/summary.txt"
if [[ "$KEEP" == 1 ]]; then
    echo "state kept in $OUT"
fi
exit "$status"
