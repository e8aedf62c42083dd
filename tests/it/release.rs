//! The last mile (design §7) end to end, on real git, the stub agent and real ticks: the
//! `deploy-staging → deploy` sub-gates (secret scan, merge gate with the merge lease, rebase,
//! push and re-test, coverage), the deploy hook, the merge into `origin/main` with its proof
//! (git mode, and Gitea mode against the fake forge), and the post-deploy watch.

use std::path::{Path, PathBuf};

use crate::support::git;
use crate::support::sched::{Cfg, DEADLINE, Sched, tick_until};

/// A `Sched` world whose repo `shop` opts into the last mile; `extra` adds lines to its entry.
struct Rel {
    s: Sched,
    /// Each line is one run of the deploy hook.
    hook_runs: PathBuf,
    /// Each line is one run of the test suite.
    suite_runs: PathBuf,
}

impl std::ops::Deref for Rel {
    type Target = Sched;
    fn deref(&self) -> &Sched {
        &self.s
    }
}

fn q(p: &Path) -> String {
    serde_json::to_string(&p.display().to_string()).unwrap()
}

impl Rel {
    fn new(extra: &str) -> Rel {
        Self::with(extra, Cfg::default())
    }

    fn with(extra: &str, mut cfg: Cfg) -> Rel {
        let s = Sched::new(Cfg::default());
        let dir = s.dir.path().to_path_buf();
        let hook_runs = dir.join("hook-runs");
        let suite_runs = dir.join("suite-runs");
        let hook = s.script(
            "deploy-hook.sh",
            &format!(
                "echo \"deploy $ORCH_WORK_ITEM $ORCH_DEPLOY_SHA\" >> {}\nsleep ${{HOOK_SLEEP:-0}}\nexit ${{HOOK_EXIT:-0}}",
                q(&hook_runs)
            ),
        );
        // The suite: green unless main's `src/lib.txt` says BREAK.
        let suite = s.script(
            "suite.sh",
            &format!(
                "echo run >> {}\nif grep -q BREAK src/lib.txt; then echo 'FAILED: lib broke' >&2; exit 1; fi\necho '3 passed'",
                q(&suite_runs)
            ),
        );
        let mut lines = format!(
            "    tests: {{argv: [\"/bin/sh\", {}], timeout_s: 60}}\n\
             \x20   deploy: {{mode: hook, require_confirm: false, argv: [\"/bin/sh\", {}], timeout_s: 60}}\n",
            q(&suite),
            q(&hook)
        );
        for l in extra.lines() {
            lines.push_str("    ");
            lines.push_str(l);
            lines.push('\n');
        }
        lines.push_str(&cfg.extra_repos);
        cfg.extra_repos = lines;
        s.configure(&cfg);
        Rel {
            s,
            hook_runs,
            suite_runs,
        }
    }

    fn lines(p: &Path) -> usize {
        std::fs::read_to_string(p)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    fn hook_count(&self) -> usize {
        Self::lines(&self.hook_runs)
    }

    fn suite_count(&self) -> usize {
        Self::lines(&self.suite_runs)
    }

    /// Push a commit to the remote's main from the scratch clone.
    fn push_main(&self, file: &str, text: &str) -> String {
        let sc = &self.scratch;
        git(sc, &["fetch", "-q", "origin"]);
        git(sc, &["checkout", "-q", "-B", "main", "origin/main"]);
        let path = sc.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        git(sc, &["add", "-A"]);
        git(sc, &["commit", "-qm", &format!("main: {file}")]);
        git(sc, &["push", "-q", "origin", "main"]);
        git(sc, &["rev-parse", "HEAD"])
    }

    fn main_has(&self, rev: &str) -> bool {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&self.remote)
            .args(["merge-base", "--is-ancestor", rev, "refs/heads/main"])
            .status()
            .unwrap()
            .success()
    }

    fn main_file(&self, file: &str) -> Option<String> {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&self.remote)
            .args(["show", &format!("refs/heads/main:{file}")])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn steps(&self, wi: &str) -> String {
        self.sql(&format!(
            "SELECT s.stage || ' ' || s.step || ' ' || s.status FROM release_steps s \
             JOIN tasks t ON t.id = s.task_id WHERE t.base_work_item = '{wi}' ORDER BY s.id"
        ))
    }

    fn history(&self, wi: &str) -> String {
        self.sql(&format!(
            "SELECT r.from_stage || '→' || r.to_stage || ' ' || r.outcome || ': ' || r.reason \
             FROM transitions r JOIN tasks t ON t.id = r.task_id WHERE t.work_item = '{wi}' \
             ORDER BY r.id"
        ))
    }

