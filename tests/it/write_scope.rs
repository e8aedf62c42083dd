//! Each role's write scope, enforced by orch whatever the agent CLI allows (here the stub, which
//! has no permissions at all): an analyst, architect, reviewer, tester or deployer job whose
//! changes touch anything outside its artifacts commits nothing, puts the worktree back and
//! fails naming the paths; a developer may change protected paths (CI configuration, another
//! stage's artifacts), and the history says so.

use crate::support::sched::{Cfg, DEADLINE, Sched, tick_until};
use crate::support::{World, git};

fn branch_files(w: &World, wi: &str) -> Vec<String> {
    let branch = w.branch_of(wi);
    if w.remote_head(&branch).is_none() {
        return Vec::new();
    }
    git(&w.remote, &["ls-tree", "-r", "--name-only", &branch])
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn an_analyst_that_writes_outside_its_artifacts_commits_nothing_and_fails_naming_the_paths() {
    let s = Sched::new(Cfg {
        max_attempts: 1,
        ..Cfg::default()
    });
    let wi = s.add("Stray analyst", &[]);
    let env = [("STUB_STRAY", "analyst:src/evil.sh")];
    tick_until(
        &s,
        &env,
        |s| s.job(&wi, "analyst").is_some_and(|j| j.status == "failed"),
        DEADLINE,
    );
    let err = s.job_error(s.job(&wi, "analyst").unwrap().id);
    assert!(
        err.contains("outside its write scope") && err.contains("`src/evil.sh`"),
        "{err}"
    );
    assert!(
        !err.contains("`docs/work-items/"),
        "its own artifacts are in scope: {err}"
    );
    let files = branch_files(&s, &wi);
    assert!(
        !files
            .iter()
            .any(|f| f.contains("evil") || f.ends_with("01-brd.md")),
        "nothing of the run was committed: {files:?}"
    );
    let wt = s.state_dir().join(format!("repos/_wt/shop/{wi}"));
    if wt.exists() {
        assert!(
            !wt.join("src/evil.sh").exists(),
            "the worktree was put back"
        );
        assert_eq!(git(&wt, &["status", "--porcelain"]), "", "clean");
    }
}

#[test]
fn a_reviewer_that_edits_the_code_commits_nothing() {
    let s = Sched::new(Cfg {
        max_attempts: 1,
        ..Cfg::default()
    });
    let wi = s.add("Stray reviewer", &[]);
    let env = [("STUB_STRAY", "reviewer:src/stub_shop-1.txt")];
    tick_until(
        &s,
        &env,
        |s| s.job(&wi, "reviewer").is_some_and(|j| j.status == "failed"),
        DEADLINE,
    );
    let err = s.job_error(s.job(&wi, "reviewer").unwrap().id);
    assert!(err.contains("`src/stub_shop-1.txt`"), "{err}");
    assert_eq!(s.stage_of(&wi), "review");
    let branch = s.branch_of(&wi);
    let code = git(
        &s.remote,
        &["show", &format!("{branch}:src/stub_shop-1.txt")],
    );
    assert!(
        !code.contains("stray"),
        "the developer's code stands: {code}"
    );
}

#[test]
fn a_developer_change_to_ci_config_is_committed_and_recorded() {
    let s = Sched::new(Cfg::default());
    let wi = s.add("CI change", &[]);
    let env = [
        ("STUB_EXTRA_FILE", ".github/workflows/ci.yml"),
        ("STUB_EXTRA_TEXT", "on: push"),
    ];
    tick_until(
        &s,
        &env,
        |s| s.stage_of(&wi) == "review" || s.stage_of(&wi) == "testing",
        DEADLINE,
    );
    assert!(branch_files(&s, &wi).contains(&".github/workflows/ci.yml".to_string()));
    let rows = s.sql(
        "SELECT outcome || ' ' || reason FROM transitions WHERE outcome = 'checked' ORDER BY id",
    );
    assert!(
        rows.contains("`.github/workflows/ci.yml` (CI configuration)"),
        "the history names it: {rows}"
    );
}
