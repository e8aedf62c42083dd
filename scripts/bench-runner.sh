#!/usr/bin/env bash
# Benchmark of the deterministic test runner: `orch run-tests <WI> --no-advance`.
#
#   bash scripts/bench-runner.sh [--runs N] [--suite-runs N] [--rss-runs N] [--out DIR] [--keep]
#
# 1. builds orch in release mode (in cargo's target directory, `cargo metadata`'s);
# 2. makes a world: a bare git remote with one commit on `main`, an orch.yaml with one repo
#    `shop` whose `tests.argv` is rewritten before each measurement, one task (`orch task add`);
#    checks `orch --version`;
# 3. before each measurement, one `orch run-tests <WI> --no-advance --json` must say `checked`,
#    `code-pass`, `PASS`, write the dry report under <state_dir>/runs/<WI>/ and leave the task's
#    stage as it was; every timed run must exit 0;
# 4. measures (wall time by perf_counter around posix_spawn + wait4, in scripts/bench_runner.py):
#    (a) overhead: `tests.argv: ["true"]`, N runs (default 30) after 3 warm-ups (the first
#        creates the clone and the worktree), interleaved with the floors `orch --version` and
#        `true` run directly: median and max ms;
#    (b) a suite of about 2 s: `tests.argv: ["sleep", "2"]`, the median of N runs (default 10)
#        against the median of N runs of `sleep 2` run directly, interleaved; target <= 1.1x;
#    (c) memory: the suite prints 500 MB (`yes 0123456789abcdef | head -c 500000000`), N runs
#        (default 3), peak RSS by /usr/bin/time -f %M (which is the maximum over orch and the
#        processes it reaped: git, sh, yes, head), also orch's own VmHWM sampled from /proc
#        every 5 ms; the run log must hold all 500 MB and the report the tail; target <= 30 MB.
#    Prints the 1-minute load average before and after, and PASS/MISS per target.
#
# It is a report: it exits 0 whether or not the targets are met, and non-zero only when a step
# fails (build, world, a command's exit status or output). --out DIR keeps the world in DIR
# (rebuilt each time); otherwise it goes to a temp dir removed at exit unless --keep. Needs
# cargo, git and python3 (standard library only); no network. Part (c) writes a 500 MB log,
# removed after each run.

set -euo pipefail

RUNS=30
SUITE_RUNS=10
RSS_RUNS=3
OUT=""
KEEP=0

usage() {
    sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

positive() {
    [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "bench-runner: $1 must be a positive integer, not \`$2\`" >&2; exit 2; }
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --runs) RUNS="${2:?--runs needs a number}"; shift 2 ;;
        --runs=*) RUNS="${1#--runs=}"; shift ;;
        --suite-runs) SUITE_RUNS="${2:?--suite-runs needs a number}"; shift 2 ;;
        --suite-runs=*) SUITE_RUNS="${1#--suite-runs=}"; shift ;;
        --rss-runs) RSS_RUNS="${2:?--rss-runs needs a number}"; shift 2 ;;
        --rss-runs=*) RSS_RUNS="${1#--rss-runs=}"; shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "bench-runner: unknown argument \`$1\`" >&2; usage 2 >&2 ;;
    esac
done
positive --runs "$RUNS"
positive --suite-runs "$SUITE_RUNS"
positive --rss-runs "$RSS_RUNS"

die() { echo "bench-runner: FAIL: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELPER="$ROOT/scripts/bench_runner.py"
# The release binary in cargo's own target directory (CARGO_TARGET_DIR, .cargo/config.toml).
TARGET_DIR="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')" \
    || { echo "cannot ask cargo for its target directory" >&2; exit 1; }
ORCH="$TARGET_DIR/release/orch"
command -v python3 >/dev/null || die "python3 is required"
command -v cargo >/dev/null || die "cargo is required"
command -v git >/dev/null || die "git is required"
[[ -f "$HELPER" ]] || die "$HELPER is missing"

# The measured commands must see only the generated config: drop every ORCH_* override
# (ORCH_STATE_DIR, ORCH_CONFIG, ORCH_LOG, ...) that the caller's environment may carry, and any
# GIT_* variable that would point git elsewhere.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(ORCH_|GIT_)' || true)

echo "== build"
(cd "$ROOT" && cargo build --release --quiet) || die "cargo build --release failed"
[[ -x "$ORCH" ]] || die "$ORCH was not built"
tree="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo 'not a git tree')"
version="$("$ORCH" --version)" || die "\`orch --version\` failed"
[[ "$version" == orch* ]] || die "\`orch --version\` printed \`$version\`"
echo "  $version from $tree at $ORCH"

if [[ -n "$OUT" ]]; then
    mkdir -p "$OUT"
    OUT="$(cd "$OUT" && pwd)"
    KEEP=1
    rm -rf "$OUT/remote.git" "$OUT/seed" "$OUT/state" "$OUT/orch.yaml"
else
    OUT="$(mktemp -d "${TMPDIR:-/tmp}/orch-bench-runner.XXXXXX")"
    if [[ "$KEEP" -eq 0 ]]; then
        trap 'rm -rf "$OUT"' EXIT
    fi
fi

echo "== world in $OUT"
g() { git -c user.name="orch bench" -c user.email="bench@orch.invalid" "$@"; }
g init -q --bare -b main "$OUT/remote.git" || die "git init --bare failed"
g init -q -b main "$OUT/seed" || die "git init failed"
echo "shop" >"$OUT/seed/README.md"
g -C "$OUT/seed" add README.md || die "git add failed"
g -C "$OUT/seed" commit -qm "initial" || die "git commit failed"
g -C "$OUT/seed" push -q "$OUT/remote.git" main || die "git push failed"
rm -rf "$OUT/seed"

# The `tests:` line is rewritten by the helper before each measurement (same shape).
cat >"$OUT/orch.yaml" <<EOF
state_dir: $OUT/state
repos:
  - name: shop
    remote: $OUT/remote.git
    prefix: SHOP
    tests: { argv: ["true"], timeout_s: 600 }
EOF

WI="$("$ORCH" --config "$OUT/orch.yaml" task add --repo shop --title "bench runner" --json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["work_item"])')" \
    || die "\`orch task add\` failed"
[[ -n "$WI" ]] || die "\`orch task add\` printed no work item"
echo "  task $WI; remote $(git -C "$OUT/remote.git" rev-parse --short main) on main"

echo "== verify and measure"
python3 "$HELPER" --orch "$ORCH" --config "$OUT/orch.yaml" --state "$OUT/state" --wi "$WI" \
    --runs "$RUNS" --suite-runs "$SUITE_RUNS" --rss-runs "$RSS_RUNS" \
    || die "measurement failed"

if [[ "$KEEP" -eq 1 ]]; then
    echo
    echo "world kept in $OUT (orch.yaml, remote.git, state/)"
fi