    fn drive(&self, wi: &str, stage: &str) {
        self.drive_with(&[], wi, stage);
    }

    /// Tick with `env` until `wi` is in `stage`.
    fn drive_with(&self, env: &[(&str, &str)], wi: &str, stage: &str) {
        let wi = wi.to_string();
        let stage = stage.to_string();
        tick_until(self, env, move |w| w.stage_of(&wi) == stage, DEADLINE * 2);
    }

    /// Tick (with `env`) until `wi` has been rolled back once from `deploy-staging` (to `to`,
    /// when given).
    fn drive_to_rollback(&self, env: &[(&str, &str)], wi: &str, to: Option<&str>) {
        let to = to.map_or(String::new(), |s| format!(" AND r.to_stage = '{s}'"));
        let sql = format!(
            "SELECT count(*) FROM transitions r JOIN tasks t ON t.id = r.task_id \
             WHERE t.work_item = '{wi}' AND r.from_stage = 'deploy-staging'{to} \
             AND r.outcome = 'rolled-back'"
        );
        tick_until(self, env, move |w| w.sql(&sql) == "1", DEADLINE * 2);
    }

    /// The prompt of the task's latest developer job.
    fn last_developer_prompt(&self, wi: &str) -> String {
        self.sql(&format!(
            "SELECT j.prompt FROM jobs j JOIN tasks t ON t.id = j.task_id WHERE t.work_item = '{wi}' \
             AND j.role = 'developer' ORDER BY j.id DESC LIMIT 1"
        ))
    }
}

#[test]
fn a_task_reaches_done_with_its_code_in_main_and_its_worktree_gone() {
    let w = Rel::new("merge: {mode: git, style: rebase}");
    let wi = w.add("Ship the greeting", &[]);
    w.drive(&wi, "done");
    let branch = w.branch_of(&wi);
    let head = git(&w.remote, &["rev-parse", &format!("refs/heads/{branch}")]);
    assert!(
        w.main_has(&head),
        "the branch head is not in main\n{}",
        w.history(&wi)
    );
    let code = format!("src/stub_{}.txt", wi.to_lowercase());
    assert!(w.main_file(&code).is_some(), "{code} is not in main");
    // Every step ran once, in order, and the hook exactly once.
    assert_eq!(
        w.steps(&wi),
        "deploy-staging security pass\ndeploy-staging merge-gate pass\n\
         deploy deploy-hook pass\ndeploy merge pass",
        "{}",
        w.history(&wi)
    );
    assert_eq!(w.hook_count(), 1);
    assert!(
        !w.history(&wi).contains("stage-cas-lost"),
        "{}",
        w.history(&wi)
    );
    // Reports on the branch (and so in main): the scan, the merge gate, the deploy log.
    for f in [
        "17-security-report.md",
        "19-merge-gate.md",
        "14-deploy-log.md",
    ] {
        let t = w
            .main_file(&format!("docs/work-items/{wi}/{f}"))
            .unwrap_or_else(|| panic!("{f} not in main"));
        assert!(t.starts_with("---\n"), "{f}: {t}");
    }
    // The worktree goes with the next tick, and the lease with `done`.
    w.tick(&[]);
    let wt = w.state_dir().join("repos/_wt/shop").join(&wi);
    assert!(!wt.exists(), "{} still exists", wt.display());
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "0");
    let fsck = w.orch(&["fsck"]);
    assert_eq!(fsck.code, 0, "{fsck:?}");
}

#[test]
fn a_commit_pushed_to_main_meanwhile_is_rebased_over_and_re_tested() {
    let w = Rel::new("merge: {mode: git, style: merge}");
    let wi = w.add("Ship the greeting", &[]);
    w.drive(&wi, "testing");
    let other = w.push_main("src/other.txt", "someone else's change\n");
    let suites_before = w.suite_count();
    w.drive(&wi, "done");
    assert!(w.main_has(&other), "the other commit left main");
    let code = format!("src/stub_{}.txt", wi.to_lowercase());
    assert!(w.main_file(&code).is_some(), "{code} is not in main");
    assert!(w.main_file("src/other.txt").is_some());
    // The merge gate rebased and ran the suite again on the rebased head.
    let gate = w
        .main_file(&format!("docs/work-items/{wi}/19-merge-gate.md"))
        .unwrap();
    assert!(gate.contains("merge_gate_status: PASS"), "{gate}");
    assert!(gate.contains(&format!("base: {other}")), "{gate}");
    assert!(
        w.suite_count() > suites_before,
        "no re-test after the rebase\n{}",
        w.history(&wi)
    );
    // merge style: a merge commit on main whose second parent is the branch.
    let parents = git(
        &w.remote,
        &["rev-list", "--parents", "-n", "1", "refs/heads/main"],
    );
    assert_eq!(parents.split_whitespace().count(), 3, "{parents}");
}

