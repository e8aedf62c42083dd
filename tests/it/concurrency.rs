//! Eight `orch tick` processes started at once, round after round, over a queue of 300 analyst
//! jobs: the tick lock and the claim's row guard must make every job run exactly once, and the
//! claim must never let more than `max_concurrency` jobs run at the same time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{Run, World, lanes, poll, procs, stub_agent, wait_output};

const TASKS: usize = 300;
const MAX_CONCURRENCY: i64 = 4;
const TICKS_PER_ROUND: usize = 8;
const DEADLINE: Duration = Duration::from_secs(300);
/// The longest wait between two rounds.
const ROUND_PAUSE: Duration = Duration::from_millis(500);

/// No auto-approve label: after its analyst job a task waits in `analysis` for a human, so each
/// task gets exactly one job.
fn write_config(w: &World) {
    let yaml = format!(
        "state_dir: {state:?}\n\
max_concurrency: {MAX_CONCURRENCY}\n\
agent:\n  argv: [{stub:?}]\n\
scheduler:\n  retry_backoff_s: 1\n\
repos:\n  - name: shop\n    remote: {remote:?}\n    prefix: SHOP\n    serial_gate: false\n",
        state = w.state_dir().display().to_string(),
        stub = stub_agent().display().to_string(),
        remote = w.remote.display().to_string(),
    );
    std::fs::write(&w.config, yaml).unwrap();
}

