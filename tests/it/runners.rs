//! The deterministic runners end to end (SPEC §3.3, §6; issue 4): `orch run-tests` and
//! `orch run-staging` run small shell suites written by the tests into the temp world, classify
//! the outcome (code-pass / code-fail / transient-infra / permanent-env) and apply it — a report
//! committed as the runner plus an advance or a rollback, a hold, or a deferral with a budget
//! counted across separate `orch` invocations. Smoke checks talk to a fake HTTP server on
//! `127.0.0.1:0`; the ssh wrapper talks to a fake `ssh` put first on `PATH`; the supervisor
//! intercept is driven by real `orch tick` passes.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::fake_http::{Mode, Server};
use crate::support::{
    self, Run, World, git, jobs, now, orch_bin, poll, procs, transitions, wait_until,
};
use serde_json::Value;

/// How long a polled condition may take on a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(90);

// ------------------------------------------------------------------------------ the world

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A YAML flow sequence of strings.
fn yaml_list(items: &[&str]) -> String {
    format!(
        "[{}]",
        items.iter().map(|s| q(s)).collect::<Vec<_>>().join(", ")
    )
}

fn tmp(w: &World) -> String {
    w.dir.path().display().to_string()
}

/// `["/bin/sh", "<tmp>/<name>"]` for a suite script written with [`World::script`].
fn sh_argv(w: &World, name: &str, body: &str) -> String {
    let p = w.script(name, body);
    yaml_list(&["/bin/sh", &p.display().to_string()])
}