#[test]
fn a_conflicting_main_rolls_back_with_the_paths_named() {
    let w = Rel::new("merge: {mode: git}");
    let wi = w.add("Ship the greeting", &[]);
    w.drive(&wi, "testing");
    let path = format!("src/stub_{}.txt", wi.to_lowercase());
    w.push_main(&path, "main's own version of this file\n");
    w.drive_to_rollback(&[], &wi, Some("development"));
    let h = w.history(&wi);
    assert!(h.contains("merge gate failed"), "{h}");
    // The next developer prompt names the conflicting path.
    let prompt = w.last_developer_prompt(&wi);
    assert!(prompt.contains(&path), "{prompt}");
    assert!(prompt.contains("conflicts"), "{prompt}");
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "0", "{h}");
    assert_eq!(w.hook_count(), 0, "deployed after a failed merge gate");
}

#[test]
fn a_planted_private_key_fails_the_security_gate() {
    let w = Rel::new("merge: {mode: git}");
    let wi = w.add("Ship the greeting", &[]);
    let env = [
        ("STUB_EXTRA_FILE", "config/deploy.pem"),
        (
            "STUB_EXTRA_TEXT",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7s3cr3tK3yM4teri4l\n-----END RSA PRIVATE KEY-----",
        ),
    ];
    w.drive_to_rollback(&env, &wi, None);
    let h = w.history(&wi);
    assert!(h.contains("security scan failed"), "{h}");
    let prompt = w.last_developer_prompt(&wi);
    assert!(
        prompt.contains("config/deploy.pem:1: private key"),
        "{prompt}"
    );
    // The report names file and line, never the value.
    let branch = w.branch_of(&wi);
    let report = git(
        &w.remote,
        &[
            "show",
            &format!("refs/heads/{branch}:docs/work-items/{wi}/17-security-report.md"),
        ],
    );
    assert!(report.contains("security_status: FAIL"), "{report}");
    assert!(!report.contains("MIIEowIBAAKCAQEA"), "{report}");
    assert!(!prompt.contains("MIIEowIBAAKCAQEA"), "{prompt}");
    assert_eq!(w.hook_count(), 0);
}

const GITEA_TOKEN: &str = "gitea-token-REL";

/// A `Rel` world whose repo merges through the fake Gitea, which merges into the world's bare
/// remote.
fn gitea_world() -> (Rel, crate::support::fakes::Gitea) {
    let gitea = crate::support::fakes::Gitea::start(GITEA_TOKEN);
    let w = Rel::new("merge: {mode: gitea, style: rebase}\nforge_repo: team/shop");
    w.append_config(&format!(
        "forge: {{kind: gitea, base_url: {:?}, token_env: ORCH_REL_GITEA_TOKEN}}",
        gitea.url()
    ));
    gitea
        .data
        .lock()
        .unwrap()
        .remotes
        .insert("team/shop".into(), w.remote.clone());
    (w, gitea)
}

const GITEA_ENV: [(&str, &str); 1] = [("ORCH_REL_GITEA_TOKEN", GITEA_TOKEN)];

#[test]
fn gitea_answers_502_then_200_and_the_pull_request_is_merged_once() {
    let (w, gitea) = gitea_world();
    gitea.data.lock().unwrap().merge_script.push_back(502);
    let wi = w.add("Ship the greeting", &[]);
    // The code's pull request is opened when it goes to review, not at the merge.
    w.drive_with(&GITEA_ENV, &wi, "testing");
    let opened = gitea.data.lock().unwrap().pulls_created;
    w.drive_with(&GITEA_ENV, &wi, "done");
    let d = gitea.data.lock().unwrap();
    assert_eq!(opened, 1, "no pull request opened at review");
    assert_eq!(d.pulls_created, 1, "a second pull request");
    assert_eq!(d.merges, 1, "{} merges", d.merges);
    assert_eq!(d.merge_calls, 2, "502, then the merge");
    let branch = w.branch_of(&wi);
    let head = git(&w.remote, &["rev-parse", &format!("refs/heads/{branch}")]);
    assert!(w.main_has(&head));
    let h = w.history(&wi);
    assert!(
        h.contains("deploy→done advanced") && h.contains("merge into main:"),
        "{h}"
    );
    assert!(!h.contains("stage-cas-lost"), "{h}");
}

