#!/usr/bin/env python3
"""Fill an orch state database with a synthetic history for `scripts/bench-queue.sh`.

The database must already exist and be migrated by orch itself (`orch tick` once), so the
schema and `PRAGMA user_version` are orch's own; this script only INSERTs, in one transaction.
Python standard library only (sqlite3).

Presets: `large` (10,000 tasks, 100,000 finished jobs, 100 active tasks, 200 queued jobs),
`small` (100 tasks, 1,000 jobs: the same shape scaled down, 10 active tasks, 20 queued jobs)
and `control` (large's live set on small's history: 200 tasks, 100 of them active, 1,000
finished and 200 queued jobs), which tells cost that grows with history from cost that grows
with the live set.

Shape (LARGE preset; the others are the same shape with their own counts):
  * tasks: mostly terminal (`done`, some `cancelled` with a tombstoned work item
    `R3-17#cancelled-<id>`), the rest active and spread over the stages that have a role;
    ids follow creation time, work items `R<n>-<k>` numbered per repo.
  * transitions: the real stage path of each task (created -> analysis -> ... -> done, with
    some review/testing rollbacks; cancelled tasks stop part-way).
  * historical jobs: done/failed/cancelled, one per stage visit plus retries and superseded
    ones, finished within the task's life, created/started before finishing, all within the
    last 90 days.
  * queued jobs: 1-2 per active task, a few left on just-finished tasks (the `others` path of
    `orch queue`), some with `available_at` in the future.
  * some active tasks paused, blocked or held; a few job_deps rows; one repo frozen.

Writes a JSON file (--meta) naming the work items the benchmark should query and the counts
it should find.
"""

import argparse
import json
import random
import sqlite3
import sys
import time

DAY = 86_400
HOUR = 3_600

PATH = ["analysis", "architecture", "development", "review", "testing", "deploy-staging", "deploy"]
ROLE = {
    "analysis": "analyst",
    "architecture": "architect",
    "development": "developer",
    "review": "reviewer",
    "testing": "tester",
    "deploy-staging": "deployer",
    "deploy": "deployer",
}
VERDICT_FILE = {
    "review": "12-review.md",
    "testing": "13-test-report.md",
    "deploy-staging": "15-staging-log.md",
    "deploy": "14-deploy-log.md",
}

PRESETS = {
    # tasks, active, historical (finished) jobs, queued jobs, queued jobs on finished tasks,
    # job_deps rows
    "large": dict(tasks=10_000, active=100, hist_jobs=100_000, queued=200, orphans=5, deps=8),
    "small": dict(tasks=100, active=10, hist_jobs=980, queued=20, orphans=1, deps=2),
    # The control: LARGE's live set (active tasks, queued jobs, deps) on SMALL's history, to
    # tell what grows with history from what grows with the live set.
    "control": dict(tasks=200, active=100, hist_jobs=1_000, queued=200, orphans=5, deps=8),
}

REPOS = 20
FROZEN_REPO = "r3"

WORDS = (
    "add health endpoint cache invoices retry webhook export csv audit log rate limit login "
    "session token refresh search index pagination billing report email template queue worker "
    "migration schema cleanup metrics dashboard alert timeout upload image resize locale"
).split()

FEEDBACK = (
    "## Findings\n\n"
    "1. `src/handlers/export.rs:88`: the CSV writer is not flushed before the response is "
    "sent, so large exports are truncated. Flush and check the error.\n"
    "2. `src/handlers/export.rs:120`: the date column uses the server's local time zone; the "
    "acceptance criteria (AC-3) require UTC with an explicit offset.\n"
    "3. `tests/export.rs`: no test covers an empty result set; add one that expects the header "
    "row only.\n"
    "4. The migration adds a NOT NULL column without a default; it fails on a populated table.\n"
) * 3


def description(rng, wi):
    words = " ".join(rng.choice(WORDS) for _ in range(40))
    return (
        f"As an operator I want {words}.\n\n"
        f"Acceptance: the change is covered by tests and documented in docs/work-items/{wi}/."
    )