/// A `<key>:` contract block for the repo entry (`more` adds keys, one per line).
fn contract_block(key: &str, argv: &str, timeout_s: u64, more: &str) -> String {
    let mut s = format!("{key}:\n  argv: {argv}\n  timeout_s: {timeout_s}\n");
    for l in more.lines() {
        s.push_str("  ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// A `tests:` block for the repo entry.
fn tests_block(argv: &str, timeout_s: u64, more: &str) -> String {
    contract_block("tests", argv, timeout_s, more)
}

/// A `staging:` block for the repo entry.
fn staging_block(argv: &str, timeout_s: u64, more: &str) -> String {
    contract_block("staging", argv, timeout_s, more)
}

/// Rewrite the config: `repo` goes into the `shop` entry, `top` is appended at top level.
fn configure(w: &World, repo: &str, top: &str) {
    w.write_config(repo);
    w.append_config(top);
}

/// `orch run-tests <wi> --json [extra…]`, asserting the exit code.
fn run_tests(w: &World, wi: &str, extra: &[&str], code: i32) -> Value {
    let mut a = vec!["run-tests", wi, "--json"];
    a.extend_from_slice(extra);
    w.ok(&a, code).json()
}

fn run_staging(w: &World, wi: &str, extra: &[&str], code: i32) -> Value {
    let mut a = vec!["run-staging", wi, "--json"];
    a.extend_from_slice(extra);
    w.ok(&a, code).json()
}

/// A file of `branch` on the bare remote.
fn remote_file(w: &World, branch: &str, path: &str) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(&w.remote)
        .args(["show", &format!("refs/heads/{branch}:{path}")])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn report_path(wi: &str, file: &str) -> String {
    format!("docs/work-items/{wi}/{file}")
}

/// The task worktree (`<repos_dir>/_wt/<repo>/<WI>`).
fn worktree(w: &World, wi: &str) -> PathBuf {
    w.state_dir()
        .join("repos")
        .join("_wt")
        .join("shop")
        .join(wi)
}

/// The frontmatter of a markdown artifact as key → value text.
fn frontmatter(text: &str) -> BTreeMap<String, String> {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("---"), "no frontmatter in:\n{text}");
    let yaml: Vec<&str> = lines.take_while(|l| *l != "---").collect();
    let map: serde_yaml::Mapping = serde_yaml::from_str(&yaml.join("\n"))
        .unwrap_or_else(|e| panic!("frontmatter is not YAML ({e}):\n{text}"));
    map.into_iter()
        .map(|(k, v)| {
            let k = k.as_str().expect("string keys").to_string();
            let v = match v {
                serde_yaml::Value::String(s) => s,
                serde_yaml::Value::Number(n) => n.to_string(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                serde_yaml::Value::Null => "null".to_string(),
                other => format!("{other:?}"),
            };
            (k, v)
        })
        .collect()
}

/// The text of a markdown section, from its `## heading` line to the next `## ` heading.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no section `{heading}` in the report"));
    let rest = &text[start + 1..];
    let body_start = rest.find('\n').unwrap() + 1;
    let rest = &rest[body_start..];
    match rest.find("\n## ") {
        Some(end) => &rest[..end],
        None => rest,
    }
}

/// The task's job with this id, from `task show`.
fn job_by_id(v: &Value, id: i64) -> Value {
    jobs(v)
        .iter()
        .find(|j| j["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no job {id} in {:#}", v["jobs"]))
}

/// A snapshot of everything a runner must not touch when it holds or dry-checks.
#[derive(Debug, PartialEq)]
struct Untouched {
    stage: String,
    dev_retries: Value,
    jobs: String,
    head: Option<String>,
}

fn untouched(w: &World, wi: &str) -> Untouched {
    let s = w.show(wi);
    Untouched {
        stage: s["stage"].as_str().unwrap().to_string(),
        dev_retries: s["dev_retries"].clone(),
        jobs: w.sql(
            "SELECT id, role, stage, status, attempts, available_at, length(prompt) FROM jobs ORDER BY id",
        ),
        head: w.remote_head(s["branch"].as_str().unwrap()),
    }
}

/// Processes matching `needle` may take a moment to die after the group's SIGKILL was sent;
/// poll briefly (bounded), then assert that none is left.
#[track_caller]
fn assert_none_survive(needle: &str) {
    let gone = poll(Duration::from_secs(5), Duration::from_millis(20), || {
        procs::with_cmdline(needle).is_empty()
    });
    assert!(
        gone,
        "processes of the suite survived the run: {:?}",
        procs::with_cmdline(needle)
    );
}

// ------------------------------------------------------------------------------ run-tests: verdicts

#[test]
fn exit_zero_passes_commits_the_report_as_test_runner_and_advances() {
    let w = World::new();
    let argv = sh_argv(
        &w,
        "suite-pass.sh",
        "echo 'running 3 tests'\necho 'test result: ok. 3 passed; 0 failed'",
    );
    configure(&w, &tests_block(&argv, 60, ""), "");
    let wi = w.walk_to_testing("Add a health endpoint");
    let branch = w.branch_of(&wi);
    let before = w.remote_head(&branch).unwrap();

    let r = run_tests(&w, &wi, &[], 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["class"], "code-pass", "{r:#}");
    assert_eq!(r["verdict"], "PASS", "{r:#}");
    assert_eq!(r["exit_code"], 0, "{r:#}");
    assert_eq!(r["report"], report_path(&wi, "13-test-report.md"), "{r:#}");
    // No staging or deploy contract: the N/A stages pass in the same call.
    let s = w.show(&wi);
    assert_ne!(s["stage"], "testing", "the stage moved on: {s:#}");
    assert_eq!(s["stage"], "done", "{s:#}");
    assert!(
        transitions(&s).iter().any(|t| t["from"] == "testing"
            && t["to"] == "deploy-staging"
            && t["outcome"] == "advanced"),
        "{:#}",
        s["transitions"]
    );
    assert_eq!(s["dev_retries"], 0);

    // Committed by the runner on the task branch and pushed.
    let after = w.remote_head(&branch).unwrap();
    assert_ne!(before, after, "the report was pushed");
    let author = git(&w.remote, &["log", "-1", "--format=%an <%ae>", &branch]);
    assert_eq!(author, "test-runner <test-runner@orch.invalid>");
    let changed = git(&w.remote, &["show", "--name-only", "--format=", &branch]);
    assert_eq!(changed, report_path(&wi, "13-test-report.md"));
    let text = remote_file(&w, &branch, &report_path(&wi, "13-test-report.md"))
        .expect("13-test-report.md is on the remote branch");
    let fm = frontmatter(&text);
    assert_eq!(fm["result"], "PASS", "{text}");
    assert_eq!(fm["status"], "success", "{text}");
    assert_eq!(fm["work_item"], wi);
    assert_eq!(fm["stage"], "testing");
    assert_eq!(fm["author_agent"], "test-runner");
    assert_eq!(fm["exit_code"], "0");
    assert_eq!(fm["model_used"], "n/a");
    assert_eq!(fm["smoke"], "none");
    for k in ["created_at", "duration_s", "command"] {
        assert!(
            fm.get(k).is_some_and(|v| !v.is_empty() && v != "null"),
            "`{k}` is in the frontmatter:\n{text}"
        );
    }
    assert!(fm["command"].contains("suite-pass.sh"), "{text}");
    assert!(
        fm["duration_s"].parse::<f64>().is_ok(),
        "duration_s is a number: {text}"
    );
    // No negative token anywhere in the verdict keys of a PASS report.
    assert!(!fm.contains_key("verdict"));
    assert!(section(&text, "Test output").contains("test result: ok. 3 passed"));
}

/// A suite that exits with `code` (printing a unique line) fails and rolls back.
fn failing_suite_rolls_back(code: i32) {
    let w = World::new();
    let unique = format!("assertion failed: cart total UNIQUE-FAIL-{code}-7f3a");
    let argv = sh_argv(
        &w,
        "suite-fail.sh",
        &format!(
            "echo 'running 3 tests'\necho 'test cart::total ... FAILED'\n\
             # The default env_markers are empty: a failing test may well print this.\n\
             echo 'server is not running' >&2\n\
             echo '{unique}' >&2\nexit {code}"
        ),
    );
    configure(&w, &tests_block(&argv, 60, ""), "");
    let wi = w.walk_to_testing("Fix the cart total");
    let branch = w.branch_of(&wi);
    let before = w.remote_head(&branch).unwrap();
    assert_eq!(w.show(&wi)["dev_retries"], 0);

    let r = run_tests(&w, &wi, &[], 3);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    assert_eq!(r["class"], "code-fail", "{r:#}");
    assert_eq!(r["verdict"], "FAIL", "{r:#}");
    assert_eq!(r["exit_code"], code, "{r:#}");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "development", "{s:#}");
    assert_eq!(s["dev_retries"], 1, "one developer retry spent");
    assert!(s["held_at"].is_null(), "{s:#}");

    // The FAIL report is committed by the runner and round-trips through the gate.
    assert_ne!(w.remote_head(&branch).unwrap(), before);
    let author = git(&w.remote, &["log", "-1", "--format=%an", &branch]);
    assert_eq!(author, "test-runner");
    let text = remote_file(&w, &branch, &report_path(&wi, "13-test-report.md")).unwrap();
    let fm = frontmatter(&text);
    assert_eq!(fm["result"], "FAIL", "{text}");
    assert_eq!(fm["status"], "failed", "{text}");
    assert_eq!(fm["exit_code"], code.to_string());
    assert!(section(&text, "Test output").contains(&unique), "{text}");

    // The new developer job embeds the output tail and links the artifact.
    let job = r["enqueued_job"]
        .as_i64()
        .unwrap_or_else(|| panic!("a developer job is enqueued: {r:#}"));
    let j = job_by_id(&s, job);
    assert_eq!(j["role"], "developer");
    assert_eq!(j["status"], "queued");
    let prompt = j["prompt"].as_str().unwrap();
    assert!(
        prompt.contains(&unique),
        "the output tail is in the prompt:\n{prompt}"
    );
    assert!(
        prompt.contains(&report_path(&wi, "13-test-report.md")),
        "the prompt links the report:\n{prompt}"
    );
    // The rollback row says what happened.
    assert!(
        transitions(&s).iter().any(|t| t["from"] == "testing"
            && t["to"] == "development"
            && t["outcome"] == "rolled-back"),
        "{:#}",
        s["transitions"]
    );
}

#[test]
fn exit_one_fails_and_rolls_back_with_the_output_tail_in_the_prompt() {
    failing_suite_rolls_back(1);
}

#[test]
fn exit_three_fails_and_rolls_back_with_the_output_tail_in_the_prompt() {
    failing_suite_rolls_back(3);
}

/// The suite's last words are what a developer needs: with more output than the prompt keeps,
/// the final failure line must still reach the developer prompt.
#[test]
fn a_long_failing_output_keeps_its_last_line_in_the_developer_prompt() {
    let w = World::new();
    let last = "FINAL-FAILURE-LINE-9c41: 1 failed, 499 passed";
    let argv = sh_argv(
        &w,
        "suite-long.sh",
        &format!(
            "i=0\nwhile [ $i -lt 500 ]; do echo \"test case_$i ... ok (padding padding padding padding padding padding padding padding)\"; i=$((i+1)); done\n\
             echo '{last}'\nexit 1"
        ),
    );
    configure(&w, &tests_block(&argv, 60, ""), "");
    let wi = w.walk_to_testing("Long output");
    let r = run_tests(&w, &wi, &[], 3);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    let branch = w.branch_of(&wi);
    let text = remote_file(&w, &branch, &report_path(&wi, "13-test-report.md")).unwrap();
    assert!(
        section(&text, "Test output").contains(last),
        "the report keeps the tail"
    );
    let s = w.show(&wi);
    let j = job_by_id(&s, r["enqueued_job"].as_i64().unwrap());
    let prompt = j["prompt"].as_str().unwrap();
    assert!(
        prompt.contains(last),
        "the last line of the suite's output is in the developer prompt (prompt is {} bytes, ends with:\n{})",
        prompt.len(),
        &prompt[prompt.len().saturating_sub(400)..]
    );
}

// ------------------------------------------------------------------------------ run-tests: holds

/// A suite that cannot run (`suite` returns its argv as YAML and extra `tests:` keys) holds
/// the task: exit 5, `held_at`, no artifact, no advance, no retry spent; the next run whose
/// suite ran clears the hold.
fn holds_then_clears(suite: impl FnOnce(&World) -> (String, String), reason_has: &str) {
    let w = World::new();
    let (argv, more) = suite(&w);
    configure(&w, &tests_block(&argv, 60, &more), "");
    let wi = w.walk_to_testing("Held by the environment");
    let branch = w.branch_of(&wi);
    let before = untouched(&w, &wi);
    let rows_before = transitions(&w.show(&wi)).len();

    let r = run_tests(&w, &wi, &[], 5);
    assert_eq!(r["outcome"], "held", "{r:#}");
    assert_eq!(r["class"], "permanent-env", "{r:#}");
    assert!(r["verdict"].is_null(), "{r:#}");
    assert!(r["report"].is_null(), "no artifact: {r:#}");
    assert!(r["enqueued_job"].is_null(), "{r:#}");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains(reason_has),
        "the reason names the cause ({reason_has}): {reason}"
    );
    assert!(reason.contains("environment"), "{reason}");

    let s = w.show(&wi);
    assert!(s["held_at"].is_string(), "held_at is set: {s:#}");
    assert!(s["held_reason"].is_string(), "{s:#}");
    assert_eq!(
        untouched(&w, &wi),
        before,
        "a hold changes no stage, job, retry or branch"
    );
    assert_eq!(s["stage"], "testing");
    assert!(
        remote_file(&w, &branch, &report_path(&wi, "13-test-report.md")).is_none(),
        "no report on the branch"
    );
    assert!(
        !worktree(&w, &wi)
            .join(report_path(&wi, "13-test-report.md"))
            .exists(),
        "no report in the worktree"
    );
    let rows = transitions(&s);
    assert_eq!(rows.len(), rows_before + 1, "one history row: {rows:#?}");
    let last = rows.last().unwrap();
    assert_eq!(last["outcome"], "held", "{last:#}");
    assert_eq!(last["from"], "testing");
    assert_eq!(last["to"], "testing");
    assert!(
        last["reason"].as_str().unwrap().contains("permanent-env"),
        "the history row carries the outcome class: {last:#}"
    );

    // The next run whose suite ran clears the hold.
    let fixed = sh_argv(&w, "suite-fixed.sh", "echo 'all good'\nexit 0");
    configure(&w, &tests_block(&fixed, 60, ""), "");
    let r = run_tests(&w, &wi, &[], 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    let s = w.show(&wi);
    assert!(s["held_at"].is_null(), "the hold is cleared: {s:#}");
    assert!(s["held_reason"].is_null(), "{s:#}");
    assert_eq!(s["dev_retries"], 0);
}

#[test]
fn exit_126_holds() {
    holds_then_clears(
        |w| {
            let argv = sh_argv(
                w,
                "suite-126.sh",
                "echo 'cannot execute binary file' >&2\nexit 126",
            );
            (argv, String::new())
        },
        "126",
    );
}

#[test]
fn exit_127_holds() {
    holds_then_clears(
        |w| {
            let argv = sh_argv(
                w,
                "suite-127.sh",
                "echo 'running'\norch-test-no-such-command-xyz --all",
            );
            (argv, String::new())
        },
        "127",
    );
}

#[test]
fn a_missing_program_holds() {
    holds_then_clears(
        |_| {
            (
                yaml_list(&["orch-test-no-such-program-4b1d", "--all"]),
                String::new(),
            )
        },
        "could not be started",
    );
}

#[test]
fn a_non_executable_file_holds() {
    holds_then_clears(
        |w| {
            let p = w.dir.path().join("suite-noexec.sh");
            std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            (yaml_list(&[&p.display().to_string()]), String::new())
        },
        "could not be started",
    );
}

#[test]
fn a_configured_env_marker_on_stderr_holds() {
    holds_then_clears(
        |w| {
            let argv = sh_argv(
                w,
                "suite-marker.sh",
                "echo 'connecting to db'\necho 'Error: No such container: shop-db-test' >&2\nexit 1",
            );
            (argv, "env_markers: [\"No such container\"]".to_string())
        },
        "No such container",
    );
}

// ------------------------------------------------------------------------------ run-tests: transient

#[test]
fn a_suite_past_its_timeout_is_killed_with_its_child_deferred_then_failed_when_the_budget_is_spent()
{
    let w = World::new();
    let t = tmp(&w);
    // A uniquely named `sleep`, so every process of the suite is found by its command line.
    let marker = format!("{t}/marker-sleep");
    std::os::unix::fs::symlink(
        support::which("sleep").expect("sleep is installed"),
        &marker,
    )
    .unwrap();
    let argv = sh_argv(
        &w,
        "suite-hang.sh",
        &format!(
            "echo 'starting the slow suite'\n\
             '{marker}' 30 &\n\
             bg=$!\n\
             # Record the child once it runs the marked sleep.\n\
             while ! grep -q marker-sleep /proc/$bg/cmdline 2>/dev/null; do sleep 0.05; done\n\
             echo $bg > '{t}/bg.tmp' && mv '{t}/bg.tmp' '{t}/bg.pid'\n\
             '{marker}' 30\n\
             echo 'never printed'"
        ),
    );
    let delay = 300;
    configure(
        &w,
        &tests_block(
            &argv,
            1,
            &format!("infra_retry_delay_s: {delay}\ninfra_max_retries: 2"),
        ),
        "",
    );
    let wi = w.walk_to_testing("Slow suite");
    let branch = w.branch_of(&wi);
    let head = w.remote_head(&branch);
    let first_tester = jobs(&w.show(&wi))
        .iter()
        .find(|j| j["role"] == "tester" && j["status"] == "queued")
        .expect("entering testing queued a tester job")["id"]
        .as_i64()
        .unwrap();
    let mut marker_jobs: Vec<i64> = Vec::new();

    for round in 1..=2 {
        let _ = std::fs::remove_file(format!("{t}/bg.pid"));
        let before = now();
        let started = Instant::now();
        let r = w.orch(&["run-tests", &wi, "--json"]);
        let took = started.elapsed();
        let after = now();
        assert_eq!(r.code, 4, "round {round}: {r:?}");
        // The suite's background child was running the marked sleep when the timeout hit.
        let bg: i32 = std::fs::read_to_string(format!("{t}/bg.pid"))
            .unwrap_or_else(|e| panic!("the suite recorded its background child ({e}): {r:?}"))
            .trim()
            .parse()
            .unwrap();
        assert_none_survive(&marker);
        assert_none_survive(&format!("{t}/suite-hang.sh"));
        let bg_cmd = std::fs::read(format!("/proc/{bg}/cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bg_cmd).contains(&marker),
            "the background child {bg} was killed"
        );
        assert!(
            took < Duration::from_secs(20),
            "killed at the timeout (1 s + grace), not after the sleeps: {took:?}"
        );

        let v = r.json();
        assert_eq!(v["outcome"], "deferred", "{v:#}");
        assert_eq!(v["class"], "transient-infra", "{v:#}");
        assert!(v["exit_code"].is_null(), "{v:#}");
        assert!(v["verdict"].is_null(), "{v:#}");
        let job = v["enqueued_job"].as_i64().expect("a tester job is queued");
        let s = w.show(&wi);
        assert_eq!(s["stage"], "testing");
        assert_eq!(s["dev_retries"], 0, "no developer retry spent");
        assert!(s["held_at"].is_null());
        assert_eq!(w.remote_head(&branch), head, "no report is committed");
        let j = job_by_id(&s, job);
        assert_eq!(j["role"], "tester");
        assert_eq!(j["stage"], "testing");
        assert_eq!(j["status"], "queued");
        assert!(
            j["prompt"]
                .as_str()
                .unwrap()
                .contains("test-runner infra-retry"),
            "{j:#}"
        );
        let at: i64 = w
            .sql(&format!("SELECT available_at FROM jobs WHERE id = {job}"))
            .parse()
            .unwrap();
        assert!(
            at >= before + delay && at <= after + delay,
            "available_at {at} ≈ now + {delay} (now was {before}..{after})"
        );
        // The earlier queued tester job was superseded: one queued tester job at a time.
        let queued: Vec<&Value> = jobs(&s)
            .iter()
            .filter(|j| j["role"] == "tester" && j["status"] == "queued")
            .collect();
        assert_eq!(queued.len(), 1, "{:#}", s["jobs"]);
        assert_eq!(job_by_id(&s, first_tester)["status"], "cancelled");
        for old in &marker_jobs {
            assert_eq!(job_by_id(&s, *old)["status"], "cancelled");
        }
        marker_jobs.push(job);
    }

    // The budget (2) is spent: the third invocation writes a FAIL report and rolls back.
    let r = run_tests(&w, &wi, &[], 3);
    assert_none_survive(&marker);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    assert_eq!(r["verdict"], "FAIL", "{r:#}");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "development");
    assert_eq!(s["dev_retries"], 1);
    assert_ne!(w.remote_head(&branch), head, "the FAIL report is pushed");
    assert_eq!(
        git(&w.remote, &["log", "-1", "--format=%an", &branch]),
        "test-runner"
    );
    let text = remote_file(&w, &branch, &report_path(&wi, "13-test-report.md")).unwrap();
    let fm = frontmatter(&text);
    assert_eq!(fm["result"], "FAIL", "{text}");
    assert_eq!(fm["status"], "failed", "{text}");
    assert!(
        text.contains("did not complete"),
        "the report says the suite did not complete:\n{text}"
    );
    let dev = job_by_id(&s, r["enqueued_job"].as_i64().unwrap());
    assert_eq!(dev["role"], "developer");
    // No tester job is left queued behind the rollback.
    assert!(
        !jobs(&s)
            .iter()
            .any(|j| j["role"] == "tester" && j["status"] == "queued"),
        "{:#}",
        s["jobs"]
    );
}

// ------------------------------------------------------------------------------ --no-advance

#[test]
fn no_advance_is_a_dry_check_that_touches_nothing() {
    let w = World::new();
    let fail = sh_argv(&w, "suite-fail.sh", "echo 'DRY-FAIL-LINE'\nexit 1");
    configure(&w, &tests_block(&fail, 60, ""), "");
    let wi = w.walk_to_testing("Dry check");
    let before = untouched(&w, &wi);
    let runs = w.state_dir().join("runs").join(&wi);
    let checked = |w: &World| {
        transitions(&w.show(&wi))
            .iter()
            .filter(|t| t["outcome"] == "checked")
            .cloned()
            .collect::<Vec<_>>()
    };

    // A failing suite: exit 3, the report under the state dir, nothing else.
    let r = run_tests(&w, &wi, &["--no-advance"], 3);
    assert_eq!(r["outcome"], "checked", "{r:#}");
    assert_eq!(r["verdict"], "FAIL", "{r:#}");
    assert_eq!(r["class"], "code-fail", "{r:#}");
    let path = runs.join("13-test-report.md");
    assert_eq!(r["report"], path.display().to_string(), "{r:#}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(frontmatter(&text)["result"], "FAIL");
    assert!(text.contains("DRY-FAIL-LINE"));
    assert_eq!(untouched(&w, &wi), before);
    assert!(
        !worktree(&w, &wi)
            .join(report_path(&wi, "13-test-report.md"))
            .exists(),
        "nothing is written into the worktree"
    );
    let rows = checked(&w);
    assert_eq!(rows.len(), 1, "one `checked` row: {rows:#?}");
    assert_eq!(rows[0]["from"], "testing");
    assert_eq!(rows[0]["to"], "testing");
    assert!(rows[0]["reason"].as_str().unwrap().contains("code-fail"));

    // A passing suite: exit 0, PASS report, still no advance.
    let pass = sh_argv(&w, "suite-pass.sh", "echo ok\nexit 0");
    configure(&w, &tests_block(&pass, 60, ""), "");
    let r = run_tests(&w, &wi, &["--no-advance"], 0);
    assert_eq!(r["outcome"], "checked", "{r:#}");
    assert_eq!(r["verdict"], "PASS", "{r:#}");
    assert_eq!(
        frontmatter(&std::fs::read_to_string(&path).unwrap())["result"],
        "PASS"
    );
    assert_eq!(untouched(&w, &wi), before);
    assert_eq!(checked(&w).len(), 2);

    // A transient outcome: exit 4 but no job, no budget.
    let hang = sh_argv(&w, "suite-hang.sh", "sleep 30");
    configure(&w, &tests_block(&hang, 1, "infra_retry_delay_s: 300"), "");
    let r = run_tests(&w, &wi, &["--no-advance"], 4);
    assert_eq!(r["outcome"], "checked", "{r:#}");
    assert_eq!(r["class"], "transient-infra", "{r:#}");
    assert!(r["enqueued_job"].is_null());
    assert_eq!(untouched(&w, &wi), before);
    assert_eq!(checked(&w).len(), 3);

    // A permanent one: exit 5 but no hold.
    configure(
        &w,
        &tests_block(&yaml_list(&["orch-test-no-such-program-4b1d"]), 60, ""),
        "",
    );
    let r = run_tests(&w, &wi, &["--no-advance"], 5);
    assert_eq!(r["outcome"], "checked", "{r:#}");
    assert_eq!(r["class"], "permanent-env", "{r:#}");
    let s = w.show(&wi);
    assert!(s["held_at"].is_null(), "a dry check records no hold: {s:#}");
    assert_eq!(untouched(&w, &wi), before);
    let rows = checked(&w);
    assert_eq!(rows.len(), 4);
    assert!(
        transitions(&s)
            .iter()
            .all(|t| t["outcome"] != "held" && t["outcome"] != "deferred"),
        "{:#}",
        s["transitions"]
    );

    // The dry check of a later run is still possible in any stage, and the real run still works.
    let pass = sh_argv(&w, "suite-pass.sh", "echo ok\nexit 0");
    configure(&w, &tests_block(&pass, 60, ""), "");
    let r = run_tests(&w, &wi, &[], 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
}

// ------------------------------------------------------------------------------ smoke

fn smoke_world(w: &World, smoke: &str) -> String {
    let argv = sh_argv(
        w,
        "suite-pass.sh",
        "echo 'test result: ok. 1 passed'\nexit 0",
    );
    configure(w, &tests_block(&argv, 60, &format!("smoke:\n{smoke}")), "");
    w.walk_to_testing("Smoke checks")
}

fn smoke_entry(url: &str, status: u16, contains: Option<&str>) -> String {
    let mut s = format!("  - url: {}\n    status: {status}\n", q(url));
    if let Some(c) = contains {
        s.push_str(&format!("    contains: {}\n", q(c)));
    }
    s
}

#[test]
fn smoke_200_with_the_substring_passes() {
    let srv = Server::scripted(&[(200, "status: ok, version 1.2")]);
    let w = World::new();
    let wi = smoke_world(
        &w,
        &smoke_entry(&format!("{}/health", srv.url()), 200, Some("ok")),
    );
    let r = run_tests(&w, &wi, &[], 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["verdict"], "PASS", "{r:#}");
    assert!(srv.hits() >= 1, "the smoke URL was fetched");
    let text = remote_file(
        &w,
        &w.branch_of(&wi),
        &report_path(&wi, "13-test-report.md"),
    )
    .unwrap();
    assert_eq!(frontmatter(&text)["smoke"], "1 ok", "{text}");
    assert!(section(&text, "Smoke checks").contains("ok"), "{text}");
}

#[test]
fn smoke_500_fails_with_smoke_in_the_reason() {
    // Stateful: a retry on the wrong status would get a 200 and pass.
    let srv = Server::scripted(&[(500, "boom"), (200, "ok")]);
    let w = World::new();
    let wi = smoke_world(
        &w,
        &smoke_entry(&format!("{}/health", srv.url()), 200, None),
    );
    let r = run_tests(&w, &wi, &[], 3);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    assert_eq!(r["verdict"], "FAIL", "{r:#}");
    assert_eq!(r["exit_code"], 0, "the suite itself passed: {r:#}");
    assert_eq!(srv.hits(), 1, "a wrong status fails at once, no retry");
    let text = remote_file(
        &w,
        &w.branch_of(&wi),
        &report_path(&wi, "13-test-report.md"),
    )
    .unwrap();
    let fm = frontmatter(&text);
    assert_eq!(fm["result"], "FAIL", "{text}");
    assert_eq!(fm["smoke"], "1 of 1 not ok", "{text}");
    assert!(section(&text, "Smoke checks").contains("500"), "{text}");
    assert!(section(&text, "Summary").contains("smoke"), "{text}");
    // What an operator and the next developer read must say that the smoke check failed (the
    // suite's own output says `ok`).
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("smoke"),
        "the reason says smoke failed: {reason}"
    );
    let s = w.show(&wi);
    let job = r["enqueued_job"].as_i64().expect("a developer job");
    let prompt = job_by_id(&s, job)["prompt"].as_str().unwrap().to_string();
    assert!(
        prompt.contains("smoke"),
        "the developer prompt names the failed smoke check:\n{prompt}"
    );
}

#[test]
fn smoke_connection_refused_then_up_within_the_retries_passes() {
    // The fake stops listening, and listens on its port again only ~1.2 s after the suite has
    // run, so the first smoke attempt is refused and a later one (1 s apart, 3 tries) gets an
    // answer.
    let srv = Server::scripted(&[(200, "ok")]);
    srv.set_mode(Mode::Refusing);
    let w = World::new();
    let ran = w.dir.path().join("suite-ran");
    let argv = sh_argv(
        &w,
        "suite-pass.sh",
        &format!("echo 'test result: ok'\ntouch '{}'\nexit 0", ran.display()),
    );
    let url = format!("{}/health", srv.url());
    configure(
        &w,
        &tests_block(
            &argv,
            60,
            &format!("smoke:\n{}", smoke_entry(&url, 200, Some("ok"))),
        ),
        "",
    );
    let wi = w.walk_to_testing("Smoke comes up late");
    let (r, took) = std::thread::scope(|s| {
        s.spawn(|| {
            wait_until("the suite ran", DEADLINE, || ran.exists());
            std::thread::sleep(Duration::from_millis(1200));
            srv.set_mode(Mode::Up);
        });
        let started = Instant::now();
        let r = w.orch_with(&["run-tests", &wi, "--json"], &[("ORCH_LOG", "info")]);
        (r, started.elapsed())
    });
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["outcome"], "advanced", "{v:#}");
    assert_eq!(v["verdict"], "PASS", "{v:#}");
    assert!(srv.hits() >= 1, "the late server was reached");
    assert!(
        r.stderr.contains("retrying"),
        "the first attempt was refused and retried:\n{}",
        r.stderr
    );
    assert!(took >= Duration::from_millis(1000), "{took:?}");
}

#[test]
fn smoke_missing_required_substring_fails() {
    // Stateful: a retry would find the substring.
    let srv = Server::scripted(&[(200, "status: degraded"), (200, "status: READY")]);
    let w = World::new();
    let wi = smoke_world(
        &w,
        &smoke_entry(&format!("{}/health", srv.url()), 200, Some("READY")),
    );
    let r = run_tests(&w, &wi, &[], 3);
    assert_eq!(r["outcome"], "rolled-back", "{r:#}");
    assert_eq!(r["verdict"], "FAIL", "{r:#}");
    assert_eq!(srv.hits(), 1, "a missing substring fails at once");
    let text = remote_file(
        &w,
        &w.branch_of(&wi),
        &report_path(&wi, "13-test-report.md"),
    )
    .unwrap();
    assert_eq!(frontmatter(&text)["result"], "FAIL", "{text}");
    assert!(section(&text, "Smoke checks").contains("READY"), "{text}");
    assert_eq!(w.show(&wi)["stage"], "development");
}

// ------------------------------------------------------------------------------ environment

#[test]
fn the_suite_sees_no_secret_and_sees_orch_sandbox() {
    let w = World::new();
    let t = tmp(&w);
    let argv = sh_argv(
        &w,
        "suite-env.sh",
        &format!("env > '{t}/child-env.txt'\nenv\nexit 0"),
    );
    configure(
        &w,
        &tests_block(&argv, 60, ""),
        "tracker: {kind: plane, token_env: MY_PLANE_TOKEN, webhook_secret_env: PLANEHOOKSIG}",
    );
    let wi = w.walk_to_testing("No secrets");
    let r = w.orch_with(
        &["run-tests", &wi, "--json"],
        &[
            ("MY_PLANE_TOKEN", "plane-secret-5f1e"),
            ("FOO_API_KEY", "foo-secret-5f1e"),
            // Named by a `*_env` key but matching no deny glob.
            ("PLANEHOOKSIG", "hook-secret-5f1e"),
            ("ORCH_TEST_LEAK_CHECK", "orch-leak-5f1e"),
            ("KEEP_ME_VISIBLE", "visible-5f1e"),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let env = std::fs::read_to_string(format!("{t}/child-env.txt")).unwrap();
    for needle in [
        "MY_PLANE_TOKEN",
        "plane-secret",
        "FOO_API_KEY",
        "foo-secret",
        "PLANEHOOKSIG",
        "hook-secret",
        "ORCH_TEST_LEAK_CHECK",
        "orch-leak",
    ] {
        assert!(!env.contains(needle), "the child saw `{needle}`:\n{env}");
    }
    assert!(
        env.lines().any(|l| l == "ORCH_SANDBOX=1"),
        "ORCH_SANDBOX=1 is set:\n{env}"
    );
    assert!(
        env.lines().any(|l| l == "KEEP_ME_VISIBLE=visible-5f1e"),
        "ordinary variables pass through:\n{env}"
    );
    // The suite printed its environment: nothing secret reached the report or the log either.
    let text = remote_file(
        &w,
        &w.branch_of(&wi),
        &report_path(&wi, "13-test-report.md"),
    )
    .unwrap();
    assert!(text.contains("ORCH_SANDBOX=1"), "{text}");
    assert!(!text.contains("secret-5f1e"), "{text}");
    for e in std::fs::read_dir(w.state_dir().join("logs"))
        .unwrap()
        .flatten()
    {
        let log = std::fs::read_to_string(e.path()).unwrap_or_default();
        assert!(!log.contains("secret-5f1e"), "{}", e.path().display());
    }
}

// ------------------------------------------------------------------------------ big output

#[test]
fn fifty_megabytes_of_output_go_to_the_log_and_only_the_tail_to_the_report() {
    let w = World::new();
    let argv = sh_argv(
        &w,
        "suite-big.sh",
        "yes 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' | head -c 50000000\necho\necho 'BIG-OUTPUT-END-2d7e'\nexit 0",
    );
    configure(&w, &tests_block(&argv, 300, ""), "");
    let wi = w.walk_to_testing("Big output");
    let rss_file = w.dir.path().join("rss.txt");
    let time = Path::new("/usr/bin/time");
    let mut c = if time.exists() {
        let mut c = Command::new(time);
        c.arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(&rss_file)
            .arg(orch_bin());
        c
    } else {
        Command::new(orch_bin())
    };
    c.arg("--config")
        .arg(&w.config)
        .args(["run-tests", &wi, "--json"])
        .env_remove("ORCH_CONFIG")
        .env_remove("ORCH_STATE_DIR")
        .env("ORCH_LOG", "warn")
        // Unconfined like every world (`World::orch_cmd`): under bubblewrap the suite in the
        // world's /tmp directory is hidden and `sh` exits 2.
        .env("ORCH_AGENT_SANDBOX", "none");
    let r = Run::of(&mut c);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["verdict"], "PASS");

    // The log under <state>/logs has all of it.
    let logs: Vec<(PathBuf, u64)> = std::fs::read_dir(w.state_dir().join("logs"))
        .unwrap()
        .flatten()
        .map(|e| (e.path(), e.metadata().unwrap().len()))
        .collect();
    let big = logs
        .iter()
        .find(|(p, _)| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("test-runner-")
        })
        .unwrap_or_else(|| panic!("a test-runner log: {logs:?}"));
    assert!(big.1 >= 50_000_000, "the log has the output: {big:?}");

    // The report has the tail only.
    let text = remote_file(
        &w,
        &w.branch_of(&wi),
        &report_path(&wi, "13-test-report.md"),
    )
    .unwrap();
    let output = section(&text, "Test output");
    assert!(
        output.contains("BIG-OUTPUT-END-2d7e"),
        "the tail ends the section"
    );
    assert!(
        output.len() < 70_000,
        "the output section is small: {} bytes",
        output.len()
    );
    assert!(
        text.len() < 80_000,
        "the report is small: {} bytes",
        text.len()
    );

    if time.exists() {
        let kb: u64 = std::fs::read_to_string(&rss_file)
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        eprintln!("orch peak RSS while the suite printed 50 MB: {kb} KiB");
        assert!(kb < 60 * 1024, "orch's peak RSS stays low: {kb} KiB");
    } else {
        eprintln!("/usr/bin/time is missing: the peak RSS of orch was not measured");
    }
}

// ------------------------------------------------------------------------------ staging

/// A world whose repo has a passing test contract and `staging`, walked to `deploy-staging`
/// by `orch run-tests`.
fn walk_to_deploy_staging(w: &World, staging: &str, more_repo: &str, top: &str) -> String {
    let pass = sh_argv(w, "suite-pass.sh", "echo 'tests ok'\nexit 0");
    configure(
        w,
        &format!("{}{}{}", tests_block(&pass, 60, ""), staging, more_repo),
        top,
    );
    let wi = w.walk_to_testing("Staging");
    let r = run_tests(w, &wi, &[], 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    let s = w.show(&wi);
    assert_eq!(s["stage"], "deploy-staging", "{s:#}");
    assert!(
        jobs(&s).iter().any(|j| j["role"] == "deployer"
            && j["stage"] == "deploy-staging"
            && j["status"] == "queued"),
        "{:#}",
        s["jobs"]
    );
    wi
}

#[test]
fn staging_exit_zero_writes_the_log_and_advances_to_deploy() {
    let w = World::new();
    let st = sh_argv(&w, "staging-ok.sh", "echo 'staging checks: 4 ok'\nexit 0");
    let wi = walk_to_deploy_staging(
        &w,
        &staging_block(&st, 60, ""),
        "deploy: {mode: agent, require_confirm: false}\n",
        "",
    );
    let branch = w.branch_of(&wi);
    let r = run_staging(&w, &wi, &[], 0);
    assert_eq!(r["outcome"], "advanced", "{r:#}");
    assert_eq!(r["class"], "code-pass", "{r:#}");
    assert_eq!(r["verdict"], "SUCCESS", "{r:#}");
    assert_eq!(r["report"], report_path(&wi, "15-staging-log.md"));
    let s = w.show(&wi);
    assert_eq!(s["stage"], "deploy", "{s:#}");
    assert!(
        transitions(&s).iter().any(|t| t["from"] == "deploy-staging"
            && t["to"] == "deploy"
            && t["outcome"] == "advanced"),
        "{:#}",
        s["transitions"]
    );
    let text = remote_file(&w, &branch, &report_path(&wi, "15-staging-log.md"))
        .expect("15-staging-log.md is on the remote branch");
    let fm = frontmatter(&text);
    assert_eq!(fm["staging_status"], "SUCCESS", "{text}");
    assert_eq!(fm["author_agent"], "staging-runner");
    assert_eq!(fm["stage"], "deploy-staging");
    assert_eq!(fm["status"], "success");
    assert_eq!(fm["exit_code"], "0");
    assert!(text.contains("staging checks: 4 ok"), "{text}");
    assert_eq!(
        git(&w.remote, &["log", "-1", "--format=%an <%ae>", &branch]),
        "staging-runner <staging-runner@orch.invalid>"
    );
}

#[test]
fn staging_command_not_found_on_stderr_holds() {
    let w = World::new();
    let st = sh_argv(
        &w,
        "staging-cnf.sh",
        "echo 'deploying to staging'\necho 'sh: 1: kubectl: command not found' >&2\nexit 1",
    );
    let wi = walk_to_deploy_staging(&w, &staging_block(&st, 60, ""), "", "");
    let branch = w.branch_of(&wi);
    let before = untouched(&w, &wi);
    let r = run_staging(&w, &wi, &[], 5);
    assert_eq!(r["outcome"], "held", "{r:#}");
    assert_eq!(r["class"], "permanent-env", "{r:#}");
    assert!(
        r["reason"].as_str().unwrap().contains("command not found"),
        "{r:#}"
    );
    let s = w.show(&wi);
    assert!(s["held_at"].is_string(), "{s:#}");
    assert_eq!(untouched(&w, &wi), before);
    assert!(remote_file(&w, &branch, &report_path(&wi, "15-staging-log.md")).is_none());
}

#[test]
fn staging_timeouts_defer_until_the_budget_is_spent_then_hold() {
    let w = World::new();
    let st = sh_argv(
        &w,
        "staging-hang.sh",
        "echo 'waiting for staging'\nsleep 30",
    );
    let wi = walk_to_deploy_staging(
        &w,
        &staging_block(&st, 1, "infra_retry_delay_s: 120\ninfra_max_retries: 2"),
        "",
        "",
    );
    let branch = w.branch_of(&wi);
    let head = w.remote_head(&branch);
    for round in 1..=2 {
        let before = now();
        let r = run_staging(&w, &wi, &[], 4);
        let after = now();
        assert_eq!(r["outcome"], "deferred", "round {round}: {r:#}");
        assert_eq!(r["class"], "transient-infra", "{r:#}");
        let job = r["enqueued_job"].as_i64().unwrap();
        let s = w.show(&wi);
        let j = job_by_id(&s, job);
        assert_eq!(j["role"], "deployer");
        assert_eq!(j["stage"], "deploy-staging");
        assert!(
            j["prompt"].as_str().unwrap().contains("infra-retry"),
            "{j:#}"
        );
        let at: i64 = w
            .sql(&format!("SELECT available_at FROM jobs WHERE id = {job}"))
            .parse()
            .unwrap();
        assert!(
            at >= before + 120 && at <= after + 120,
            "{at} vs {before}..{after}"
        );
        assert_eq!(s["stage"], "deploy-staging");
        assert!(s["held_at"].is_null());
    }
    let r = run_staging(&w, &wi, &[], 5);
    assert_eq!(r["outcome"], "held", "{r:#}");
    assert_eq!(r["class"], "transient-infra", "{r:#}");
    let s = w.show(&wi);
    assert!(s["held_at"].is_string(), "{s:#}");
    assert_eq!(s["stage"], "deploy-staging", "never a FAILED rollback");
    assert_eq!(s["dev_retries"], 0);
    assert_eq!(w.remote_head(&branch), head, "no staging log is committed");
    assert!(remote_file(&w, &branch, &report_path(&wi, "15-staging-log.md")).is_none());
    assert!(
        procs::with_cmdline(&format!("{}/staging-hang.sh", tmp(&w))).is_empty(),
        "the staging suite is gone"
    );
}

/// A fake `ssh` first on `PATH`: records its argv (NUL-separated) and then, per the mode file,
/// exits with a code or runs its last argument through `sh -c` locally.
fn fake_ssh(w: &World, mode: &str) -> String {
    let t = tmp(w);
    let ssh = w.script(
        "bin/ssh",
        &format!(
            "printf '%s\\0' \"$@\" > '{t}/ssh-argv'\n\
             mode=$(cat '{t}/ssh-mode')\n\
             if [ \"$mode\" = eval ]; then\n  for a; do last=$a; done\n  exec /bin/sh -c \"$last\"\nfi\n\
             echo 'ssh: connect to host stage1 port 22: Connection timed out' >&2\nexit \"$mode\""
        ),
    );
    std::fs::write(format!("{t}/ssh-mode"), mode).unwrap();
    support::path_with(ssh.parent().unwrap())
}

fn ssh_argv(w: &World) -> Vec<String> {
    let raw = std::fs::read(w.dir.path().join("ssh-argv")).expect("the fake ssh ran");
    raw.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[test]
fn staging_over_ssh_exit_255_is_transient() {
    let w = World::new();
    let path = fake_ssh(&w, "255");
    let st = staging_block(
        &yaml_list(&["./scripts/staging-check.sh", "--quick"]),
        60,
        "infra_retry_delay_s: 60\nssh: {user: deploy, host: stage1}",
    );
    let wi = walk_to_deploy_staging(&w, &st, "", "");
    let r = w.orch_with(&["run-staging", &wi, "--json"], &[("PATH", &path)]);
    assert_eq!(r.code, 4, "{r:?}");
    let v = r.json();
    assert_eq!(v["outcome"], "deferred", "{v:#}");
    assert_eq!(v["class"], "transient-infra", "{v:#}");
    assert_eq!(v["exit_code"], 255, "{v:#}");
    let argv = ssh_argv(&w);
    let joined = argv.join(" ");
    assert!(
        joined.contains("-o BatchMode=yes -o ConnectTimeout=10"),
        "{argv:?}"
    );
    assert!(argv.iter().any(|a| a == "deploy@stage1"), "{argv:?}");
    assert_eq!(
        argv.last().unwrap(),
        "./scripts/staging-check.sh --quick",
        "{argv:?}"
    );
    let s = w.show(&wi);
    assert_eq!(s["stage"], "deploy-staging");
    assert!(s["held_at"].is_null());
}

#[test]
fn staging_over_ssh_keeps_tricky_arguments_literal() {
    let w = World::new();
    let t = tmp(&w);
    let path = fake_ssh(&w, "eval");
    let tricky = format!(
        "a b  'c' \"d\" $(touch {t}/xyz) `touch {t}/xyz2`; touch {t}/xyz3 && echo $HOME \\n *"
    );
    let st = staging_block(
        &yaml_list(&["printf", "[%s]\\n", &tricky]),
        60,
        "ssh: {user: deploy, host: stage1}",
    );
    let wi = walk_to_deploy_staging(&w, &st, "", "");
    let r = w.orch_with(&["run-staging", &wi, "--json"], &[("PATH", &path)]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["verdict"], "SUCCESS", "{v:#}");
    for f in ["xyz", "xyz2", "xyz3"] {
        assert!(
            !Path::new(&format!("{t}/{f}")).exists(),
            "`{f}` was created: the inner command was evaluated"
        );
    }
    let argv = ssh_argv(&w);
    assert!(argv.iter().any(|a| a == "deploy@stage1"), "{argv:?}");
    let text = remote_file(
        &w,
        &w.branch_of(&wi),
        &report_path(&wi, "15-staging-log.md"),
    )
    .unwrap();
    assert!(
        text.contains(&format!("[{tricky}]")),
        "the argument was printed literally:\n{text}"
    );
}

// ------------------------------------------------------------------------------ the supervisor

#[test]
fn tick_runs_tester_and_deployer_jobs_through_the_runners_without_an_agent() {
    let w = World::new();
    let t = tmp(&w);
    let agent = w.script(
        "agent.sh",
        &format!(
            "touch '{t}/agent-launched'\necho '{{\"type\":\"result\",\"is_error\":true}}'\nexit 1"
        ),
    );
    let pass = sh_argv(
        &w,
        "suite-pass.sh",
        "echo 'tests ok via the supervisor'\nexit 0",
    );
    let st = sh_argv(
        &w,
        "staging-ok.sh",
        "echo 'staging ok via the supervisor'\nexit 0",
    );
    configure(
        &w,
        &format!(
            "{}{}",
            tests_block(&pass, 60, ""),
            staging_block(&st, 60, "")
        ),
        &format!(
            "agent:\n  argv: [{}]\nscheduler:\n  reconcile_grace_s: 1\n  retry_backoff_s: 1\n",
            q(&agent.display().to_string())
        ),
    );
    let wi = w.walk_to_testing("Supervised");
    let s = w.show(&wi);
    let live: Vec<&Value> = jobs(&s)
        .iter()
        .filter(|j| j["status"] == "queued" || j["status"] == "running")
        .collect();
    assert_eq!(live.len(), 1, "only the tester is queued: {live:#?}");
    let tester = live[0]["id"].as_i64().unwrap();
    assert_eq!(live[0]["role"], "tester");

    let done = poll(DEADLINE, Duration::from_millis(200), || {
        let r = w.orch(&["tick"]);
        assert_eq!(r.code, 0, "{r:?}");
        w.sql(&format!("SELECT stage FROM tasks WHERE work_item = '{wi}'")) == "done"
            && w.sql("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')") == "0"
    });
    assert!(done, "the task did not reach done: {:#}", w.show(&wi));
    assert!(
        !Path::new(&format!("{t}/agent-launched")).exists(),
        "no agent was launched"
    );
    assert_eq!(
        w.sql(&format!("SELECT status FROM jobs WHERE id = {tester}")),
        "done"
    );
    let deployer: i64 = w
        .sql("SELECT id FROM jobs WHERE role = 'deployer' AND stage = 'deploy-staging'")
        .parse()
        .expect("one deployer job on deploy-staging");
    assert_eq!(
        w.sql(&format!("SELECT status FROM jobs WHERE id = {deployer}")),
        "done"
    );
    assert_eq!(
        w.sql(&format!(
            "SELECT count(*) FROM agent_runs WHERE job_id IN ({tester}, {deployer})"
        )),
        "0",
        "no agent_runs row for a runner job"
    );
    assert_eq!(w.sql("SELECT count(*) FROM agent_runs"), "0");
    let branch = w.branch_of(&wi);
    let authors = git(&w.remote, &["log", "--format=%an", &branch]);
    assert!(authors.lines().any(|a| a == "test-runner"), "{authors}");
    assert!(authors.lines().any(|a| a == "staging-runner"), "{authors}");
    let s = w.show(&wi);
    assert!(
        transitions(&s)
            .iter()
            .any(|t| t["from"] == "testing" && t["actor"] == "supervisor"),
        "{:#}",
        s["transitions"]
    );
}

// ------------------------------------------------------------------------------ crash safety

/// A suite whose processes are all found by a marked `sleep` in their command lines.
fn marked_hanging_suite(w: &World, name: &str) -> (String, String) {
    let t = tmp(w);
    let marker = format!("{t}/{name}-sleep");
    std::os::unix::fs::symlink(
        support::which("sleep").expect("sleep is installed"),
        &marker,
    )
    .unwrap();
    let argv = sh_argv(
        w,
        &format!("{name}.sh"),
        &format!("echo started > '{t}/{name}.started'\n'{marker}' 60 &\n'{marker}' 60\n"),
    );
    (argv, marker)
}

/// SIGINT to a foreground `orch run-tests` used to orphan the suite: orch died, the suite ran
/// on. Now the suite's whole group is killed first, then orch ends of the signal.
#[test]
fn sigint_to_run_tests_kills_the_suite_first() {
    let w = World::new();
    let (argv, marker) = marked_hanging_suite(&w, "int-suite");
    configure(&w, &tests_block(&argv, 120, ""), "");
    let wi = w.walk_to_testing("Interrupted");
    let mut child = w
        .orch_cmd(&["run-tests", &wi])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Path::new(&tmp(&w)).join("int-suite.started");
    wait_until("the suite started", DEADLINE, || {
        started.exists() && procs::with_cmdline(&marker).len() == 2
    });
    procs::signal(child.id() as i32, libc::SIGINT);
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    assert_none_survive(&marker);
    // Nothing was decided: no report, the task still in testing.
    assert_eq!(w.stage(&wi), "testing");
}

/// Suites and CI commands were not recorded as the job's process group: a SIGKILLed supervisor
/// left its suite running, and the next attempt started a second suite in the same worktree.
#[test]
fn a_dead_supervisors_suite_is_killed_before_the_job_runs_again() {
    let w = World::new();
    let (argv, marker) = marked_hanging_suite(&w, "sup-suite");
    configure(
        &w,
        &tests_block(&argv, 120, ""),
        "scheduler:\n  reconcile_grace_s: 1\n  retry_backoff_s: 1\n",
    );
    let wi = w.walk_to_testing("Supervised suite");
    let started = Path::new(&tmp(&w)).join("sup-suite.started");
    let ok = poll(DEADLINE, Duration::from_millis(200), || {
        assert_eq!(w.orch(&["tick"]).code, 0);
        started.exists() && procs::with_cmdline(&marker).len() == 2
    });
    assert!(ok, "the suite never started: {:#}", w.show(&wi));
    // The suite is the job's recorded group.
    let row = w.sql(&format!(
        "SELECT j.supervisor_pid, j.agent_pgid FROM jobs j JOIN tasks t ON t.id = j.task_id \
         WHERE t.work_item = '{wi}' AND j.status = 'running'"
    ));
    let (sup, group) = row.split_once('|').expect("one running job");
    let group: i32 = group.parse().expect("the suite's group is recorded");
    assert!(
        procs::with_cmdline(&marker)
            .iter()
            .all(|(p, _)| procs::stat(*p).is_some_and(|s| s.pgrp == group))
    );
    procs::kill(sup.parse().unwrap());
    // The next tick reaps the job: the suite dies with its group, and only then runs again.
    assert_eq!(w.orch(&["tick"]).code, 0);
    assert!(
        poll(Duration::from_secs(20), Duration::from_millis(50), || {
            procs::with_cmdline(&marker).len() <= 2 && std::fs::read_to_string(&started).is_ok()
        }),
        "{:?}",
        procs::with_cmdline(&marker)
    );
    // Never two suites at once in the worktree.
    for _ in 0..10 {
        assert_eq!(w.orch(&["tick"]).code, 0);
        assert!(
            procs::with_cmdline(&marker).len() <= 2,
            "two suites run at once"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    w.orch(&["cancel", &wi]);
    assert_none_survive(&marker);
}

/// A FIFO named like an artifact wedged the scheduler: the gate read it under the repo lock and
/// the transition lease, for ever, and every supervisor of the repo queued behind the lock. It
/// is refused at once, and the gate says why.
#[test]
fn a_fifo_named_like_the_artifact_is_refused_without_blocking() {
    let w = World::new();
    let pass = sh_argv(&w, "suite-pass.sh", "exit 0");
    configure(&w, &tests_block(&pass, 60, ""), "");
    let wi = w.walk_to_review("Fifo artifact");
    // A dry check creates the task worktree; the reviewer's artifact becomes a FIFO in it.
    run_tests(&w, &wi, &["--no-advance"], 0);
    let fifo = worktree(&w, &wi).join(report_path(&wi, "12-review.md"));
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let started = Instant::now();
    let mut child = w
        .orch_cmd(&["advance", &wi, "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let done = poll(Duration::from_secs(60), Duration::from_millis(50), || {
        child.try_wait().unwrap().is_some()
    });
    if !done {
        let _ = child.kill();
        panic!("orch advance blocked on the FIFO");
    }
    let r = support::wait_output(child);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.json()["reason"]
            .as_str()
            .unwrap()
            .contains("`12-review.md` is a FIFO, not a regular file"),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(w.sql("SELECT count(*) FROM transition_lease"), "0");
}
