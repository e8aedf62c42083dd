//! The kill matrix (design §4–§5, §7, §9): for every failpoint `orch debug failpoints` lists, a
//! world with one task — started from a (fake) Plane webhook, with a test contract, `ci.mode:
//! command`, the stub agent, a Plane fake counting what it receives and a Telegram fake, and for
//! the `release.*` points the last mile too (an external secret scanner, the merge gate in git
//! mode with a commit pushed to main meanwhile so the branch is rebased, coverage, a deploy hook
//! that counts its runs) — is
//! driven by ticks that have the failpoint armed until some orch process died on it, then by
//! plain ticks until the task settles. Then, for that failpoint:
//!
//! - the task reached `done` (`cancelled` for the cancel points; held as "deploy initiated,
//!   outcome unknown" for the points between the hook's `initiated` marker and its recorded
//!   outcome): nothing was lost;
//! - the deploy hook ran exactly once (never for a cancel; at most once, and then never again,
//!   where its outcome is unknown), and the task's code is in `origin/main` when `done`;
//! - no stage hop is in the history twice, every outbox row was delivered, every Plane state
//!   move and comment arrived once, a Telegram message at most twice (it has no idempotency
//!   key): nothing was done twice;
//! - no running job, no lease and no process of the world is left after two more ticks;
//! - `orch fsck` is clean.
//!
//! A table of `failpoint × runs × lost × doubled` goes to stdout and to
//! `target/kill-matrix.txt`. The matrix runs alone (it starts thousands of processes).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::fakes::{Plane, Telegram};
use crate::support::webhooks::{PLANE_PROJECT, plane_issue, signed_headers};
use crate::support::{Run, World, feed, lanes, poll, stub_agent};

const PLANE_TOKEN: &str = "plane-token-KILL";
const TG_TOKEN: &str = "123:tg-token-KILL";
const HOOK_SECRET: &str = "hook-secret-KILL";
const HOOK_VAR: &str = "ORCH_KM_HOOK_SECRET";
const PLANE_VAR: &str = "ORCH_KM_PLANE_TOKEN";
const TG_VAR: &str = "ORCH_KM_TG_TOKEN";
const WI: &str = "SHOP-7";
const ISSUE: &str = "1a2b3c4d-0000-4000-8000-000000000007";
/// How long one phase (until the point fires, until the task settles) may take.
const PHASE: Duration = Duration::from_secs(120);

/// Points that fire only after another one: the companion is armed alongside.
fn companions(point: &str) -> &'static [&'static str] {
    match point {
        // Something must be dead before the reaper has anything to kill.
        "reap.after-kill" => &["job.agent-running"],
        _ => &[],
    }
}

/// What a settled world must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Done,
    Cancelled,
    /// Killed between the deploy hook's `initiated` row and its outcome: held for a human,
    /// the hook never run again.
    HeldUnknown,
}

fn expected_end(point: &str) -> End {
    if point.starts_with("cancel.") {
        End::Cancelled
    } else if matches!(
        point,
        "release.hook-initiated" | "release.hook-running" | "release.after-hook"
    ) {
        End::HeldUnknown
    } else {
        End::Done
    }
}

/// How often the deploy hook may have run when the world settles.
fn hook_runs(point: &str) -> std::ops::RangeInclusive<usize> {
    match point {
        p if !p.starts_with("release.") => 0..=0,
        "release.hook-initiated" => 0..=0,
        "release.hook-running" => 0..=1,
        _ => 1..=1,
    }
}

/// Points this world cannot reach, and the test that kills there instead.
fn elsewhere(point: &str) -> Option<&'static str> {
    match point {
        "release.before-forge-merge" => Some(
            "release::a_merge_job_killed_after_asking_the_forge_merges_once (merge.mode: gitea)",
        ),
        _ => None,
    }
}

struct Km {
    w: World,
    plane: Plane,
    tg: Telegram,
    log: std::path::PathBuf,
    /// One line per run of the deploy hook.
    hook_runs: std::path::PathBuf,
    /// Whether main got its commit from elsewhere yet (the branch is rebased over it).
    pushed_main: std::cell::Cell<bool>,
}

