#!/usr/bin/env python3
"""The measuring half of `scripts/bench-tick.sh` (Python standard library only).

  bench_tick.py a --orch BIN --out DIR --runs N [--warmup 3]
      tick with nothing to launch on the state dirs DIR/{large,small,control} that the shell
      script generated with scripts/bench_gen.py: closes dispatch with the breaker, proves with
      `orch tick --plan --json` that the pass would do nothing, times `orch tick`.
  bench_tick.py b --orch BIN --root REPO --out DIR --jobs N [--timeout S]
      throughput: N analyst jobs through 8 slots with the stub agent, ticking every 0.2 s.
  bench_tick.py c --orch BIN --out DIR --runs N
      `orch demo` end to end, N times.
  bench_tick.py d --orch BIN --root REPO --out DIR --jobs N [--timeout S]
      part B's world at max_concurrency 1, with the floor (git worktree add + commit + push)
      measured on the same remote before and after.
  bench_tick.py e --orch BIN --out DIR --queued N --runs N [--pueue-root DIR]
      `orch task add` and `orch queue --json` against `pueue add` and `pueue status --json`.
  bench_tick.py targets --orch BIN --out DIR
      the targets of issue 13 side by side, from DIR/results.json.

Each part prints its report, appends its PASS/MISS lines to DIR/summary.txt and its figures to
DIR/results.json (read by `targets`). Exit status:
0 when the part ran (targets met or not), 1 when a step or a correctness check failed, 3 when
part B was stopped (timeout, SIGTERM or SIGINT) before every job finished: its report then
covers the jobs that did finish.
"""

import argparse
import calendar
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# The measured commands must see only the config they are given.
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
VERDICT = {True: "PASS", False: "MISS"}
SUMMARY = None  # path of DIR/summary.txt
RESULTS = None  # path of DIR/results.json
FAILURES = []


def fail(msg):
    print(f"bench-tick: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(ok, msg):
    """A correctness check: recorded, printed, and the part exits 1 at its end when one failed."""
    print(f"  [{'ok' if ok else 'FAIL'}] {msg}", flush=True)
    if not ok:
        FAILURES.append(msg)
    return ok


def summary(line):
    print(line, flush=True)
    if SUMMARY:
        with open(SUMMARY, "a") as f:
            f.write(line + "\n")


def record(**figures):
    """Merge figures into DIR/results.json, which `targets` reads."""
    if not RESULTS:
        return
    try:
        with open(RESULTS) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {}
    data.update(figures)
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def load_note(before, after):
    return (f"load average (1/5/15 min) before: {before}; after: {after}; on {os.cpu_count()} "
            f"CPUs (other work on the machine shows up in the max and the throughput)")


def spawn(argv, env=None, stdout_path="/dev/null", stderr_path="/dev/null", cwd=None):
    """Run argv to its end: (exit code, wall seconds, rusage of the direct child)."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    if cwd is not None:
        # posix_spawn has no cwd action before Python 3.13's POSIX_SPAWN_CHDIR: go through sh.
        argv = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd] + list(argv)
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env if env is not None else BASE_ENV,
                         file_actions=actions)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    return os.waitstatus_to_exitcode(status), wall, ru


class Rss:
    """Peak RSS by GNU time's %M: a child of python keeps python's pre-exec high-water mark in
    ru_maxrss (~13 MB), GNU time forks from a ~1 MB process."""

    TIME = "/usr/bin/time"

    def __init__(self, out):
        self.file = os.path.join(out, "rss.txt")
        self.exact = False
        if os.access(self.TIME, os.X_OK):
            code, _, _ = spawn([self.TIME, "-f", "%M", "-o", self.file, "/bin/true"])
            try:
                self.exact = code == 0 and int(open(self.file).read().split()[-1]) > 0
            except (OSError, ValueError, IndexError):
                self.exact = False
        if not self.exact:
            print("  note: no usable GNU /usr/bin/time: peak RSS is wait4's ru_maxrss of "
                  "python's child, an upper bound that includes python's own pages")

    def kib(self, argv):
        if self.exact:
            code, _, _ = spawn([self.TIME, "-f", "%M", "-o", self.file] + argv)
            if code != 0:
                fail(f"`{' '.join(argv)}` exited {code} (under {self.TIME})")
            return int(open(self.file).read().split()[-1])
        code, _, ru = spawn(argv)
        if code != 0:
            fail(f"`{' '.join(argv)}` exited {code}")
        return ru.ru_maxrss


def run_capture(argv, env=None, cwd=None, timeout=None):
    r = subprocess.run(argv, env=env if env is not None else BASE_ENV, cwd=cwd,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def table(head, rows, left=1):
    width = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    cell = lambda i, v: str(v).ljust(width[i]) if i < left else str(v).rjust(width[i])
    print("  " + "  ".join(cell(i, h) for i, h in enumerate(head)))
    print("  " + "  ".join("-" * x for x in width))
    for r in rows:
        print("  " + "  ".join(cell(i, v) for i, v in enumerate(r)))


# ============================================================================ part A

TARGET_MS = 15.0
TARGET_RSS_MB = 15.0
TARGET_RATIO = 1.5
DBS = ("large", "small", "control")
TEN_YEARS = 10 * 365 * 86_400
TERMINAL = ("done", "cancelled")
# Stages the reconciler never looks at (design §4.3: analysis is a human gate, created has no gate).
NO_RECONCILE = ("created", "analysis")


def quiesce(db):
    """Make nothing claimable or reconcilable: the breaker open for ten years, and every active
    task that the reconciler would examine (no live job, not in a human stage, not flagged)
    paused; no cancel request left pending. Returns (breaker until, ids of the tasks paused,
    ids of the tasks whose cancel request was cleared)."""
    now = int(time.time())
    until = now + TEN_YEARS
    con = sqlite3.connect(db, isolation_level=None, timeout=10)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT OR REPLACE INTO breaker (id, open_until, reason) VALUES (1, ?, ?)",
                    (until, "bench"))
        marks = ",".join("?" * len(TERMINAL + NO_RECONCILE))
        orphans = [r[0] for r in con.execute(
            f"SELECT t.id FROM tasks t WHERE t.stage NOT IN ({marks}) "
            "AND t.paused_at IS NULL AND t.blocked_at IS NULL AND t.held_at IS NULL "
            "AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.task_id = t.id "
            "                AND j.status IN ('queued', 'running'))",
            TERMINAL + NO_RECONCILE)]
        # A requested cancel is applied by the tick whatever the stage: none may be pending.
        cancels = [r[0] for r in con.execute(
            "SELECT id FROM tasks WHERE cancel_requested_at IS NOT NULL "
            f"AND stage NOT IN ({','.join('?' * len(TERMINAL))})", TERMINAL)]
        if cancels:
            con.execute(f"UPDATE tasks SET cancel_requested_at = NULL WHERE id IN "
                        f"({','.join('?' * len(cancels))})", cancels)
        if orphans:
            con.execute(
                f"UPDATE tasks SET paused_at = ?, paused_reason = 'bench: no live job', "
                f"paused_by = 'bench' WHERE id IN ({','.join('?' * len(orphans))})",
                [now] + orphans)
        con.execute("COMMIT")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
    return until, orphans, cancels


def db_fingerprint(db):
    """What a tick that does nothing must leave as it is."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return dict(
            jobs=con.execute("SELECT status, attempts, count(*) FROM jobs GROUP BY 1, 2 "
                             "ORDER BY 1, 2").fetchall(),
            tasks=con.execute("SELECT stage, paused_at IS NOT NULL, count(*) FROM tasks "
                              "GROUP BY 1, 2 ORDER BY 1, 2").fetchall(),
            transitions=con.execute("SELECT count(*) FROM transitions").fetchone()[0],
            leases=con.execute("SELECT (SELECT count(*) FROM transition_lease), "
                               "(SELECT count(*) FROM merge_lease)").fetchone(),
            breaker=con.execute("SELECT open_until, reason FROM breaker").fetchall(),
        )
    finally:
        con.close()


