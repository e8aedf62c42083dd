//! The scheduler end to end (SPEC §4, §5): real `orch tick` processes launch detached
//! `orch job run` supervisors, which run the stub agent (`scripts/stub-agent`) in the task
//! worktree, commit, push and advance. Failure knobs of the stub reach the agents through the
//! environment of the tick (supervisors and agents inherit it). Every world is torn down with
//! the processes it started, found by the unique `STUB_STATE_DIR` in their environment.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::procs::{self, alive_as, cmdline, stat};
use crate::support::sched::{
    Cfg, DEADLINE, Job, REMOTE, Sched, TICK_EVERY, tick_until, wait_until,
};
use crate::support::{boot_id, git, now};
use serde_json::Value;

// ------------------------------------------------------------------------------ the tests

#[test]
fn ticks_alone_drive_a_task_to_done() {
    let w = Sched::new(Cfg::default());
    let main_before = git(&w.remote, &["rev-parse", "refs/heads/main"]);
    let wi = w.add("Add a health endpoint", &[]);
    let branch = w.branch_of(&wi);

    tick_until(&w, &[], |w| w.stage_of(&wi) == "done", DEADLINE);

    let v = w.show(&wi);
    let hist: Vec<(String, String, String, String)> = v["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let s = |k: &str| t[k].as_str().unwrap_or_default().to_string();
            (s("from"), s("to"), s("actor"), s("outcome"))
        })
        .collect();
    let hops: Vec<(&str, &str)> = hist
        .iter()
        .filter(|h| h.0 != h.1)
        .map(|h| (h.0.as_str(), h.1.as_str()))
        .collect();
    assert_eq!(
        hops,
        [
            ("created", "analysis"),
            ("analysis", "architecture"),
            ("architecture", "development"),
            ("development", "review"),
            ("review", "testing"),
            ("testing", "deploy-staging"),
            ("deploy-staging", "deploy"),
            ("deploy", "done"),
        ],
        "history: {hist:#?}"
    );
    for h in hist.iter().filter(|h| h.0 != h.1 && h.0 != "created") {
        assert_eq!(
            (h.2.as_str(), h.3.as_str()),
            ("supervisor", "advanced"),
            "every hop after `created` is the supervisor's advance: {h:?}\n{hist:#?}"
        );
    }

    // One job per agent stage, each run once; one agent run per job with the stub's usage.
    let jobs = w.jobs(&wi);
    let roles: Vec<&str> = jobs.iter().map(|j| j.role.as_str()).collect();
    assert_eq!(
        roles,
        ["analyst", "architect", "developer", "reviewer", "tester"],
        "{jobs:#?}"
    );
    for j in &jobs {
        assert_eq!((j.status.as_str(), j.attempts), ("done", 1), "{j:?}");
    }
    let runs = w.sql(&format!(
        "SELECT r.job_id, r.role, r.exit_code, r.input_tokens, r.output_tokens, \
         coalesce(r.cache_read_tokens, 'NULL'), coalesce(r.cache_write_tokens, 'NULL'), \
         r.cost_usd, r.session_id \
         FROM agent_runs r JOIN tasks t ON t.id = r.task_id WHERE t.work_item = '{wi}' ORDER BY r.id"
    ));
    let runs: Vec<Vec<String>> = runs
        .lines()
        .map(|l| l.split('|').map(String::from).collect())
        .collect();
    assert_eq!(runs.len(), jobs.len(), "one agent run per job: {runs:#?}");
    // (role, input, output, cache read, cost) as scripts/stub-agent reports them.
    let expect = [
        ("analyst", "1200", "340", "0", 0.0123),
        ("architect", "1500", "420", "200", 0.0151),
        ("developer", "4200", "1800", "900", 0.0614),
        ("reviewer", "2600", "520", "300", 0.0242),
        ("tester", "2100", "380", "100", 0.0187),
    ];
    for ((r, j), (role, input, output, cache_r, cost)) in runs.iter().zip(&jobs).zip(expect) {
        assert_eq!(r[0], j.id.to_string(), "{runs:#?}");
        assert_eq!(r[1], role);
        assert_eq!(r[2], "0", "exit code of {role}");
        assert_eq!(r[3], input, "input_tokens of {role} (parsed, not NULL)");
        assert_eq!(r[4], output, "output_tokens of {role}");
        // The stub reports both cache fields (cache_creation as 0); a missing one would be NULL.
        assert_eq!(r[5], cache_r, "cache_read_tokens of {role}");
        assert_eq!(r[6], "0", "cache_write_tokens of {role}");
        let c: f64 = r[7].parse().unwrap();
        assert!((c - cost).abs() < 1e-9, "cost of {role}: {}", r[7]);
        assert!(
            r[8].starts_with(&format!("stub-{wi}-")),
            "session id {}",
            r[8]
        );
    }

    // The work is on the task branch of the remote, committed as the roles; main is untouched.
    let authors = git(&w.remote, &["log", "--format=%an", &branch]);
    for role in ["analyst", "architect", "developer", "reviewer", "tester"] {
        assert!(
            authors.lines().any(|a| a == format!("orch-{role}")),
            "no commit by orch-{role} on {branch}: {authors}"
        );
    }
    assert_eq!(
        git(&w.remote, &["rev-parse", "refs/heads/main"]),
        main_before,
        "main on the remote moved"
    );
    let code_file = format!("src/stub_{}.txt", wi.to_lowercase());
    git(
        &w.remote,
        &["cat-file", "-e", &format!("{branch}:{code_file}")],
    );
}

