//! No waiting for the timer (`scheduler.launch_on_finish`): a supervisor whose job ended, a
//! human gesture and an ingest run the same launch pass as a tick, so the next job starts at
//! once. These worlds run no ticks unless a test says so: what runs was started by those
//! passes alone. Exactly once still holds when the passes race each other and ticks.

use std::time::Duration;

use serde_json::Value;

use crate::support::sched::{Cfg, DEADLINE, Sched};
use crate::support::{Run, poll};

/// A scheduler world whose gestures and supervisors launch.
fn chained(cfg: Cfg) -> Sched {
    Sched::new(Cfg {
        launch_on_finish: true,
        ..cfg
    })
}

/// `orch <args> --json` in the world, with the stub's knobs `env`.
fn orch_json(s: &Sched, args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let r = Run::of(s.stub_cmd(&a).envs(env.iter().copied()));
    let v = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    (r.code, v)
}

fn add(s: &Sched, title: &str, env: &[(&str, &str)]) -> (String, Value) {
    let (code, v) = orch_json(s, &["task", "add", "--repo", "shop", "--title", title], env);
    assert_eq!(code, 0, "{v:#}");
    (v["work_item"].as_str().unwrap().to_string(), v)
}

#[track_caller]
fn wait(s: &Sched, what: &str, pred: impl Fn(&Sched) -> bool) {
    if !poll(DEADLINE, Duration::from_millis(50), || pred(s)) {
        panic!("{what}: not reached in {DEADLINE:?}\n{}", s.diagnose());
    }
}

/// Every stage hop waited for the next tick (every 10 s in production): a task with a no-op
/// agent needed at least seven timer periods to reach `done`.
#[test]
fn a_task_reaches_done_with_no_tick_at_all() {
    let s = chained(Cfg::default());
    let (wi, added) = add(&s, "Chained", &[]);
    assert_eq!(added["next"]["status"], "launched", "{added:#}");
    assert_eq!(added["next"]["role"], "analyst", "{added:#}");
    wait(&s, "done without a tick", |s| s.stage_of(&wi) == "done");
    let actors = s.sql(&format!(
        "SELECT DISTINCT actor FROM transitions h JOIN tasks t ON t.id = h.task_id \
         WHERE t.work_item = '{wi}' AND h.to_stage <> 'analysis' ORDER BY 1"
    ));
    assert_eq!(actors, "supervisor", "every hop was the supervisors'");
    assert!(
        !s.state_dir().join("tick.lock").exists(),
        "no tick ever ran in this world"
    );
}

#[test]
fn approve_starts_the_next_job_at_once_and_says_so() {
    let s = chained(Cfg {
        auto_approve: false,
        ..Cfg::default()
    });
    let (wi, _) = add(&s, "Needs a human", &[]);
    wait(&s, "the analysis is written", |s| {
        s.job_done(&wi, "analyst")
    });
    let (code, v) = orch_json(&s, &["approve", &wi], &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["next"]["status"], "launched", "{v:#}");
    assert_eq!(v["next"]["role"], "architect", "{v:#}");
    let text = Run::of(&mut s.stub_cmd(&["why", &wi]));
    assert!(
        text.stdout.contains("architect"),
        "why follows the job: {text:?}"
    );
}

#[test]
fn resume_at_a_breakpoint_and_retry_start_the_job_at_once() {
    let s = chained(Cfg {
        max_attempts: 1,
        ..Cfg::default()
    });
    let (wi, _) = add(&s, "Breakpoint", &[]);
    let r =
        Run::of(&mut s.stub_cmd(&["pause", &wi, "--before", "development", "--reason", "look"]));
    assert_eq!(r.code, 0, "{r:?}");
    wait(&s, "paused at the breakpoint", |s| {
        s.sql(&format!(
            "SELECT paused_at IS NOT NULL FROM tasks WHERE work_item = '{wi}'"
        )) == "1"
            && s.sql("SELECT count(*) FROM jobs WHERE status = 'running'") == "0"
    });
    // The developer fails its one attempt: a job failed for good, for `retry` below.
    let knobs = [("STUB_EXIT", "developer:3")];
    let (code, v) = orch_json(&s, &["resume", &wi], &knobs);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["next"]["status"], "launched", "{v:#}");
    assert_eq!(v["next"]["role"], "developer", "{v:#}");
    wait(&s, "the developer failed for good", |s| {
        s.job(&wi, "developer")
            .is_some_and(|j| j.status == "failed")
    });
    let id = s.job(&wi, "developer").unwrap().id;
    let (code, v) = orch_json(&s, &["retry", &id.to_string()], &[]);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["next"]["status"], "launched", "{v:#}");
    assert_eq!(v["next"]["job_id"], id, "{v:#}");
    wait(&s, "done after the retry", |s| s.stage_of(&wi) == "done");
}

