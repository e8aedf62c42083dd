#!/usr/bin/env bash
# Benchmark of the scheduler: `orch tick` when idle, job throughput, and `orch demo`.
#
#   bash scripts/bench-tick.sh [--only A|B|C] [--jobs N] [--runs N] [--demo-runs N]
#                              [--timeout S] [--out DIR] [--keep]
#
# A. `orch tick` with nothing to launch, on the LARGE (10,000 tasks, 100,000 finished jobs, 100
#    active tasks with 200 queued jobs), SMALL and CONTROL (LARGE's live set on SMALL's history)
#    databases of scripts/bench_gen.py, made exactly as scripts/bench-queue.sh makes them (20
#    repos whose remotes are /nonexistent). Dispatch is closed with the breaker (open for ten
#    years); active tasks the reconciler would examine (no live job, past analysis, not
#    flagged) are paused, so no pass touches git; `orch tick --plan --json` must plan nothing
#    and one real tick must leave the database as it was. Then N runs (default 30) after 3
#    warm-ups of `orch tick`, `orch tick --plan` and the floor `orch --version`: median and max
#    wall, CPU, peak RSS (/usr/bin/time -f %M). Targets on LARGE: median <= 15 ms, peak RSS
#    <= 15 MB, LARGE <= 1.5x SMALL; LARGE vs CONTROL tells whether history matters. Where a
#    tick's time goes: strace -c per database and, when perf works here, a CPU profile.
# B. Throughput: a bare remote with one commit on main, max_concurrency 8, one repo with
#    serial_gate false and no auto-approve label (each task runs exactly one analyst job, then
#    waits for a human), the agent scripts/stub-agent, retry_backoff_s 1. `orch task add` N
#    times (default 2000; timed), then `orch tick` every 0.2 s (STUB_RUN_LOG, STUB_STATE_DIR
#    and ORCH_LOG=info,orch=debug set: timestamped launch, step and git-command lines) until
#    every job is done or the timeout (default max(300, 1.8 N) s). Reports the draining wall
#    time, jobs/s, the mean agent run time (agent_runs.duration_ms), the orchestration
#    overhead per job = wall x 8 / N - mean agent time, a per-job timeline and git command
#    costs from the supervisor logs, the repo lock's occupancy, tick cost vs queue length, the
#    sampled maximum of running jobs (<= 8), and proof that each job ran exactly once.
#    SIGTERM/SIGINT (to the python helper) stops the ticking and reports the finished jobs.
# C. `orch demo` (release binary) N times (default 5), each in a fresh TMPDIR removed after:
#    median and max wall; every run must exit 0 and reach `done`.
#
# --only A|B|C runs one part (or a list: --only A,C); --runs N sets part A's timed runs;
# --demo-runs N part C's runs. It is a report: it exits 0 whether or not the targets are met,
# and non-zero when a step or a correctness check fails (3: part B stopped before the end).
# State goes to a temp dir removed at exit unless --keep or --out DIR. Needs cargo, git and
# python3 (standard library only); no network.

set -euo pipefail

RUNS=30
DEMO_RUNS=5
JOBS=2000
TIMEOUT=0
ONLY="A,B,C"
OUT=""
KEEP=0

usage() {
    sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --only) ONLY="${2:?--only needs A, B or C}"; shift 2 ;;
        --only=*) ONLY="${1#--only=}"; shift ;;
        --jobs) JOBS="${2:?--jobs needs a number}"; shift 2 ;;
        --jobs=*) JOBS="${1#--jobs=}"; shift ;;
        --runs) RUNS="${2:?--runs needs a number}"; shift 2 ;;
        --runs=*) RUNS="${1#--runs=}"; shift ;;
        --demo-runs) DEMO_RUNS="${2:?--demo-runs needs a number}"; shift 2 ;;
        --demo-runs=*) DEMO_RUNS="${1#--demo-runs=}"; shift ;;
        --timeout) TIMEOUT="${2:?--timeout needs seconds}"; shift 2 ;;
        --timeout=*) TIMEOUT="${1#--timeout=}"; shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "bench-tick: unknown argument \`$1\`" >&2; usage 2 >&2 ;;
    esac
