//! A task walked through the pipeline by hand, the way an operator (or a runbook) drives it with
//! `orch advance`, `orch approve`, `orch pause`, `orch cancel`: every gate, every rollback, the
//! block at the retry cap, the override ledger, and the history `orch task show` prints.

use crate::support::{self, World, jobs, transitions};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn last_job(v: &Value) -> &Value {
    jobs(v).last().expect("the task has a job")
}

fn queued_jobs(v: &Value) -> Vec<&Value> {
    jobs(v).iter().filter(|j| j["status"] == "queued").collect()
}

fn artifact<'a>(v: &'a Value, file: &str) -> &'a Value {
    v["artifacts"]
        .as_array()
        .expect("artifacts is an array")
        .iter()
        .find(|a| a["file"] == file)
        .unwrap_or_else(|| panic!("no artifact `{file}` in {:#}", v["artifacts"]))
}

fn transition_count(w: &World) -> String {
    w.sql("SELECT count(*) FROM transitions")
}

/// A review file exactly as pushed, so its sha256 can be computed by the test.
fn review_body(wi: &str, verdict: &str, findings: &str, run: u32) -> String {
    format!(
        "---\nverdict: {verdict}\nwork_item: {wi}\nstage: review\nrun_id: {run}\n---\n# Review\n\n## Findings\n{findings}\n"
    )
}

fn push_review_body(w: &World, wi: &str, body: &str) {
    w.push_files(wi, &[(&format!("docs/work-items/{wi}/12-review.md"), body)]);
}