/// A job fetched every branch of the remote three times, twice back to back, so its cost grew
/// with the branches (issue 13): now it fetches once, `main` and its own branch, and the gate
/// after its push reads the worktree without another fetch.
#[test]
fn a_job_fetches_once_and_only_main_and_its_branch() {
    let w = Sched::new(Cfg::default());
    let env = [("ORCH_LOG", "info,orch=debug")];
    // The supervisor's own advance (analysis waits for a human) is the last thing it does.
    let advanced = |w: &Sched, wi: &str| {
        w.show(wi)["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["actor"] == "supervisor")
    };
    // A first task makes the clone (of the remote's default branch only).
    let first = w.add("Clone first", &[]);
    git(&w.remote, &["branch", "feature/OTHER-0-before", "main"]);
    tick_until(&w, &env, |w| advanced(w, &first), DEADLINE);
    // Branches of other work appear on the remote: no job of another task may bring them.
    for b in ["feature/OTHER-1-x", "feature/OTHER-2-y"] {
        git(&w.remote, &["branch", b, "main"]);
    }
    let wi = w.add("Fetch little", &[]);
    let branch = w.branch_of(&wi);
    tick_until(&w, &env, |w| advanced(w, &wi), DEADLINE);
    let job = w.jobs(&wi)[0].id;
    let log = std::fs::read_to_string(w.state_dir().join(format!("logs/job-{job}.log"))).unwrap();
    let fetches: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("running") && l.contains(" fetch "))
        .collect();
    assert_eq!(fetches.len(), 1, "one fetch per job:\n{log}");
    assert!(
        fetches[0].contains("+refs/heads/main:refs/remotes/origin/main")
            && fetches[0].contains(&format!("+refs/heads/{branch}*:")),
        "a fetch of main and the task branch: {}",
        fetches[0]
    );
    let clone = w.state_dir().join("repos").join("shop");
    let refs = git(&clone, &["for-each-ref", "--format=%(refname)"]);
    assert!(!refs.contains("OTHER"), "{refs}");
    assert!(
        refs.lines()
            .any(|r| r == format!("refs/remotes/origin/{branch}")),
        "the push updated the task branch's tracking ref: {refs}"
    );
}

#[test]
fn request_changes_twice_still_reaches_done() {
    let w = Sched::new(Cfg::default());
    let wi = w.add("Handle empty input", &[]);
    tick_until(
        &w,
        &[("STUB_REQUEST_CHANGES_FIRST", "2")],
        |w| w.stage_of(&wi) == "done",
        DEADLINE,
    );
    let v = w.show(&wi);
    let rollbacks: Vec<&Value> = v["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["outcome"] == "rolled-back")
        .collect();
    assert_eq!(rollbacks.len(), 2, "{:#}", v["transitions"]);
    for r in &rollbacks {
        assert_eq!(
            (&r["from"], &r["to"]),
            (&"review".into(), &"development".into()),
            "{r:#}"
        );
    }
    assert_eq!(v["dev_retries"], 2, "{v:#}");
    let devs: Vec<&Value> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["role"] == "developer")
        .collect();
    assert_eq!(devs.len(), 3, "{:#}", v["jobs"]);
    assert!(
        !devs[0]["prompt"]
            .as_str()
            .unwrap()
            .contains("P0: stub finding"),
        "the first developer job has no findings: {:#}",
        devs[0]
    );
    for (n, d) in devs[1..].iter().enumerate() {
        let p = d["prompt"].as_str().unwrap();
        assert!(
            p.contains(&format!("P0: stub finding {}", n + 1)),
            "developer job after rollback {} lacks the reviewer's P0 finding:\n{p}",
            n + 1
        );
        assert!(
            p.contains("12-review.md"),
            "the artifact path is linked:\n{p}"
        );
    }
    let reviews = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["role"] == "reviewer" && j["status"] == "done")
        .count();
    assert_eq!(reviews, 3);
}

#[test]
fn a_failing_agent_is_retried_then_failed_and_left_alone() {
    let w = Sched::new(Cfg {
        max_attempts: 3,
        ..Cfg::default()
    });
    let wi = w.add("Fails every time", &[]);
    let env = [("STUB_EXIT", "analyst:1")];
    tick_until(
        &w,
        &env,
        |w| w.job(&wi, "analyst").is_some_and(|j| j.status == "failed"),
        DEADLINE,
    );
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!((j.attempts, j.max_attempts), (3, 3), "{j:?}");
    let err = w.job_error(j.id);
    assert!(err.contains("exited with code 1"), "error: {err}");
    let runs = w.sql(&format!(
        "SELECT count(*), min(exit_code), max(exit_code) FROM agent_runs WHERE job_id = {}",
        j.id
    ));
    assert_eq!(runs, "3|1|1", "three runs, each exit 1");

    // Failed is final: more ticks (past the reconcile grace) neither re-run the job nor move
    // the task.
    let transitions = w.transitions_count();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1200));
        let r = w.tick(&env);
        assert!(r.stdout.is_empty(), "an idle tick is silent: {r:?}");
    }
    assert_eq!(w.stage_of(&wi), "analysis");
    assert_eq!(w.transitions_count(), transitions, "the history moved");
    let jobs = w.jobs(&wi);
    assert_eq!(jobs.len(), 1, "no new job: {jobs:#?}");
    assert_eq!((jobs[0].status.as_str(), jobs[0].attempts), ("failed", 3));
    assert_eq!(
        w.sql(&format!(
            "SELECT count(*) FROM agent_runs WHERE job_id = {}",
            j.id
        )),
        "3"
    );
}

