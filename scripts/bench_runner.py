#!/usr/bin/env python3
"""Measurements of scripts/bench-runner.sh: `orch run-tests <WI> --no-advance` against floors.

Standard library only. Called by the shell script once the world exists; see its header for
what is measured and why. Exits 1 (with a message naming the step) when a command fails or says
something other than expected, 0 otherwise whether or not the targets are met.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time

TARGET_RATIO = 1.1
TARGET_RSS_MB = 30.0
BIG_BYTES = 500_000_000
BIG_ARGV = ["sh", "-c", f"yes 0123456789abcdef | head -c {BIG_BYTES}"]
TIME = "/usr/bin/time"

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "GIT_"))}


def fail(msg):
    print(f"bench-runner: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def which(prog):
    path = shutil.which(prog, path=ENV.get("PATH"))
    if not path:
        fail(f"`{prog}` is not on PATH")
    return path


def spawn(argv, stdout_path="/dev/null", stderr_path="/dev/null", on_wait=None):
    """Run argv to its end: (exit code, wall seconds). `on_wait(pid)` is polled while it runs."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, ENV, file_actions=actions)
    if on_wait is None:
        _, status = os.waitpid(pid, 0)
    else:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            on_wait(pid)
            time.sleep(0.005)
    wall = time.perf_counter() - t0
    return os.waitstatus_to_exitcode(status), wall


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


class World:
    def __init__(self, a):
        self.orch, self.config, self.state, self.wi = a.orch, a.config, a.state, a.wi
        self.scratch = os.path.join(os.path.dirname(a.config), "scratch")
        os.makedirs(self.scratch, exist_ok=True)

    def cmd(self, *args):
        return [self.orch, "--config", self.config, *args]

    def run_tests(self, *extra):
        return self.cmd("run-tests", self.wi, "--no-advance", *extra)

    def set_tests_argv(self, argv):
        with open(self.config) as f:
            text = f.read()
        new, n = re.subn(r"(?m)^(    tests: \{ argv: )\[.*\](, timeout_s: \d+ \})$",
                         lambda m: m.group(1) + json.dumps(argv) + m.group(2), text)
        if n != 1:
            fail(f"cannot find the `tests:` line in {self.config}")
        with open(self.config, "w") as f:
            f.write(new)

    def checked(self, argv, label):
        """One run with its output kept; fails loudly on a non-zero exit."""
        so = os.path.join(self.scratch, "last.stdout")
        se = os.path.join(self.scratch, "last.stderr")
        code, wall = spawn(argv, so, se)
        with open(so, errors="replace") as f:
            stdout = f.read()
        with open(se, errors="replace") as f:
            stderr = f.read()
        if code != 0:
            fail(f"{label}: `{' '.join(argv)}` exited {code}\n--- stdout ---\n{stdout}"
                 f"\n--- stderr ---\n{stderr[-4000:]}")
        return stdout, wall

    def stage(self):
        out, _ = self.checked(self.cmd("task", "show", self.wi, "--json"), "task show")
        return json.loads(out)["stage"]

    def report_path(self):
        return os.path.join(self.state, "runs", self.wi, "13-test-report.md")

    def verify(self, label):
        """One dry check with --json: it must be a clean PASS that changes nothing."""
        before = self.stage()
        report = self.report_path()
        if os.path.exists(report):
            os.remove(report)
        out, wall = self.checked(self.run_tests("--json"), label)
        try:
            rep = json.loads(out)
        except ValueError as e:
            fail(f"{label}: `orch run-tests --json` printed invalid JSON ({e}):\n{out[:2000]}")
        got = (rep.get("outcome"), rep.get("class"), rep.get("verdict"), rep.get("exit_code"))
        if got != ("checked", "code-pass", "PASS", 0):
            fail(f"{label}: expected checked/code-pass/PASS/exit 0, got {got}: {rep}")
        if rep.get("report") != report or not os.path.isfile(report):
            fail(f"{label}: no dry report at {report} (report: {rep.get('report')})")
        after = self.stage()
        if after != before:
            fail(f"{label}: --no-advance moved the task from `{before}` to `{after}`")
        print(f"  {label}: checked, code-pass, PASS in {wall * 1000:.0f} ms; stage `{after}` "
              f"unchanged; report {report}")
        return rep


def timed(runs, argv, label):
    code, wall = spawn(argv)
    if code != 0:
        fail(f"{label}: `{' '.join(argv)}` exited {code}")
    runs.append(wall * 1000)


def fmt_row(cells, widths):
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))