#[test]
fn a_task_walks_by_hand_from_created_to_done() {
    let w = World::new();
    let wi = w.add("Add a health endpoint", &[]);
    assert_eq!(wi, "SHOP-1");
    let branch = w.branch_of(&wi);

    // Analysis: the files alone are not enough, a human must approve.
    w.push_analysis(&wi);
    let r = w.advance(&wi, 3);
    assert_eq!(r["outcome"], "not-satisfied", "{r:#}");
    assert_eq!(r["to"], "analysis");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("approval") && reason.contains("orch approve SHOP-1"),
        "the reason names the missing approval: {reason}"
    );
    assert_eq!(w.stage(&wi), "analysis");

    let r = w.ok(&["approve", &wi, "--json"], 0).json();
    assert_eq!(r["advance"]["outcome"], "advanced", "{r:#}");
    assert_eq!(r["advance"]["to"], "architecture");
    assert_eq!(w.stage(&wi), "architecture");

    // Architecture → development enqueues the developer.
    w.push_adr(&wi);
    let r = w.advance(&wi, 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["from"], "architecture");
    assert_eq!(r["to"], "development");
    let job = r["enqueued_job"]
        .as_i64()
        .unwrap_or_else(|| panic!("a developer job is enqueued: {r:#}"));
    let s = w.show(&wi);
    assert_eq!(s["stage"], "development");
    let last = last_job(&s);
    assert_eq!(last["id"], job);
    assert_eq!(last["role"], "developer");
    assert_eq!(last["status"], "queued");
    assert_eq!(
        queued_jobs(&s).len(),
        1,
        "only the developer is queued: {s:#}"
    );

    // Development: no code yet.
    let r = w.advance(&wi, 3);
    assert_eq!(r["outcome"], "not-satisfied", "{r:#}");
    assert!(
        r["reason"].as_str().unwrap().contains("docs/work-items/"),
        "{r:#}"
    );
    assert_eq!(w.stage(&wi), "development");

    w.push_code(&wi, "health endpoint");
    let r = w.advance(&wi, 0);
    assert_eq!(r["to"], "review", "{r:#}");
    assert!(
        !r["enqueued_job"].is_null(),
        "a reviewer is enqueued: {r:#}"
    );
    assert_eq!(last_job(&w.show(&wi))["role"], "reviewer");

    w.push_review(&wi, "APPROVED", "- none", 1);
    let r = w.advance(&wi, 0);
    assert_eq!(r["to"], "testing", "{r:#}");
    assert_eq!(last_job(&w.show(&wi))["role"], "tester");

    // Testing PASS walks through the N/A stages to done in one call.
    w.push_test_report(&wi, "PASS", "test result: ok. 3 passed", 1);
    let r = w.advance(&wi, 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["from"], "testing");
    assert_eq!(r["to"], "done");
    assert!(r["enqueued_job"].is_null(), "done enqueues nothing: {r:#}");

    let s = w.show(&wi);
    assert_eq!(s["stage"], "done");
    let hops: Vec<(String, String)> = transitions(&s)
        .iter()
        .filter(|t| t["outcome"] == "advanced")
        .map(|t| {
            (
                t["from"].as_str().unwrap().to_string(),
                t["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("created", "analysis"),
        ("analysis", "architecture"),
        ("architecture", "development"),
        ("development", "review"),
        ("review", "testing"),
        ("testing", "deploy-staging"),
        ("deploy-staging", "deploy"),
        ("deploy", "done"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(hops, expected, "every hop, oldest first");
    let hop = |from: &str, to: &str| -> &Value {
        transitions(&s)
            .iter()
            .find(|t| t["from"] == from && t["to"] == to && t["outcome"] == "advanced")
            .unwrap()
    };
    let staging = hop("deploy-staging", "deploy")["reason"].as_str().unwrap();
    assert!(staging.contains("staging N/A"), "{staging}");
    let merge = hop("deploy", "done")["reason"].as_str().unwrap();
    assert!(merge.contains("merge: not configured"), "{merge}");
    // The gestures and refusals are in the history too, in order.
    let outcomes: Vec<&str> = transitions(&s)
        .iter()
        .map(|t| t["outcome"].as_str().unwrap())
        .collect();
    let first_approved = outcomes.iter().position(|o| *o == "approved").unwrap();
    let first_not = outcomes.iter().position(|o| *o == "not-satisfied").unwrap();
    assert!(first_not < first_approved, "{outcomes:?}");

    let review = artifact(&s, "12-review.md");
    assert_eq!(review["present"], true);
    assert_eq!(review["key"], "verdict");
    assert_eq!(review["value"], "APPROVED");
    assert_eq!(artifact(&s, "13-test-report.md")["present"], true);
    assert_eq!(artifact(&s, "01-brd.md")["present"], true);

    // The work stays on the task branch of the remote.
    let remote = w.remote.to_str().unwrap();
    let refs = support::git(
        &w.scratch,
        &["ls-remote", remote, &format!("refs/heads/{branch}")],
    );
    assert!(
        refs.ends_with(&format!("refs/heads/{branch}")),
        "branch `{branch}` is on the remote: {refs:?}"
    );

    // Nothing is left queued for it; every superseded job counts as finished (cancelled).
    let q = w.ok(&["queue", "--json"], 0).json();
    let queued = q["queued"].as_array().expect("queued is an array");
    assert!(
        queued.iter().all(|j| j["work_item"] != wi.as_str()),
        "no queued job for a done task: {q:#}"
    );
    assert_eq!(q["counts"]["queued"], 0, "{q:#}");
    assert_eq!(q["counts"]["running"], 0, "{q:#}");
    let superseded = jobs(&s)
        .iter()
        .filter(|j| j["status"] == "cancelled")
        .count();
    assert_eq!(
        superseded,
        jobs(&s).len(),
        "every job of a done task is closed: {s:#}"
    );
    assert_eq!(
        jobs(&s).len(),
        5,
        "analyst, architect, developer, reviewer, tester"
    );
    assert_eq!(q["counts"]["cancelled"], superseded as u64, "{q:#}");
    assert!(
        q["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["work_item"] != wi.as_str()),
        "a done task is not active: {q:#}"
    );
    // The plain-text queue renders the same counts.
    let plain = w.ok(&["queue"], 0);
    assert!(plain.stdout.contains("cancelled 5"), "{plain:?}");

    // A finished task cannot be advanced further.
    let r = w.ok(&["advance", &wi], 2);
    assert!(r.stderr.contains("already `done`"), "{r:?}");
}

#[test]
fn request_changes_rolls_back_with_findings_in_the_prompt() {
    let w = World::new();
    let wi = w.walk_to_review("Parse orders");
    w.push_review(
        &wi,
        "REQUEST_CHANGES",
        "- P0: null check missing in parse\n- P2: rename x\n- P1: add a test for empty input",
        1,
    );
    let r = w.advance(&wi, 3);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    assert_eq!(r["to"], "development");
    let new_job = r["enqueued_job"].as_i64().expect("a developer job");

    let s = w.show(&wi);
    assert_eq!(s["stage"], "development");
    assert_eq!(s["dev_retries"], 1);
    let job = last_job(&s);
    assert_eq!(job["id"], new_job);
    assert_eq!(job["role"], "developer");
    assert_eq!(job["status"], "queued");
    let prompt = job["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("P0: null check missing in parse"),
        "{prompt}"
    );
    assert!(
        prompt.contains("P1: add a test for empty input"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("P2: rename x"),
        "P2 items stay out: {prompt}"
    );
    assert!(
        prompt.contains(&format!("docs/work-items/{wi}/12-review.md")),
        "{prompt}"
    );
    assert_eq!(
        queued_jobs(&s).len(),
        1,
        "the reviewer job is superseded: {s:#}"
    );
    let rb = transitions(&s).last().unwrap();
    assert_eq!(rb["outcome"], "rolled-back");
    assert_eq!(rb["from"], "review");
    assert_eq!(rb["to"], "development");

    // Next round: the old REQUEST_CHANGES must not decide it.
    w.push_code(&wi, "null check added");
    let r = w.advance(&wi, 0);
    assert_eq!(r["to"], "review", "{r:#}");
    let r = w.advance(&wi, 3);
    assert_eq!(r["outcome"], "not-satisfied", "{r:#}");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("has not been rewritten since"),
        "{r:#}"
    );
    assert_eq!(w.stage(&wi), "review");
    assert_eq!(
        w.show(&wi)["dev_retries"],
        1,
        "a stale verdict spends nothing"
    );

    w.push_review(&wi, "APPROVED", "- none", 2);
    let r = w.advance(&wi, 0);
    assert_eq!(r["to"], "testing", "{r:#}");
}

#[test]
fn the_fourth_verdict_failure_blocks_the_task() {
    let w = World::new();
    let wi = w.walk_to_review("Flaky reviewer");
    let mut run = 0;
    for round in 1..=3u32 {
        run += 1;
        let body = review_body(&wi, "REQUEST_CHANGES", "- P0: still wrong", run);
        push_review_body(&w, &wi, &body);
        let r = w.advance(&wi, 3);
        assert_eq!(r["outcome"], "rolled-back", "round {round}: {r:#}");
        assert_eq!(w.show(&wi)["dev_retries"], round);
        w.push_code(&wi, &format!("round {round}"));
        let r = w.advance(&wi, 0);
        assert_eq!(r["to"], "review", "round {round}: {r:#}");
    }

    // The fourth failure: blocked, stays in review, nothing enqueued.
    run += 1;
    let fourth = review_body(&wi, "REQUEST_CHANGES", "- P0: still wrong", run);
    push_review_body(&w, &wi, &fourth);
    let jobs_before = jobs(&w.show(&wi)).len();
    let r = w.advance(&wi, 5);
    assert_eq!(r["outcome"], "blocked", "{r:#}");
    assert!(r["enqueued_job"].is_null(), "{r:#}");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "review");
    assert!(s["blocked_at"].is_string(), "{s:#}");
    assert!(
        s["blocked_reason"]
            .as_str()
            .unwrap()
            .contains("retries exhausted"),
        "{s:#}"
    );
    assert_eq!(s["dev_retries"], 3);
    assert_eq!(jobs(&s).len(), jobs_before, "no new job: {s:#}");
    assert!(
        queued_jobs(&s).is_empty(),
        "nothing queued for a blocked task: {s:#}"
    );

    let why = w.ok(&["why", &wi, "--json"], 0).json();
    assert_eq!(why["waits_for"], "blocked", "{why:#}");
    assert!(
        why["paragraph"].as_str().unwrap().contains("Blocked"),
        "{why:#}"
    );

    let r = w.advance(&wi, 5);
    assert_eq!(r["outcome"], "blocked", "{r:#}");
    assert_eq!(w.stage(&wi), "review");

    // The operator unblocks it; the retry count is kept.
    let r = w
        .ok(
            &[
                "advance",
                &wi,
                "--to",
                "development",
                "--reason",
                "fixed flaky reviewer",
                "--json",
            ],
            0,
        )
        .json();
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["to"], "development");
    assert!(!r["enqueued_job"].is_null(), "a developer job: {r:#}");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "development");
    assert!(s["blocked_at"].is_null(), "{s:#}");
    assert!(s["blocked_reason"].is_null(), "{s:#}");
    assert_eq!(s["dev_retries"], 3, "the retry count is kept");
    assert_eq!(last_job(&s)["role"], "developer");
    let ov = transitions(&s).last().unwrap();
    assert_eq!(ov["outcome"], "override");
    assert_eq!(ov["actor"], "operator");
    assert_eq!(ov["reason"], "fixed flaky reviewer");

    // Another override with --reset-retries sets the count back to 0.
    w.push_code(&wi, "after the fix");
    let r = w.advance(&wi, 0);
    assert_eq!(r["to"], "review", "{r:#}");
    w.ok(
        &[
            "advance",
            &wi,
            "--to",
            "development",
            "--reason",
            "start over",
            "--reset-retries",
            "--json",
        ],
        0,
    );
    let s = w.show(&wi);
    assert_eq!(s["stage"], "development");
    assert_eq!(s["dev_retries"], 0);

    // The override ledger.
    let expected_sha = hex::encode(Sha256::digest(fourth.as_bytes()));
    let rep = w.ok(&["report", "overrides", "--json"], 0).json();
    let list = rep["overrides"].as_array().expect("overrides is an array");
    assert_eq!(list.len(), 2, "{rep:#}");
    let first = list
        .iter()
        .find(|o| o["reason"] == "fixed flaky reviewer")
        .unwrap_or_else(|| panic!("the unblock override is listed: {rep:#}"));
    assert_eq!(first["work_item"], wi.as_str());
    assert_eq!(first["from"], "review");
    assert_eq!(first["to"], "development");
    let verdict = first["overridden_verdict"].as_str().unwrap_or_default();
    assert!(!verdict.is_empty(), "{rep:#}");
    assert!(verdict.contains("REQUEST_CHANGES"), "{verdict}");
    let sha = first["artifact_sha256"].as_str().unwrap_or_default();
    assert_eq!(sha.len(), 64, "{rep:#}");
    assert!(sha.bytes().all(|b| b.is_ascii_hexdigit()), "{sha}");
    assert_eq!(sha, expected_sha, "the sha256 of `12-review.md` as it was");
}

#[test]
fn failed_tests_roll_back_with_the_test_output_embedded() {
    let w = World::new();
    let wi = w.walk_to_testing("Totals");
    w.push_test_report(&wi, "FAIL", "assertion failed: left == right", 1);
    let r = w.advance(&wi, 3);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    assert_eq!(r["from"], "testing");
    assert_eq!(r["to"], "development");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "development");
    assert_eq!(s["dev_retries"], 1);
    let job = last_job(&s);
    assert_eq!(job["role"], "developer");
    assert_eq!(job["id"], r["enqueued_job"]);
    let prompt = job["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("assertion failed: left == right"),
        "{prompt}"
    );
    assert!(
        prompt.contains(&format!("docs/work-items/{wi}/13-test-report.md")),
        "{prompt}"
    );
}

#[test]
fn negative_token_wins_over_pass() {
    let w = World::new();
    let wi = w.walk_to_testing("Negative tokens");
    let file = format!("docs/work-items/{wi}/13-test-report.md");
    w.push_files(
        &wi,
        &[(
            &file,
            "---\nresult: PASS\nstatus: FAILED\nrun_id: 1\n---\n# Test report\n\n## Test output\nthread main panicked\n",
        )],
    );
    let r = w.advance(&wi, 3);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    assert_eq!(w.stage(&wi), "development");

    // Next round: `status: stored` holds no negative token (not `RED`), so PASS wins.
    w.push_code(&wi, "fixed the panic");
    assert_eq!(w.advance(&wi, 0)["to"], "review");
    w.push_review(&wi, "APPROVED", "- none", 2);
    assert_eq!(w.advance(&wi, 0)["to"], "testing");
    w.push_files(
        &wi,
        &[(
            &file,
            "---\nresult: PASS\nstatus: stored\nrun_id: 2\n---\n# Test report\n\n## Test output\nok\n",
        )],
    );
    let r = w.advance(&wi, 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["to"], "done");
}

#[test]
fn dry_run_changes_nothing() {
    let w = World::new();
    let wi = w.approved("Dry run", &[]);
    w.push_adr(&wi);
    let before = w.show(&wi);
    let count_before = transition_count(&w);

    let r = w.ok(&["advance", &wi, "--dry-run", "--json"], 0).json();
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["from"], "architecture");
    assert_eq!(r["to"], "development");
    assert!(r["enqueued_job"].is_null(), "{r:#}");

    let after = w.show(&wi);
    assert_eq!(after["stage"], "architecture");
    assert_eq!(after["jobs"], before["jobs"], "the job list is unchanged");
    assert_eq!(transition_count(&w), count_before, "no history row");
    assert_eq!(
        w.advance(&wi, 0)["to"],
        "development",
        "the real call still advances"
    );
}