done
for v in RUNS DEMO_RUNS JOBS; do
    if ! [[ "${!v}" =~ ^[1-9][0-9]*$ ]]; then
        echo "bench-tick: --$(tr 'A-Z_' 'a-z-' <<<"$v") must be a positive integer, not \`${!v}\`" >&2
        exit 2
    fi
done
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || { echo "bench-tick: --timeout must be seconds" >&2; exit 2; }
ONLY="$(tr 'a-z' 'A-Z' <<<"$ONLY")"
[[ "$ONLY" =~ ^[ABC](,?[ABC])*$ ]] || { echo "bench-tick: --only takes A, B, C or a list (A,C)" >&2; exit 2; }
want() { [[ "$ONLY" == *"$1"* ]]; }

die() { echo "bench-tick: FAIL: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GEN="$ROOT/scripts/bench_gen.py"
HELPER="$ROOT/scripts/bench_tick.py"
ORCH="$ROOT/target/release/orch"
command -v python3 >/dev/null || die "python3 is required"
command -v cargo >/dev/null || die "cargo is required"
command -v git >/dev/null || die "git is required"
[[ -f "$GEN" ]] || die "$GEN is missing"
[[ -f "$HELPER" ]] || die "$HELPER is missing"

# The measured commands must see only the generated config: drop every ORCH_* override
# (ORCH_STATE_DIR, ORCH_CONFIG, ORCH_LOG, ...) that the caller's environment may carry.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^ORCH_' || true)

echo "== build"
(cd "$ROOT" && cargo build --release --quiet) || die "cargo build --release failed"
[[ -x "$ORCH" ]] || die "$ORCH was not built"
tree="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo 'not a git tree')"
echo "  $("$ORCH" --version) from $tree at $ORCH"
echo "  $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'); $(date -u '+%Y-%m-%dT%H:%M:%SZ')"

if [[ -n "$OUT" ]]; then
    mkdir -p "$OUT"
    OUT="$(cd "$OUT" && pwd)"
    KEEP=1
else
    OUT="$(mktemp -d "${TMPDIR:-/tmp}/orch-bench-tick.XXXXXX")"
    if [[ "$KEEP" -eq 0 ]]; then
        trap 'rm -rf "$OUT"' EXIT
    fi
fi
# A signal ends the script through `exit`, so the EXIT trap still removes the temp dir.
trap 'exit 143' TERM
trap 'exit 130' INT
: >"$OUT/summary.txt"

# make_state NAME: as in bench-queue.sh, a state dir with orch.yaml (20 repos) and a database
# that orch created, then filled by the generator with preset NAME.
make_state() {
    local name="$1" dir="$OUT/$1"
    rm -rf "$dir"
    mkdir -p "$dir"
    {
        echo "state_dir: $dir"
        echo "repos:"
        for i in $(seq 0 19); do
            echo "  - name: r$i"
            echo "    prefix: R$i"
            echo "    remote: /nonexistent/r$i.git"
        done
    } >"$dir/orch.yaml"
    "$ORCH" --config "$dir/orch.yaml" task list >/dev/null \
        || die "$name: \`orch task list\` on a new state dir failed"
    [[ -f "$dir/orch.db" ]] || die "$name: orch did not create $dir/orch.db"
    python3 "$GEN" --db "$dir/orch.db" --preset "$name" --meta "$dir/meta.json" \
        || die "$name: generating the data failed"
}

status=0
part() {
    # part LETTER ARGS...: run the helper for one part; remember the worst exit status.
    local rc=0
    python3 "$HELPER" "$@" --orch "$ORCH" --out "$OUT" --root "$ROOT" || rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "bench-tick: part $1 exited $rc" >&2
        [[ $status -ne 0 ]] || status=$rc
    fi
    echo
}

if want A; then
    echo "== A: generate in $OUT"
    for db in large small control; do
        make_state "$db"
    done
    du -sh "$OUT"/{large,small,control}/orch.db | sed 's/^/  /'
    part a --runs "$RUNS"
fi
if want B; then
    part b --jobs "$JOBS" --timeout "$TIMEOUT"
fi
if want C; then
    part c --runs "$DEMO_RUNS"
fi

echo "== summary ($(nproc) CPUs; load average now $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))"
sed 's/^/  /' "$OUT/summary.txt"
if [[ "$KEEP" -eq 1 ]]; then
    echo
    echo "state kept in $OUT"
fi
exit "$status"