#[test]
fn with_launch_on_finish_off_only_ticks_launch_and_why_says_so() {
    let s = Sched::new(Cfg::default());
    let (wi, added) = add(&s, "Old way", &[]);
    assert_eq!(added["next"]["status"], "off", "{added:#}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.job(&wi, "analyst").unwrap().status, "queued");
    let why = Run::of(&mut s.stub_cmd(&["why", &wi]));
    assert!(
        why.stdout.contains("the next `orch tick` starts it"),
        "{why:?}"
    );
    let r = s.tick(&[]);
    assert!(r.stdout.contains("launch job"), "{r:?}");
}

/// Two supervisors of one serial repo finish at about the same time and both run a launch
/// pass, racing a stream of ticks: every job runs once, and the third task's analyst starts
/// only once both tasks ahead of it are done.
#[test]
fn two_supervisors_finishing_at_once_on_a_serial_repo_start_each_job_once() {
    let s = chained(Cfg {
        max_concurrency: 3,
        ..Cfg::default()
    });
    let run_log = s.dir.path().join("runs.log");
    let log = run_log.display().to_string();
    let env = [("STUB_RUN_LOG", log.as_str()), ("STUB_SLEEP", "1")];
    // A is paused, so B overtakes it through the serial gate; then A resumes and runs beside
    // B. C waits behind both.
    let (a, _) = add(&s, "Ahead", &env);
    let r = Run::of(&mut s.stub_cmd(&["pause", &a, "--reason", "later"]));
    assert_eq!(r.code, 0, "{r:?}");
    let (b, _) = add(&s, "Overtakes", &env);
    let (c, _) = add(&s, "Behind both", &env);
    let (code, v) = orch_json(&s, &["resume", &a], &env);
    assert_eq!(code, 0, "{v:#}");
    // Ticks race the supervisors' passes the whole time.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = {
        let stop = stop.clone();
        let cmd = |s: &Sched| {
            let mut c = s.stub_cmd(&["tick"]);
            c.envs(env.iter().copied());
            c
        };
        let mut cmds: Vec<std::process::Command> = (0..400).map(|_| cmd(&s)).collect();
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && !cmds.is_empty() {
                let r = Run::of(&mut cmds.pop().unwrap());
                assert_eq!(r.code, 0, "{r:?}");
                n += 1;
                std::thread::sleep(Duration::from_millis(40));
            }
            n
        })
    };
    wait(&s, "all three done", |s| {
        [&a, &b, &c].iter().all(|wi| s.stage_of(wi) == "done")
    });
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let ticks = ticker.join().unwrap();
    assert!(ticks > 0);
    // Each job ran exactly once.
    let log = std::fs::read_to_string(&run_log).unwrap();
    let mut runs: Vec<&str> = log.lines().map(|l| l.split(' ').nth(2).unwrap()).collect();
    let total = runs.len();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), total, "a job ran twice:\n{log}");
    assert_eq!(
        s.sql("SELECT count(*) FROM jobs WHERE status = 'done'"),
        s.sql("SELECT count(*) FROM jobs"),
        "{}",
        s.diagnose()
    );
    // C's analyst ran after A and B were done: its first run line comes after both tasks'
    // last ones.
    let lines: Vec<&str> = log.lines().collect();
    let first_c = lines
        .iter()
        .position(|l| l.starts_with(&format!("{c} ")))
        .unwrap();
    for wi in [&a, &b] {
        let last = lines
            .iter()
            .rposition(|l| l.starts_with(&format!("{wi} ")))
            .unwrap();
        assert!(last < first_c, "{c} started before {wi} was done:\n{log}");
    }
}

/// Gestures racing ticks: six approvals given while ticks run back to back; each architect
/// job starts exactly once, whichever pass claims it.
#[test]
fn approvals_racing_ticks_start_each_job_once() {
    let s = chained(Cfg {
        auto_approve: false,
        max_concurrency: 3,
        serial_gate: false,
        ..Cfg::default()
    });
    let run_log = s.dir.path().join("runs.log");
    let log = run_log.display().to_string();
    let env = [("STUB_RUN_LOG", log.as_str())];
    let wis: Vec<String> = (1..=6)
        .map(|i| add(&s, &format!("Racing {i}"), &env).0)
        .collect();
    wait(&s, "every analysis written", |s| {
        wis.iter().all(|wi| s.job_done(wi, "analyst"))
    });
    let ticks: Vec<std::thread::JoinHandle<()>> = (0..3)
        .map(|_| {
            let cmds: Vec<std::process::Command> = (0..15)
                .map(|_| {
                    let mut c = s.stub_cmd(&["tick"]);
                    c.envs(env.iter().copied());
                    c
                })
                .collect();
            std::thread::spawn(move || {
                for mut c in cmds {
                    let r = Run::of(&mut c);
                    assert_eq!(r.code, 0, "{r:?}");
                }
            })
        })
        .collect();
    let approvals: Vec<std::thread::JoinHandle<Run>> = wis
        .iter()
        .map(|wi| {
            let mut c = s.stub_cmd(&["approve", wi, "--json"]);
            c.envs(env.iter().copied());
            std::thread::spawn(move || Run::of(&mut c))
        })
        .collect();
    for a in approvals {
        let r = a.join().unwrap();
        assert_eq!(r.code, 0, "{r:?}");
    }
    for t in ticks {
        t.join().unwrap();
    }
    wait(&s, "every architect done", |s| {
        wis.iter().all(|wi| s.job_done(wi, "architect"))
    });
    let log = std::fs::read_to_string(&run_log).unwrap();
    let architects: Vec<&str> = log
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some("architect"))
        .map(|l| l.split(' ').nth(2).unwrap())
        .collect();
    let mut distinct = architects.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(architects.len(), 6, "{log}");
    assert_eq!(distinct.len(), 6, "an architect ran twice:\n{log}");
    assert_eq!(
        s.sql("SELECT count(*) FROM jobs WHERE attempts > 1"),
        "0",
        "{}",
        s.diagnose()
    );
}