#[test]
fn bug_track_skips_architecture() {
    let w = World::new();
    let wi = w.approved("Crash on empty cart", &["--bug"]);
    let s = w.show(&wi);
    assert_eq!(s["track"], "bug");
    assert_eq!(s["stage"], "development");
    assert_eq!(last_job(&s)["role"], "developer");
    assert!(
        transitions(&s).iter().any(|t| t["from"] == "analysis"
            && t["to"] == "development"
            && t["outcome"] == "advanced"),
        "{s:#}"
    );
    assert!(
        transitions(&s).iter().all(|t| t["to"] != "architecture"),
        "{s:#}"
    );
}

#[test]
fn breakpoint_pauses_before_the_named_stage() {
    let w = World::new();
    let wi = w.walk_to_development("Breakpoint");
    w.ok(&["pause", &wi, "--reason", "r", "--before", "review"], 0);
    assert_eq!(w.show(&wi)["pause_before"], "review");
    w.push_code(&wi, "code");

    let r = w.advance(&wi, 4);
    assert_eq!(r["outcome"], "deferred", "{r:#}");
    assert_eq!(r["to"], "development");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "development");
    assert_eq!(s["paused"], true, "{s:#}");
    assert!(s["paused_at"].is_string());
    assert!(
        s["pause_before"].is_null(),
        "the breakpoint is used up: {s:#}"
    );

    // Resuming at a breakpoint makes the transition it stopped (the gate had passed), instead
    // of leaving the task idle until the reconciler.
    let r = w.ok(&["resume", &wi, "--json"], 0).json();
    assert_eq!(r["advance"]["to"], "review", "{r:#}");
    assert_eq!(w.show(&wi)["paused"], false);
    assert_eq!(w.stage(&wi), "review");
}

