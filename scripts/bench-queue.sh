#!/usr/bin/env bash
# Benchmark of the operator's read commands on a large and a small state database.
#
#   bash scripts/bench-queue.sh [--runs N] [--out DIR] [--keep]
#
# 1. builds orch in release mode (in cargo's target directory, `cargo metadata`'s);
# 2. generates three state dirs: LARGE (10,000 tasks, 100,000 finished jobs, 100 active tasks
#    with 200 queued jobs), SMALL (100 tasks, 1,000 jobs: the same shape scaled down) and
#    CONTROL (LARGE's live set on SMALL's history, to tell cost that grows with history from
#    cost that grows with the live set). orch creates and migrates each database, then
#    scripts/bench_gen.py fills it in one transaction;
# 3. checks that every measured command exits 0 and that `orch queue --json` lists exactly the
#    queued jobs that were generated (200 on LARGE), failing loudly otherwise;
# 4. times `orch queue --json`, `orch why <WI>`, `orch task show <WI> --json` and the floor
#    `orch --version`: N runs (default 30) after 3 warm-ups, wall time by perf_counter around
#    posix_spawn + wait4, peak RSS by /usr/bin/time -f %M (a child of python would report
#    python's own pre-exec RSS); prints a table, the ratios and PASS/MISS for the targets.
#
# It is a report: it exits 0 whether or not the targets are met, and non-zero only when a step
# fails (build, generation, a command's exit status, a wrong queue). --out DIR keeps the state
# dirs in DIR (regenerated each time); otherwise they go to a temp dir removed at exit unless
# --keep. Needs cargo and python3 (standard library only); no network and no git clone: the
# repos of the generated config point at /nonexistent, which no measured command touches.

set -euo pipefail

RUNS=30
WARMUP=3
OUT=""
KEEP=0

usage() {
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --runs) RUNS="${2:?--runs needs a number}"; shift 2 ;;
        --runs=*) RUNS="${1#--runs=}"; shift ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --out=*) OUT="${1#--out=}"; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage 0 ;;
        *) echo "bench-queue: unknown argument \`$1\`" >&2; usage 2 >&2 ;;
    esac
done
if ! [[ "$RUNS" =~ ^[1-9][0-9]*$ ]]; then
    echo "bench-queue: --runs must be a positive integer, not \`$RUNS\`" >&2
    exit 2
fi

die() { echo "bench-queue: FAIL: $*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GEN="$ROOT/scripts/bench_gen.py"
# The release binary in cargo's own target directory (CARGO_TARGET_DIR, .cargo/config.toml).
TARGET_DIR="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')" \
    || { echo "cannot ask cargo for its target directory" >&2; exit 1; }
ORCH="$TARGET_DIR/release/orch"
command -v python3 >/dev/null || die "python3 is required"
command -v cargo >/dev/null || die "cargo is required"
[[ -f "$GEN" ]] || die "$GEN is missing"

# The measured commands must see only the generated config: drop every ORCH_* override
# (ORCH_STATE_DIR, ORCH_CONFIG, ORCH_LOG, ...) that the caller's environment may carry.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^ORCH_' || true)

echo "== build"
(cd "$ROOT" && cargo build --release --quiet) || die "cargo build --release failed"
[[ -x "$ORCH" ]] || die "$ORCH was not built"
tree="$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo 'not a git tree')"
echo "  $("$ORCH" --version) from $tree at $ORCH"

if [[ -n "$OUT" ]]; then
    mkdir -p "$OUT"
    OUT="$(cd "$OUT" && pwd)"
    KEEP=1
else
    OUT="$(mktemp -d "${TMPDIR:-/tmp}/orch-bench.XXXXXX")"
    if [[ "$KEEP" -eq 0 ]]; then
        trap 'rm -rf "$OUT"' EXIT
    fi
fi

# make_state NAME: a state dir with orch.yaml (20 repos) and a database that orch created,
# then filled by the generator with preset NAME.
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
    # A writing command creates the database and runs its migrations (which set PRAGMA
    # user_version); the read commands never create state. An empty tick changes nothing else.
    "$ORCH" --config "$dir/orch.yaml" tick >/dev/null \
        || die "$name: \`orch tick\` on a new state dir failed"
    [[ -f "$dir/orch.db" ]] || die "$name: orch did not create $dir/orch.db"
    python3 "$GEN" --db "$dir/orch.db" --preset "$name" --meta "$dir/meta.json" \
        || die "$name: generating the data failed"
}