def table(head, rows):
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    print(fmt_row(head, widths))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(fmt_row(r, widths))


def measure_overhead(w, runs, warmup):
    w.set_tests_argv(["true"])
    w.verify("(a) verify")
    true = which("true")
    cmds = [
        ("orch run-tests --no-advance (true)", w.run_tests()),
        ("orch --version (floor)", [w.orch, "--version"]),
        ("true, run directly", [true]),
    ]
    walls = {label: [] for label, _ in cmds}
    for i in range(warmup + runs):
        for label, argv in cmds:
            sink = [] if i < warmup else walls[label]
            timed(sink, argv, f"(a) run {i + 1}")
    rows = []
    for label, _ in cmds:
        v = walls[label]
        rows.append((label, f"{statistics.median(v):.2f}", f"{max(v):.2f}", f"{min(v):.2f}"))
    print()
    table(("(a) command", "median ms", "max ms", "min ms"), rows)
    med = {label: statistics.median(v) for label, v in walls.items()}
    rt = med[cmds[0][0]]
    print(f"  run-tests above `orch --version`: {rt - med[cmds[1][0]]:.2f} ms; "
          f"above running `true` directly: {rt - med[cmds[2][0]]:.2f} ms")
    return rt, max(walls[cmds[0][0]])


def measure_suite(w, runs):
    w.set_tests_argv(["sleep", "2"])
    w.verify("(b) verify")
    sleep = which("sleep")
    orch_walls, direct_walls = [], []
    for i in range(runs):
        timed(orch_walls, w.run_tests(), f"(b) orch run {i + 1}")
        timed(direct_walls, [sleep, "2"], f"(b) sleep run {i + 1}")
    mo, md = statistics.median(orch_walls), statistics.median(direct_walls)
    print()
    table(("(b) command", "median ms", "max ms", "min ms"), [
        ("orch run-tests --no-advance (sleep 2)", f"{mo:.1f}", f"{max(orch_walls):.1f}",
         f"{min(orch_walls):.1f}"),
        ("sleep 2, run directly", f"{md:.1f}", f"{max(direct_walls):.1f}",
         f"{min(direct_walls):.1f}"),
    ])
    ratio = mo / md
    print(f"  ratio of medians {ratio:.4f}x ({mo - md:.1f} ms above the suite itself)")
    return ratio


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []


def find_exe(root, exe):
    """The first descendant of `root` running `exe`, or None."""
    todo = children_of(root)
    while todo:
        pid = todo.pop(0)
        try:
            if os.readlink(f"/proc/{pid}/exe") == exe:
                return pid
        except OSError:
            continue
        todo.extend(children_of(pid))
    return None


def vm_hwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def rss_exact():
    """Whether GNU time is there and reports %M."""
    if not os.access(TIME, os.X_OK):
        return False
    probe = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench-runner-time-{os.getpid()}")
    try:
        code, _ = spawn([TIME, "-f", "%M", "-o", probe, which("true")])
        with open(probe) as f:
            return code == 0 and int(f.read().split()[-1]) > 0
    except (OSError, ValueError, IndexError):
        return False
    finally:
        if os.path.exists(probe):
            os.remove(probe)