#[test]
fn cancel_tombstones_the_id_and_it_can_be_reused() {
    let w = World::new();
    let wi = w.add("Soon cancelled", &[]);
    assert_eq!(wi, "SHOP-1");
    w.push_analysis(&wi);
    let r = w.ok(&["cancel", &wi, "--json"], 0).json();
    assert_eq!(r["work_item"], "SHOP-1#cancelled-1", "{r:#}");

    let s = w.show("SHOP-1");
    assert_eq!(s["stage"], "cancelled");
    assert_eq!(s["work_item"], "SHOP-1#cancelled-1");
    assert!(s["cancelled_at"].is_string(), "{s:#}");
    assert!(!jobs(&s).is_empty());
    assert!(jobs(&s).iter().all(|j| j["status"] == "cancelled"), "{s:#}");
    assert!(
        transitions(&s)
            .iter()
            .any(|t| t["outcome"] == "cancelled" && t["to"] == "cancelled"),
        "{s:#}"
    );

    let again = w.add("Started again", &["--work-item", "SHOP-1"]);
    assert_eq!(again, "SHOP-1");
    let s = w.show("SHOP-1");
    assert_eq!(s["work_item"], "SHOP-1");
    assert_eq!(s["stage"], "analysis");
    assert_eq!(s["title"], "Started again");
    let old = w.show("SHOP-1#cancelled-1");
    assert_eq!(old["stage"], "cancelled");
    assert_eq!(old["title"], "Soon cancelled");
}