impl Km {
    /// The world; `release`: with the last mile (the `release.*` points need it, and it takes
    /// the N/A walks the other points rely on away).
    fn new(release: bool) -> Km {
        let plane = Plane::start("team", PLANE_TOKEN);
        plane.add_project(PLANE_PROJECT);
        plane.add_issue(PLANE_PROJECT, ISSUE, "To Analyse");
        let tg = Telegram::start(TG_TOKEN);
        let w = World::new();
        // Finishing supervisors and the ingest launch the next job, as in production: their
        // launch passes are among the points killed.
        w.launch.store(true, std::sync::atomic::Ordering::Relaxed);
        let suite = w.script("suite.sh", "echo 'tests pass'\nexit 0");
        let ci = w.script("ci.sh", "echo 'ci green'\nexit 0");
        let scan = w.script("scan.sh", "echo 'no leaks found'\nexit 0");
        let cov = w.script("coverage.sh", "echo 'TOTAL 91.0%'");
        let hook_runs = w.dir.path().join("hook-runs");
        let hook = w.script(
            "hook.sh",
            &format!(
                "echo deploy >> '{}'\nsleep 0.3\nexit 0",
                hook_runs.display()
            ),
        );
        let q = |s: &str| serde_json::to_string(s).unwrap();
        let yaml = [
            format!("state_dir: {}", q(&w.state_dir().display().to_string())),
            "max_concurrency: 2".into(),
            "agent:".into(),
            format!(
                "  argv: [{}, \"--print\"]",
                q(&stub_agent().display().to_string())
            ),
            "  inactivity_timeout_s: 60".into(),
            "  max_attempts: 6".into(),
            "scheduler:".into(),
            "  reconcile_grace_s: 1".into(),
            "  retry_backoff_s: 1".into(),
            "  launch_grace_s: 2".into(),
            "  stage_alert_after_s: 0".into(),
            "repos:".into(),
            "  - name: shop".into(),
            format!("    remote: {}", q(&w.remote.display().to_string())),
            "    prefix: SHOP".into(),
            "    default_labels: [auto-approve]".into(),
            format!("    plane_project: {PLANE_PROJECT}"),
            format!(
                "    ci: {{mode: command, argv: [\"/bin/sh\", {}]}}",
                q(&ci.display().to_string())
            ),
            format!(
                "    tests: {{argv: [\"/bin/sh\", {}], timeout_s: 60}}",
                q(&suite.display().to_string())
            ),
            if release {
                [
                    "    merge: {mode: git, style: rebase, defer_s: 1}".to_string(),
                    format!(
                        "    security: {{argv: [\"/bin/sh\", {}]}}",
                        q(&scan.display().to_string())
                    ),
                    format!(
                        "    coverage: {{argv: [\"/bin/sh\", {}], floor: 50.0}}",
                        q(&cov.display().to_string())
                    ),
                    format!(
                        "    deploy: {{mode: hook, require_confirm: false, argv: [\"/bin/sh\", {}], timeout_s: 60}}",
                        q(&hook.display().to_string())
                    ),
                ]
                .join("\n")
            } else {
                "    # (no last mile)".to_string()
            },
            "tracker:".into(),
            "  kind: plane".into(),
            format!("  base_url: {}", q(&plane.url())),
            "  workspace: team".into(),
            format!("  token_env: {PLANE_VAR}"),
            format!("  webhook_secret_env: {HOOK_VAR}"),
            "chat:".into(),
            "  kind: telegram".into(),
            format!("  base_url: {}", q(&tg.url())),
            format!("  token_env: {TG_VAR}"),
            "  chat_id: \"-100123\"".into(),
        ]
        .join("\n");
        std::fs::write(&w.config, yaml).unwrap();
        let log = w.dir.path().join("failpoints.log");
        Km {
            w,
            plane,
            tg,
            log,
            hook_runs,
            pushed_main: std::cell::Cell::new(!release),
        }
    }

    /// An `orch` command with the services' secrets, and the failpoints `armed` (if any).
    fn cmd(&self, args: &[&str], armed: &[&str]) -> std::process::Command {
        let mut c = self.w.stub_cmd(args);
        c.env(HOOK_VAR, HOOK_SECRET)
            .env(PLANE_VAR, PLANE_TOKEN)
            .env(TG_VAR, TG_TOKEN)
            .env("ORCH_FAILPOINT_LOG", &self.log)
            .env_remove("ORCH_FAILPOINT");
        if !armed.is_empty() {
            c.env("ORCH_FAILPOINT", armed.join(","));
        }
        c
    }