def rss_via_rusage(argv):
    """Fallback without GNU time: a fresh python that only spawns argv reports
    getrusage(RUSAGE_CHILDREN).ru_maxrss (an upper bound: it includes the pre-exec pages)."""
    code = ("import os, resource, sys\n"
            "pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=["
            "(os.POSIX_SPAWN_OPEN, 0, '/dev/null', os.O_RDONLY, 0),"
            "(os.POSIX_SPAWN_OPEN, 1, '/dev/null', os.O_WRONLY, 0),"
            "(os.POSIX_SPAWN_OPEN, 2, '/dev/null', os.O_WRONLY, 0)])\n"
            "_, st = os.waitpid(pid, 0)\n"
            "print(os.waitstatus_to_exitcode(st), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    return [sys.executable, "-c", code] + argv


def measure_rss(w, runs):
    w.set_tests_argv(BIG_ARGV)
    logs = os.path.join(w.state, "logs")
    shutil.rmtree(logs, ignore_errors=True)
    w.verify("(c) verify")
    check_big_log(logs, w.report_path(), "(c) verify")
    exact = rss_exact()
    if not exact:
        print(f"  note: no usable GNU {TIME}: peak RSS is getrusage(RUSAGE_CHILDREN) of a fresh "
              "python that only spawns orch, an upper bound that includes its pre-exec pages")
    out = os.path.join(w.scratch, "rss.txt")
    orch_exe = os.path.realpath(w.orch)
    rows, peaks, own = [], [], []
    for i in range(runs):
        shutil.rmtree(logs, ignore_errors=True)
        hwm = [0]
        orch_pid = [None]

        def sample(parent):
            # The orch process is the child of time (or of the fallback python).
            if orch_pid[0] is None:
                orch_pid[0] = find_exe(parent, orch_exe)
            if orch_pid[0] is not None:
                v = vm_hwm_kib(orch_pid[0])
                if v is not None:
                    hwm[0] = max(hwm[0], v)

        label = f"(c) run {i + 1}"
        if exact:
            code, wall = spawn([TIME, "-f", "%M", "-o", out] + w.run_tests(), on_wait=sample)
            if code != 0:
                fail(f"{label}: `orch run-tests` under {TIME} exited {code}")
            with open(out) as f:
                peak = int(f.read().split()[-1])
        else:
            code, wall = spawn(rss_via_rusage(w.run_tests()), out, on_wait=sample)
            with open(out) as f:
                rc, peak = (int(x) for x in f.read().split())
            if code != 0 or rc != 0:
                fail(f"{label}: `orch run-tests` exited {rc} (helper {code})")
        size = check_big_log(logs, None, label)
        peaks.append(peak / 1024)
        own.append(hwm[0] / 1024)
        rows.append((label, f"{wall:.2f}", f"{BIG_BYTES / 1e6 / wall:.0f}", f"{size / 1e6:.1f}",
                     f"{peak / 1024:.1f}", f"{hwm[0] / 1024:.1f}"))
    shutil.rmtree(logs, ignore_errors=True)
    print()
    table(("(c) 500 MB of output", "wall s", "MB/s", "log MB", "%M MB", "orch VmHWM MB"), rows)
    print(f"  %M: {'GNU time, max over orch and the processes it reaped (git, sh, yes, head)' if exact else 'RUSAGE_CHILDREN upper bound'};"
          " VmHWM: orch's own peak, sampled every 5 ms")
    return max(peaks), max(own), exact


def check_big_log(logs, report, label):
    """The run log holds the whole output and the report its tail; returns the log's size."""
    try:
        files = [os.path.join(logs, f) for f in os.listdir(logs)]
    except OSError:
        files = []
    if len(files) != 1:
        fail(f"{label}: expected one run log in {logs}, found {len(files)}")
    size = os.path.getsize(files[0])
    if size < BIG_BYTES:
        fail(f"{label}: the run log {files[0]} has {size} bytes, less than the {BIG_BYTES} printed")
    if report is not None:
        with open(report, errors="replace") as f:
            text = f.read()
        if "0123456789abcdef" not in text:
            fail(f"{label}: the report {report} does not carry the output's tail")
        print(f"  {label}: log {size / 1e6:.1f} MB, report {len(text) / 1024:.1f} KiB with the tail")
    return size


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--orch", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--wi", required=True)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--suite-runs", type=int, default=10)
    p.add_argument("--rss-runs", type=int, default=3)
    a = p.parse_args()
    w = World(a)

    load_before = loadavg()
    t0 = time.time()
    a_med, a_max = measure_overhead(w, a.runs, a.warmup)
    ratio = measure_suite(w, a.suite_runs)
    rss, own, exact = measure_rss(w, a.rss_runs)
    load_after = loadavg()
    # Restore the config the world was made with.
    w.set_tests_argv(["true"])

    verdict = lambda ok: "PASS" if ok else "MISS"
    print()
    print(f"1-minute load average before/after: {load_before}/{load_after} on {os.cpu_count()} "
          f"CPUs; measurements took {time.time() - t0:.0f} s (other work on the machine shows "
          "up in the max columns and the ratio)")
    print()
    print("results:")
    print(f"  (a) overhead of `orch run-tests --no-advance` with `true`: median {a_med:.2f} ms, "
          f"max {a_max:.2f} ms over {a.runs} runs (no target)")
    print(f"  (b) sleep 2 via orch / directly <= {TARGET_RATIO}x   {ratio:7.4f} x    "
          f"{verdict(ratio <= TARGET_RATIO)}")
    print(f"  (c) peak RSS <= {TARGET_RSS_MB:.0f} MB (%M)         {rss:7.1f} MB   "
          f"{verdict(rss <= TARGET_RSS_MB)}" + ("" if exact else " (upper bound)")
          + f"   (orch alone: {own:.1f} MB)")


if __name__ == "__main__":
    main()
