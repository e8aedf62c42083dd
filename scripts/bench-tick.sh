#!/usr/bin/env bash
# Benchmark of the scheduler: `orch tick` when idle, job throughput, per-job overhead against
# plain git, orch's queue against pueue's, and `orch demo`. One command, one table of targets.
#
#   bash scripts/bench-tick.sh [--only A,B,C,D,E] [--jobs N] [--jobs1 N] [--queued N]
#                              [--runs N] [--demo-runs N] [--timeout S] [--bin ORCH]
#                              [--pueue-root DIR] [--out DIR] [--keep]
#
# A. `orch tick` and `orch queue --json` with nothing to launch, on the LARGE (10,000 tasks,
#    100,000 finished jobs, 100 active tasks with 200 queued jobs), SMALL and CONTROL (LARGE's
#    live set on 1% of its history: 1,000 finished jobs) databases of scripts/bench_gen.py,
#    made exactly as scripts/bench-queue.sh makes them (20 repos whose remotes are
#    /nonexistent). Dispatch is closed with the breaker (open for ten years); active tasks the
#    reconciler would examine (no live job, past analysis, not flagged) are paused, so no pass
#    touches git; `orch tick --plan --json` must plan nothing and one real tick must leave the
#    database as it was. Then N runs (default 30) after 3 warm-ups of `orch tick`,
#    `orch tick --plan`, `orch queue --json` and the floor `orch --version`: median and max
#    wall, CPU, peak RSS (/usr/bin/time -f %M). Targets: LARGE within 1.2x of CONTROL (history
#    must not cost) and within 5x of `orch --version`, for the tick and the queue.
# B. Throughput: a bare remote with one commit on main, max_concurrency 8, one repo with
#    serial_gate false and no auto-approve label (each task runs exactly one analyst job, then
#    waits for a human), the agent scripts/stub-agent, retry_backoff_s 1. `orch task add` N
#    times (default 2000; timed), then `orch tick` every 0.2 s (STUB_RUN_LOG, STUB_STATE_DIR
#    and ORCH_LOG=info,orch=debug set: timestamped launch, step and git-command lines) until
#    every job is done or the timeout (default max(300, 1.8 N) s). Reports the draining wall
#    time, jobs/s, jobs/s per tenth of the run, the mean agent run time (agent_runs.duration_ms),
#    the orchestration overhead per job = wall x 8 / N - mean agent time, a per-job timeline and
#    git command costs from the supervisor logs, the repo lock's occupancy, tick cost vs queue
#    length, the sampled maximum of running jobs (<= 8), and proof that each job ran exactly
#    once. Targets: >= 8 jobs/s, and the last tenth at least 0.7x the rate of the first tenth.
#    SIGTERM/SIGINT (to the python helper) stops the ticking and reports the finished jobs.
# C. `orch demo` (release binary) N times (default 5), each in a fresh TMPDIR removed after:
#    median and max wall; every run must exit 0 and reach `done`.
# D. Per-job overhead at concurrency 1: part B's world with max_concurrency 1 and --jobs1 N
#    jobs (default 200), and, on the same bare remote before and after the run, the floor: 20
#    times `git worktree add` + one commit (`git add -A`, `git commit`) + `git push` of that
#    commit, with plain git in a clone of that remote. Targets: overhead per job <= 300 ms and
#    <= 4x the floor.
# E. orch against pueue with --queued N (default 2000) queued entries: `orch task add` vs
#    `pueue add` (interleaved, each timed), then `orch queue --json` vs `pueue status --json`
#    (interleaved, N runs after 3 warm-ups). pueue is installed with `cargo install pueue
#    --locked` into a temporary root inside the output directory (or into --pueue-root DIR,
#    which is kept and reused), and its daemon runs paused (nothing starts) with a config and
#    state of its own under the output directory. Targets: orch no slower than pueue, both.
# F. No waiting for the timer (issue 20): (1) `task add` -> `done` of --pipeline-tasks N tasks
#    (default 25) one after the other through every stage, the stub at zero sleep, with
#    `scheduler.launch_on_finish` on and a tick every 10 s (the shipped timer), against 10 such
#    tasks with it off and ticks back to back; (2) the hop latency over those tasks' hops (a
#    job's outcome recorded -> its task's next job launched, from the job logs' timestamps);
#    (3) `orch approve` -> the next job's supervisor launched, over 20 approvals; (4) part B's
#    throughput world with --chain-jobs N jobs (default 200) at concurrency 8, drained by the
#    supervisors' passes plus the 10 s timer, against the same drained by ticks every 0.2 s
#    alone. Targets: median task <= 3 s and <= 1.5x the tight loop; hops median <= 100 ms, max
#    <= 500 ms; approve <= 200 ms median; chained throughput >= the ticks', max running <= 8;
#    and (parts B and F) orch's own per-job cost (launch -> outcome recorded, minus the agent's
#    run and the push, whose time is the remote's receive side) flat: first tenth / last tenth
#    >= 0.8x.
#
# At the end: every target of issues 13 and 20 side by side, with its figure and PASS/MISS.
# Parts A, B, D and E queue their tasks without launching them (`ORCH_LAUNCH_ON_FINISH=false`
# on the adds, as `pueue add` into a paused group), and B and D drain them with ticks alone:
# they measure the tick-driven scheduler they always measured.
#
# --only picks parts (A, B, C, D, E, F or a list: --only A,D); --runs N sets part A's and E's
# timed runs; --demo-runs N part C's runs; --bin ORCH measures that binary instead of building
# one (say, a build of main for a before/after). It is a report: it exits 0 whether or not the
# targets are met, and non-zero when a step or a correctness check fails (3: part B or D
# stopped before the end). State goes to a temp dir removed at exit unless --keep or --out
# DIR. Needs cargo, git and python3 (standard library only); no network but crates.io for
# pueue.