    fn run(&self, args: &[&str], armed: &[&str]) -> Run {
        Run::of(&mut self.cmd(args, armed))
    }

    fn tick(&self, armed: &[&str]) -> Run {
        let r = self.run(&["tick"], armed);
        self.move_main();
        r
    }

    /// Once the task is past development, someone pushes to main: the merge gate must rebase.
    fn move_main(&self) {
        if self.pushed_main.get() || !matches!(self.stage().as_str(), "review" | "testing") {
            return;
        }
        let sc = &self.w.scratch;
        let g = |args: &[&str]| crate::support::git(sc, args);
        g(&["fetch", "-q", "origin"]);
        g(&["checkout", "-q", "-B", "main", "origin/main"]);
        std::fs::write(sc.join("elsewhere.txt"), "pushed by someone else\n").unwrap();
        g(&["add", "-A"]);
        g(&["commit", "-qm", "a change from elsewhere"]);
        g(&["push", "-q", "origin", "main"]);
        self.pushed_main.set(true);
    }

    fn hook_count(&self) -> usize {
        std::fs::read_to_string(&self.hook_runs)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// The Plane delivery that starts the task. Unarmed, it launches nothing: the armed ticks
    /// start the first job, and the supervisors they start carry the armed failpoints on.
    fn ingest(&self, armed: &[&str]) -> Run {
        let body = plane_issue(7, "To Analyse", "Crash-proof work", &[]);
        let headers = signed_headers("plane", "km-start", "issue", HOOK_SECRET, &body);
        let mut args = vec![
            "ingest".to_string(),
            "plane".to_string(),
            "--json".to_string(),
        ];
        for (k, v) in &headers {
            args.push("--header".into());
            args.push(format!("{k}: {v}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = self.cmd(&args, armed);
        if armed.is_empty() {
            c.env("ORCH_LAUNCH_ON_FINISH", "false");
        }
        feed(&mut c, &body)
    }

    fn fired(&self, point: &str) -> bool {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').next() == Some(point))
    }

    fn stage(&self) -> String {
        self.w.sql(&format!(
            "SELECT stage FROM tasks WHERE base_work_item = '{WI}' ORDER BY id DESC LIMIT 1"
        ))
    }

    fn count(&self, sql: &str) -> i64 {
        self.w.sql(sql).parse().unwrap_or(-1)
    }

    fn settled(&self, end: End) -> bool {
        let stage = self.stage();
        let at_end = match end {
            End::Done => stage == "done",
            End::Cancelled => stage == "cancelled",
            End::HeldUnknown => stage == "deploy"
                && self
                    .w
                    .sql(&format!(
                        "SELECT coalesce(held_reason, '') FROM tasks WHERE base_work_item = '{WI}' \
                             ORDER BY id DESC LIMIT 1"
                    ))
                    .contains("outcome unknown"),
        };
        at_end
            && self.count("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')") == 0
            && self.count("SELECT count(*) FROM outbox WHERE status = 'pending'") == 0
    }

    /// Everything worth reading when a point misbehaves.
    fn diagnose(&self) -> String {
        let r = self.run(&["task", "show", WI, "--json"], &[]);
        let q = self.run(&["queue", "--json"], &[]);
        let o = self.run(&["outbox", "--json"], &[]);
        format!(
            "--- task show\n{}\n--- queue\n{}\n--- outbox\n{}\n--- failpoints\n{}\n--- procs {:?}",
            r.stdout,
            q.stdout,
            o.stdout,
            std::fs::read_to_string(&self.log).unwrap_or_default(),
            self.w.procs()
        )
    }
}

/// One failpoint's row of the table.
#[derive(Debug)]
struct Row {
    point: String,
    runs: u32,
    lost: Vec<String>,
    doubled: Vec<String>,
    seconds: f64,
}

/// Drive one world through `point`; what was lost or doubled.
fn run_point(point: &str) -> Row {
    let started = Instant::now();
    let km = Km::new(point.starts_with("release."));
    let end = expected_end(point);
    let mut armed = vec![point];
    armed.extend_from_slice(companions(point));
    let mut runs = 0;

    // Start the task (the ingest's points are hit by the start itself; the sender redelivers).
    if matches!(point, "ingest.after-route" | "gesture.before-launch") {
        let r = km.ingest(&armed);
        runs += 1;
        assert!(km.fired(point), "{point} did not fire on ingest: {r:?}");
        let again = km.ingest(&[]);
        assert_eq!(again.code, 0, "redelivery: {again:?}");
    } else {
        let r = km.ingest(&[]);
        assert_eq!(r.code, 0, "{r:?}");
    }

    if point.starts_with("cancel.") {
        // Cancel while the developer works (it hangs until killed).
        let ok = poll(PHASE, Duration::from_millis(150), || {
            runs += 1;
            let mut c = km.cmd(&["tick"], &[]);
            c.env("STUB_HANG", "developer");
            Run::of(&mut c);
            km.count(
                "SELECT count(*) FROM jobs WHERE role = 'developer' AND status = 'running' \
                 AND agent_pgid IS NOT NULL",
            ) == 1
        });
        assert!(ok, "{point}: the developer never ran\n{}", km.diagnose());
        let r = km.run(&["cancel", WI], &armed);
        assert!(km.fired(point), "{point} did not fire on cancel: {r:?}");
    } else if !matches!(point, "ingest.after-route" | "gesture.before-launch") {
        let ok = poll(PHASE, Duration::from_millis(150), || {
            runs += 1;
            // The slow developer gives the running-job points time to be hit mid-run.
            let mut c = km.cmd(&["tick"], &armed);
            c.env("STUB_SLEEP", "0.3");
            Run::of(&mut c);
            km.move_main();
            km.fired(point)
        });
        assert!(ok, "{point} never fired\n{}", km.diagnose());
    }

    // Plain ticks until the world settles, then two more.
    let settled = poll(PHASE, Duration::from_millis(150), || {
        runs += 1;
        km.tick(&[]);
        km.settled(end)
    });
    for _ in 0..2 {
        runs += 1;
        km.tick(&[]);
    }

    let mut lost = Vec::new();
    let mut doubled = Vec::new();
    if !settled {
        lost.push(format!(
            "did not settle in `{end:?}` (stage `{}`)\n{}",
            km.stage(),
            km.diagnose()
        ));
    }
    // No hop twice.
    let twice = km.w.sql(
        "SELECT from_stage || '→' || to_stage || ' ×' || count(*) FROM transitions \
         WHERE outcome IN ('advanced', 'rolled-back', 'cancelled') AND from_stage != to_stage \
         GROUP BY task_id, from_stage, to_stage HAVING count(*) > 1",
    );
    if !twice.is_empty() {
        doubled.push(format!("hops: {twice}"));
    }
    // Every effect delivered.
    let undelivered =
        km.w.sql("SELECT id || ' ' || kind || ' ' || status FROM outbox WHERE status != 'done'");
    if !undelivered.is_empty() {
        lost.push(format!("outbox rows not delivered: {undelivered}"));
    }
    // Plane: each hop's state once and in order, each comment once.
    let issue = km.plane.issue(PLANE_PROJECT, ISSUE);
    for pair in issue.moves.windows(2) {
        if pair[0] == pair[1] {
            doubled.push(format!("plane state `{}` set twice in a row", pair[0]));
        }
    }
    let state_rows = km.count("SELECT count(*) FROM outbox WHERE kind = 'plane.state'");
    if (issue.moves.len() as i64) < state_rows.min(1) {
        lost.push("no plane state arrived".into());
    }
    let comment_rows = km.count("SELECT count(*) FROM outbox WHERE kind = 'plane.comment'");
    let mut ids: Vec<_> = issue
        .comments
        .iter()
        .map(|c| c.external_id.clone())
        .collect();
    ids.sort();
    ids.dedup();
    if ids.len() != issue.comments.len() {
        doubled.push("a plane comment posted twice".into());
    }
    if (issue.comments.len() as i64) != comment_rows {
        lost.push(format!(
            "{} plane comment(s) for {comment_rows} row(s)",
            issue.comments.len()
        ));
    }
    // Telegram: at most twice per row (no idempotency key).
    let tg_rows = km.count("SELECT count(*) FROM outbox WHERE kind = 'chat.message'");
    let tg_msgs = km.tg.messages().len() as i64;
    if tg_msgs > 2 * tg_rows {
        doubled.push(format!("{tg_msgs} telegram messages for {tg_rows} row(s)"));
    }
    if tg_msgs < tg_rows {
        lost.push(format!("{tg_msgs} telegram messages for {tg_rows} row(s)"));
    }
    // The deploy hook: exactly once where it ran, never twice anywhere.
    let hooks = km.hook_count();
    if !hook_runs(point).contains(&hooks) {
        let msg = format!(
            "the deploy hook ran {hooks} time(s), expected {:?}",
            hook_runs(point)
        );
        if hooks > *hook_runs(point).end() {
            doubled.push(msg);
        } else {
            lost.push(msg);
        }
    }
    // Done means merged (in the last-mile world): the branch head is in main, proven.
    if end == End::Done && point.starts_with("release.") {
        let branch = km.w.branch_of(WI);
        let head = crate::support::git(
            &km.w.remote,
            &["rev-parse", &format!("refs/heads/{branch}")],
        );
        let merged = std::process::Command::new("git")
            .arg("-C")
            .arg(&km.w.remote)
            .args(["merge-base", "--is-ancestor", &head, "refs/heads/main"])
            .status()
            .is_ok_and(|s| s.success());
        if !merged {
            lost.push(format!("`done` but {branch} is not in main"));
        }
    }
    // Nothing left behind (a task held in `deploy` keeps its merge lease for the human).
    let running = km.count("SELECT count(*) FROM jobs WHERE status = 'running'");
    let leases = km.count(
        "SELECT (SELECT count(*) FROM transition_lease) + (SELECT count(*) FROM merge_lease)",
    );
    let leases_allowed = if end == End::HeldUnknown { 1 } else { 0 };
    if running != 0 || leases > leases_allowed {
        lost.push(format!("left: {running} running job(s), {leases} lease(s)"));
    }
    let left = poll(Duration::from_secs(10), Duration::from_millis(100), || {
        km.w.pids().is_empty()
    });
    if !left {
        lost.push(format!("processes left: {:?}", km.w.procs()));
    }
    let fsck = km.run(&["fsck"], &[]);
    if fsck.code != 0 {
        lost.push(format!("fsck: {}", fsck.stdout));
    }
    // The work itself is on the branch: every role's commit once.
    if end == End::Done {
        let branch = km.w.branch_of(WI);
        let authors = crate::support::git(&km.w.remote, &["log", "--format=%an", &branch]);
        for role in [
            "orch-analyst",
            "orch-architect",
            "orch-developer",
            "orch-reviewer",
        ] {
            if !authors.lines().any(|a| a == role) {
                lost.push(format!("no commit by {role} on {branch}"));
            }
        }
    }
    Row {
        point: point.to_string(),
        runs,
        lost,
        doubled,
        seconds: started.elapsed().as_secs_f64(),
    }
}

#[test]
fn every_failpoint_loses_nothing_and_doubles_nothing() {
    let _alone = lanes::alone();
    let listed = World::new().orch(&["debug", "failpoints"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let mut points: Vec<String> = listed.stdout.lines().map(str::to_string).collect();
    assert!(points.len() >= 25, "{points:?}");
    // While working on one point: `ORCH_KM_ONLY=job.after-push cargo test kill_matrix`.
    if let Ok(only) = std::env::var("ORCH_KM_ONLY") {
        points.retain(|p| only.split(',').any(|o| o == p));
    }
    let mut rows = Vec::new();
    for p in &points {
        if let Some(test) = elsewhere(p) {
            println!("{p}: killed in {test}");
            continue;
        }
        rows.push(run_point(p));
    }
    let mut table = String::from(
        "| failpoint | ticks/commands | lost | doubled | seconds |\n|---|---|---|---|---|\n",
    );
    for r in &rows {
        table.push_str(&format!(
            "| `{}` | {} | {} | {} | {:.1} |\n",
            r.point,
            r.runs,
            r.lost.len(),
            r.doubled.len(),
            r.seconds
        ));
    }
    println!("{table}");
    let out = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("kill-matrix.txt");
    let _ = std::fs::write(out, &table);
    let bad: Vec<&Row> = rows
        .iter()
        .filter(|r| !r.lost.is_empty() || !r.doubled.is_empty())
        .collect();
    assert!(bad.is_empty(), "{table}\n{bad:#?}");
}