def part_a(a):
    out, orch = a.out, a.orch
    rss = Rss(out)
    print("== A. `orch tick` with nothing to launch")
    cmds = {}
    prints = {}
    for name in DBS:
        d = os.path.join(out, name)
        db = os.path.join(d, "orch.db")
        cfg = os.path.join(d, "orch.yaml")
        with open(os.path.join(d, "meta.json")) as f:
            meta = json.load(f)
        until, orphans, cancels = quiesce(db)
        c = meta["counts"]
        print(f"  {name}: {c['tasks']} tasks ({c['active']} active, {c['paused']} paused), "
              f"{c['historical_jobs']} finished jobs, {c['queued_jobs']} queued; breaker open "
              f"until {time.strftime('%Y-%m-%d', time.gmtime(until))}; active tasks without a "
              f"live job outside analysis (reconciler candidates) paused: {len(orphans)}"
              + (f"; pending cancel requests cleared: {len(cancels)}" if cancels else ""))
        if orphans:
            print(f"    note: the reconciler would have run git on /nonexistent for "
                  f"{len(orphans)} task(s) {orphans[:10]}; they are paused so the pass is empty")
        # One real pass settles what a first tick does once and never again: it cancels the
        # queued jobs the generator left on finished tasks and journals one stage-age alert per
        # task that sits in its stage past a day (stderr: the alert lines).
        code, stdout, _ = run_capture([orch, "--config", cfg, "tick", "--json"])
        if code != 0:
            fail(f"{name}: the settling `orch tick --json` exited {code}\n{stdout}")
        settled = [a["text"] for a in json.loads(stdout)["actions"]]
        print(f"    settling tick: {len(settled)} actions ("
              f"{sum(a.startswith('cancel job') for a in settled)} queued jobs of finished "
              f"tasks cancelled, {sum(a.startswith('alert:') for a in settled)} stage-age "
              f"alerts journaled)")
        c["queued_jobs"] -= sum(a.startswith("cancel job") for a in settled)
        # The plan must be empty: no reap, no reclaim, no reconcile, no launch, no error.
        code, stdout, stderr = run_capture([orch, "--config", cfg, "tick", "--plan", "--json"])
        if code != 0:
            fail(f"{name}: `orch tick --plan --json` exited {code}\n{stderr}")
        plan = json.loads(stdout)
        busy = {k: plan[k] for k in ("reaped", "reclaimed", "reconciled", "launched") if plan[k]}
        if busy or plan["actions"] or plan["errors"] or plan["skipped"] or stderr.strip():
            fail(f"{name}: `orch tick --plan` is not empty: {busy} actions {plan['actions']} "
                 f"errors {plan['errors']} skipped {plan['skipped']} stderr {stderr.strip()!r}")
        print(f"    tick --plan: reaped 0, reclaimed 0, reconciled 0, launched 0, no action, no "
              f"error; running {plan['running']}, queued {plan['queued']} (of "
              f"{c['queued_jobs']} generated)")
        if plan["queued"] != c["queued_jobs"] or plan["running"] != 0:
            fail(f"{name}: the plan sees {plan['queued']} queued / {plan['running']} running")
        # And one real pass, which must do exactly as little.
        before = db_fingerprint(db)
        code, stdout, stderr = run_capture([orch, "--config", cfg, "tick", "--json"])
        rep = json.loads(stdout) if code == 0 else None
        if code != 0 or rep["actions"] or rep["errors"] or rep["skipped"] or stderr.strip():
            fail(f"{name}: a real `orch tick` did something or failed (exit {code}):\n"
                 f"{stdout}\n{stderr}")
        if db_fingerprint(db) != before:
            fail(f"{name}: a real `orch tick` changed the database")
        print("    tick: same empty pass, exit 0, nothing on stderr, database unchanged")
        prints[name] = before
        cmds[name] = [
            ("tick", [orch, "--config", cfg, "tick"]),
            ("tick --plan", [orch, "--config", cfg, "tick", "--plan"]),
            ("queue --json", [orch, "--config", cfg, "queue", "--json"]),
            ("--version (floor)", [orch, "--version"]),
        ]

    load_before = loadavg()
    order = [(n, label, argv) for n in DBS for label, argv in cmds[n]]
    walls = {(n, l): [] for n, l, _ in order}
    cpus = {(n, l): [] for n, l, _ in order}
    rsss = {(n, l): [] for n, l, _ in order}
    print(f"  timing: {a.runs} runs after {a.warmup} warm-ups, databases and commands "
          f"interleaved; wall by perf_counter around posix_spawn + wait4, CPU = user + sys of "
          f"the child, peak RSS by {Rss.TIME} -f %M")
    for i in range(a.warmup + a.runs):
        for n, label, argv in order:
            code, wall, ru = spawn(argv)
            if code != 0:
                fail(f"{n}: `{' '.join(argv)}` exited {code} on run {i + 1}")
            if i >= a.warmup:
                walls[(n, label)].append(wall * 1000)
                cpus[(n, label)].append((ru.ru_utime + ru.ru_stime) * 1000)
                rsss[(n, label)].append(rss.kib(argv))
    load_after = loadavg()
    for n in DBS:
        db = os.path.join(out, n, "orch.db")
        if db_fingerprint(db) != prints[n]:
            fail(f"{n}: the database changed during the timed ticks")
    print(f"  after {2 * (a.warmup + a.runs) + 1} ticks per database, every database is as it "
          f"was (jobs, tasks, transitions, leases, breaker)")

    stats = {}
    rows = []
    for n, label, _ in order:
        w = walls[(n, label)]
        st = (statistics.median(w), max(w), statistics.median(cpus[(n, label)]),
              max(rsss[(n, label)]) / 1024)
        stats[(label, n)] = st
        rows.append((label, n, f"{st[0]:.2f}", f"{st[1]:.2f}", f"{st[2]:.2f}", f"{st[3]:.1f}"))
    print()
    table(("command", "db", "median ms", "max ms", "CPU ms (median)", "peak RSS MB"), rows,
          left=2)
    tl, ts, tc = (stats[("tick", n)] for n in DBS)
    pl = stats[("tick --plan", "large")]
    floor = statistics.median(stats[("--version (floor)", n)][0] for n in DBS)
    print()
    print(f"  orch tick, medians: large/small {tl[0] / ts[0]:.2f}x; large/control "
          f"{tl[0] / tc[0]:.2f}x (same live set: 100 active tasks, 200 queued jobs; 100x the "
          f"history: 100,000 vs 1,000 finished jobs)")
    print(f"  above the --version floor ({floor:.2f} ms): large {tl[0] - floor:.2f} ms, control "
          f"{tc[0] - floor:.2f} ms, small {ts[0] - floor:.2f} ms; tick minus tick --plan on "
          f"large (the tick lock + the claim's BEGIN IMMEDIATE write transaction): "
          f"{tl[0] - pl[0]:+.2f} ms")
    print(f"  the same by CPU time (user + sys, less sensitive to the machine's load): large "
          f"{tl[2]:.2f} ms, control {tc[2]:.2f} ms, small {ts[2]:.2f} ms, --version "
          f"{stats[('--version (floor)', 'large')][2]:.2f} ms; large/small {tl[2] / ts[2]:.2f}x, "
          f"large/control {tl[2] / tc[2]:.2f}x; wall/CPU on large {tl[0] / tl[2]:.1f}x (time "
          f"spent runnable but waiting for a CPU, or blocked)")
    print(f"  history: large vs control (same live set) {tl[0] - tc[0]:+.2f} ms wall "
          f"({(tl[0] / tc[0] - 1) * 100:+.0f}%), {tl[2] - tc[2]:+.2f} ms CPU "
          f"({(tl[2] / tc[2] - 1) * 100:+.0f}%); the live set: control vs small (10x the "
          f"active tasks and queued jobs) {tc[0] - ts[0]:+.2f} ms wall, {tc[2] - ts[2]:+.2f} ms CPU")
    ql, qc = stats[("queue --json", "large")], stats[("queue --json", "control")]
    ver = stats[("--version (floor)", "large")]
    print(f"  orch queue --json, medians: large/control {ql[0] / qc[0]:.2f}x, large/--version "
          f"{ql[0] / floor:.2f}x; CPU large/control {ql[2] / qc[2]:.2f}x")
    record(a_tick_large_ms=tl[0], a_tick_control_ms=tc[0], a_tick_small_ms=ts[0],
           a_queue_large_ms=ql[0], a_queue_control_ms=qc[0], a_version_ms=floor,
           a_tick_large_cpu_ms=tl[2], a_tick_control_cpu_ms=tc[2], a_queue_large_cpu_ms=ql[2],
           a_queue_control_cpu_ms=qc[2], a_version_cpu_ms=ver[2])
    profile_tick(a, {n: cmds[n][0][1] for n in DBS})
    print()
    print("  " + load_note(load_before, load_after))
    print()
    ratio = tl[0] / ts[0]
    summary("A. orch tick, nothing to launch (large: 10,000 tasks, 100,000 finished jobs, "
            "100 active, 200 queued):")
    summary(f"  median <= {TARGET_MS:.0f} ms        {tl[0]:7.2f} ms   "
            f"{VERDICT[tl[0] <= TARGET_MS]}")
    summary(f"  peak RSS <= {TARGET_RSS_MB:.0f} MB      {tl[3]:7.1f} MB   "
            f"{VERDICT[tl[3] <= TARGET_RSS_MB]}" + ("" if rss.exact else " (upper bound)"))
    summary(f"  large <= {TARGET_RATIO}x small    {ratio:7.2f} x    "
            f"{VERDICT[ratio <= TARGET_RATIO]}")
    summary(f"  (info) max {tl[1]:.2f} ms; large/control {tl[0] / tc[0]:.2f}x; "
            f"--version floor {floor:.2f} ms")


def profile_tick(a, argvs):
    """Where a tick's time goes: syscalls (strace -c -f) on each database, a timeline of one
    traced tick, and a CPU profile (perf) of 30 ticks on large, when those tools work here."""
    strace = shutil.which("strace")
    if strace:
        parts = []
        for name, argv in argvs.items():
            path = os.path.join(a.out, f"strace-{name}.txt")
            code, _, _ = spawn([strace, "-f", "-c", "-o", path] + argv)
            if code != 0:
                continue
            calls = {}
            for l in open(path).read().splitlines():
                f = l.split()
                if len(f) >= 5 and re.match(r"\d", f[0]) and f[-1] != "total":
                    try:
                        calls[f[-1]] = int(f[3])
                    except ValueError:
                        pass
            top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
            parts.append(f"{name} {sum(calls.values())} ({', '.join(f'{k} {v}' for k, v in top)})")
        if parts:
            print("  syscalls of one tick (strace -c -f): " + "; ".join(parts))
        path = os.path.join(a.out, "strace-t.txt")
        code, _, _ = spawn([strace, "-f", "-ttt", "-e", "trace=execve,openat,pread64,exit_group",
                            "-o", path] + argvs["large"])
        t0 = t_db = t_exit = None
        preads = 0
        for l in open(path) if code == 0 else []:
            m = re.match(r"(?:\d+\s+)?(\d+\.\d+) (\w+)\(", l)
            if not m:
                continue
            t, call = float(m.group(1)), m.group(2)
            t0 = t if t0 is None else t0
            if call == "openat" and 'orch.db"' in l and t_db is None:
                t_db = t
            preads += call == "pread64"
            if call == "exit_group":
                t_exit = t
        if t0 and t_db and t_exit:
            print(f"  one traced tick on large (strace slows it): exec -> database open "
                  f"{(t_db - t0) * 1000:.2f} ms, database open -> exit "
                  f"{(t_exit - t_db) * 1000:.2f} ms, {preads} pread64 (SQLite page reads)")
    perf = shutil.which("perf")
    if not perf:
        return
    data = os.path.join(a.out, "perf.data")
    script = os.path.join(a.out, "ticks.sh")
    with open(script, "w") as f:
        f.write("for i in $(seq 30); do \"$@\" >/dev/null; done\n")
    code, _, _ = spawn([perf, "record", "-q", "-F", "20000", "-o", data, "--", "/bin/sh", script]
                       + argvs["large"])
    if code != 0:
        print(f"  (perf record exited {code}: no CPU profile)")
        return
    rc, text, _ = run_capture([perf, "report", "-i", data, "--comm", "orch", "--sort",
                               "dso,symbol", "--stdio", "--percentage", "relative"])
    rows = []  # (percent, dso, symbol)
    for l in text.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*?)\s*$", l)
        if m:
            rows.append((float(m.group(1)), m.group(2), re.split(r"\s{2,}", m.group(3))[0]))
    if rc != 0 or not rows:
        print("  (perf report gave nothing: no CPU profile)")
        return
    share = {}
    for p, dso, sym in rows:
        if dso.startswith("[kernel"):
            k = "kernel (exec, mmap, page faults, reads)"
        elif dso == "orch" and "::" in sym:
            k = "orch's Rust code (rusqlite row decoding, clap, serde, ...)"
        elif dso == "orch":
            k = "SQLite (bundled C)"
        elif dso.startswith("libc"):
            k = "libc (malloc/free, memmove)"
        elif dso.startswith("ld-linux"):
            k = "dynamic loader"
        else:
            k = "other"
        share[k] = share.get(k, 0.0) + p
    top = [(p, sym) for p, dso, sym in rows if not dso.startswith("[kernel")][:8]
    print("  CPU profile of 30 ticks on large (perf, share of the orch processes' samples): "
          + ", ".join(f"{k} {v:.0f}%" for k, v in sorted(share.items(), key=lambda kv: -kv[1])))
    print("    top user-space symbols: " + ", ".join(f"{sym} {p:.1f}%" for p, sym in top))