#[test]
fn a_merge_the_forge_reports_but_main_lacks_holds_the_task() {
    let (w, gitea) = gitea_world();
    gitea.data.lock().unwrap().merge_lies = true;
    let wi = w.add("Ship the greeting", &[]);
    let wi2 = wi.clone();
    tick_until(
        &w,
        &GITEA_ENV,
        move |w| {
            w.sql(&format!(
                "SELECT held_at IS NOT NULL FROM tasks WHERE work_item = '{wi2}'"
            )) == "1"
        },
        DEADLINE * 2,
    );
    assert_eq!(w.stage_of(&wi), "deploy", "{}", w.history(&wi));
    let why = w.sql(&format!(
        "SELECT held_reason FROM tasks WHERE work_item = '{wi}'"
    ));
    assert!(why.contains("deployed but not merged"), "{why}");
    assert_eq!(w.hook_count(), 1, "the deploy ran once");
    // It stays held: more ticks neither merge nor advance it.
    for _ in 0..5 {
        w.tick(&GITEA_ENV);
    }
    assert_eq!(w.stage_of(&wi), "deploy");
    assert_eq!(gitea.data.lock().unwrap().merge_calls, 1);
    let alert = w.sql("SELECT count(*) FROM lessons WHERE kind = 'held'");
    assert_ne!(alert, "0");
}

#[test]
fn coverage_below_the_baseline_fails_and_a_higher_figure_raises_it_once() {
    let w = Rel::new("merge: {mode: git}");
    let figure = w.dir.path().join("coverage.txt");
    let cov = w.script("coverage.sh", &format!("cat {}", q(&figure)));
    // Re-write the repo entry with the coverage contract.
    let text = std::fs::read_to_string(&w.config).unwrap().replace(
        "    merge: {mode: git}\n",
        &format!(
            "    merge: {{mode: git}}\n    coverage: {{argv: [\"/bin/sh\", {}], floor: 50.0, ratchet: true, epsilon: 0.1}}\n",
            q(&cov)
        ),
    );
    std::fs::write(&w.config, text).unwrap();
    std::fs::write(&figure, "lines 80.1%\nTOTAL 81.50%\n").unwrap();
    let wi = w.add("Ship the greeting", &[]);
    w.sql("INSERT INTO coverage_baseline (repo, percent, updated_at) VALUES ('shop', 85.0, 0)");
    w.drive_to_rollback(&[], &wi, None);
    let h = w.history(&wi);
    assert!(h.contains("coverage failed"), "{h}");
    assert!(h.contains("below the baseline 85.00%"), "{h}");
    assert_eq!(w.sql("SELECT percent FROM coverage_baseline"), "85");
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "0");
    // A better figure passes, and the baseline moves up once the merge is proven.
    std::fs::write(&figure, "TOTAL 90.25%\n").unwrap();
    w.drive(&wi, "done");
    assert_eq!(w.sql("SELECT percent FROM coverage_baseline"), "90.25");
    assert_eq!(
        w.sql("SELECT count(*) FROM lessons WHERE kind = 'coverage-baseline'"),
        "1"
    );
    let report = w
        .main_file(&format!("docs/work-items/{wi}/18-coverage-report.md"))
        .unwrap();
    assert!(report.contains("coverage_status: PASS"), "{report}");
    assert!(report.contains("coverage_percent: 90.25"), "{report}");
}

#[test]
fn two_tasks_of_one_repo_never_hold_the_merge_lease_together() {
    let w = Rel::with(
        "merge: {mode: git, defer_s: 1}",
        Cfg {
            serial_gate: false,
            ..Cfg::default()
        },
    );
    let a = w.add("First change", &[]);
    let b = w.add("Second change", &[]);
    let mut holders = std::collections::BTreeSet::new();
    let env = [("HOOK_SLEEP", "4")];
    let mut ticks = 0;
    let ok = crate::support::poll(DEADLINE * 3, std::time::Duration::from_millis(200), || {
        ticks += 1;
        w.tick(&env);
        let rows = w.sql("SELECT t.work_item FROM merge_lease m JOIN tasks t ON t.id = m.task_id");
        assert!(rows.lines().count() <= 1, "two merge leases: {rows}");
        if !rows.is_empty() {
            holders.insert(rows);
        }
        w.stage_of(&a) == "done" && w.stage_of(&b) == "done"
    });
    assert!(
        ok,
        "not both done after {ticks} ticks\n{}\n{}",
        w.history(&a),
        w.history(&b)
    );
    assert_eq!(holders.len(), 2, "{holders:?}");
    let both = format!("{}\n{}", w.history(&a), w.history(&b));
    assert!(
        both.contains("merge lease of `shop` held by SHOP-"),
        "neither task waited for the lease:\n{both}"
    );
    for wi in [&a, &b] {
        let code = format!("src/stub_{}.txt", wi.to_lowercase());
        assert!(w.main_file(&code).is_some(), "{code} not in main");
    }
    assert_eq!(w.hook_count(), 2);
}