def prompt(wi, title, desc, repo, branch, role, stage, rollback_from=None, retry=1):
    p = (
        f"Work item: {wi}\nTitle: {title}\nRepo: {repo}\nBranch: {branch}\nRole: {role}\n"
        f"Stage: {stage}\nArtifacts: docs/work-items/{wi}/\n"
        f"\n## Description\n\n{desc}\n"
    )
    if rollback_from:
        p += (
            f"\n## Rollback from {rollback_from} (developer retry {retry} of 3)\n\n"
            f"The previous round was rejected. Address every finding below.\n"
            f"Gate: verdict FAIL\nFull artifact: docs/work-items/{wi}/{VERDICT_FILE[rollback_from]}\n\n"
            f"### Feedback (verbatim)\n\n{FEEDBACK}"
        )
    return p


def visits_for(rng, final):
    """The stage visits of a task's life as a list of (stage, rolled_back_from_or_None).

    `final` is `done`, `cancelled`, or an active stage name (the current stage, not included:
    the caller adds its queued jobs)."""
    visits = []
    if final == "done":
        stop = len(PATH)
    elif final == "cancelled":
        stop = rng.randint(1, 5)
    else:
        stop = PATH.index(final)
    i = 0
    rollback = None
    retries = 0
    while i < stop:
        stage = PATH[i]
        visits.append((stage, rollback))
        rollback = None
        if stage in ("review", "testing") and retries < 2 and rng.random() < (0.22 if stage == "review" else 0.08):
            # The verdict failed: back to development, then forward again.
            rollback = stage
            retries += 1
            i = PATH.index("development")
            if i >= stop:
                break
            continue
        i += 1
    return visits, retries