# ============================================================================ part B

SLOTS = 8
TICK_EVERY = 0.2
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)Z\s+(\w+)\s+(.*)$")


def log_time(stamp):
    """RFC 3339 UTC with microseconds (tracing's default timer) -> unix seconds."""
    base, _, frac = stamp.partition(".")
    t = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    return t + (float("0." + frac) if frac else 0.0)


def parse_log(path):
    """[(unix time, level, message)] of a tracing log, colours stripped."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for raw in f:
                line = ANSI.sub("", raw.rstrip("\n"))
                m = TS.match(line)
                if m:
                    out.append((log_time(m.group(1)), m.group(2), m.group(3)))
                else:
                    out.append((None, "", line))
    except OSError:
        pass
    return out


def git(*args, cwd=None):
    r = subprocess.run(["git"] + list(args), cwd=cwd, env=dict(BASE_ENV, GIT_TERMINAL_PROMPT="0"),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"git {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout.strip()


class Watcher(threading.Thread):
    """Its own read-only connection; every 20 ms the job counts by status."""

    def __init__(self, db, n):
        super().__init__(daemon=True)
        self.db, self.n = db, n
        self.stop = threading.Event()
        self.samples = 0
        self.errors = []
        self.max_running = 0
        self.running_sum = 0
        self.series = []  # (perf_counter, done, running)
        self.t_all_done = None

    def run(self):
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10,
                              check_same_thread=False)
        try:
            while not self.stop.is_set():
                try:
                    rows = dict(con.execute(
                        "SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
                except sqlite3.Error as e:
                    self.errors.append(str(e))
                    time.sleep(0.02)
                    continue
                t = time.perf_counter()
                running, done = rows.get("running", 0), rows.get("done", 0)
                self.samples += 1
                self.running_sum += running
                self.max_running = max(self.max_running, running)
                if not self.series or self.series[-1][1] != done or self.samples % 50 == 0:
                    self.series.append((t, done, running))
                if done >= self.n and self.t_all_done is None:
                    self.t_all_done = t
                time.sleep(0.02)
        finally:
            con.close()


STOP = {"why": None}


def on_signal(signum, _frame):
    STOP["why"] = signal.Signals(signum).name


def alive(pid, start):
    """The process recorded as (pid, start time in clock ticks since boot, as orch records a
    supervisor) still runs: the pid exists, is not a zombie, and was not recycled."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(") ", 1)[-1].split()
    except OSError:
        return False
    # rest[0] is field 3 (state), so field 22 (starttime) is rest[19].
    return rest[0] != "Z" and (start is None or (len(rest) > 19 and rest[19] == str(start)))


GIT_CMD = re.compile(r"cmd=(\S+)(.*?)(?: status=.*)?$")


def command_kind(cmd):
    """`git -C d -c k=v ... fetch --prune ...` -> `git fetch`; `worktree add` keeps two words."""
    m = GIT_CMD.search(cmd)
    if not m:
        return "?"
    prog = os.path.basename(m.group(1))
    try:
        # The log quotes an argument with spaces as the shell would (`-c 'core.sshCommand=…'`).
        rest = shlex.split(m.group(2))
    except ValueError:
        rest = m.group(2).split()
    if prog != "git":
        return prog
    i = 0
    while i < len(rest) and rest[i] in ("-C", "-c"):
        i += 2
    words = rest[i:i + 2]
    if not words:
        return "git"
    if words[0] in ("worktree", "config") and len(words) > 1 and not words[1].startswith("-"):
        return f"git {words[0]} {words[1] if words[0] == 'worktree' else ''}".strip()
    return f"git {words[0]}"


def job_timeline(events):
    """The marks of one supervisor log (ORCH_LOG=info,orch=debug): the start of its first git
    command (the repo lock is taken just before), 'launching the agent', the agent's end,
    'pushed', 'gate' (the advance's verdict, read from the worktree just pushed), and, when the
    idle task gives its worktree back, the repo lock taken for that and the worktree given back;
    and every command with its phase and duration."""
    tl = dict(first_pre=None, agent=None, agent_end=None, pushed=None, gate=None,
              park_lock=None, parked=None, settled=None, cmds=[])
    open_cmd = None
    for t, lvl, msg in events:
        if t is None:
            continue
        if "launching the agent" in msg:
            tl["agent"] = t
        elif "supervised run ended" in msg and tl["agent_end"] is None:
            tl["agent_end"] = t
        elif re.search(r":\s+pushed ", msg):
            tl["pushed"] = t
        elif re.search(r":\s+gate: ", msg):
            tl["gate"] = t
        elif "repo lock taken to give the worktree back" in msg:
            tl["park_lock"] = t
        elif re.search(r"worktree of \S+ given back", msg):
            tl["parked"] = t
        elif re.search(r"job \d+ settled: ", msg) and tl["settled"] is None:
            tl["settled"] = t
        elif re.search(r":\s+running cmd=", msg):
            open_cmd = (t, command_kind(msg))
            if tl["agent"] is None and tl["first_pre"] is None:
                tl["first_pre"] = t
        elif re.search(r":\s+finished cmd=", msg) and open_cmd:
            phase = ("pre" if tl["agent"] is None else "post" if tl["pushed"] is None
                     else "park")
            tl["cmds"].append((phase, open_cmd[1], (t - open_cmd[0]) * 1000))
            open_cmd = None
    return tl