#[test]
fn a_silent_agent_is_killed_by_the_inactivity_timeout() {
    let w = Sched::new(Cfg {
        inactivity_timeout_s: 2,
        max_attempts: 1,
        ..Cfg::default()
    });
    let wi = w.add("Hangs", &[]);
    let started = Instant::now();
    tick_until(
        &w,
        &[("STUB_HANG", "analyst")],
        |w| w.job(&wi, "analyst").is_some_and(|j| j.status == "failed"),
        DEADLINE,
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "failed before the inactivity timeout could pass"
    );
    let j = w.job(&wi, "analyst").unwrap();
    let err = w.job_error(j.id);
    assert!(
        err.contains("inactivity") || err.contains("silent"),
        "error: {err}"
    );
    assert_eq!(
        w.sql(&format!(
            "SELECT coalesce(exit_code, 'NULL') FROM agent_runs WHERE job_id = {}",
            j.id
        )),
        "NULL",
        "a killed agent has no exit code"
    );
    wait_until(
        &w,
        "no process of this world (the hanging `sleep 100000`) survives",
        |w| w.pids().is_empty(),
        Duration::from_secs(20),
    );
}

#[test]
fn a_lingering_agent_leaves_nothing_behind() {
    let w = Sched::new(Cfg::default());
    let wi = w.add("Lingers", &[]);
    tick_until(
        &w,
        &[("STUB_LINGER", "analyst")],
        |w| w.job_done(&wi, "analyst") && w.stage_of(&wi) != "analysis",
        DEADLINE,
    );
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!(j.attempts, 1, "{j:?}");
    // Finalised from the result line: tokens parsed, no exit code (the group was killed).
    assert_eq!(
        w.sql(&format!(
            "SELECT input_tokens, coalesce(exit_code, 'NULL') FROM agent_runs WHERE job_id = {}",
            j.id
        )),
        "1200|NULL"
    );
    assert_eq!(w.stage_of(&wi), "architecture");
    wait_until(
        &w,
        "no process of this world (the lingering stub and its `sleep`) survives",
        |w| w.pids().is_empty(),
        Duration::from_secs(20),
    );
}