set -euo pipefail

RUNS=30
DEMO_RUNS=5
JOBS=2000
JOBS1=200
QUEUED=2000
TIMEOUT=0
ONLY="A,B,C,D,E,F"
PIPELINE_TASKS=25
CHAIN_JOBS=200
BIN=""
PUEUE_ROOT=""
OUT=""
KEEP=0

usage() {
    sed -n '2,70p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --only) ONLY="${2:?--only needs A, B or C}"; shift 2 ;;
        --only=*) ONLY="${1#--only=}"; shift ;;
        --jobs) JOBS="${2:?--jobs needs a number}"; shift 2 ;;
        --jobs=*) JOBS="${1#--jobs=}"; shift ;;
        --jobs1) JOBS1="${2:?--jobs1 needs a number}"; shift 2 ;;
        --jobs1=*) JOBS1="${1#--jobs1=}"; shift ;;
        --pipeline-tasks) PIPELINE_TASKS="${2:?--pipeline-tasks needs a number}"; shift 2 ;;
        --chain-jobs) CHAIN_JOBS="${2:?--chain-jobs needs a number}"; shift 2 ;;
        --queued) QUEUED="${2:?--queued needs a number}"; shift 2 ;;
        --queued=*) QUEUED="${1#--queued=}"; shift ;;
        --bin) BIN="${2:?--bin needs a path}"; shift 2 ;;
        --bin=*) BIN="${1#--bin=}"; shift ;;
        --pueue-root) PUEUE_ROOT="${2:?--pueue-root needs a directory}"; shift 2 ;;
        --pueue-root=*) PUEUE_ROOT="${1#--pueue-root=}"; shift ;;
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
for v in RUNS DEMO_RUNS JOBS JOBS1 QUEUED PIPELINE_TASKS CHAIN_JOBS; do
    if ! [[ "${!v}" =~ ^[1-9][0-9]*$ ]]; then
        echo "bench-tick: --$(tr 'A-Z_' 'a-z-' <<<"$v") must be a positive integer, not \`${!v}\`" >&2
        exit 2
    fi
done
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || { echo "bench-tick: --timeout must be seconds" >&2; exit 2; }
ONLY="$(tr 'a-z' 'A-Z' <<<"$ONLY")"
[[ "$ONLY" =~ ^[A-F](,?[A-F])*$ ]] || { echo "bench-tick: --only takes A, B, C, D, E, F or a list (A,D)" >&2; exit 2; }
want() { [[ "$ONLY" == *"$1"* ]]; }

die() { echo "bench-tick: FAIL: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GEN="$ROOT/scripts/bench_gen.py"
HELPER="$ROOT/scripts/bench_tick.py"
command -v python3 >/dev/null || die "python3 is required"
command -v cargo >/dev/null || die "cargo is required"
command -v git >/dev/null || die "git is required"
[[ -f "$GEN" ]] || die "$GEN is missing"
[[ -f "$HELPER" ]] || die "$HELPER is missing"

# The measured commands must see only the generated config: drop every ORCH_* override
# (ORCH_STATE_DIR, ORCH_CONFIG, ORCH_LOG, ...) that the caller's environment may carry.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^ORCH_' || true)

if [[ -n "$BIN" ]]; then
    ORCH="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
    [[ -x "$ORCH" ]] || die "--bin $BIN is not an executable"
    echo "== binary given: $ORCH (not built)"
else
    # The release binary in cargo's own target directory (CARGO_TARGET_DIR, .cargo/config.toml).
    TARGET_DIR="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')" \
        || die "cannot ask cargo for its target directory"
    ORCH="$TARGET_DIR/release/orch"
    echo "== build"
    (cd "$ROOT" && cargo build --release --quiet) || die "cargo build --release failed"
    [[ -x "$ORCH" ]] || die "$ORCH was not built"
fi
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
rm -f "$OUT/results.json"

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
    "$ORCH" --config "$dir/orch.yaml" tick >/dev/null \
        || die "$name: \`orch tick\` on a new state dir failed"
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
if want D; then
    part d --jobs "$JOBS1" --timeout "$TIMEOUT"
fi
if want E; then
    part e --queued "$QUEUED" --runs "$RUNS" ${PUEUE_ROOT:+--pueue-root "$PUEUE_ROOT"}
fi
if want F; then
    part f --pipeline-tasks "$PIPELINE_TASKS" --chain-jobs "$CHAIN_JOBS" --timeout "$TIMEOUT"
fi

echo "== summary ($(nproc) CPUs; load average now $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))"
sed 's/^/  /' "$OUT/summary.txt"
echo
python3 "$HELPER" targets --orch "$ORCH" --out "$OUT" || true
if [[ "$KEEP" -eq 1 ]]; then
    echo
    echo "state kept in $OUT"
fi
exit "$status"