echo "== generate in $OUT"
for db in large small control; do
    make_state "$db"
done
du -sh "$OUT"/{large,small,control}/orch.db | sed 's/^/  /'

echo "== verify and measure ($RUNS runs after $WARMUP warm-ups)"
python3 - "$ORCH" "$OUT" "$RUNS" "$WARMUP" <<'PY'
import json
import os
import statistics
import sys
import time

orch, out, runs, warmup = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
DBS = ("large", "small", "control")

TARGET_MS = 40.0
TARGET_RSS_MB = 20.0
TARGET_RATIO = 1.5


def fail(msg):
    print(f"bench-queue: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def spawn(argv, stdout_path="/dev/null", stderr_path="/dev/null"):
    """Run argv to its end: (exit code, wall seconds, ru_maxrss KiB of the direct child)."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    return os.waitstatus_to_exitcode(status), wall, ru.ru_maxrss


# Peak RSS. A process spawned by python inherits python's address space until its exec, and
# Linux's ru_maxrss keeps that pre-exec high-water mark (~13 MB here, even for `--version`).
# GNU time forks from a ~1 MB process, so its %M is the command's own peak.
RSS_FILE = os.path.join(out, "rss.txt")
TIME = "/usr/bin/time"
rss_exact = False
if os.access(TIME, os.X_OK):
    code, _, _ = spawn([TIME, "-f", "%M", "-o", RSS_FILE, "/bin/true"])
    try:
        rss_exact = code == 0 and int(open(RSS_FILE).read().split()[-1]) > 0
    except (OSError, ValueError, IndexError):
        rss_exact = False
if not rss_exact:
    print("  note: no usable GNU /usr/bin/time: peak RSS is wait4's ru_maxrss of python's child,"
          " an upper bound that includes python's own pages")


def rss_kib(argv):
    """Peak RSS of one run of argv, in KiB."""
    if rss_exact:
        code, _, _ = spawn([TIME, "-f", "%M", "-o", RSS_FILE] + argv)
        if code != 0:
            fail(f"`{' '.join(argv)}` exited {code} (under {TIME})")
        return int(open(RSS_FILE).read().split()[-1])
    code, _, rss = spawn(argv)
    if code != 0:
        fail(f"`{' '.join(argv)}` exited {code}")
    return rss


def checked(argv, label):
    """One run with its output kept; fails loudly on a non-zero exit."""
    so, se = os.path.join(out, "last.stdout"), os.path.join(out, "last.stderr")
    code, _, _ = spawn(argv, so, se)
    with open(so) as f:
        stdout = f.read()
    with open(se) as f:
        stderr = f.read()
    if code != 0:
        fail(f"{label}: `{' '.join(argv)}` exited {code}\n--- stderr ---\n{stderr}")
    return stdout


dbs = {}
for name in DBS:
    d = os.path.join(out, name)
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    cfg = os.path.join(d, "orch.yaml")
    cmds = [
        ("queue --json", [orch, "--config", cfg, "queue", "--json"]),
        (f"why {meta['why_wi']}", [orch, "--config", cfg, "why", meta["why_wi"]]),
        (f"task show {meta['show_wi']} --json",
         [orch, "--config", cfg, "task", "show", meta["show_wi"], "--json"]),
        ("--version (floor)", [orch, "--version"]),
    ]
    dbs[name] = (meta, cmds)

    # --- verification -------------------------------------------------------------------
    c = meta["counts"]
    stdout = checked(cmds[0][1], f"{name} queue")
    try:
        snap = json.loads(stdout)
    except ValueError as e:
        fail(f"{name}: `orch queue --json` printed invalid JSON: {e}")
    if len(snap["queued"]) != c["queued_jobs"] or snap["counts"]["queued"] != c["queued_jobs"]:
        fail(f"{name}: `orch queue --json` lists {len(snap['queued'])} queued jobs "
             f"(counts.queued {snap['counts']['queued']}); {c['queued_jobs']} were generated")
    if len(snap["tasks"]) != c["active"]:
        fail(f"{name}: `orch queue --json` lists {len(snap['tasks'])} active tasks; "
             f"{c['active']} were generated")
    reasons = {}
    for q in snap["queued"]:
        r = (q["blocked_by"] or {}).get("reason", "claimable")
        reasons[r] = reasons.get(r, 0) + 1
    day = snap["counts"]
    print(f"  {name}: queue OK: {len(snap['queued'])} queued "
          f"({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))}), "
          f"{len(snap['tasks'])} active tasks; last 24h done {day['done']}, failed {day['failed']}, "
          f"cancelled {day['cancelled']}; {len(stdout)} bytes of JSON")
    stdout = checked(cmds[1][1], f"{name} why")
    if meta["why_wi"] not in stdout or "queued" not in stdout:
        fail(f"{name}: `orch why {meta['why_wi']}` does not describe a queued job:\n{stdout}")
    print(f"  {name}: why OK: {stdout.strip()[:150]}…")
    stdout = checked(cmds[2][1], f"{name} task show")
    detail = json.loads(stdout)
    if detail["stage"] != "done" or len(detail["jobs"]) != meta["show_jobs"]:
        fail(f"{name}: `orch task show {meta['show_wi']}`: stage {detail['stage']}, "
             f"{len(detail['jobs'])} jobs; expected done with {meta['show_jobs']} jobs")
    print(f"  {name}: task show OK: {detail['work_item']} {detail['stage']}, "
          f"{len(detail['jobs'])} jobs, {len(detail['transitions'])} transitions")
    checked(cmds[3][1], "version")

# --- measurement: interleave databases and commands so drift hits all of them alike -------
load_before = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
order = [(name, label, argv) for name in DBS for label, argv in dbs[name][1]]
walls = {(name, label): [] for name, label, _ in order}
rsss = {(name, label): [] for name, label, _ in order}
for i in range(warmup + runs):
    for name, label, argv in order:
        code, wall, _ = spawn(argv)
        if code != 0:
            fail(f"{name}: `{' '.join(argv)}` exited {code} on run {i + 1}")
        if i >= warmup:
            walls[(name, label)].append(wall * 1000)
            rsss[(name, label)].append(rss_kib(argv))

load_after = open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"
rows = []
stats = {}
for name, label, _ in order:
    w = walls[(name, label)]
    med, mx, rss = statistics.median(w), max(w), max(rsss[(name, label)]) / 1024
    stats[(label.split()[0], name)] = (med, mx, rss)
    rows.append((label, name, f"{med:.2f}", f"{mx:.2f}", f"{rss:.1f}"))

head = ("command", "db", "median ms", "max ms", "peak RSS MB")
width = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
cell = lambda i, v: v.ljust(width[i]) if i < 2 else v.rjust(width[i])
print()
print("  ".join(cell(i, h) for i, h in enumerate(head)))
print("  ".join("-" * x for x in width))
for r in rows:
    print("  ".join(cell(i, v) for i, v in enumerate(r)))

ql, qs, qc = (stats[("queue", n)] for n in DBS)
floor = statistics.median(stats[("--version", n)][0] for n in DBS)
ratio = ql[0] / qs[0]
net = lambda q: q[0] - floor
print()
print(f"orch queue --json, medians: large/small {ratio:.2f}x; large/control {ql[0] / qc[0]:.2f}x "
      f"(same live set, 100x the history)")
print(f"  above the --version floor ({floor:.2f} ms): large {net(ql):.2f} ms, "
      f"control {net(qc):.2f} ms, small {net(qs):.2f} ms")
print()
print(f"1-minute load average before/after the timed runs: {load_before}/{load_after} "
      f"on {os.cpu_count()} CPUs (other work on the machine shows up in the max column)")
print()
print("targets (orch queue --json on the large database):")
verdict = lambda ok: "PASS" if ok else "MISS"
print(f"  median <= {TARGET_MS:.0f} ms      {ql[0]:7.2f} ms   {verdict(ql[0] <= TARGET_MS)}")
print(f"  peak RSS <= {TARGET_RSS_MB:.0f} MB    {ql[2]:7.1f} MB   {verdict(ql[2] <= TARGET_RSS_MB)}"
      + ("" if rss_exact else " (upper bound)"))
print(f"  large <= {TARGET_RATIO}x small  {ratio:7.2f} x    {verdict(ratio <= TARGET_RATIO)}")
PY

if [[ "$KEEP" -eq 1 ]]; then
    echo
    echo "state dirs kept in $OUT (large/, small/, control/: orch.yaml, orch.db, meta.json)"
fi