#[test]
fn a_killed_supervisor_is_reaped_and_its_job_finishes() {
    let w = Sched::new(Cfg::default());
    let wi = w.add("Supervisor dies", &[]);
    w.tick(&[("STUB_SLEEP", "30")]);
    wait_until(
        &w,
        "the analyst job runs with its supervisor and agent recorded",
        |w| {
            w.job(&wi, "analyst")
                .is_some_and(|j| j.status == "running" && j.supervisor_pid > 0 && j.agent_pgid > 0)
        },
        Duration::from_secs(60),
    );
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!(j.attempts, 1);
    assert!(
        alive_as(j.agent_pgid, j.agent_start),
        "the agent runs: {j:?}"
    );
    assert!(procs::kill(j.supervisor_pid), "the supervisor is killed");

    let out = tick_until(
        &w,
        &[],
        |w| w.job_done(&wi, "analyst") && w.stage_of(&wi) != "analysis",
        DEADLINE,
    );
    assert!(
        out.contains(&format!("reap job {} (analyst): supervisor dead", j.id)),
        "{out}"
    );
    let after = w.job(&wi, "analyst").unwrap();
    assert_eq!(after.id, j.id);
    assert_eq!(after.attempts, 2, "re-queued once: {after:?}");
    assert!(
        !alive_as(j.agent_pgid, j.agent_start),
        "the old agent (pid {}) still runs",
        j.agent_pgid
    );
    let group_left: Vec<String> = procs::pids()
        .filter(|p| stat(*p).is_some_and(|s| s.pgrp == j.agent_pgid && !s.zombie()))
        .map(|p| format!("{p}: {}", cmdline(p)))
        .collect();
    assert!(
        group_left.is_empty(),
        "the old agent group survives: {group_left:?}"
    );
    assert_ne!(w.stage_of(&wi), "analysis");
    let v = w.show(&wi);
    assert!(
        v["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["from"] == "analysis" && t["to"] == "architecture"),
        "{:#}",
        v["transitions"]
    );
}

#[test]
fn a_reused_pid_or_zombie_is_not_taken_for_the_supervisor() {
    let w = Sched::new(Cfg {
        serial_gate: false,
        ..Cfg::default()
    });
    let reused = w.add("Reused pid", &[]);
    let zombie = w.add("Zombie supervisor", &[]);
    let live = w.add("Live supervisor", &[]);
    let me = std::process::id() as i32;
    let my_start = stat(me).expect("our own stat").start;
    let boot = boot_id();

    // A child that has exited and that we do not wait for yet: a zombie with its true start time.
    let mut child = Command::new("true").spawn().unwrap();
    let zpid = child.id() as i32;
    let mut z_start = 0;
    crate::support::wait_until(
        &format!("pid {zpid} becomes a zombie"),
        Duration::from_secs(10),
        || match stat(zpid) {
            Some(s) if s.zombie() => {
                z_start = s.start;
                true
            }
            _ => false,
        },
    );

    let set_running = |wi: &str, pid: i32, start: u64| {
        let id = w.job(wi, "analyst").unwrap().id;
        w.sql(&format!(
            "UPDATE jobs SET status = 'running', attempts = 1, started_at = {}, \
             supervisor_pid = {pid}, supervisor_start = {start}, supervisor_boot = '{boot}' \
             WHERE id = {id}",
            now() - 120
        ));
        id
    };
    let reused_job = set_running(&reused, me, my_start + 1);
    let zombie_job = set_running(&zombie, zpid, z_start);
    let live_job = set_running(&live, me, my_start);

    let plan = w.ok(&["tick", "--plan"], 0).stdout;
    assert!(plan.contains(&format!("reap job {reused_job} ")), "{plan}");
    assert!(plan.contains(&format!("reap job {zombie_job} ")), "{plan}");
    assert!(!plan.contains(&format!("reap job {live_job} ")), "{plan}");

    let r = w.tick(&[]);
    assert!(r.stdout.contains("tick: reaped 2,"), "{r:?}");
    assert!(r.stdout.contains("was reused"), "{r:?}");
    assert!(r.stdout.contains("is a zombie"), "{r:?}");
    for (wi, id) in [(&reused, reused_job), (&zombie, zombie_job)] {
        let j = w.job(wi, "analyst").unwrap();
        assert_eq!(
            (j.id, j.status.as_str(), j.attempts),
            (id, "queued", 1),
            "re-queued, the attempt spent"
        );
        let err = w.job_error(id);
        assert!(err.contains("reaped: supervisor dead"), "{err}");
    }
    let j = w.job(&live, "analyst").unwrap();
    assert_eq!(
        (j.status.as_str(), j.supervisor_pid),
        ("running", me),
        "a live supervisor was reaped: {j:?}"
    );
    // And a second pass still leaves it alone.
    let r = w.tick(&[]);
    assert!(
        !r.stdout.contains(&format!("reap job {live_job} ")),
        "{r:?}"
    );
    assert_eq!(w.job(&live, "analyst").unwrap().status, "running");
    child.wait().unwrap();
}

#[test]
fn usage_limit_opens_the_breaker_without_spending_an_attempt() {
    let w = Sched::new(Cfg {
        max_concurrency: 1,
        serial_gate: false,
        usage_limit_backoff_s: 3,
        ..Cfg::default()
    });
    let first = w.add("Hits the usage limit", &[]);
    let second = w.add("Waits for the breaker", &[]);
    // Only the first tick's agent hits the limit; later ones run normally.
    let r = w.tick(&[("STUB_USAGE_LIMIT", "analyst:1")]);
    assert!(r.stdout.contains("launched 1"), "{r:?}");
    let id = w.job(&first, "analyst").unwrap().id;
    wait_until(
        &w,
        "the usage-limited job is back in the queue",
        |w| {
            w.job(&first, "analyst")
                .is_some_and(|j| j.status == "queued")
                && w.job_error(id).contains("usage limit")
        },
        Duration::from_secs(60),
    );
    let q = w.queue();
    let breaker = &q["breaker"];
    assert_eq!(breaker["reason"], "breaker", "{q:#}");
    assert!(
        breaker["detail"]
            .as_str()
            .unwrap()
            .contains("agent provider rate-limited until"),
        "{q:#}"
    );
    let reason_of = |wi: &str| -> String {
        q["queued"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["work_item"] == wi)
            .map(|j| {
                j["blocked_by"]["reason"]
                    .as_str()
                    .unwrap_or("none")
                    .to_string()
            })
            .unwrap_or_else(|| panic!("{wi} not queued: {q:#}"))
    };
    assert!(
        ["breaker", "delayed"].contains(&reason_of(&first).as_str()),
        "{q:#}"
    );
    assert_eq!(
        reason_of(&second),
        "breaker",
        "all dispatch is suspended: {q:#}"
    );
    assert_eq!(
        w.job(&first, "analyst").unwrap().attempts,
        0,
        "the attempt was refunded"
    );

    tick_until(
        &w,
        &[],
        |w| w.stage_of(&first) != "analysis" && w.stage_of(&second) != "analysis",
        DEADLINE,
    );
    let j = w.job(&first, "analyst").unwrap();
    assert_eq!((j.status.as_str(), j.attempts), ("done", 1), "{j:?}");
    let runs = w.sql(&format!(
        "SELECT started_at, finished_at FROM agent_runs WHERE job_id = {id} ORDER BY id"
    ));
    let runs: Vec<Vec<i64>> = runs
        .lines()
        .map(|l| l.split('|').map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(
        runs[1][0] - runs[0][1] >= 3,
        "the retry ran before the breaker closed: {runs:?}"
    );
}

/// An agent that merely printed "usage limit reached" in its output (it is data, the model's
/// or a tool's words) opened the breaker, stopped all dispatch for an hour and got its attempt
/// back. Only the CLI's structured result says a limit was hit.
#[test]
fn an_agent_saying_usage_limit_reached_does_not_open_the_breaker() {
    let w = Sched::new(Cfg {
        max_attempts: 2,
        usage_limit_backoff_s: 3600,
        ..Cfg::default()
    });
    let wi = w.add("Talks about limits", &[]);
    let env = [
        ("STUB_EXIT", "analyst:1"),
        ("STUB_SAY", "Claude AI usage limit reached|1767225600"),
    ];
    w.tick(&env);
    let id = w.job(&wi, "analyst").unwrap().id;
    wait_until(
        &w,
        "the failed attempt is recorded",
        |w| {
            w.job(&wi, "analyst")
                .is_some_and(|j| j.status != "running" && j.attempts == 1)
                && w.job_error(id).contains("exited with code 1")
        },
        Duration::from_secs(60),
    );
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!(
        (j.status.as_str(), j.attempts),
        ("queued", 1),
        "an ordinary failure: the attempt is spent and retried: {j:?}"
    );
    assert_eq!(
        w.sql(&format!(
            "SELECT count(*) FROM breaker WHERE open_until > {}",
            crate::support::now()
        )),
        "0",
        "the breaker stays closed"
    );
    let q = w.queue();
    assert!(q["breaker"].is_null(), "{q:#}");
}

/// The agent's `session_id` went into the database and, on a retry, into the agent's argv
/// (`--resume <id>`) unchecked. A hostile one is now dropped with a warning and never passed;
/// a valid one still resumes.
#[test]
fn a_hostile_session_id_is_dropped_and_never_reaches_the_argv() {
    let w = Sched::new(Cfg {
        max_attempts: 3,
        ..Cfg::default()
    });
    // The agent is a wrapper that logs its arguments, one run a line, then runs the stub.
    let argv_log = w.dir.path().join("argv.log");
    let wrapper = w.script(
        "agent",
        &format!(
            "printf '%s\\n' \"$*\" >> {log:?}\nexec {stub:?} \"$@\"",
            log = argv_log.display().to_string(),
            stub = crate::support::stub_agent().display().to_string()
        ),
    );
    let text = std::fs::read_to_string(&w.config).unwrap();
    let stub = format!(
        "[{:?}, \"--print\"]",
        crate::support::stub_agent().display().to_string()
    );
    assert!(text.contains(&stub), "{text}");
    let text = text.replace(
        &stub,
        &format!(
            "[{:?}, \"--print\", \"--resume\", \"{{session_id}}\"]",
            wrapper.display().to_string()
        ),
    );
    std::fs::write(&w.config, text).unwrap();
    let wi = w.add("Resumes safely", &[]);
    let hostile = "x; touch /tmp/orch-pwned";
    let settled = |w: &Sched, n: usize| {
        std::fs::read_to_string(&argv_log)
            .unwrap_or_default()
            .lines()
            .count()
            >= n
            && w.job(&wi, "analyst").is_some_and(|j| j.status != "running")
    };

    // 1: fails, printing the hostile id: it is not stored.
    tick_until(
        &w,
        &[("STUB_EXIT", "analyst:1"), ("STUB_SESSION_ID", hostile)],
        |w| settled(w, 1),
        DEADLINE,
    );
    // 2: nothing valid to resume, so no `--resume`; fails with a valid id.
    tick_until(
        &w,
        &[("STUB_EXIT", "analyst:1")],
        |w| settled(w, 2),
        DEADLINE,
    );
    // 3: resumes that one, and succeeds.
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);

    let argv = std::fs::read_to_string(&argv_log).unwrap();
    let lines: Vec<&str> = argv.lines().collect();
    assert_eq!(lines.len(), 3, "{argv}");
    assert!(
        !argv.contains("touch"),
        "the hostile id reached the argv:\n{argv}"
    );
    assert_eq!(lines[0], "--print", "a first run has nothing to resume");
    assert_eq!(lines[1], "--print", "the hostile id was not resumed");
    let sessions = w.sql(&format!(
        "SELECT coalesce(r.session_id, 'NULL') FROM agent_runs r JOIN tasks t ON t.id = r.task_id \
         WHERE t.work_item = '{wi}' ORDER BY r.id"
    ));
    let sessions: Vec<&str> = sessions.lines().collect();
    assert_eq!(sessions.len(), 3, "{sessions:?}");
    assert_eq!(sessions[0], "NULL", "the hostile id is not stored");
    assert!(
        sessions[1].starts_with(&format!("stub-{wi}-")),
        "{sessions:?}"
    );
    assert_eq!(
        lines[2],
        format!("--print --resume {}", sessions[1]),
        "a valid id is resumed"
    );
    let job = w.job(&wi, "analyst").unwrap();
    let log =
        std::fs::read_to_string(w.state_dir().join(format!("logs/job-{}.log", job.id))).unwrap();
    assert!(
        log.contains("WARN") && log.contains("session id"),
        "the drop is logged: {log}"
    );
}

#[test]
fn serial_gate_pause_and_dependencies_change_the_claim_order() {
    let w = Sched::new(Cfg {
        max_concurrency: 1,
        auto_approve: false,
        // A second repo without the serial gate, on the same remote.
        extra_repos: format!(
            "  - name: lab\n    remote: \"{REMOTE}\"\n    prefix: LAB\n    serial_gate: false\n"
        ),
        ..Cfg::default()
    });

    let s1 = w.add("First", &[]);
    let s2 = w.add("Second", &[]);
    let s3 = w.add("Third", &[]);
    let lab = w
        .ok(
            &[
                "task",
                "add",
                "--repo",
                "lab",
                "--title",
                "Needs SHOP-1",
                "--depends-on",
                &s1,
                "--json",
            ],
            0,
        )
        .json()["work_item"]
        .as_str()
        .unwrap()
        .to_string();
    let reason = |q: &Value, wi: &str| -> (String, String) {
        let j = q["queued"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["work_item"] == wi)
            .unwrap_or_else(|| panic!("{wi} not queued: {q:#}"));
        (
            j["blocked_by"]["reason"]
                .as_str()
                .unwrap_or("none")
                .to_string(),
            j["blocked_by"]["detail"].as_str().unwrap_or("").to_string(),
        )
    };
    let not_started = |wi: &str| {
        let j = w.job(wi, "analyst").unwrap();
        assert_eq!(
            (j.status.as_str(), j.attempts),
            ("queued", 0),
            "{wi}: {j:?}"
        );
    };

    let r = w.tick(&[]);
    assert!(r.stdout.contains("launched 1"), "{r:?}");
    assert_ne!(w.job(&s1, "analyst").unwrap().attempts, 0);
    let q = w.queue();
    let (r2, d2) = reason(&q, &s2);
    assert_eq!(r2, "serial-gate", "{q:#}");
    assert!(d2.contains(&s1), "{d2}");
    let (r3, d3) = reason(&q, &s3);
    assert_eq!(r3, "serial-gate", "{q:#}");
    assert!(d3.contains(&s2), "{d3}");
    let (rl, dl) = reason(&q, &lab);
    assert_eq!(rl, "dependency", "{q:#}");
    assert!(dl.contains(&s1), "{dl}");

    tick_until(&w, &[], |w| w.job_done(&s1, "analyst"), DEADLINE);
    // SHOP-1 waits for its human approval in `analysis`: it still holds the gate.
    for _ in 0..3 {
        w.tick(&[]);
        std::thread::sleep(TICK_EVERY);
    }
    assert_eq!(w.stage_of(&s1), "analysis");
    for wi in [&s2, &s3, &lab] {
        not_started(wi);
    }
    let q = w.queue();
    assert_eq!(reason(&q, &s2).0, "serial-gate", "{q:#}");
    assert_eq!(reason(&q, &lab).0, "dependency", "{q:#}");

    w.ok(&["pause", &s1, "--reason", "x"], 0);
    let q = w.queue();
    assert_eq!(reason(&q, &s2).0, "none", "SHOP-2 is next: {q:#}");
    let (r3, d3) = reason(&q, &s3);
    assert_eq!(r3, "serial-gate", "{q:#}");
    assert!(d3.contains(&s2), "{d3}");
    assert_eq!(
        reason(&q, &lab).0,
        "dependency",
        "a paused task is still not terminal: {q:#}"
    );
    let j2 = w.job(&s2, "analyst").unwrap().id;
    let j3 = w.job(&s3, "analyst").unwrap().id;
    let plan = w.ok(&["tick", "--plan"], 0).stdout;
    assert!(plan.contains(&format!("launch job {j2} ")), "{plan}");
    assert!(!plan.contains(&format!("launch job {j3} ")), "{plan}");

    tick_until(&w, &[], |w| w.job_done(&s2, "analyst"), DEADLINE);
    not_started(&s3);
    not_started(&lab);
    let q = w.queue();
    assert_eq!(reason(&q, &s3).0, "serial-gate", "{q:#}");
    assert_eq!(reason(&q, &lab).0, "dependency", "{q:#}");
}

#[test]
fn hostile_titles_are_safe() {
    let w = Sched::new(Cfg::default());
    let pwned = std::env::temp_dir().join(format!(
        "pwned-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = std::fs::remove_file(&pwned);
    let inject = format!("$(touch {})", pwned.display());
    let backticks = format!("`touch {}` ${{HOME}} \"quoted\" 'single'", pwned.display());
    let long = "a".repeat(1_000);
    let longest_allowed = "b".repeat(500);
    let titles = [
        inject.as_str(),
        "../../etc/passwd",
        long.as_str(),
        longest_allowed.as_str(),
        "🚀 emoji ✨",
        "a;b|c&d",
        backticks.as_str(),
    ];
    w.ok(&["tick"], 0); // creates the state database (the read commands never do)
    // Past 1,000 characters a title is refused (one table cell, one branch name).
    let r = w.orch(&[
        "task",
        "add",
        "--repo",
        "shop",
        "--title",
        &"c".repeat(1_001),
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    let mut first = None;
    for t in titles {
        let r = w.orch(&["task", "add", "--repo", "shop", "--title", t, "--json"]);
        assert_eq!(r.code, 0, "title {:?}: {r:?}", &t[..t.len().min(60)]);
        let v = r.json();
        let wi = v["work_item"].as_str().unwrap().to_string();
        let branch = w.branch_of(&wi);
        git(w.dir.path(), &["check-ref-format", "--branch", &branch]);
        assert!(branch.starts_with(&format!("feature/{wi}-")), "{branch}");
        assert!(branch.is_ascii() && !branch.contains(".."), "{branch}");
        assert_eq!(w.show(&wi)["title"], t, "the title is kept verbatim");
        first.get_or_insert(wi);
    }
    let wi = first.unwrap();
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!(j.attempts, 1);
    assert!(
        w.show(&wi)["jobs"][0]["prompt"]
            .as_str()
            .unwrap()
            .contains(&inject),
        "the prompt carries the title as text"
    );
    assert!(
        !pwned.exists(),
        "{} was created: the title was executed",
        pwned.display()
    );
}

#[test]
fn tick_plan_does_nothing() {
    let w = Sched::new(Cfg::default());
    let wi = w.add("Planned", &[]);
    let id = w.job(&wi, "analyst").unwrap().id;

    let plan = w.tick_with(&[], &["--plan"]);
    assert_eq!(plan.code, 0, "{plan:?}");
    assert!(plan.stdout.contains("plan (nothing was done)"), "{plan:?}");
    assert!(
        plan.stdout.contains(&format!("launch job {id} ")),
        "{plan:?}"
    );
    let pj = w.tick_with(&[], &["--plan", "--json"]);
    assert_eq!(pj.code, 0, "{pj:?}");
    let pj = pj.json();
    assert_eq!(pj["plan"], true, "{pj:#}");
    assert_eq!(pj["launched"], 1, "{pj:#}");
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!(
        (j.status.as_str(), j.attempts),
        ("queued", 0),
        "--plan claimed: {j:?}"
    );
    assert!(
        !w.state_dir()
            .join("logs")
            .join(format!("job-{id}.log"))
            .exists()
    );

    // A real pass, as JSON: the documented counts (SPEC §4.3 step 7).
    let r = w.tick_with(&[("STUB_SLEEP", "2")], &["--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    for (k, want) in [
        ("schema_version", 1),
        ("reaped", 0),
        ("reclaimed", 0),
        ("reconciled", 0),
        ("launched", 1),
        ("running", 1),
        ("max_concurrency", 2),
        ("queued", 0),
    ] {
        assert_eq!(v[k], want, "`{k}` in {v:#}");
    }
    assert_eq!(v["plan"], false, "{v:#}");
    assert!(v["skipped"].is_null(), "{v:#}");
    assert_eq!(v["errors"], serde_json::json!([]), "{v:#}");
    // Each action is an object naming its kind, task, role and job (issue 12, item 8).
    assert_eq!(
        v["actions"],
        serde_json::json!([{
            "kind": "launch",
            "work_item": wi,
            "role": "analyst",
            "job_id": id,
            "text": format!("launch job {id} ({wi} analyst, attempt 1)"),
        }]),
        "{v:#}"
    );
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);
}

#[test]
fn a_second_tick_exits_zero_while_one_holds_the_lock() {
    use std::io::Write as _;
    use std::os::fd::AsRawFd as _;
    let w = Sched::new(Cfg::default());
    let wi = w.add("Locked out", &[]);
    let lock = w.state_dir().join("tick.lock");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .unwrap();
    // SAFETY: flock(2) on a descriptor we own.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(rc, 0, "could not take {}", lock.display());
    f.set_len(0).unwrap();
    writeln!(f, "{}", std::process::id()).unwrap();

    let r = w.tick_with(&[], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "another tick is running (pid {})",
            std::process::id()
        )),
        "{r:?}"
    );
    let r = w.tick_with(&[], &["--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert!(
        v["skipped"]
            .as_str()
            .is_some_and(|s| s.starts_with("another tick is running")),
        "{v:#}"
    );
    assert_eq!(v["launched"], 0, "{v:#}");
    let j = w.job(&wi, "analyst").unwrap();
    assert_eq!((j.status.as_str(), j.attempts), ("queued", 0), "{j:?}");

    drop(f);
    let r = w.tick(&[]);
    assert!(r.stdout.contains("launched 1"), "{r:?}");
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);
}

/// SPEC §4.3 step 4: the reconciler is "the path for lost webhooks and crashed supervisors".
/// A supervisor that has just marked its job `done` (it does so before it advances) and is
/// still alive is neither: the reconciler must leave the hop to it. Once that supervisor is dead
/// and the grace has passed since the job finished, the reconciler does advance.
#[test]
fn the_reconciler_leaves_a_finishing_supervisor_alone() {
    let w = Sched::new(Cfg {
        reconcile_grace_s: 30,
        ..Cfg::default()
    });
    let wi = w.add("Finishing supervisor", &[]);
    // One tick launches the analyst; no further tick, so the architect job stays queued.
    w.tick(&[]);
    wait_until(
        &w,
        "the analyst's supervisor moves the task to architecture",
        |w| w.stage_of(&wi) == "architecture" && w.job(&wi, "architect").is_some(),
        DEADLINE,
    );
    // The architect's work is on the branch: the gate of `architecture` is green.
    w.push_adr(&wi);
    // Its supervisor (a stand-in: a live process) has marked the job done a moment ago and is
    // about to advance; the stage was entered long before.
    let mut stand_in = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = stand_in.id() as i32;
    let start = stat(pid).unwrap().start;
    let job = w.job(&wi, "architect").unwrap().id;
    let t = now();
    w.sql(&format!(
        "UPDATE jobs SET status = 'done', attempts = 1, started_at = {}, finished_at = {t}, \
         exit_code = 0, supervisor_pid = {pid}, supervisor_start = {start}, \
         supervisor_boot = '{}' WHERE id = {job}",
        t - 50,
        boot_id()
    ));
    w.sql(&format!(
        "UPDATE tasks SET stage_entered_at = {} WHERE work_item = '{wi}'",
        t - 60
    ));
    let r = w.tick(&[]);
    let stage = w.stage_of(&wi);
    stand_in.kill().unwrap();
    stand_in.wait().unwrap();
    assert!(
        // An idle tick prints nothing; one that did something says how much it reconciled.
        (r.stdout.is_empty() || r.stdout.contains("reconciled 0")) && stage == "architecture",
        "the reconciler took the hop of a live supervisor that finished its job {}s ago \
         (grace {}s): stage now `{stage}`\n{r:?}",
        now() - t,
        30
    );

    // The supervisor is gone and the job finished long ago: now it is the reconciler's hop.
    w.sql(&format!(
        "UPDATE jobs SET finished_at = {} WHERE id = {job}",
        now() - 60
    ));
    let r = w.tick(&[]);
    assert!(r.stdout.contains("reconciled 1"), "{r:?}");
    assert_eq!(w.stage_of(&wi), "development");
    let v = w.show(&wi);
    assert!(
        v["transitions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["from"] == "architecture"
                && x["to"] == "development"
                && x["actor"] == "reconciler"),
        "{:#}",
        v["transitions"]
    );
}

/// A job that ended `done` while its gate was not satisfied (the reviewer wrote nothing) left
/// the task with no job and no alert, holding the serial gate. The role gets one more run, told
/// what is missing, and the task goes on.
#[test]
fn a_role_that_left_its_work_missing_runs_once_more() {
    let w = Sched::new(Cfg::default());
    let wi = w.add("Forgetful reviewer", &[]);
    tick_until(
        &w,
        &[("STUB_NOTHING_FIRST", "reviewer:1")],
        |w| w.stage_of(&wi) == "done",
        DEADLINE,
    );
    let reviewers: Vec<Job> = w
        .jobs(&wi)
        .into_iter()
        .filter(|j| j.role == "reviewer")
        .collect();
    assert_eq!(reviewers.len(), 2, "{reviewers:?}");
    let second = w.sql(&format!(
        "SELECT prompt FROM jobs WHERE id = {}",
        reviewers[1].id
    ));
    assert!(
        second.contains("`12-review.md` does not exist"),
        "the re-run is told what is missing: {second}"
    );
}

/// …and a role that leaves its work missing twice holds the task with an alert instead of
/// leaving it idle for ever.
#[test]
fn a_role_that_left_its_work_missing_twice_holds_the_task() {
    let w = Sched::new(Cfg::default());
    let wi = w.add("Hopeless reviewer", &[]);
    tick_until(
        &w,
        &[("STUB_NOTHING_FIRST", "reviewer:5")],
        |w| {
            w.sql(&format!(
                "SELECT held_at IS NOT NULL FROM tasks WHERE work_item = '{wi}'"
            )) == "1"
        },
        DEADLINE,
    );
    assert_eq!(w.stage_of(&wi), "review");
    let reason = w.sql(&format!(
        "SELECT held_reason FROM tasks WHERE work_item = '{wi}'"
    ));
    assert!(
        reason.contains("the reviewer finished twice without the work of `review`"),
        "{reason}"
    );
    let reviewers = w
        .jobs(&wi)
        .into_iter()
        .filter(|j| j.role == "reviewer")
        .count();
    assert_eq!(reviewers, 2);
    let why = w.orch(&["why", &wi]);
    assert!(why.stdout.contains("Held since"), "{why:?}");
    let logs = std::fs::read_dir(w.state_dir().join("logs"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    assert!(
        logs.contains("alert:") && logs.contains("held"),
        "an alert was raised"
    );
    // Nothing more is queued while it is held.
    for _ in 0..3 {
        w.tick(&[]);
    }
    assert_eq!(
        w.jobs(&wi)
            .into_iter()
            .filter(|j| j.role == "reviewer")
            .count(),
        2
    );
}

/// A crash right after `orch approve` recorded the approval (before its advance) was never
/// reconciled: analysis was skipped as a human gate. Once approved it is not one any more.
#[test]
fn an_approval_whose_advance_was_lost_is_reconciled() {
    let w = Sched::new(Cfg {
        auto_approve: false,
        ..Cfg::default()
    });
    let wi = w.add("Approved then crashed", &[]);
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);
    // What `orch approve` writes before it advances, without the advance.
    w.sql(&format!(
        "UPDATE tasks SET approved_at = {} WHERE work_item = '{wi}'",
        now()
    ));
    tick_until(&w, &[], |w| w.stage_of(&wi) != "analysis", DEADLINE);
    assert_eq!(w.stage_of(&wi), "architecture");
}

/// A task left with no live job (its analysis waits for the approval) gives its worktree back:
/// clean and pushed, nothing is lost, and every worktree kept would slow each later worktree
/// add and fetch of the repo. The next job re-creates it from the remote branch, and the task
/// goes on to `done` with the analysis it had.
#[test]
fn an_idle_task_gives_its_worktree_back_and_the_next_job_recreates_it() {
    let w = Sched::new(Cfg {
        auto_approve: false,
        ..Cfg::default()
    });
    let wi = w.add("Park the worktree", &[]);
    let wt = w.state_dir().join("repos/_wt/shop").join(&wi);
    tick_until(&w, &[], |w| w.job_done(&wi, "analyst"), DEADLINE);
    wait_until(
        &w,
        "the idle worktree is given back",
        |_| !wt.exists(),
        DEADLINE,
    );
    assert_eq!(w.stage_of(&wi), "analysis");
    let branch = w.branch_of(&wi);
    let pushed = git(&w.remote, &["rev-parse", &format!("refs/heads/{branch}")]);
    w.ok(&["approve", &wi], 0);
    tick_until(&w, &[], |w| w.stage_of(&wi) == "done", DEADLINE);
    // The architect's work was built on the analyst's commit, fetched back from the remote.
    let log = git(
        &w.remote,
        &["log", "--format=%H", &format!("refs/heads/{branch}")],
    );
    assert!(log.lines().any(|l| l.trim() == pushed.trim()), "{log}");
    wait_until(
        &w,
        "the done task's worktree is given back",
        |_| !wt.exists(),
        DEADLINE,
    );
}