fn count(w: &World, sql: &str) -> i64 {
    w.sql(sql)
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// A read-only connection of the test's own, beside orch's writers.
fn open_read_only(db: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .expect("open the database read-only");
    c.busy_timeout(Duration::from_secs(10)).unwrap();
    c
}

fn scalar(c: &rusqlite::Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The `N` of `<key> N` in a tick summary line.
fn field(summary: &str, key: &str) -> u32 {
    let rest = summary
        .split(&format!("{key} "))
        .nth(1)
        .unwrap_or_else(|| panic!("no `{key}` in `{summary}`"));
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after `{key}` in `{summary}`"))
}

/// The lines of the supervisor logs that are not the supervisor's closing report or the stub's
/// own output: warnings and errors (the test runs orch with `ORCH_LOG=warn`).
fn job_log_trouble(state: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(state.join("logs")) else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("job-") || name.ends_with(".agent.log") {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for line in text.lines() {
            let benign = line.starts_with("stub-agent: ")
                || line.starts_with("{\"type\":\"result\"")
                || (line.starts_with("job ") && line.contains("): done"));
            if !benign && !line.trim().is_empty() {
                out.push(format!("{name}: {line}"));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn eight_concurrent_ticks_run_every_job_exactly_once_within_max_concurrency() {
    concurrent_ticks(false);
}

/// The same, with every finishing supervisor running a launch pass of its own
/// (`scheduler.launch_on_finish`): chained passes race each other and the ticks, and still
/// every job runs once, never past `max_concurrency`.
#[test]
fn chained_launch_passes_racing_eight_ticks_run_every_job_exactly_once() {
    concurrent_ticks(true);
}

fn concurrent_ticks(chain: bool) {
    // Hundreds of processes: nothing else runs meanwhile.
    let _alone = lanes::alone();
    let t0 = Instant::now();
    let w = World::new();
    write_config(&w);
    let state = w.state_dir();
    let run_log = w.dir.path().join("runs.log");

    for i in 1..=TASKS {
        w.add(&format!("task {i}"), &[]);
    }
    assert_eq!(count(&w, "SELECT count(*) FROM jobs"), TASKS as i64);
    assert_eq!(
        count(
            &w,
            "SELECT count(*) FROM jobs WHERE role = 'analyst' AND status = 'queued'"
        ),
        TASKS as i64
    );
    let added = t0.elapsed();
    // From here on (the adds above queued every job without starting one), supervisors launch.
    w.launch.store(chain, Ordering::Relaxed);

    // The watcher: its own read-only connection, sampling the running count every ~20 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let max_running = Arc::new(AtomicU64::new(0));
    let watcher = {
        let stop = stop.clone();
        let max_running = max_running.clone();
        let db = w.db_path();
        thread::spawn(move || {
            let c = open_read_only(&db);
            let (mut samples, mut total, mut errors) = (0u64, 0u64, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                match c.query_row(
                    "SELECT count(*) FROM jobs WHERE status = 'running'",
                    [],
                    |r| r.get::<_, i64>(0),
                ) {
                    Ok(n) => {
                        samples += 1;
                        total += n as u64;
                        max_running.fetch_max(n as u64, Ordering::SeqCst);
                    }
                    Err(e) => errors.push(e.to_string()),
                }
                thread::sleep(Duration::from_millis(20));
            }
            (samples, total, errors)
        })
    };

    let monitor = open_read_only(&w.db_path());
    let started = Instant::now();
    let mut rounds = 0u32;
    let mut ticks: Vec<Run> = Vec::new();
    let finished = poll(DEADLINE, Duration::ZERO, || {
        rounds += 1;
        let children: Vec<_> = (0..TICKS_PER_ROUND)
            .map(|_| {
                w.stub_cmd(&["tick"])
                    .env("STUB_RUN_LOG", &run_log)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("orch tick starts")
            })
            .collect();
        ticks.extend(children.into_iter().map(wait_output));
        // Every job is terminal (the analyst jobs leave nothing behind to run).
        if scalar(
            &monitor,
            "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')",
        ) == 0
        {
            return true;
        }
        // The next round starts as soon as a slot is free (or after a pause even when none is,
        // so full passes keep running too); ticks that could launch nothing would only take the
        // CPU from the supervisors.
        poll(ROUND_PAUSE, Duration::from_millis(10), || {
            scalar(
                &monitor,
                "SELECT count(*) FROM jobs WHERE status = 'running'",
            ) < MAX_CONCURRENCY
        });
        false
    });
    let ticking = started.elapsed();

    // The supervisors advance (a no-op: analysis waits for approval) after marking the job
    // done; let them all exit before looking at the end state and removing the world.
    let pids: Vec<i32> = w
        .sql("SELECT supervisor_pid FROM jobs WHERE supervisor_pid IS NOT NULL")
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    poll(Duration::from_secs(30), Duration::from_millis(50), || {
        !pids.iter().any(|&p| procs::alive(p))
    });
    drop(monitor);
    stop.store(true, Ordering::SeqCst);
    let (samples, total_running, watch_errors) =
        watcher.join().expect("the watcher does not panic");
    let max_seen = max_running.load(Ordering::SeqCst) as i64;

    eprintln!(
        "concurrency: {TASKS} tasks added in {added:.1?}; {rounds} rounds of {TICKS_PER_ROUND} \
         ticks in {ticking:.1?}; watcher: {samples} samples, max running {max_seen}, mean {:.2}; total {:.1?}",
        total_running as f64 / samples.max(1) as f64,
        t0.elapsed()
    );

    let jobs_by_status = w.sql("SELECT status, attempts, count(*) FROM jobs GROUP BY 1, 2");
    let trouble = job_log_trouble(&state);
    let diag = format!(
        "jobs (status|attempts|count):\n{jobs_by_status}\nsupervisor log trouble ({} lines):\n{}",
        trouble.len(),
        trouble
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Throughput is bounded by the supervisors (git, the stub, the advance) at most
    // MAX_CONCURRENCY at a time: on a starved machine a timeout with every job done or queued
    // and the slots full is slowness, not a lost job.
    assert!(
        finished,
        "not every job finished within {DEADLINE:?} ({rounds} rounds, mean running {:.2} of \
         {MAX_CONCURRENCY}, load average {})\n{diag}",
        total_running as f64 / samples.max(1) as f64,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim(),
    );

    // The ticks: each either skipped on the tick lock or did a clean pass.
    let mut launched_sum = 0u32;
    let mut launched_jobs: BTreeMap<i64, u32> = BTreeMap::new();
    let mut passes = 0u32;
    let mut recovered: Vec<String> = Vec::new();
    for t in &ticks {
        assert_eq!(t.code, 0, "a tick failed:\n{t:?}\n{diag}");
        assert!(t.stderr.trim().is_empty(), "a tick warned:\n{t:?}\n{diag}");
        let out = t.stdout.trim();
        if out.starts_with("another tick is running (pid ") && out.lines().count() == 1 {
            continue;
        }
        passes += 1;
        // An idle pass is silent (the timer runs one every 10 s).
        if out.is_empty() {
            continue;
        }
        let summary = out
            .lines()
            .find(|l| l.starts_with("tick: "))
            .unwrap_or_else(|| panic!("no summary line:\n{t:?}"));
        // Nothing dies and nothing is stuck here: a pass that reaps, reclaims or reconciles
        // anything is noted, and judged after everything else has been checked.
        if ["reaped", "reclaimed", "reconciled"]
            .iter()
            .any(|key| field(summary, key) != 0)
        {
            recovered.push(t.stdout.clone());
        }
        let n = field(summary, "launched");
        assert!(
            field(summary, "running") <= MAX_CONCURRENCY as u32,
            "a tick reports more running than max_concurrency:\n{t:?}"
        );
        launched_sum += n;
        let mut lines = 0;
        for l in out
            .lines()
            .filter(|l| l.trim_start().starts_with("launch job "))
        {
            lines += 1;
            let rest = l.trim_start().trim_start_matches("launch job ");
            // `launch job 7 (SHOP-3 analyst, attempt 1)`: the task and role are named.
            let (id, what) = rest.split_once(" (").expect("a launch line");
            let id: i64 = id.parse().expect("a job id");
            assert!(
                what.contains(" analyst, "),
                "the line names the role:\n{t:?}"
            );
            assert!(what.ends_with(", attempt 1)"), "a relaunch:\n{t:?}\n{diag}");
            *launched_jobs.entry(id).or_default() += 1;
        }
        assert_eq!(lines, n, "launch lines vs the summary:\n{t:?}");
    }
    assert!(passes >= 1);
    let twice: Vec<_> = launched_jobs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs launched more than once: {twice:?}");
    if chain {
        // The supervisors launched the rest; the run log below proves each job ran once.
        assert!(
            (launched_sum as usize) < TASKS && launched_jobs.len() == launched_sum as usize,
            "ticks launched {launched_sum} of {TASKS}: the supervisors launched none?\n{diag}"
        );
    } else {
        assert_eq!(
            launched_sum, TASKS as u32,
            "sum of `launched N` over all tick outputs\n{diag}"
        );
        assert_eq!(launched_jobs.len(), TASKS);
    }

    // The watcher never saw more than max_concurrency jobs running.
    assert!(
        watch_errors.is_empty(),
        "the watcher could not read: {watch_errors:?}"
    );
    assert!(samples > 10, "the watcher took only {samples} samples");
    assert!(max_seen >= 1, "the watcher never saw a running job");
    assert!(
        max_seen <= MAX_CONCURRENCY,
        "{max_seen} jobs were running at once (max_concurrency {MAX_CONCURRENCY})\n{diag}"
    );

    // The database: one analyst job per task, each done on its first attempt.
    assert_eq!(
        jobs_by_status,
        format!("done|1|{TASKS}"),
        "every job done on attempt 1\n{diag}"
    );
    assert_eq!(
        count(
            &w,
            "SELECT count(*) FROM jobs WHERE role = 'analyst' AND status = 'done' AND attempts = 1"
        ),
        TASKS as i64
    );
    assert_eq!(
        count(&w, "SELECT count(*) FROM jobs WHERE status = 'failed'"),
        0
    );
    assert_eq!(
        w.sql("SELECT stage, count(*) FROM tasks GROUP BY stage"),
        format!("analysis|{TASKS}"),
        "every task waits for approval in analysis"
    );
    assert_eq!(
        count(&w, "SELECT count(*) FROM agent_runs"),
        TASKS as i64,
        "one recorded agent run per job"
    );

    // The run log: exactly one run per job and per task.
    let db_jobs: BTreeMap<i64, String> = w
        .sql("SELECT j.id, t.work_item FROM jobs j JOIN tasks t ON t.id = j.task_id")
        .lines()
        .map(|l| {
            let (id, wi) = l.split_once('|').unwrap();
            (id.parse().unwrap(), wi.to_string())
        })
        .collect();
    let log = std::fs::read_to_string(&run_log).expect("the run log exists");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), TASKS, "run log lines\n{diag}");
    let mut by_job: BTreeMap<i64, u32> = BTreeMap::new();
    let mut by_wi: BTreeMap<String, u32> = BTreeMap::new();
    let mut run_ids = BTreeSet::new();
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f.len(), 4, "run log line `{l}`");
        assert_eq!(f[1], "analyst", "run log line `{l}`");
        let id: i64 = f[2].parse().expect("a job id");
        assert_eq!(
            db_jobs.get(&id).map(String::as_str),
            Some(f[0]),
            "run log line `{l}` names a job of another task"
        );
        *by_job.entry(id).or_default() += 1;
        *by_wi.entry(f[0].to_string()).or_default() += 1;
        run_ids.insert(f[3]);
    }
    assert_eq!(by_job.len(), TASKS, "distinct job ids in the run log");
    assert!(by_job.values().all(|&n| n == 1), "a job ran twice");
    assert_eq!(by_wi.len(), TASKS, "distinct tasks in the run log");
    assert!(by_wi.values().all(|&n| n == 1), "a task ran twice");
    assert_eq!(run_ids.len(), TASKS);
    assert_eq!(
        by_wi.keys().cloned().collect::<BTreeSet<_>>(),
        db_jobs.values().cloned().collect::<BTreeSet<_>>()
    );

    // The supervisors logged no warnings (a `database is locked`, a failed advance, …).
    assert!(
        trouble.is_empty(),
        "the supervisor logs hold warnings or errors:\n{diag}"
    );

    // And the operator's view agrees.
    let q = w.ok(&["queue", "--json"], 0).json();
    assert_eq!(q["counts"]["done"], TASKS as u64, "{q:#}");
    assert_eq!(q["counts"]["failed"], 0, "{q:#}");
    assert_eq!(q["counts"]["running"], 0, "{q:#}");
    assert_eq!(q["counts"]["queued"], 0, "{q:#}");
    // No tick reaped, reclaimed or reconciled anything: every supervisor ran to its end and
    // released what it held. A "reclaim" here names a lease whose owner — the supervisor of a
    // job that ended `done` on its first attempt, with a clean log — released it itself.
    if !recovered.is_empty() {
        let supervisors = w.sql(
            "SELECT t.work_item, j.id, j.status, j.attempts, j.supervisor_pid \
             FROM jobs j JOIN tasks t ON t.id = j.task_id ORDER BY j.id",
        );
        let mut facts = Vec::new();
        for out in &recovered {
            for l in out.lines().map(str::trim) {
                let Some(rest) = l.strip_prefix("reclaim transition lease of ") else {
                    continue;
                };
                let wi = rest.split(':').next().unwrap_or("");
                let job = supervisors
                    .lines()
                    .find(|r| r.split('|').next() == Some(wi))
                    .unwrap_or("?");
                facts.push(format!(
                    "`{l}`: its job (work item|job|status|attempts|supervisor pid) = {job}"
                ));
            }
        }
        panic!(
            "{} tick pass(es) reaped, reclaimed or reconciled although no supervisor died \
             (transition leases left now: {}; supervisor log trouble: {} lines):\n{}\n{}",
            recovered.len(),
            w.sql("SELECT count(*) FROM transition_lease"),
            trouble.len(),
            recovered.join("\n"),
            facts.join("\n")
        );
    }

    let t_drop = Instant::now();
    drop(w);
    eprintln!("concurrency: world removed in {:.1?}", t_drop.elapsed());
}