#[test]
fn a_failing_health_endpoint_after_the_deploy_freezes_the_repo() {
    let health = crate::support::fake_http::Server::start(|_| {
        crate::support::fake_http::Reply::text(500, "boom")
    });
    let w = Rel::new(&format!(
        "merge: {{mode: git}}\npost_deploy: {{urls: [{{url: \"{}/health\"}}], interval_s: 1, window_s: 4, fail_threshold: 2, error_ratio: 0.5}}",
        health.url()
    ));
    let wi = w.add("Ship the greeting", &[]);
    w.drive(&wi, "done");
    let ok = crate::support::poll(DEADLINE, std::time::Duration::from_millis(200), || {
        w.tick(&[]);
        w.sql("SELECT count(*) FROM repo_freeze") == "1"
    });
    assert!(ok, "the repo was not frozen\n{}", w.history(&wi));
    let reason = w.sql("SELECT reason FROM repo_freeze");
    assert!(reason.contains("DEGRADED"), "{reason}");
    let log = std::fs::read_to_string(
        w.state_dir()
            .join("artifacts")
            .join(&wi)
            .join("16-post-deploy-log.md"),
    )
    .unwrap();
    assert!(log.contains("post_deploy_status: DEGRADED"), "{log}");
    assert!(log.contains("status 500"), "{log}");
    // The next task waits for a human.
    let next = w.add("After the incident", &[]);
    w.tick(&[]);
    let why = w.orch(&["why", &next]);
    assert!(why.stdout.contains("frozen"), "{why:?}");
}

#[test]
fn a_merge_job_killed_after_asking_the_forge_merges_once() {
    let (w, gitea) = gitea_world();
    let log = w.dir.path().join("failpoints.log");
    let wi = w.add("Ship the greeting", &[]);
    // Ticks whose supervisors die right after queuing the forge merge, until one did.
    let mut env: Vec<(&str, &str)> = GITEA_ENV.to_vec();
    let log_s = log.display().to_string();
    env.push(("ORCH_FAILPOINT", "release.before-forge-merge"));
    env.push(("ORCH_FAILPOINT_LOG", &log_s));
    let fired = crate::support::poll(DEADLINE * 2, std::time::Duration::from_millis(200), || {
        w.tick_with(&env, &[]);
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("release.before-forge-merge"))
    });
    assert!(fired, "the failpoint never fired\n{}", w.history(&wi));
    w.drive_with(&GITEA_ENV, &wi, "done");
    let d = gitea.data.lock().unwrap();
    assert_eq!(d.merges, 1, "merged {} times", d.merges);
    assert_eq!(d.merge_calls, 1);
    assert_eq!(w.hook_count(), 1);
    assert_eq!(
        w.sql("SELECT count(*) FROM outbox WHERE kind = 'forge.merge_pr'"),
        "1"
    );
}

#[test]
fn a_cancel_while_the_hook_runs_waits_for_it_to_end() {
    let w = Rel::new("merge: {mode: git}");
    let wi = w.add("Ship the greeting", &[]);
    let env = [("HOOK_SLEEP", "3")];
    let started = crate::support::poll(DEADLINE * 2, std::time::Duration::from_millis(150), || {
        w.tick(&env);
        w.hook_count() == 1
    });
    assert!(started, "the hook never started\n{}", w.history(&wi));
    let r = w.orch(&["cancel", &wi]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stdout.contains("recorded"), "{r:?}");
    // The hook finishes its run; then the cancel applies.
    let wi2 = wi.clone();
    tick_until(
        &w,
        &env,
        move |w| {
            w.sql(&format!(
                "SELECT stage FROM tasks WHERE base_work_item = '{wi2}' ORDER BY id DESC LIMIT 1"
            )) == "cancelled"
        },
        DEADLINE,
    );
    let log = std::fs::read_to_string(
        w.state_dir()
            .join("logs")
            .join(format!("deploy-hook-{wi}.log")),
    )
    .unwrap_or_default();
    let steps = w.steps(&wi);
    assert!(
        steps.contains("deploy deploy-hook pass"),
        "the hook was cut short: {steps}\n{log}"
    );
    assert_eq!(w.hook_count(), 1);
    assert_eq!(w.sql("SELECT count(*) FROM merge_lease"), "0");
}