#[test]
fn approve_outside_analysis_is_refused() {
    let w = World::new();
    let wi = w.approved("Approved twice", &[]);
    assert_eq!(w.stage(&wi), "architecture");
    let count = transition_count(&w);
    let r = w.ok(&["approve", &wi], 2);
    assert!(r.stderr.contains("not `analysis`"), "{r:?}");
    assert_eq!(w.stage(&wi), "architecture");
    assert_eq!(
        transition_count(&w),
        count,
        "a refused gesture records nothing"
    );
}

#[test]
fn confirm_deploy_outside_deploy_is_refused() {
    let w = World::new();
    let wi = w.add("Not deployable yet", &[]);
    let r = w.ok(&["confirm-deploy", &wi], 2);
    assert!(r.stderr.contains("not `deploy`"), "{r:?}");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "analysis");
    assert!(s["deploy_confirmed_at"].is_null(), "{s:#}");
}

#[test]
fn an_approval_before_the_files_is_kept_until_they_arrive() {
    let w = World::new();
    let wi = w.add("Early approval", &[]);
    let r = w.ok(&["approve", &wi, "--json"], 3).json();
    let msg = r["message"].as_str().unwrap();
    for f in [
        "01-brd.md",
        "02-trz.md",
        "03-acceptance-criteria.md",
        "04-test-plan.yaml",
    ] {
        assert!(msg.contains(f), "the message names `{f}`: {msg}");
    }
    assert_eq!(r["advance"]["outcome"], "not-satisfied", "{r:#}");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "analysis");
    assert!(
        s["approved_at"].is_string(),
        "the approval is recorded: {s:#}"
    );

    w.push_analysis(&wi);
    let r = w.advance(&wi, 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["to"], "architecture");
    assert_eq!(w.stage(&wi), "architecture");
}

/// An override once revived a cancelled task under its tombstone, leaving two active tasks on
/// one worktree path; a finished task is never moved again.
#[test]
fn an_override_cannot_revive_a_cancelled_task() {
    let w = World::new();
    let wi = w.add("Cancel me", &[]);
    w.ok(&["cancel", &wi], 0);
    let before = transition_count(&w);
    let r = w.ok(
        &[
            "advance",
            "SHOP-1#cancelled-1",
            "--to",
            "development",
            "--reason",
            "x",
        ],
        2,
    );
    assert!(r.stderr.contains("already `cancelled`"), "{r:?}");
    assert!(
        r.stderr
            .contains("orch task add --repo shop --work-item SHOP-1 --title"),
        "{r:?}"
    );
    assert_eq!(transition_count(&w), before);
    assert_eq!(w.stage("SHOP-1#cancelled-1"), "cancelled");
}