def report_timeline(tls, drain, n_done):
    """Where a job's time goes, from the supervisor logs."""
    seg = {k: [] for k in ("start", "lock_pre", "agent", "post", "advance", "park_wait",
                           "lock_park")}
    git_by = {}
    for jid, t_launch, dur, tl in tls:
        seg["start"].append((tl["first_pre"] - t_launch) * 1000)
        seg["lock_pre"].append((tl["agent"] - tl["first_pre"]) * 1000)
        seg["agent"].append(dur)
        seg["post"].append((tl["pushed"] - tl["agent"]) * 1000 - dur)
        seg["advance"].append((tl["gate"] - tl["pushed"]) * 1000)
        seg["park_wait"].append((tl["park_lock"] - tl["gate"]) * 1000)
        seg["lock_park"].append((tl["parked"] - tl["park_lock"]) * 1000)
        for phase, kind, ms in tl["cmds"]:
            d = git_by.setdefault((phase, kind), [0, 0.0])
            d[0] += 1
            d[1] += ms
    m = {k: statistics.mean(v) for k, v in seg.items() if v}
    med = {k: statistics.median(v) for k, v in seg.items() if v}
    p95 = {k: pct(v, 95) for k, v in seg.items() if v}

    def git_ms(phase):
        return sum(v[1] for (ph, _), v in git_by.items() if ph == phase) / len(tls)
    print(f"    per-job timeline from the supervisor logs (ORCH_LOG=info,orch=debug; {len(tls)} "
          f"jobs), ms:")
    rows = [
        ("1 tick launch -> first git command: supervisor start, DB, repo lock wait", "slot",
         "start"),
        ("2 first git command -> agent start: fetch, worktree add (repo lock held)", "slot",
         "lock_pre"),
        ("3 agent run (agent_runs.duration_ms)", "slot", "agent"),
        ("4 agent exit -> pushed: record run, git add + commit, push", "slot", "post"),
        ("5 pushed -> gate: set exit, finish (frees the slot), the advance's gate (no git)",
         "slot/after", "advance"),
        ("6 gate -> repo lock taken to park: status, lock wait", "after", "park_wait"),
        ("7 lock taken -> worktree given back: removal on disk (repo lock held)", "after",
         "lock_park"),
    ]
    table(("segment", "slot?", "mean", "median", "p95"),
          [(label, where, f"{m[k]:.1f}", f"{med[k]:.1f}", f"{p95[k]:.1f}")
           for label, where, k in rows], left=2)
    print(f"      git processes' own run time inside segments 2 / 4 / 6-7: {git_ms('pre'):.1f} / "
          f"{git_ms('post'):.1f} / {git_ms('park'):.1f} ms per job")
    cmds = sorted(git_by.items(), key=lambda kv: -kv[1][1])
    print("      commands per job (count x mean ms), by total time: " + "; ".join(
        f"{kind} [{ph}] {v[0] / len(tls):.1f}x{v[1] / v[0]:.1f}" for (ph, kind), v in cmds[:10]))
    held = m["lock_pre"] + m["lock_park"]
    util = held * n_done / 1000 / drain if drain > 0 else float("nan")
    print(f"      the repo lock (one repo: every job's worktree preparation and removal take it "
          f"in turn) is held {held:.1f} ms per job (2 + 7): {util * 100:.0f}% of the draining "
          f"wall time; it alone caps the throughput at {1000 / held:.2f} jobs/s")
    tls.sort(key=lambda x: x[0])
    tenth = max(1, len(tls) // 10)

    def cmd_ms(part, kind):
        xs = [ms for _, _, _, tl in part for ph, k, ms in tl["cmds"] if k == kind]
        return statistics.median(xs) if xs else float("nan")

    def seg_ms(part, a, b):
        return statistics.mean((tl[b] - tl[a]) * 1000 for _, _, _, tl in part)
    first, last = tls[:tenth], tls[-tenth:]
    print(f"      first {tenth} vs last {tenth} jobs by id (medians of the commands, means of "
          f"the segments): "
          + "; ".join(f"{k} {cmd_ms(first, k):.1f} -> {cmd_ms(last, k):.1f} ms"
                      for k in ("git fetch", "git worktree add", "git commit", "git push"))
          + f"; segment 2 {seg_ms(first, 'first_pre', 'agent'):.1f} -> "
          f"{seg_ms(last, 'first_pre', 'agent'):.1f} ms; segment 4 "
          f"{seg_ms(first, 'agent_end', 'pushed'):.1f} -> "
          f"{seg_ms(last, 'agent_end', 'pushed'):.1f} ms")


# The adds only queue (as `pueue add` into a paused group): the launch pass a `task add` runs
# by default (`scheduler.launch_on_finish`) is off for them; the parts that measure it say so.
QUEUE_ONLY = dict(BASE_ENV, ORCH_LAUNCH_ON_FINISH="false")


def orch_add(orch, cfg, i, err, env=None):
    """`orch task add` of bench task i to repo `shop`: its wall time in ms (a failure ends the
    benchmark)."""
    code, wall, _ = spawn([orch, "--config", cfg, "task", "add", "--repo", "shop",
                           "--title", f"bench task {i}"], env=env or QUEUE_ONLY,
                          stderr_path=err)
    if code != 0:
        fail(f"`orch task add` #{i} exited {code}: {open(err).read().strip()}")
    return wall * 1000


def throughput(a, slots, tag, before_run=None, after_run=None, chain=False, tick_every=None,
               jobs=None):
    """N analyst jobs through `slots` slots (part B with 8, part D with 1). `before_run` and
    `after_run` are called with the bare remote's path before the first tick and after the
    last job (part D measures the floor there). With `chain`, a tick every `tick_every` s (the
    shipped timer's 10 s) and the supervisors' own launch passes (`launch_on_finish`) drain the
    queue; without, only ticks launch, one every TICK_EVERY s."""
    n, orch, root = jobs or a.jobs, a.orch, a.root
    tick_every = tick_every or TICK_EVERY
    timeout = a.timeout or max(300, int(1.8 * n))
    world = os.path.join(a.out, f"throughput-{n}-x{slots}{'-chain' if chain else ''}")
    if os.path.exists(world):
        shutil.rmtree(world)
    os.makedirs(world)
    print(f"== {tag}. throughput: {n} analyst jobs, max_concurrency {slots}, a tick every "
          f"{tick_every} s{', supervisors launching as they end' if chain else ''} (timeout "
          f"{timeout} s), world in {world}")
    remote = os.path.join(world, "remote.git")
    seed = os.path.join(world, "seed")
    git("init", "-q", "--bare", "-b", "main", remote)
    git("init", "-q", "-b", "main", seed)
    with open(os.path.join(seed, "README.md"), "w") as f:
        f.write("# shop\n\nThe throughput benchmark's project.\n")
    os.makedirs(os.path.join(seed, "src"))
    with open(os.path.join(seed, "src", "lib.txt"), "w") as f:
        f.write("v1\n")
    git("-C", seed, "add", "-A")
    git("-C", seed, "-c", "user.name=bench", "-c", "user.email=bench@orch.invalid",
        "commit", "-qm", "initial")
    git("-C", seed, "push", "-q", remote, "main")
    stub = os.path.join(root, "scripts", "stub-agent")
    state = os.path.join(world, "state")
    cfg = os.path.join(world, "orch.yaml")
    # No auto-approve label: after its analyst job a task waits in `analysis` for a human, so
    # every task runs exactly one job.
    with open(cfg, "w") as f:
        f.write(
            f"state_dir: {json.dumps(state)}\n"
            f"max_concurrency: {slots}\n"
            f"agent:\n  argv: [{json.dumps(stub)}]\n"
            # The agent runs confined where bubblewrap is installed (the default); the stub's
            # run log and counters live in the world directory.
            f"  sandbox_writable: [{json.dumps(world)}]\n"
            f"scheduler:\n  retry_backoff_s: 1\n"
            f"repos:\n  - name: shop\n    remote: {json.dumps(remote)}\n    prefix: SHOP\n"
            f"    serial_gate: false\n")
    db = os.path.join(state, "orch.db")
    run_log = os.path.join(world, "runs.log")
    stub_state = os.path.join(world, "stub-state")

    # ---- task add, N times --------------------------------------------------------------
    adds = []
    t0 = time.perf_counter()
    err = os.path.join(world, "add.stderr")
    for i in range(1, n + 1):
        adds.append(orch_add(orch, cfg, i, err))
    add_total = time.perf_counter() - t0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    queued = con.execute("SELECT count(*) FROM jobs WHERE role = 'analyst' AND status = 'queued'"
                         ).fetchone()[0]
    total = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
    con.close()
    if queued != n or total != n:
        fail(f"after {n} `task add`: {queued} queued analyst jobs, {total} jobs in all")
    print(f"  task add x{n}: {add_total:.2f} s in all; per add median {statistics.median(adds):.2f}"
          f" ms, max {max(adds):.2f} ms; {n} queued analyst jobs")

    if before_run:
        before_run(remote, world)

    # ---- tick until every job is done ---------------------------------------------------
    env = dict(BASE_ENV, STUB_RUN_LOG=run_log, STUB_STATE_DIR=stub_state,
               # The tick logs each launch (info) and the supervisor each step and each git
               # command (debug), with a timestamp: the per-job timeline comes from those lines.
               ORCH_LOG="info,orch=debug",
               ORCH_LAUNCH_ON_FINISH="true" if chain else "false")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    watcher = Watcher(db, n)
    watcher.start()
    load_before = loadavg()
    loads = []
    ticks = []  # (start perf, wall s, exit, report or None, stderr)
    launches = {}  # job id -> [(unix time, attempt)]
    tick_trouble = []
    t_start = time.perf_counter()
    unix_start = time.time()
    k = 0
    stopped = None
    while True:
        ts = time.perf_counter()
        r = subprocess.run([orch, "--config", cfg, "tick", "--json"], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        wall = time.perf_counter() - ts
        rep = None
        try:
            rep = json.loads(r.stdout)
        except ValueError:
            pass
        ticks.append((ts, wall, r.returncode, rep))
        if r.returncode != 0 or rep is None or rep.get("errors"):
            tick_trouble.append(f"tick #{len(ticks)} exit {r.returncode}: "
                                f"{(r.stdout + r.stderr).strip()[:300]}")
        for line in r.stderr.splitlines():
            line = ANSI.sub("", line)
            m = TS.match(line)
            if m and m.group(2) == "INFO" and "launched supervisor" in m.group(3):
                jm = re.search(r"job=(\d+)", m.group(3))
                if jm:
                    launches.setdefault(int(jm.group(1)), []).append(log_time(m.group(1)))
            elif (m and m.group(2) in ("WARN", "ERROR")) or (not m and line.strip()):
                tick_trouble.append(f"tick #{len(ticks)} stderr: {line.strip()[:300]}")
        if rep:
            for act in rep.get("actions", []):
                # An action is an object with the printed line in `text` (docs/json.md).
                act = act["text"]
                m = re.match(r"launch job (\d+) \(.*attempt (\d+)\)", act)
                if m and m.group(2) != "1":
                    tick_trouble.append(f"tick #{len(ticks)} relaunched: {act}")
        if watcher.t_all_done is not None:
            break
        el = time.perf_counter() - t_start
        if el > timeout:
            stopped = f"timeout after {timeout} s"
            break
        if STOP["why"]:
            stopped = f"stopped by {STOP['why']}"
            break
        if len(ticks) % 150 == 0:
            loads.append(loadavg().split()[0])
            print(f"  ... {el:6.0f} s: {watcher.series[-1][1] if watcher.series else 0}/{n} "
                  f"done, running {watcher.series[-1][2] if watcher.series else 0}, "
                  f"load {loads[-1]}", flush=True)
        k += 1
        # The next tick is due; the run may end meanwhile (the supervisors drain it).
        while (time.perf_counter() < t_start + k * tick_every and watcher.t_all_done is None
               and not STOP["why"]):
            time.sleep(min(0.02, max(0.0, t_start + k * tick_every - time.perf_counter())))
    t_end = watcher.t_all_done if watcher.t_all_done is not None else time.perf_counter()
    drain = t_end - t_start
    load_after = loadavg()

    # Let the supervisors finish their advance (a no-op: analysis waits for a human) and exit.
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    pids = con.execute("SELECT supervisor_pid, supervisor_start FROM jobs "
                       "WHERE supervisor_pid IS NOT NULL").fetchall()
    con.close()
    q0 = time.perf_counter()
    while any(alive(*p) for p in pids) and time.perf_counter() - q0 < 60:
        time.sleep(0.05)
    still = [p[0] for p in pids if alive(*p)]
    watcher.stop.set()
    watcher.join()

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    q = lambda sql, *p: con.execute(sql, p).fetchall()
    by_status = q("SELECT status, attempts, count(*) FROM jobs GROUP BY 1, 2 ORDER BY 1, 2")
    done_ids = {r[0] for r in q("SELECT id FROM jobs WHERE status = 'done'")}
    n_done = len(done_ids)
    runs = q("SELECT r.job_id, r.duration_ms, r.started_at, r.finished_at, j.started_at, "
             "j.finished_at FROM agent_runs r JOIN jobs j ON j.id = r.job_id "
             "WHERE j.status = 'done'")
    wi_of = dict(q("SELECT j.id, t.work_item FROM jobs j JOIN tasks t ON t.id = j.task_id"))
    stages = q("SELECT stage, count(*) FROM tasks GROUP BY stage")
    n_runs_all = q("SELECT count(*) FROM agent_runs")[0][0]
    n_failed = q("SELECT count(*) FROM jobs WHERE status = 'failed'")[0][0]
    con.close()
    complete = n_done == n and stopped is None

    print()
    if stopped:
        print(f"  STOPPED ({stopped}) with {n_done}/{n} jobs done: the figures below cover the "
              f"{n_done} jobs that finished")
    # ---- exactly once -------------------------------------------------------------------
    print("  correctness:")
    try:
        with open(run_log) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    by_job, by_wi, run_ids, bad = {}, {}, set(), []
    for l in lines:
        f = l.split(" ")
        if len(f) != 4 or f[1] != "analyst" or not f[2].isdigit():
            bad.append(l)
            continue
        jid = int(f[2])
        if wi_of.get(jid) != f[0]:
            bad.append(l)
        by_job[jid] = by_job.get(jid, 0) + 1
        by_wi[f[0]] = by_wi.get(f[0], 0) + 1
        run_ids.add(f[3])
    want = n if complete else n_done
    if complete:
        check(len(lines) == n, f"run-log lines == N: {len(lines)} == {n}")
        check(len(by_job) == n, f"distinct job ids in the run log == N: {len(by_job)} == {n}")
        check(by_status == [("done", 1, n)],
              f"every job `done` with attempts == 1: jobs by (status, attempts, count) = "
              f"{by_status}")
    else:
        check(len(set(by_job) & done_ids) == n_done,
              f"every done job is in the run log: {len(set(by_job) & done_ids)} of {n_done}")
        check(all(s in ("done", "queued", "running") and (s != "done" or at == 1)
                  for s, at, _ in by_status),
              f"jobs by (status, attempts, count) = {by_status}")
    check(all(v == 1 for v in by_job.values()) and len(run_ids) == len(lines),
          f"no job ran twice: max runs per job {max(by_job.values(), default=0)}, "
          f"{len(run_ids)} distinct run ids for {len(lines)} lines")
    check(all(v == 1 for v in by_wi.values()),
          f"no task ran twice: {len(by_wi)} distinct work items in the run log")
    check(not bad, f"every run-log line is `<WI> analyst <job id> <run id>` of that job's task"
          + (f"; bad: {bad[:3]}" if bad else ""))
    check(n_failed == 0, f"no `failed` job: {n_failed}")
    check(n_runs_all == (n if complete else n_runs_all) and len(runs) == n_done,
          f"one agent_runs row per done job: {len(runs)} for {n_done} done ({n_runs_all} rows)")
    if complete:
        check(stages == [("analysis", n)],
              f"every task waits for approval in `analysis`: {stages}")
    check(watcher.max_running <= slots,
          f"sampled max running <= {slots}: {watcher.max_running} over {watcher.samples} "
          f"samples (every 20 ms)")
    check(not watcher.errors, f"the watcher read without error ({len(watcher.errors)} errors)")
    max_rep_running = max((t[3] or {}).get("running", 0) for t in ticks)
    check(max_rep_running <= slots, f"max `running` reported by a tick <= {slots}: "
          f"{max_rep_running}")
    launched = sum((t[3] or {}).get("launched", 0) for t in ticks)
    if not chain:
        check(launched == (n if complete else launched)
              and all(len(v) == 1 for v in launches.values()),
              f"launches summed over all tick reports: {launched}; every job launched once "
              f"({len(launches)} distinct)")
    check(not tick_trouble, f"every tick exited 0, with no error and no warning "
          f"({len(ticks)} ticks)" + ("".join("\n      " + t for t in tick_trouble[:10])))
    trouble = []
    logs = os.path.join(state, "logs")
    timeline = {}
    for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        m = re.match(r"job-(\d+)\.log$", name)
        if not m:
            continue
        events = parse_log(os.path.join(logs, name))
        for i, (_, lvl, msg) in enumerate(events):
            if lvl in ("WARN", "ERROR"):
                # The message and the lines of command output that follow it (git's stderr).
                more = []
                for t, _, line in events[i + 1:i + 6]:
                    if t is not None:
                        break
                    more.append(line.strip())
                trouble.append(f"{name}: {lvl} {msg[:160]} | " + " | ".join(more)[:500])
        timeline[int(m.group(1))] = job_timeline(events)
        # A supervisor's own launch pass starts further jobs: their launch is in its log.
        for t, lvl, msg in events:
            if t is not None and lvl == "INFO" and "launched supervisor" in msg:
                # `job=N` of the message, not of the supervisor's span (`job{… job=M}`).
                jm = re.search(r"launched supervisor job=(\d+)", msg)
                if jm:
                    launches.setdefault(int(jm.group(1)), []).append(t)
    check(not trouble, f"the supervisor logs hold no WARN/ERROR line ({len(trouble)})"
          + "".join("\n      " + t for t in trouble[:10]))
    if chain:
        check(len(launches) == (n if complete else len(launches))
              and all(len(v) == 1 for v in launches.values()),
              f"every job launched once, by a tick ({launched}) or by a supervisor "
              f"({len(launches) - launched}): {len(launches)} distinct")
    check(not still, f"every supervisor exited within 60 s of the last job ({len(still)} alive)")

    # ---- figures ------------------------------------------------------------------------
    durs = [r[1] for r in runs if r[1] is not None]
    mean_agent = statistics.mean(durs) if durs else float("nan")
    # Stopped early: the rate counts the jobs done when the ticking stopped (the watcher's last
    # sample), not the few that the running supervisors finished afterwards.
    done_for_rate = n if complete else (watcher.series[-1][1] if watcher.series else 0)
    rate = done_for_rate / drain if drain > 0 else float("nan")
    per_job = drain * slots / done_for_rate * 1000 if done_for_rate else float("nan")
    overhead = per_job - mean_agent
    mean_running = watcher.running_sum / watcher.samples if watcher.samples else float("nan")
    tick_walls = [t[1] * 1000 for t in ticks]
    launching = [t[1] * 1000 for t in ticks if (t[3] or {}).get("launched")]
    idle = [t[1] * 1000 for t in ticks if not (t[3] or {}).get("launched")]

    # Per-job timeline (log timestamps, microseconds), for the jobs whose every mark is there.
    tls = []
    for jid, dur in ((r[0], r[1]) for r in runs):
        tl = timeline.get(jid)
        t_launch = launches.get(jid, [None])[0]
        if tl and t_launch is not None and dur is not None and all(
                tl.get(k) is not None for k in ("first_pre", "agent", "agent_end", "pushed",
                                                "gate", "park_lock", "parked")):
            tls.append((jid, t_launch, dur, tl))
    print()
    print("  figures:")
    print(f"    jobs completed                 {done_for_rate} of {n}"
          + ("" if complete else f" when the ticking stopped ({n_done} once the running "
             f"supervisors had finished)"))
    print(f"    draining wall time             {drain:.2f} s (first tick -> "
          + ("the watcher sees the last job `done`)" if complete else f"{stopped})"))
    print(f"    throughput                     {rate:.2f} jobs/s ({1000 / rate:.1f} ms of wall "
          f"per job)" if rate == rate and rate > 0 else "    throughput                     n/a")
    print(f"    mean agent run time            {mean_agent:.1f} ms (agent_runs.duration_ms; "
          f"median {statistics.median(durs) if durs else float('nan'):.0f}, p95 "
          f"{pct(durs, 95):.0f}, max {max(durs, default=0)} ms)")
    print(f"    slot time per job              {per_job:.1f} ms = wall {drain:.2f} s x {slots} "
          f"slots / {done_for_rate} jobs")
    print(f"    orchestration overhead per job {overhead:.1f} ms = slot time per job - mean "
          f"agent time ({per_job:.1f} - {mean_agent:.1f})")
    print(f"      (the pool of {slots} slots offers wall x {slots} slot-seconds; spread over the "
          f"jobs it is what each job cost the pool; minus the agent's own run it is the cost of "
          f"orchestrating one job: waiting for a tick to fill the freed slot, the supervisor's "
          f"start, git clone/fetch/worktree, commit + push, the database writes, and the CPU "
          f"contention of all that on {os.cpu_count()} CPUs. It is exact only if the slots "
          f"stay full; they were {mean_running:.2f} of {slots} busy on average)")
    print(f"    mean running (sampled)         {mean_running:.2f}; max {watcher.max_running} "
          f"(<= {slots})")
    print(f"    ticks                          {len(ticks)}: median {statistics.median(tick_walls):.1f}"
          f" ms, max {max(tick_walls):.1f} ms; those that launched ({len(launching)}): median "
          f"{statistics.median(launching) if launching else float('nan'):.1f} ms; the others "
          f"{statistics.median(idle) if idle else float('nan'):.1f} ms")
    # A tick reads every live job and active task: its cost follows the queue's length.
    bins = {}
    for _, w, _, rep in ticks:
        if rep and "queued" in rep:
            b = min(3, rep["queued"] * 4 // max(1, n))
            bins.setdefault(b, []).append(w * 1000)
    print("    tick wall vs queued jobs        " + "; ".join(
        f"queued {b * n // 4}-{(b + 1) * n // 4}: median {statistics.median(v):.1f} ms "
        f"({len(v)} ticks)" for b, v in sorted(bins.items(), reverse=True))
        + f"; ticking took {sum(tick_walls) / 1000 / drain * 100:.0f}% of the draining wall time")
    if tls:
        report_timeline(tls, drain, done_for_rate)
    # orch's own cost per job: from its launch to its outcome recorded, minus the agent's run
    # and the push (whose time is the remote's receive side, which grows with every branch on
    # a remote that shares these CPUs), first tenth of the jobs against the last.
    own = []
    for jid, t_launch, dur, tl in sorted(tls, key=lambda x: x[0]):
        if tl.get("settled") is None:
            continue
        push = sum(ms for ph, kind, ms in tl["cmds"] if kind == "git push")
        own.append((tl["settled"] - t_launch) * 1000 - dur - push)
    own_first = own_last = float("nan")
    if len(own) >= 20:
        tenth = len(own) // 10
        own_first, own_last = statistics.median(own[:tenth]), statistics.median(own[-tenth:])
        print(f"    orch's own cost per job        first tenth {own_first:.1f} ms, last tenth "
              f"{own_last:.1f} ms ({own_first / own_last:.2f}x flat): launch -> outcome "
              f"recorded, minus the agent's run and the push")
    # Completion rate per tenth of the jobs.
    series = watcher.series
    tenths = []
    if series and done_for_rate >= 10:
        marks = []
        for d in range(1, 11):
            goal = done_for_rate * d // 10
            hit = next((t for t, dn, _ in series if dn >= goal), None)
            marks.append(hit)
        prev = t_start
        rates = []
        for d, hit in enumerate(marks, 1):
            if hit is None:
                break
            span = hit - prev
            rates.append(f"{(done_for_rate // 10) / span:.1f}" if span > 0 else "inf")
            tenths.append((done_for_rate // 10) / span if span > 0 else float("inf"))
            prev = hit
        print(f"    jobs/s per tenth of the run    {' '.join(rates)}")
    print(f"    {load_note(load_before, load_after)}"
          + (f"; sampled during the run: {' '.join(loads)}" if loads else ""))
    print()
    k = tag.lower()
    record(**{f"{k}_jobs": n, f"{k}_slots": slots, f"{k}_complete": complete,
              f"{k}_done": done_for_rate, f"{k}_rate": rate, f"{k}_overhead_ms": overhead,
              f"{k}_agent_ms": mean_agent, f"{k}_tenths": tenths,
              f"{k}_add_ms": statistics.median(adds), f"{k}_correct": not FAILURES,
              f"{k}_own_first_ms": own_first, f"{k}_own_last_ms": own_last,
              f"{k}_max_running": watcher.max_running})
    if after_run:
        after_run(remote, world)
    incomplete = "" if complete else f" [INCOMPLETE: {stopped}; {n_done}/{n} done]"
    summary(f"{tag}. throughput, {n} analyst jobs, max_concurrency {slots}, tick every "
            f"{tick_every} s{' with supervisors launching' if chain else ''}{incomplete}:")
    summary(f"  task add x{n}: {add_total:.2f} s ({add_total / n * 1000:.1f} ms per add)")
    summary(f"  draining {drain:.2f} s for {done_for_rate} jobs: {rate:.2f} jobs/s; mean agent "
            f"{mean_agent:.1f} ms; overhead per job {overhead:.1f} ms (= wall x {slots} / N - "
            f"mean agent)")
    summary(f"  exactly once (run log == N, distinct ids == N, all done/attempts 1, none failed): "
            f"{'PASS' if complete and not FAILURES else ('FAIL' if FAILURES else 'incomplete')}")
    summary(f"  max running sampled {watcher.max_running} <= {slots}: "
            f"{'PASS' if watcher.max_running <= slots else 'FAIL'}")
    if FAILURES:
        sys.exit(1)
    if not complete:
        sys.exit(3)


def part_b(a):
    floors = {}

    def before(remote, world):
        floors["before"] = measure_floor(remote, world, "before", runs=10)

    def after(remote, world):
        # Plain git on the remote the run left (a branch per job): what any client pays there.
        floors["after"] = measure_floor(remote, world, "after", runs=10)
        record(b_floor_before_ms=statistics.median(floors["before"]),
               b_floor_after_ms=statistics.median(floors["after"]))

    throughput(a, 8, "B", before, after)


# ============================================================================ part F

def small_world(out, name, auto_approve, slots=2):
    """A bare remote with one commit on main, and a config whose agent is the stub (no sleep):
    one repo `shop` without a serial gate. Returns (dir, config, database)."""
    world = os.path.join(out, name)
    if os.path.exists(world):
        shutil.rmtree(world)
    os.makedirs(world)
    remote, seed = os.path.join(world, "remote.git"), os.path.join(world, "seed")
    git("init", "-q", "--bare", "-b", "main", remote)
    git("init", "-q", "-b", "main", seed)
    with open(os.path.join(seed, "README.md"), "w") as f:
        f.write("# shop\n")
    git("-C", seed, "add", "-A")
    git("-C", seed, "-c", "user.name=bench", "-c", "user.email=bench@orch.invalid",
        "commit", "-qm", "initial")
    git("-C", seed, "push", "-q", remote, "main")
    stub = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stub-agent")
    cfg = os.path.join(world, "orch.yaml")
    labels = "[auto-approve]" if auto_approve else "[]"
    with open(cfg, "w") as f:
        f.write(f"state_dir: {json.dumps(os.path.join(world, 'state'))}\n"
                f"max_concurrency: {slots}\n"
                f"agent:\n  argv: [{json.dumps(stub)}]\n"
                f"  sandbox_writable: [{json.dumps(world)}]\n"
                f"scheduler:\n  retry_backoff_s: 1\n  reconcile_grace_s: 1\n"
                f"repos:\n  - name: shop\n    remote: {json.dumps(remote)}\n    prefix: SHOP\n"
                f"    serial_gate: false\n    default_labels: {labels}\n")
    return world, cfg, os.path.join(world, "state", "orch.db")


class Ticker(threading.Thread):
    """`orch tick` every `every` s (0: back to back), its stderr appended to `log`."""

    def __init__(self, orch, cfg, env, every, log):
        super().__init__(daemon=True)
        self.argv = [orch, "--config", cfg, "tick"]
        self.env, self.every, self.log = env, every, log
        self.stop = threading.Event()
        self.ticks = 0

    def run(self):
        with open(self.log, "a") as log:
            while not self.stop.is_set():
                t = time.perf_counter()
                subprocess.run(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=log)
                self.ticks += 1
                self.stop.wait(max(0.0, t + self.every - time.perf_counter()))


def wait_db(db, sql, want, timeout=120):
    """Poll `sql` every 5 ms until its one value is `want`; the time it took (None: timeout)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
            v = con.execute(sql).fetchone()[0]
            con.close()
            if v == want:
                return time.perf_counter() - t0
        except sqlite3.Error:
            pass
        time.sleep(0.005)
    return None


def pipeline(a, name, chain, tasks, tick_every):
    """`task add` -> `done` of `tasks` tasks one after the other (stub at zero sleep, every
    stage), with a tick every `tick_every` s (0: back to back). Returns (walls s, world)."""
    world, cfg, db = small_world(a.out, name, auto_approve=True)
    env = dict(BASE_ENV, ORCH_LAUNCH_ON_FINISH="true" if chain else "false",
               ORCH_LOG="info,orch=debug", STUB_STATE_DIR=os.path.join(world, "stub-state"))
    ticker = Ticker(a.orch, cfg, env, tick_every, os.path.join(world, "ticks.log"))
    walls = []
    # A first (writing) command creates the database before the ticker's passes race it.
    run_capture([a.orch, "--config", cfg, "tick"], env=env)
    ticker.start()
    try:
        for i in range(1, tasks + 1):
            t0 = time.perf_counter()
            code, out_text, err = run_capture([a.orch, "--config", cfg, "task", "add", "--repo",
                                               "shop", "--title", f"pipeline {i}", "--json"],
                                              env=env)
            if code != 0:
                fail(f"{name}: task add exited {code}: {err}")
            wi = json.loads(out_text)["work_item"]
            took = wait_db(db, f"SELECT stage FROM tasks WHERE work_item = '{wi}'", "done")
            if took is None:
                fail(f"{name}: {wi} did not reach done within 120 s")
            walls.append(time.perf_counter() - t0)
    finally:
        ticker.stop.set()
        ticker.join()
    return walls, world, db


def hops(world, db):
    """A job's outcome recorded -> the next job of its task launched, in ms, from the logs."""
    logs = os.path.join(world, "state", "logs")
    settled, launched = {}, {}
    files = [os.path.join(logs, f) for f in os.listdir(logs) if re.match(r"job-\d+\.log$", f)]
    files.append(os.path.join(world, "ticks.log"))
    for path in files:
        for t, lvl, msg in parse_log(path):
            if t is None:
                continue
            m = re.search(r"job (\d+) settled: ", msg)
            if m:
                settled[int(m.group(1))] = t
            if lvl == "INFO" and "launched supervisor" in msg:
                # `job=N` of the message, not of the supervisor's span (`job{… job=M}`).
                jm = re.search(r"launched supervisor job=(\d+)", msg)
                if jm:
                    launched.setdefault(int(jm.group(1)), t)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    rows = con.execute("SELECT task_id, id FROM jobs ORDER BY task_id, id").fetchall()
    con.close()
    out, by_task = [], {}
    for task, jid in rows:
        by_task.setdefault(task, []).append(jid)
    for ids in by_task.values():
        for prev, nxt in zip(ids, ids[1:]):
            if prev in settled and nxt in launched:
                out.append((launched[nxt] - settled[prev]) * 1000)
    return out


def part_f(a):
    print("== F. no waiting for the timer: launch passes of supervisors and gestures")
    n_chain, n_tight = a.pipeline_tasks, 10
    load_before = loadavg()
    chained, world, db = pipeline(a, "chain-10s", True, n_chain, 10.0)
    tight, _, _ = pipeline(a, "tight-loop", False, n_tight, 0.0)
    med_c, med_t = statistics.median(chained), statistics.median(tight)
    print(f"  task add -> done through every stage, stub at zero sleep: chained with a tick every "
          f"10 s: median {med_c:.2f} s over {n_chain} tasks (first 10: "
          f"{statistics.median(chained[:10]):.2f} s; max {max(chained):.2f}); ticks back to back "
          f"without chaining: median {med_t:.2f} s over {n_tight} ({med_c / med_t:.2f}x)")
    h = hops(world, db)
    print(f"  hop latency (a job's outcome recorded -> its task's next job launched), {len(h)} "
          f"hops: median {statistics.median(h):.1f} ms, p90 {pct(h, 90):.1f}, max {max(h):.1f}")
    # Approve -> the next job running.
    world, cfg, db = small_world(a.out, "approve", auto_approve=False)
    env = dict(BASE_ENV, ORCH_LAUNCH_ON_FINISH="true",
               STUB_STATE_DIR=os.path.join(world, "stub-state"))
    appr = []
    for i in range(1, a.approvals + 1):
        code, out_text, err = run_capture([a.orch, "--config", cfg, "task", "add", "--repo",
                                           "shop", "--title", f"approve {i}", "--json"], env=env)
        if code != 0:
            fail(f"approve world: task add exited {code}: {err}")
        wi = json.loads(out_text)["work_item"]
        # Its analyst done, the task waits for the approval with no job.
        if wait_db(db, "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')", 0) is None \
                or wait_db(db, f"SELECT count(*) FROM jobs j JOIN tasks t ON t.id = j.task_id "
                               f"WHERE t.work_item = '{wi}' AND j.status = 'done'", 1) is None:
            fail(f"approve world: {wi}'s analyst did not finish")
        t0 = time.perf_counter()
        code, out_text, err = run_capture([a.orch, "--config", cfg, "approve", wi, "--json"],
                                          env=env)
        took = (time.perf_counter() - t0) * 1000
        nxt = json.loads(out_text).get("next") or {}
        if code != 0 or nxt.get("status") != "launched" or nxt.get("role") != "architect":
            fail(f"approve {wi}: exit {code}, next {nxt} {err}")
        appr.append(took)
        # The task runs on through every stage; the next round starts once it is done.
        if wait_db(db, f"SELECT stage FROM tasks WHERE work_item = '{wi}'", "done") is None:
            fail(f"approve world: {wi} did not reach done")
    print(f"  orch approve -> the architect's supervisor launched (the command returns once it "
          f"is): median {statistics.median(appr):.1f} ms, max {max(appr):.1f} ms over "
          f"{len(appr)} approvals")
    print(f"  {load_note(load_before, loadavg())}")
    record(f_pipeline_chain_s=med_c, f_pipeline_chain10_s=statistics.median(chained[:10]),
           f_pipeline_tight_s=med_t, f_hops=len(h), f_hop_median_ms=statistics.median(h),
           f_hop_max_ms=max(h), f_approve_ms=statistics.median(appr))
    summary(f"F. task add -> done: chained (10 s timer) median {med_c:.2f} s, tight ticks "
            f"{med_t:.2f} s; hops median {statistics.median(h):.1f} ms max {max(h):.1f} ms "
            f"({len(h)}); approve -> running median {statistics.median(appr):.1f} ms")
    # Throughput at concurrency 8: the supervisors' passes with the 10 s timer, against ticks
    # every 0.2 s alone (part B's way), on the same number of tasks.
    throughput(a, 8, "FC", chain=True, tick_every=10.0, jobs=a.chain_jobs)
    throughput(a, 8, "FT", chain=False, jobs=a.chain_jobs)


# ============================================================================ part C

def part_c(a):
    print(f"== C. `orch demo` end to end, {a.runs} runs (a fresh TMPDIR each, removed after)")
    walls, codes, inner = [], [], []
    load_before = loadavg()
    for i in range(a.runs):
        tmp = tempfile.mkdtemp(prefix="orch-bench-demo.", dir=a.out)
        try:
            env = dict(BASE_ENV, TMPDIR=tmp)
            so, se = os.path.join(a.out, "demo.stdout"), os.path.join(a.out, "demo.stderr")
            code, wall, _ = spawn([a.orch, "demo"], env=env, stdout_path=so, stderr_path=se,
                                  cwd=tmp)
            text = open(so).read()
            err = open(se).read()
            m = re.search(r"reached `(\w[\w-]*)` in ([\d.]+)s \((\d+) ticks\)", text)
            left = os.listdir(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        walls.append(wall)
        codes.append(code)
        inner.append(m.groups() if m else None)
        print(f"  run {i + 1}: exit {code}, {wall:.2f} s"
              + (f"; demo: reached `{m.group(1)}` in {m.group(2)} s, {m.group(3)} ticks"
                 if m else "; no `reached` line")
              + (f"; left in TMPDIR: {left}" if left else ""))
        if code != 0 or not m or m.group(1) != "done":
            print("  --- stdout ---\n" + text + "\n  --- stderr ---\n" + err[-3000:])
            FAILURES.append(f"demo run {i + 1}: exit {code}")
        if i == 0:
            print("  " + "\n  ".join(text.rstrip().splitlines()))
    load_after = loadavg()
    med, mx = statistics.median(walls), max(walls)
    print(f"  wall: median {med:.2f} s, max {mx:.2f} s, all: "
          + " ".join(f"{w:.2f}" for w in walls))
    print(f"  {load_note(load_before, load_after)}")
    print()
    ok = all(c == 0 for c in codes) and all(m and m[0] == "done" for m in inner)
    summary(f"C. orch demo x{a.runs} (release): median {med:.2f} s, max {mx:.2f} s; every run "
            f"exit 0 and `done`: {'PASS' if ok else 'FAIL'} (exits {codes})")
    if FAILURES:
        sys.exit(1)


# ============================================================================ part D

FLOOR_RUNS = 20


def measure_floor(remote, world, label, runs=FLOOR_RUNS):
    """The floor of one job's git work, with plain git on `remote`: `git worktree add` of a new
    branch from origin/main, one commit (write a file, `git add -A`, `git commit`), and `git
    push` of that commit, `runs` times in a clone of the remote; the branches are deleted after.
    Returns the per-run totals in ms."""
    clone = os.path.join(world, f"floor-clone-{label}")
    if os.path.exists(clone):
        shutil.rmtree(clone)
    git("clone", "-q", "--no-checkout", remote, clone)
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@orch.invalid"]
    totals, parts = [], {"worktree add": [], "commit": [], "push": []}
    branches = []
    for i in range(runs):
        branch = f"floor/{label}-{i}"
        wt = os.path.join(world, f"floor-wt-{label}-{i}")
        t0 = time.perf_counter()
        git("-C", clone, "worktree", "add", "-q", "-b", branch, wt, "origin/main")
        t1 = time.perf_counter()
        with open(os.path.join(wt, f"floor-{i}.md"), "w") as fh:
            fh.write(f"floor run {i} at {time.time()}\n")
        git("-C", wt, "add", "-A")
        git("-C", wt, *ident, "commit", "-q", "-m", f"floor {i}")
        t2 = time.perf_counter()
        git("-C", wt, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
        t3 = time.perf_counter()
        totals.append((t3 - t0) * 1000)
        parts["worktree add"].append((t1 - t0) * 1000)
        parts["commit"].append((t2 - t1) * 1000)
        parts["push"].append((t3 - t2) * 1000)
        branches.append(branch)
    git("-C", clone, "push", "-q", "origin", "--delete", *branches)
    shutil.rmtree(clone, ignore_errors=True)
    for i in range(runs):
        shutil.rmtree(os.path.join(world, f"floor-wt-{label}-{i}"), ignore_errors=True)
    print(f"  floor ({label}, {runs} runs, plain git on the benchmark's remote): median "
          f"{statistics.median(totals):.1f} ms (worktree add "
          f"{statistics.median(parts['worktree add']):.1f}, commit "
          f"{statistics.median(parts['commit']):.1f}, push {statistics.median(parts['push']):.1f}"
          f"), max {max(totals):.1f} ms", flush=True)
    return totals


def part_d(a):
    floors = {}

    def before(remote, world):
        floors["before"] = measure_floor(remote, world, "before")

    def after(remote, world):
        floors["after"] = measure_floor(remote, world, "after")
        both = floors["before"] + floors["after"]
        record(d_floor_ms=statistics.median(both),
               d_floor_before_ms=statistics.median(floors["before"]),
               d_floor_after_ms=statistics.median(floors["after"]))

    throughput(a, 1, "D", before, after)


# ============================================================================ part E

def install_pueue(root, out):
    """`cargo install pueue --locked --root ROOT` unless ROOT already has both binaries."""
    bins = [os.path.join(root, "bin", b) for b in ("pueue", "pueued")]
    if all(os.access(b, os.X_OK) for b in bins):
        print(f"  pueue: using {root}")
        return bins
    print(f"  pueue: cargo install pueue --locked --root {root} (compiles it; a few minutes)",
          flush=True)
    t0 = time.perf_counter()
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(out, "pueue-target"))
    log = os.path.join(out, "pueue-install.log")
    code, _, _ = spawn([shutil.which("cargo") or "cargo", "install", "--quiet", "--locked",
                        "--root", root, "pueue"], env=env, stdout_path=log, stderr_path=log)
    if code != 0 or not all(os.access(b, os.X_OK) for b in bins):
        fail(f"`cargo install pueue` exited {code}; see {log}")
    shutil.rmtree(os.path.join(out, "pueue-target"), ignore_errors=True)
    print(f"  pueue: installed in {time.perf_counter() - t0:.0f} s")
    return bins


def part_e(a):
    n, orch, out = a.queued, a.orch, a.out
    print(f"== E. orch against pueue with {n} queued entries")
    pueue, pueued = install_pueue(a.pueue_root or os.path.join(out, "pueue-root"), out)
    code, ver, _ = run_capture([pueue, "--version"])
    home = os.path.join(out, "pueue")
    if os.path.exists(home):
        shutil.rmtree(home)
    os.makedirs(home)
    pcfg = os.path.join(home, "pueue.yml")
    with open(pcfg, "w") as f:
        f.write("shared:\n"
                f"  pueue_directory: {json.dumps(home)}\n"
                f"  runtime_directory: {json.dumps(home)}\n"
                "  use_unix_socket: true\n"
                f"  unix_socket_path: {json.dumps(os.path.join(home, 'pueue.socket'))}\n"
                f"  pid_path: {json.dumps(os.path.join(home, 'pueue.pid'))}\n"
                "daemon:\n  default_parallel_tasks: 1\n")
    penv = {k: v for k, v in BASE_ENV.items() if not k.startswith("PUEUE")}
    penv["HOME"] = home
    penv.pop("XDG_RUNTIME_DIR", None)
    penv.pop("XDG_CONFIG_HOME", None)
    daemon_log = open(os.path.join(home, "pueued.log"), "w")
    daemon = subprocess.Popen([pueued, "-c", pcfg], env=penv, stdin=subprocess.DEVNULL,
                              stdout=daemon_log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while True:
            code, _, err = run_capture([pueue, "-c", pcfg, "status", "--json"], env=penv)
            if code == 0:
                break
            if time.time() > deadline or daemon.poll() is not None:
                fail(f"pueued did not answer within 30 s: {err.strip()}")
            time.sleep(0.1)
        # Nothing may start: the default group is paused before the first add.
        code, _, err = run_capture([pueue, "-c", pcfg, "pause"], env=penv)
        if code != 0:
            fail(f"`pueue pause` exited {code}: {err.strip()}")
        print(f"  {ver.strip()}: daemon pid {daemon.pid}, paused, state in {home}")

        world = os.path.join(out, f"queue-{n}")
        if os.path.exists(world):
            shutil.rmtree(world)
        os.makedirs(world)
        cfg = os.path.join(world, "orch.yaml")
        with open(cfg, "w") as f:
            f.write(f"state_dir: {json.dumps(os.path.join(world, 'state'))}\n"
                    "repos:\n  - name: shop\n    remote: /nonexistent/shop.git\n"
                    "    prefix: SHOP\n    serial_gate: false\n")
        err = os.path.join(world, "add.stderr")
        orch_adds, pueue_add = [], []
        for i in range(1, n + 1):
            orch_adds.append(orch_add(orch, cfg, i, err))
            code, wall, _ = spawn([pueue, "-c", pcfg, "add", "--", "true", f"bench-task-{i}"],
                                  env=penv, stderr_path=err)
            if code != 0:
                fail(f"`pueue add` #{i} exited {code}: {open(err).read().strip()}")
            pueue_add.append(wall * 1000)
        # Both must hold exactly n queued entries.
        code, stdout, err_text = run_capture([orch, "--config", cfg, "queue", "--json"])
        if code != 0 or len(json.loads(stdout)["queued"]) != n:
            fail(f"`orch queue --json` does not list {n} queued jobs (exit {code}) {err_text}")
        orch_bytes = len(stdout)
        code, stdout, err_text = run_capture([pueue, "-c", pcfg, "status", "--json"], env=penv)
        tasks = json.loads(stdout).get("tasks", {}) if code == 0 else {}
        queued = [t for t in tasks.values() if "Queued" in json.dumps(t.get("status"))]
        if len(tasks) != n or len(queued) != n:
            fail(f"`pueue status --json` lists {len(tasks)} tasks, {len(queued)} queued; "
                 f"expected {n} queued (exit {code}) {err_text}")
        pueue_bytes = len(stdout)
        print(f"  {n} adds each: orch task add median {statistics.median(orch_adds):.2f} ms "
              f"(first tenth {statistics.median(orch_adds[:n // 10]):.2f}, last tenth "
              f"{statistics.median(orch_adds[-(n // 10):]):.2f}); pueue add median "
              f"{statistics.median(pueue_add):.2f} ms (first tenth "
              f"{statistics.median(pueue_add[:n // 10]):.2f}, last tenth "
              f"{statistics.median(pueue_add[-(n // 10):]):.2f})")
        print(f"  both list {n} queued entries: orch queue --json {orch_bytes} bytes, pueue "
              f"status --json {pueue_bytes} bytes")
        cmds = [("orch queue --json", [orch, "--config", cfg, "queue", "--json"], BASE_ENV),
                ("pueue status --json", [pueue, "-c", pcfg, "status", "--json"], penv),
                ("orch --version", [orch, "--version"], BASE_ENV)]
        walls = {c[0]: [] for c in cmds}
        for i in range(a.warmup + a.runs):
            for label, argv, env in cmds:
                code, wall, _ = spawn(argv, env=env)
                if code != 0:
                    fail(f"`{' '.join(argv)}` exited {code}")
                if i >= a.warmup:
                    walls[label].append(wall * 1000)
        print()
        table(("command", "median ms", "max ms"),
              [(k, f"{statistics.median(v):.2f}", f"{max(v):.2f}") for k, v in walls.items()])
        print()
    finally:
        run_capture([pueue, "-c", pcfg, "shutdown"], env=penv)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        daemon_log.close()
    oq = statistics.median(walls["orch queue --json"])
    pq = statistics.median(walls["pueue status --json"])
    oa, pa = statistics.median(orch_adds), statistics.median(pueue_add)
    record(e_queued=n, e_orch_queue_ms=oq, e_pueue_status_ms=pq, e_orch_add_ms=oa,
           e_pueue_add_ms=pa, e_orch_add_last_ms=statistics.median(orch_adds[-(n // 10):]),
           e_pueue_add_last_ms=statistics.median(pueue_add[-(n // 10):]))
    summary(f"E. orch vs pueue, {n} queued: queue --json {oq:.2f} ms vs pueue status --json "
            f"{pq:.2f} ms; task add {oa:.2f} ms vs pueue add {pa:.2f} ms (medians)")


# ============================================================================ targets

def targets(a):
    try:
        with open(RESULTS) as f:
            r = json.load(f)
    except (OSError, ValueError):
        print("no results.json: no part ran")
        return
    rows = []

    def row(part, what, figure, goal, ok):
        rows.append((part, what, figure, goal, "n/a" if ok is None else VERDICT[bool(ok)]))

    if "d_overhead_ms" in r:
        o, fl = r["d_overhead_ms"], r.get("d_floor_ms")
        row("D", f"overhead per job, concurrency 1 ({r['d_done']} jobs)", f"{o:.0f} ms",
            "<= 300 ms", r["d_complete"] and o <= 300)
        if fl:
            row("D", "  ... against the floor (worktree add + commit + push, "
                f"median {fl:.0f} ms: before {r['d_floor_before_ms']:.0f}, after "
                f"{r['d_floor_after_ms']:.0f})", f"{o / fl:.2f}x", "<= 4x",
                r["d_complete"] and o <= 4 * fl)
    if "b_rate" in r:
        row("B", f"{r['b_jobs']} jobs, concurrency 8, one repo", f"{r['b_rate']:.2f} jobs/s",
            ">= 8 jobs/s", r["b_complete"] and r["b_rate"] >= 8)
        t = r.get("b_tenths") or []
        if len(t) >= 2:
            row("B", f"  last tenth / first tenth ({t[-1]:.1f} / {t[0]:.1f} jobs/s)",
                f"{t[-1] / t[0]:.2f}x", ">= 0.7x", t[-1] >= 0.7 * t[0])
        row("B", "  (info) overhead per job", f"{r['b_overhead_ms']:.0f} ms", "", None)
        if "b_floor_before_ms" in r:
            row("B", "  (info) plain git's floor on that remote, before / after the run",
                f"{r['b_floor_before_ms']:.0f} / {r['b_floor_after_ms']:.0f} ms", "", None)
    if "e_orch_queue_ms" in r:
        row("E", f"orch queue --json vs pueue status --json, {r['e_queued']} queued",
            f"{r['e_orch_queue_ms']:.1f} vs {r['e_pueue_status_ms']:.1f} ms", "orch <= pueue",
            r["e_orch_queue_ms"] <= r["e_pueue_status_ms"])
        row("E", "orch task add vs pueue add (medians over the adds)",
            f"{r['e_orch_add_ms']:.1f} vs {r['e_pueue_add_ms']:.1f} ms", "orch <= pueue",
            r["e_orch_add_ms"] <= r["e_pueue_add_ms"])
    if "a_tick_large_ms" in r:
        v = r["a_version_ms"]
        for what, big, ctl in (("tick", r["a_tick_large_ms"], r["a_tick_control_ms"]),
                               ("queue --json", r["a_queue_large_ms"], r["a_queue_control_ms"])):
            row("A", f"idle {what}: large ({big:.1f} ms) / 1% history ({ctl:.1f} ms)",
                f"{big / ctl:.2f}x", "<= 1.2x", big <= 1.2 * ctl)
            row("A", f"idle {what}: large / orch --version ({v:.1f} ms)", f"{big / v:.2f}x",
                "<= 5x", big <= 5 * v)
    if "f_pipeline_chain_s" in r:
        c, t = r["f_pipeline_chain_s"], r["f_pipeline_tight_s"]
        row("F", "task add -> done, chained, tick every 10 s (median)", f"{c:.2f} s", "<= 3 s",
            c <= 3)
        row("F", f"  ... against ticks back to back ({t:.2f} s)", f"{c / t:.2f}x", "<= 1.5x",
            c <= 1.5 * t)
        row("F", f"hop latency, median over {r['f_hops']} hops", f"{r['f_hop_median_ms']:.1f} ms",
            "<= 100 ms", r["f_hop_median_ms"] <= 100)
        row("F", "hop latency, max", f"{r['f_hop_max_ms']:.1f} ms", "<= 500 ms",
            r["f_hop_max_ms"] <= 500)
        row("F", "orch approve -> next job running (median)", f"{r['f_approve_ms']:.1f} ms",
            "<= 200 ms", r["f_approve_ms"] <= 200)
    if "fc_rate" in r and "ft_rate" in r:
        row("F", f"{r['fc_jobs']} jobs at concurrency 8: chained + 10 s timer vs ticks every "
            f"{TICK_EVERY} s", f"{r['fc_rate']:.2f} vs {r['ft_rate']:.2f} jobs/s",
            "chained >= ticks", r["fc_complete"] and r["fc_rate"] >= r["ft_rate"])
        row("F", "  max running sampled (chained)", f"{r['fc_max_running']}", "<= 8",
            r["fc_max_running"] <= 8)
    for k, part in (("b", "B"), ("fc", "F")):
        f, l = r.get(f"{k}_own_first_ms"), r.get(f"{k}_own_last_ms")
        if f is not None and l is not None and f == f and l == l:
            row(part, f"  orch's own cost per job, first / last tenth ({f:.0f} / {l:.0f} ms)",
                f"{f / l:.2f}x", ">= 0.8x", f / l >= 0.8)
    print(f"== targets of issues 13 and 20 ({a.orch}; load average now {loadavg()})")
    table(("part", "target", "figure", "goal", "verdict"), rows, left=2)


def main():
    global SUMMARY, RESULTS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=("a", "b", "c", "d", "e", "f", "targets"))
    ap.add_argument("--orch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--timeout", type=int, default=0)
    ap.add_argument("--queued", type=int, default=2000)
    ap.add_argument("--pueue-root", default=None)
    ap.add_argument("--pipeline-tasks", type=int, default=25)
    ap.add_argument("--approvals", type=int, default=20)
    ap.add_argument("--chain-jobs", type=int, default=200)
    a = ap.parse_args()
    SUMMARY = os.path.join(a.out, "summary.txt")
    RESULTS = os.path.join(a.out, "results.json")
    {"a": part_a, "b": part_b, "c": part_c, "d": part_d, "e": part_e, "f": part_f,
     "targets": targets}[a.part](a)


if __name__ == "__main__":
    main()