def build(preset, now, seed):
    rng = random.Random(seed)
    n_tasks = preset["tasks"]
    n_active = preset["active"]
    n_terminal = n_tasks - n_active

    # --- tasks: creation times, repos, terminal state -------------------------------------
    specs = []  # (created_at, repo_index, kind) kind: done | cancelled | <active stage>
    for _ in range(n_terminal):
        kind = "cancelled" if rng.random() < 0.08 else "done"
        specs.append([rng.randint(now - 90 * DAY, now - DAY), rng.randrange(REPOS), kind])
    active_stages = PATH  # every non-terminal stage that has a role
    for i in range(n_active):
        stage = active_stages[i % len(active_stages)]
        specs.append([rng.randint(now - 10 * DAY, now - 2 * HOUR), i % REPOS, stage])
    specs.sort(key=lambda s: s[0])

    per_repo = [0] * REPOS
    tasks = []  # dicts
    for tid, (created, r, kind) in enumerate(specs, start=1):
        per_repo[r] += 1
        base = f"R{r}-{per_repo[r]}"
        title = f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)} {rng.choice(WORDS)}"
        tasks.append(
            dict(
                id=tid, base=base, repo=f"r{r}", title=title, kind=kind, created=created,
                desc=description(rng, base), branch=f"feature/{base}-t",
            )
        )

    # --- lives: transitions and one job per stage visit ------------------------------------
    transitions = []  # (task_id, from, to, actor, outcome, reason, at)
    job_slots = []  # [task, stage, role, enter, leave, status_of_last, rollback_from, retry]
    task_rows = []
    for t in tasks:
        kind = t["kind"]
        visits, retries = visits_for(rng, kind)
        at = t["created"]
        # created -> analysis happens at `task add`.
        transitions.append((t["id"], "created", "analysis", "operator", "advanced", "task added", at))
        if kind in ("done", "cancelled"):
            life = rng.randint(4 * HOUR, 30 * HOUR)
            end_limit = now - 60
        else:
            life = max(HOUR, (now - 60 - at) // 2)
            end_limit = now - 60
        step = max(60, life // (len(visits) + 1))
        enter = at
        n_dev = 0
        for vi, (stage, rb) in enumerate(visits):
            leave = min(enter + rng.randint(step // 2, step * 3 // 2), end_limit - 1)
            if stage == "development":
                n_dev += 1
            job_slots.append([t, stage, ROLE[stage], enter, leave, "done", rb, max(1, n_dev - 1)])
            nxt_stage = visits[vi + 1][0] if vi + 1 < len(visits) else None
            if nxt_stage is None:
                if kind == "done":
                    nxt = "done"
                elif kind == "cancelled":
                    nxt = "cancelled"
                    job_slots[-1][5] = "cancelled"
                else:
                    nxt = kind
            else:
                nxt = nxt_stage
            if nxt == "cancelled":
                transitions.append((t["id"], stage, "cancelled", "operator", "cancelled",
                                    "no longer needed", leave))
            elif nxt == "development" and stage in ("review", "testing"):
                transitions.append((t["id"], stage, "development", "supervisor", "rolled-back",
                                    f"{VERDICT_FILE[stage]}: verdict FAIL", leave))
            else:
                actor = "operator" if stage == "analysis" else rng.choice(["supervisor", "tick", "reconciler"])
                transitions.append((t["id"], stage, nxt, actor, "advanced", "gate passed", leave))
            enter = leave
        stage_entered = enter
        if kind == "cancelled" and not visits:
            stage_entered = at
        wi = t["base"]
        if kind == "cancelled":
            wi = f"{t['base']}#cancelled-{t['id']}"
        stage_now = kind
        row = dict(
            id=t["id"], work_item=wi, base_work_item=t["base"], repo=t["repo"], title=t["title"],
            description=t["desc"], stage=stage_now, track="feature", branch=t["branch"],
            labels="[]", dev_retries=retries, stage_entered_at=stage_entered,
            paused_at=None, paused_reason=None, paused_by=None, pause_before=None,
            approved_at=None, deploy_confirmed_at=None, blocked_at=None, blocked_reason=None,
            held_at=None, held_reason=None, cancelled_at=None,
            created_at=at, updated_at=stage_entered,
        )
        if kind in ("done", "cancelled") or PATH.index(kind) > PATH.index("analysis"):
            row["approved_at"] = at + step
        if kind == "done":
            row["deploy_confirmed_at"] = stage_entered - 60
        if kind == "cancelled":
            row["cancelled_at"] = stage_entered
        t["row"] = row
        t["stage_entered"] = stage_entered
        task_rows.append(row)

    # --- historical jobs: exactly hist_jobs of them ----------------------------------------
    # Each slot holds a count of extra (failed or superseded) jobs before its last one.
    target = preset["hist_jobs"]
    extras = [0] * len(job_slots)
    if len(job_slots) > target:
        rng.shuffle(job_slots)
        job_slots = job_slots[:target]
        extras = [0] * target
    else:
        for _ in range(target - len(job_slots)):
            extras[rng.randrange(len(job_slots))] += 1
    job_slots_ex = list(zip(job_slots, extras))
    job_slots_ex.sort(key=lambda s: (s[0][3], s[0][0]["id"]))

    jobs = []  # tuples in column order below
    for (t, stage, role, enter, leave, last_status, rb, retry), extra in job_slots_ex:
        n = 1 + extra
        span = max(n * 3, leave - enter)
        p = prompt(t["base"], t["title"], t["desc"], t["repo"], t["branch"], role, stage,
                   rb if stage == "development" else None, retry)
        for k in range(n):
            lo = enter + span * k // n
            hi = enter + span * (k + 1) // n
            created = lo
            started = min(hi - 2, created + rng.randint(1, max(1, (hi - lo) // 4)))
            started = max(started, created)
            finished = max(started + 1, hi - 1)
            if k < n - 1:
                if rng.random() < 0.7:
                    status, attempts, err, code = "failed", 3, "agent exited with status 1", 1
                else:
                    status, attempts, err, code = "cancelled", 1, "superseded", None
            else:
                status = last_status
                attempts = 1
                err = None if status == "done" else "cancelled"
                code = 0 if status == "done" else None
            jobs.append((t["id"], role, stage, t["repo"], status, attempts, 3, created, created,
                         started, finished, code, err, p))

    # --- active tasks: flags and queued jobs ----------------------------------------------
    active = [t for t in tasks if t["kind"] not in ("done", "cancelled")]
    n_queued = preset["queued"]
    n_orphans = preset["orphans"]
    per_active = n_queued - n_orphans
    # 1-2 queued jobs per active task: as many twos as needed to reach the total.
    twos = per_active - len(active)
    if not 0 <= twos <= len(active):
        sys.exit(f"cannot place {per_active} queued jobs on {len(active)} active tasks (1-2 each)")
    two_ids = set(t["id"] for t in rng.sample(active, twos))

    # Flags on some active tasks (never on the `why` target chosen below).
    flag_pool = [t for t in active]
    rng.shuffle(flag_pool)
    n_paused = max(1, len(active) // 10)
    n_blocked = max(1, len(active) // 50)
    n_held = max(1, len(active) // 50)
    paused = flag_pool[:n_paused]
    blocked = flag_pool[n_paused:n_paused + n_blocked]
    held = flag_pool[n_paused + n_blocked:n_paused + n_blocked + n_held]
    for t in paused:
        r = t["row"]
        r["paused_at"] = min(now - 60, t["stage_entered"] + 600)
        r["paused_reason"] = "waiting for a product decision"
        r["paused_by"] = "operator"
        r["updated_at"] = r["paused_at"]
    for t in blocked:
        r = t["row"]
        r["blocked_at"] = min(now - 60, t["stage_entered"] + 900)
        r["blocked_reason"] = "developer retries exhausted (3/3)"
        r["dev_retries"] = 3
        r["updated_at"] = r["blocked_at"]
    for t in held:
        r = t["row"]
        r["held_at"] = min(now - 60, t["stage_entered"] + 900)
        r["held_reason"] = "staging environment unreachable"
        r["updated_at"] = r["held_at"]
    for t in flag_pool[-2:]:
        t["row"]["pause_before"] = "deploy"

    queued = []
    delayed = 0
    for t in active:
        stage = t["kind"]
        role = ROLE[stage]
        k = 2 if t["id"] in two_ids else 1
        for j in range(k):
            created = t["stage_entered"] + 5 + j * 30
            attempts = 0 if j == 0 else 1
            available = created
            if rng.random() < 0.15:
                available = now + rng.randint(300, 7200)  # a retry backoff
                delayed += 1
            p = prompt(t["base"], t["title"], t["desc"], t["repo"], t["branch"], role, stage)
            queued.append((t["id"], role, stage, t["repo"], "queued", attempts, 3, available,
                           created, None, None, None, None, p))
    # A few queued jobs left behind on tasks that finished meanwhile (`others` in World).
    recent_done = sorted((t for t in tasks if t["kind"] == "done"), key=lambda t: -t["stage_entered"])
    for t in recent_done[:n_orphans]:
        created = t["stage_entered"] - 30
        p = prompt(t["base"], t["title"], t["desc"], t["repo"], t["branch"], "deployer", "deploy")
        queued.append((t["id"], "deployer", "deploy", t["repo"], "queued", 0, 3, created, created,
                       None, None, None, None, p))
    assert len(queued) == n_queued, (len(queued), n_queued)
    queued.sort(key=lambda q: q[8])

    # --- job_deps: some between active tasks, some on finished ones ------------------------
    deps = set()
    n_deps = preset["deps"]
    done_tasks = [t for t in tasks if t["kind"] == "done"]
    while len(deps) < n_deps:
        a = rng.choice(active)
        if len(deps) % 2 == 0:
            earlier = [o for o in active if o["id"] < a["id"] and o["repo"] != a["repo"]]
            if not earlier:
                continue
            b = rng.choice(earlier)
        else:
            b = rng.choice(done_tasks)
        deps.add((a["id"], b["id"]))

    # --- the work items the benchmark queries --------------------------------------------
    flagged = {t["id"] for t in paused + blocked + held}
    dep_tasks = {a for a, _ in deps}
    candidates = [t for t in active if t["id"] not in flagged and t["id"] not in dep_tasks
                  and t["repo"] != FROZEN_REPO and t["kind"] == "development"]
    candidates = candidates or [t for t in active if t["id"] not in flagged]
    why_wi = candidates[len(candidates) // 2]["base"]
    # A done task with a typical history: the median number of jobs among done tasks whose
    # base work item was never cancelled.
    jobs_per_task = {}
    for j in jobs:
        jobs_per_task[j[0]] = jobs_per_task.get(j[0], 0) + 1
    done_sorted = sorted(done_tasks, key=lambda t: (jobs_per_task.get(t["id"], 0), t["id"]))
    show_task = done_sorted[len(done_sorted) // 2]

    meta = dict(
        now=now, seed=seed, preset=preset,
        why_wi=why_wi, show_wi=show_task["base"],
        show_jobs=jobs_per_task.get(show_task["id"], 0),
        counts=dict(
            tasks=len(task_rows),
            done=sum(1 for t in tasks if t["kind"] == "done"),
            cancelled=sum(1 for t in tasks if t["kind"] == "cancelled"),
            active=len(active), paused=len(paused), blocked=len(blocked), held=len(held),
            historical_jobs=len(jobs), queued_jobs=len(queued), delayed_queued=delayed,
            orphan_queued=n_orphans, transitions=len(transitions), job_deps=len(deps),
            frozen_repo=FROZEN_REPO,
            finished_last_24h=sum(1 for j in jobs if j[10] >= now - DAY),
        ),
    )
    return task_rows, transitions, jobs, queued, sorted(deps), meta


TASK_COLS = ("id work_item base_work_item repo title description stage track branch labels "
             "dev_retries stage_entered_at paused_at paused_reason paused_by pause_before "
             "approved_at deploy_confirmed_at blocked_at blocked_reason held_at held_reason "
             "cancelled_at created_at updated_at").split()
JOB_COLS = ("task_id role stage repo status attempts max_attempts available_at created_at "
            "started_at finished_at exit_code error prompt").split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="orch.db created and migrated by orch")
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--meta", required=True, help="where to write the JSON summary")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--now", type=int, default=None, help="unix seconds (default: now)")
    a = ap.parse_args()
    now = a.now or int(time.time())

    t0 = time.perf_counter()
    tasks, transitions, jobs, queued, deps, meta = build(PRESETS[a.preset], now, a.seed)

    con = sqlite3.connect(a.db, isolation_level=None)
    version = con.execute("PRAGMA user_version").fetchone()[0]
    if version < 1:
        sys.exit(f"{a.db}: user_version is {version}; let orch create and migrate it first")
    if con.execute("SELECT count(*) FROM tasks").fetchone()[0]:
        sys.exit(f"{a.db}: already has tasks; generate into a fresh state dir")
    con.execute("PRAGMA foreign_keys = ON")
    con.execute("BEGIN IMMEDIATE")
    try:
        con.executemany(
            f"INSERT INTO tasks ({', '.join(TASK_COLS)}) VALUES ({', '.join('?' * len(TASK_COLS))})",
            [tuple(r[c] for c in TASK_COLS) for r in tasks],
        )
        con.executemany(
            "INSERT INTO transitions (task_id, from_stage, to_stage, actor, outcome, reason, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            sorted(transitions, key=lambda x: (x[6], x[0])),
        )
        jsql = f"INSERT INTO jobs ({', '.join(JOB_COLS)}) VALUES ({', '.join('?' * len(JOB_COLS))})"
        con.executemany(jsql, jobs)
        con.executemany(jsql, queued)
        con.executemany("INSERT INTO job_deps (task_id, depends_on) VALUES (?, ?)", deps)
        con.execute(
            "INSERT INTO repo_freeze (repo, reason, frozen_by, frozen_at) VALUES (?, ?, ?, ?)",
            (FROZEN_REPO, "release freeze", "operator", now - HOUR),
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    fk = con.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        sys.exit(f"{a.db}: foreign key violations: {fk[:5]}")
    con.close()

    meta["generate_s"] = round(time.perf_counter() - t0, 2)
    with open(a.meta, "w") as f:
        json.dump(meta, f, indent=2)
    c = meta["counts"]
    print(
        f"  {a.preset}: {c['tasks']} tasks ({c['done']} done, {c['cancelled']} cancelled, "
        f"{c['active']} active: {c['paused']} paused), {c['historical_jobs']} finished jobs "
        f"({c['finished_last_24h']} in the last 24h), {c['queued_jobs']} queued "
        f"({c['delayed_queued']} delayed, {c['orphan_queued']} on finished tasks), "
        f"{c['transitions']} transitions, {c['job_deps']} deps, freeze on {c['frozen_repo']} "
        f"[{meta['generate_s']} s]"
    )


if __name__ == "__main__":
    main()
