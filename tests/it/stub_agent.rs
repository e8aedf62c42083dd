//! The stub agent (`scripts/stub-agent`), run directly the way orch launches an agent: cwd = a git
//! worktree, prompt on stdin, `ORCH_*` in the environment, flags in argv.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, STUB_KNOBS, procs, stub_agent, wait_until};

const ROLES: [&str; 6] = [
    "analyst",
    "architect",
    "developer",
    "reviewer",
    "tester",
    "deployer",
];
const NEGATIVE: [&str; 6] = [
    "FAIL",
    "FAILED",
    "BLOCKED",
    "REQUEST_CHANGES",
    "REJECT",
    "RED",
];
/// What the stub reads from orch besides its knobs; a test sets them itself or not at all.
const ORCH_INPUTS: [&str; 2] = ["ORCH_STAGE", "ORCH_ARTIFACT_DIR"];

/// A temp dir holding a `git init` repo (`repo/`) and a state dir (`state/`) outside it.
struct Sandbox {
    dir: support::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = support::tempdir();
        std::fs::create_dir_all(dir.path().join("repo")).unwrap();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        let s = Sandbox { dir };
        support::git(&s.repo(), &["init", "-q", "-b", "main"]);
        s
    }

    /// Like `new`, with one commit (`README.md`, `src/lib.txt`) so HEAD exists.
    fn with_commit() -> Sandbox {
        let s = Sandbox::new();
        std::fs::write(s.repo().join("README.md"), "shop\n").unwrap();
        std::fs::create_dir_all(s.repo().join("src")).unwrap();
        std::fs::write(s.repo().join("src/lib.txt"), "v1\n").unwrap();
        support::git(&s.repo(), &["add", "-A"]);
        support::git(&s.repo(), &["commit", "-qm", "initial"]);
        s
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The command orch would run, with a clean knob environment and the state dir set.
    fn cmd(&self, role: &str, wi: &str, env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(stub_agent());
        c.args([
            "--print",
            "--output-format",
            "json",
            "--model",
            "claude-test",
            "--system-prompt-file",
            "/nonexistent/prompt.md",
        ]);
        c.current_dir(self.repo());
        for k in STUB_KNOBS.iter().chain(&ORCH_INPUTS) {
            c.env_remove(k);
        }
        c.env("ORCH_ROLE", role)
            .env("ORCH_WORK_ITEM", wi)
            .env("ORCH_JOB_ID", "42")
            .env("ORCH_ARTIFACT_DIR", format!("docs/work-items/{wi}"))
            .env("ORCH_SANDBOX", "1")
            .env("STUB_STATE_DIR", self.state());
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Run with a prompt on stdin and wait.
    fn run(&self, role: &str, wi: &str, env: &[(&str, &str)]) -> Output {
        let mut child = self
            .cmd(role, wi, env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("stub-agent starts");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"You are the agent. Do the work.\n")
            .expect("prompt written");
        child.wait_with_output().expect("stub-agent finishes")
    }

    fn ok(&self, role: &str, wi: &str, env: &[(&str, &str)]) -> serde_json::Value {
        let out = self.run(role, wi, env);
        assert_eq!(out.status.code(), Some(0), "{role}: {}", show(&out));
        result_line(&out)
    }

    fn artifact(&self, wi: &str, name: &str) -> String {
        let p = self.repo().join(format!("docs/work-items/{wi}/{name}"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn porcelain(&self) -> Vec<String> {
        support::git(
            &self.repo(),
            &["status", "--porcelain", "--untracked-files=all"],
        )
        .lines()
        .map(str::to_string)
        .collect()
    }
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// stdout is exactly one line of JSON.
fn result_line(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stdout: {}", show(out));
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", show(out)))
}

/// The frontmatter of a Markdown artifact as key → value.
fn frontmatter(text: &str) -> BTreeMap<String, String> {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("---"), "first line is ---:\n{text}");
    let mut map = BTreeMap::new();
    for line in lines {
        if line == "---" {
            return map;
        }
        let (k, v) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        map.insert(k.trim().to_string(), v.trim().to_string());
    }
    panic!("unterminated frontmatter:\n{text}");
}

fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

fn check_common(fm: &BTreeMap<String, String>, wi: &str, stage: &str, role: &str) {
    assert_eq!(fm["work_item"], wi);
    assert_eq!(fm["stage"], stage);
    assert_eq!(fm["author_agent"], format!("stub-{role}"));
    assert_eq!(fm["model_used"], "stub");
    assert!(is_timestamp(&fm["created_at"]), "{fm:?}");
    assert!(!fm["run_id"].is_empty(), "{fm:?}");
    assert!(fm.contains_key("status"), "{fm:?}");
}

/// No whole negative token anywhere in the frontmatter values.
fn assert_no_negative(fm: &BTreeMap<String, String>) {
    for (k, v) in fm {
        for tok in v.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            assert!(
                !NEGATIVE.contains(&tok.to_ascii_uppercase().as_str()),
                "negative token {tok:?} in {k}: {v}"
            );
        }
    }
}

#[test]
fn each_role_writes_its_artifacts_with_frontmatter() {
    let s = Sandbox::with_commit();
    let wi = "DEMO-1";
    for role in ROLES {
        s.ok(role, wi, &[]);
    }
    for name in ["01-brd.md", "02-trz.md", "03-acceptance-criteria.md"] {
        let fm = frontmatter(&s.artifact(wi, name));
        check_common(&fm, wi, "analysis", "analyst");
        assert_eq!(fm["status"], "success");
    }
    let plan = s.artifact(wi, "04-test-plan.yaml");
    for key in [
        "work_item: DEMO-1",
        "stage: analysis",
        "author_agent: stub-analyst",
        "status: success",
        "model_used: stub",
        "created_at: ",
        "run_id: ",
        "cases:",
    ] {
        assert!(
            plan.lines().any(|l| l.starts_with(key)),
            "{key} in plan:\n{plan}"
        );
    }
    assert!(plan.contains("- id: AC-1"), "{plan}");

    let fm = frontmatter(&s.artifact(wi, "06-adr/0001-demo-1.md"));
    check_common(&fm, wi, "architecture", "architect");

    let fm = frontmatter(&s.artifact(wi, "10-dev-notes.md"));
    check_common(&fm, wi, "development", "developer");
    let code = std::fs::read_to_string(s.repo().join("src/stub_demo-1.txt")).unwrap();
    assert!(code.contains(&fm["run_id"]), "{code}");

    let review = s.artifact(wi, "12-review.md");
    let fm = frontmatter(&review);
    check_common(&fm, wi, "review", "reviewer");
    assert_eq!(fm["verdict"], "APPROVED");
    assert_eq!(fm["status"], "success");
    assert_no_negative(&fm);
    assert!(review.contains("\n## Findings\n"), "{review}");

    let report = s.artifact(wi, "13-test-report.md");
    let fm = frontmatter(&report);
    check_common(&fm, wi, "testing", "tester");
    assert_eq!(fm["result"], "PASS");
    assert_eq!(fm["status"], "success");
    assert!(!fm.contains_key("verdict"));
    assert_no_negative(&fm);
    assert!(report.contains("\n## Test output\n"), "{report}");

    let fm = frontmatter(&s.artifact(wi, "14-deploy-log.md"));
    check_common(&fm, wi, "deploy", "deployer");
    assert_eq!(fm["deploy_status"], "SUCCESS");
    assert_eq!(fm["status"], "success");
    assert_eq!(
        fm["commit"],
        support::git(&s.repo(), &["rev-parse", "HEAD"])
    );
    assert_no_negative(&fm);

    // Nothing committed: the stub only writes files.
    assert_eq!(
        support::git(&s.repo(), &["rev-list", "--count", "HEAD"]),
        "1"
    );
}

#[test]
fn orch_stage_goes_into_the_frontmatter() {
    let s = Sandbox::new();
    s.ok("analyst", "SHOP-3", &[("ORCH_STAGE", "analysis")]);
    s.ok("tester", "SHOP-3", &[("ORCH_STAGE", "testing")]);
    // A deployer launched on deploy-staging writes the staging log the gate reads there.
    s.ok("deployer", "SHOP-3", &[("ORCH_STAGE", "deploy-staging")]);
    let fm = frontmatter(&s.artifact("SHOP-3", "15-staging-log.md"));
    check_common(&fm, "SHOP-3", "deploy-staging", "deployer");
    assert_eq!(fm["staging_status"], "SUCCESS");
    assert_no_negative(&fm);
}

#[test]
fn reviewer_requests_changes_for_the_first_n_runs_then_approves() {
    let s = Sandbox::new();
    let env = [("STUB_REQUEST_CHANGES_FIRST", "2")];
    let mut run_ids = Vec::new();
    for n in 1..=3 {
        let r = s.ok("reviewer", "SHOP-7", &env);
        assert_eq!(r["is_error"], false);
        let review = s.artifact("SHOP-7", "12-review.md");
        let fm = frontmatter(&review);
        run_ids.push(fm["run_id"].clone());
        if n <= 2 {
            assert_eq!(fm["verdict"], "REQUEST_CHANGES", "run {n}");
            assert_eq!(fm["status"], "failed", "run {n}");
            assert!(
                review.contains(&format!(
                    "## Findings\n- P0: stub finding {n}: handle the empty input\n- P2: naming nit\n"
                )),
                "run {n}:\n{review}"
            );
        } else {
            assert_eq!(fm["verdict"], "APPROVED");
            assert_eq!(fm["status"], "success");
            assert_no_negative(&fm);
            assert!(!review.contains("P0"), "{review}");
        }
    }
    run_ids.dedup();
    assert_eq!(run_ids.len(), 3, "a new run_id every run");
    // The counter is per task: another work item starts again at run 1.
    s.ok("reviewer", "SHOP-8", &env);
    assert_eq!(
        frontmatter(&s.artifact("SHOP-8", "12-review.md"))["verdict"],
        "REQUEST_CHANGES"
    );
}

#[test]
fn tester_fails_for_the_first_n_runs_then_passes() {
    let s = Sandbox::new();
    let env = [("STUB_TEST_FAIL_FIRST", "1")];
    s.ok("tester", "SHOP-2", &env);
    let report = s.artifact("SHOP-2", "13-test-report.md");
    let fm = frontmatter(&report);
    assert_eq!(fm["result"], "FAIL");
    assert_eq!(fm["status"], "failed");
    assert!(
        report.contains("stub test failure 1: assertion failed"),
        "{report}"
    );
    assert!(report.contains("\n## Test output\n"), "{report}");

    s.ok("tester", "SHOP-2", &env);
    let report = s.artifact("SHOP-2", "13-test-report.md");
    let fm = frontmatter(&report);
    assert_eq!(fm["result"], "PASS");
    assert_eq!(fm["status"], "success");
    assert_no_negative(&fm);
    assert!(!report.contains("stub test failure"), "{report}");
}

#[test]
fn stub_exit_gives_the_code_and_writes_nothing() {
    let s = Sandbox::new();
    let env = [("STUB_EXIT", "developer:7")];
    let out = s.run("developer", "SHOP-4", &env);
    assert_eq!(out.status.code(), Some(7), "{}", show(&out));
    assert_eq!(result_line(&out)["is_error"], true);
    assert!(s.porcelain().is_empty(), "{:?}", s.porcelain());
    // Other roles are not affected.
    s.ok("analyst", "SHOP-4", &env);
    assert!(s.repo().join("docs/work-items/SHOP-4/01-brd.md").is_file());
}

#[test]
fn usage_limit_for_the_first_n_runs_then_works() {
    let s = Sandbox::new();
    let env = [("STUB_USAGE_LIMIT", "analyst:2")];
    for _ in 0..2 {
        let out = s.run("analyst", "SHOP-5", &env);
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let r = result_line(&out);
        assert_eq!(r["terminal_reason"], "blocking_limit");
        assert_eq!(r["is_error"], true);
        assert_eq!(r["type"], "result");
        assert!(r["result"].as_str().unwrap().contains("usage limit"));
        assert!(s.porcelain().is_empty(), "{:?}", s.porcelain());
    }
    let r = s.ok("analyst", "SHOP-5", &env);
    assert_eq!(r["terminal_reason"], "end_turn");
    assert!(s.repo().join("docs/work-items/SHOP-5/01-brd.md").is_file());
    // A different role is not limited.
    let r = s.ok("architect", "SHOP-6", &env);
    assert_eq!(r["is_error"], false);
}

#[test]
fn say_prints_a_line_and_session_id_is_escaped_into_the_result() {
    let s = Sandbox::new();
    let hostile = r#"a"b\c; rm -rf ~ $(id)"#;
    let out = s.run(
        "analyst",
        "SHOP-7",
        &[
            ("STUB_SAY", "Claude AI usage limit reached|1767225600"),
            ("STUB_SESSION_ID", hostile),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().next(),
        Some("Claude AI usage limit reached|1767225600"),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "the line said, then the result: {stdout}");
    let r: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(r["session_id"], hostile, "{r}");
    assert_eq!(r["is_error"], false, "saying it is not hitting it: {r}");
    // A control character is refused, not printed.
    let out = s.run("analyst", "SHOP-7", &[("STUB_SESSION_ID", "a\nb")]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn result_line_is_claude_shaped_json() {
    let s = Sandbox::new();
    let mut inputs = Vec::new();
    for role in ROLES {
        let r = s.ok(role, "DEMO-9", &[]);
        assert_eq!(r["type"], "result", "{r}");
        assert_eq!(r["subtype"], "success", "{r}");
        assert_eq!(r["is_error"], false, "{r}");
        assert_eq!(r["result"], format!("stub {role} done"), "{r}");
        assert!(
            r["session_id"]
                .as_str()
                .unwrap()
                .starts_with("stub-DEMO-9-"),
            "{r}"
        );
        assert_eq!(r["terminal_reason"], "end_turn", "{r}");
        assert!(r["num_turns"].as_u64().unwrap() >= 1, "{r}");
        assert!(r["duration_ms"].as_u64().is_some(), "{r}");
        assert!(r["total_cost_usd"].as_f64().unwrap() > 0.0, "{r}");
        for k in [
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ] {
            assert!(r["usage"][k].as_u64().is_some(), "{k} in {r}");
        }
        inputs.push(r["usage"]["input_tokens"].as_u64().unwrap());
    }
    inputs.sort();
    inputs.dedup();
    assert_eq!(inputs.len(), ROLES.len(), "usage differs by role");
}

#[test]
fn counters_live_outside_the_repo() {
    let s = Sandbox::with_commit();
    let tmp = s.dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    for role in ROLES {
        let out = s
            .cmd(role, "SHOP-9", &[("TMPDIR", tmp.to_str().unwrap())])
            .env_remove("STUB_STATE_DIR")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    }
    let status = s.porcelain();
    assert!(!status.is_empty());
    for line in &status {
        assert!(
            line.starts_with("?? docs/work-items/SHOP-9/") || line.starts_with("?? src/"),
            "unexpected change {line:?} in {status:?}"
        );
    }
    // The committed file is untouched; the developer only added its own file.
    assert_eq!(
        std::fs::read_to_string(s.repo().join("src/lib.txt")).unwrap(),
        "v1\n"
    );
    assert!(status.contains(&"?? src/stub_shop-9.txt".to_string()));
    for role in ROLES {
        let counter = tmp.join(format!("orch-stub/SHOP-9/{role}.count"));
        assert_eq!(
            std::fs::read_to_string(&counter).unwrap().trim(),
            "1",
            "{}",
            counter.display()
        );
    }
}

#[test]
fn developer_appends_a_line_per_run() {
    let s = Sandbox::with_commit();
    for _ in 0..2 {
        s.ok("developer", "SHOP-1", &[]);
    }
    let code = std::fs::read_to_string(s.repo().join("src/stub_shop-1.txt")).unwrap();
    assert_eq!(code.lines().count(), 2, "{code}");
    let status = s.porcelain();
    assert_eq!(
        status,
        vec![
            "?? docs/work-items/SHOP-1/10-dev-notes.md".to_string(),
            "?? src/stub_shop-1.txt".to_string()
        ]
    );
}

#[test]
fn invalid_environment_exits_2_and_writes_nothing() {
    let s = Sandbox::new();
    for wi in [
        "",
        "shop-1",
        "SHOP-",
        "SHOP1",
        "../X-1",
        "SHOP-1/../../x",
        "SHOP-1 ",
        "-1",
        "1SHOP-1",
        "ABCDEFGHIJKLMNOPQ-1",
        "SHOP-1234567890",
    ] {
        let out = s.run("analyst", wi, &[]);
        assert_eq!(out.status.code(), Some(2), "{wi:?}: {}", show(&out));
    }
    for role in ["", "admin", "Analyst", "analyst "] {
        let out = s.run(role, "SHOP-1", &[]);
        assert_eq!(out.status.code(), Some(2), "{role:?}: {}", show(&out));
    }
    let out = s.run(
        "analyst",
        "SHOP-1",
        &[("ORCH_ARTIFACT_DIR", "docs/work-items/../../escape")],
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(s.porcelain().is_empty(), "{:?}", s.porcelain());
    assert!(
        std::fs::read_dir(s.state()).unwrap().next().is_none(),
        "no counters for rejected runs"
    );
    // The longest valid id is accepted.
    s.ok("analyst", "ABCDEFGHIJKLMNOP-123456789", &[]);
}

#[test]
fn run_log_gets_one_line_per_run() {
    let s = Sandbox::new();
    let log = s.dir.path().join("runs.log");
    let env = [("STUB_RUN_LOG", log.to_str().unwrap())];
    s.ok("analyst", "SHOP-1", &env);
    s.ok("architect", "SHOP-1", &env);
    s.ok("analyst", "SHOP-2", &env);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 3, "{text}");
    let expect = [
        ("SHOP-1", "analyst"),
        ("SHOP-1", "architect"),
        ("SHOP-2", "analyst"),
    ];
    for (fields, (wi, role)) in lines.iter().zip(expect) {
        assert_eq!(fields.len(), 4, "{text}");
        assert_eq!(fields[0], wi);
        assert_eq!(fields[1], role);
        assert_eq!(fields[2], "42");
    }
    let mut ids: Vec<&str> = lines.iter().map(|f| f[3]).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "run ids are unique: {text}");
    // The run id in the log is the one in the artifact.
    let fm = frontmatter(&s.artifact("SHOP-2", "01-brd.md"));
    assert_eq!(fm["run_id"], lines[2][3]);
}

#[test]
fn a_large_prompt_is_read_in_full() {
    let s = Sandbox::new();
    let mut child = s
        .cmd("analyst", "SHOP-1", &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prompt = vec![b'x'; 4 << 20];
    // Would fail with a broken pipe if the stub exited without reading stdin.
    child.stdin.take().unwrap().write_all(&prompt).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
}

#[test]
fn stub_sleep_delays_the_run() {
    let s = Sandbox::new();
    let t = Instant::now();
    s.ok("analyst", "SHOP-1", &[("STUB_SLEEP", "1")]);
    assert!(t.elapsed() >= Duration::from_secs(1));
    let out = s.run("analyst", "SHOP-1", &[("STUB_SLEEP", "soon")]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

/// SIGKILL to the process group this test started with `process_group(0)`.
fn kill_group(pid: u32) {
    procs::kill(-(pid as i32));
}

#[test]
fn stub_hang_sleeps_until_its_group_is_killed() {
    let s = Sandbox::new();
    let mut child = s
        .cmd("tester", "SHOP-1", &[("STUB_HANG", "tester")])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The stub `exec`s sleep, so the process we started becomes `sleep` itself.
    let comm = PathBuf::from(format!("/proc/{pid}/comm"));
    if comm.exists() {
        wait_until("the stub becomes sleep", Duration::from_secs(10), || {
            std::fs::read_to_string(&comm).unwrap_or_default().trim() == "sleep"
        });
    } else {
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(child.try_wait().unwrap().is_none(), "still running");
    kill_group(pid);
    let out = child.wait_with_output().unwrap();
    assert!(out.stdout.is_empty(), "silent");
    assert!(s.porcelain().is_empty(), "{:?}", s.porcelain());
}

#[test]
fn stub_linger_prints_its_result_then_keeps_running() {
    let s = Sandbox::new();
    let mut child = s
        .cmd("deployer", "SHOP-1", &[("STUB_LINGER", "deployer")])
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(20));
    let line = match line {
        Ok(l) => l,
        Err(e) => {
            kill_group(pid);
            panic!("no result line: {e}");
        }
    };
    let r: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(r["type"], "result");
    assert_eq!(r["is_error"], false);
    std::thread::sleep(Duration::from_millis(300));
    let still_running = child.try_wait().unwrap().is_none();
    kill_group(pid);
    child.wait().unwrap();
    // The pipe closes once the whole group (including the grandchild) is gone.
    reader.join().unwrap();
    assert!(still_running, "the stub lingers after its result");
    assert!(
        s.repo()
            .join("docs/work-items/SHOP-1/14-deploy-log.md")
            .is_file()
    );
}
