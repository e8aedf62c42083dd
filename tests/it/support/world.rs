//! A temp world for the tests: a bare git remote seeded with one commit on `main`, an `orch.yaml`
//! pointing at it, and helpers to run the real `orch` binary, to push artifacts to a task branch
//! the way an agent would, and to walk a task by hand. Dropping a world kills every process it
//! started (found by its directory or its stub-agent state), then removes it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::{TempDir, poll, procs, tempdir};

pub struct World {
    pub dir: TempDir,
    pub remote: PathBuf,
    pub config: PathBuf,
    /// A scratch clone used to push commits to the remote.
    pub scratch: PathBuf,
    /// Run agents and suites under bubblewrap (`ORCH_AGENT_SANDBOX`); off unless a test turns
    /// it on.
    pub sandbox: std::sync::atomic::AtomicBool,
    /// Let supervisors, gestures and ingests launch the next job themselves
    /// (`ORCH_LAUNCH_ON_FINISH`): on in the scheduler's worlds; off where a test walks a task by
    /// hand (pushing the artifacts itself), so no agent starts behind its back.
    pub launch: std::sync::atomic::AtomicBool,
}

/// What a finished process said.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Run `cmd` to its end (stdin empty, stdout and stderr captured).
    pub fn of(cmd: &mut Command) -> Run {
        Run::from(cmd.output().expect("the command runs"))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Wait for a child started with piped stdout and stderr.
pub fn wait_output(child: std::process::Child) -> Run {
    Run::from(child.wait_with_output().expect("child finishes"))
}

/// Run `cmd` with `input` on stdin (a reader that stops early closes the pipe; that is fine).
pub fn feed(cmd: &mut Command, input: &[u8]) -> Run {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input);
    drop(stdin);
    wait_output(child)
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=test", "-c", "user.email=test@orch.invalid"])
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The head of `branch` in the repository `repo`, if the branch exists there.
pub fn branch_head(repo: &Path, branch: &str) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}"),
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub fn orch_bin() -> &'static str {
    env!("CARGO_BIN_EXE_orch")
}

/// The `jobs` of a `task show --json` document.
pub fn jobs(show: &Value) -> &Vec<Value> {
    show["jobs"].as_array().expect("jobs is an array")
}

/// The `transitions` of a `task show --json` document.
pub fn transitions(show: &Value) -> &Vec<Value> {
    show["transitions"]
        .as_array()
        .expect("transitions is an array")
}

impl World {
    /// One repo `shop` (prefix `SHOP`).
    pub fn new() -> World {
        Self::with_repo_extra("")
    }

    /// One repo `shop` with the given extra YAML lines for that repo entry.
    pub fn with_repo_extra(extra: &str) -> World {
        Self::in_dir(tempdir(), extra)
    }

    /// One repo `shop`, everything under `dir`.
    pub fn in_dir(dir: super::TempDir, extra: &str) -> World {
        let remote = dir.path().join("remote.git");
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(&remote)
            .output()
            .unwrap();
        assert!(out.status.success());
        let scratch = dir.path().join("scratch");
        let out = Command::new("git")
            .arg("clone")
            .arg("-q")
            .arg(&remote)
            .arg(&scratch)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(scratch.join("README.md"), "shop\n").unwrap();
        std::fs::create_dir_all(scratch.join("src")).unwrap();
        std::fs::write(scratch.join("src/lib.txt"), "v1\n").unwrap();
        git(&scratch, &["checkout", "-q", "-b", "main"]);
        git(&scratch, &["add", "-A"]);
        git(&scratch, &["commit", "-qm", "initial"]);
        git(&scratch, &["push", "-q", "origin", "main"]);
        let config = dir.path().join("orch.yaml");
        let w = World {
            remote,
            config,
            scratch,
            dir,
            sandbox: std::sync::atomic::AtomicBool::new(false),
            launch: std::sync::atomic::AtomicBool::new(false),
        };
        w.write_config(extra);
        w
    }

    /// Rewrite the config: repo `shop` with `repo_extra` (YAML lines of its entry).
    pub fn write_config(&self, repo_extra: &str) {
        let mut extra = String::new();
        for line in repo_extra.lines() {
            extra.push_str("    ");
            extra.push_str(line);
            extra.push('\n');
        }
        std::fs::write(
            &self.config,
            format!(
                "state_dir: {state}\nmax_concurrency: 2\nrepos:\n  - name: shop\n    remote: {remote}\n    prefix: SHOP\n{extra}",
                state = self.dir.path().join("state").display(),
                remote = self.remote.display(),
            ),
        )
        .unwrap();
    }

    /// Append top-level YAML to the config (a newline is added if `yaml` lacks one).
    pub fn append_config(&self, yaml: &str) {
        let mut text = std::fs::read_to_string(&self.config).unwrap();
        text.push_str(yaml);
        if !yaml.is_empty() && !yaml.ends_with('\n') {
            text.push('\n');
        }
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn db_path(&self) -> PathBuf {
        self.state_dir().join("orch.db")
    }

    /// The stub agent's counters (`STUB_STATE_DIR`); its path in a process's environment marks
    /// the process as this world's.
    pub fn stub_state(&self) -> PathBuf {
        self.dir.path().join("stub-state")
    }

    /// `<dir>/<name>`, written as an executable `/bin/sh` script running `body`.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Run `orch --config <cfg> args…`.
    pub fn orch(&self, args: &[&str]) -> Run {
        Run::of(&mut self.orch_cmd(args))
    }

    /// Run `orch --config <cfg> args…` with `env` added to its environment.
    pub fn orch_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.orch_cmd(args);
        c.envs(env.iter().copied());
        Run::of(&mut c)
    }

    pub fn orch_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(orch_bin());
        c.arg("--config").arg(&self.config).args(args);
        c.env_remove("ORCH_CONFIG").env_remove("ORCH_STATE_DIR");
        c.env("ORCH_LOG", "warn");
        // Worlds run their agents unconfined whatever the host has (the stub keeps counters in
        // the world's directory); `tests/it/sandbox.rs` turns the sandbox on.
        c.env(
            "ORCH_AGENT_SANDBOX",
            if self.sandbox.load(std::sync::atomic::Ordering::Relaxed) {
                "bwrap"
            } else {
                "none"
            },
        );
        c.env(
            "ORCH_LAUNCH_ON_FINISH",
            if self.launch.load(std::sync::atomic::Ordering::Relaxed) {
                "true"
            } else {
                "false"
            },
        );
        c
    }

    /// `orch_cmd` for a world that runs the stub agent: none of its knobs leaks in from the
    /// environment of the tests, and its counters live in [`World::stub_state`].
    pub fn stub_cmd(&self, args: &[&str]) -> Command {
        let mut c = self.orch_cmd(args);
        for k in super::STUB_KNOBS {
            c.env_remove(k);
        }
        c.env("STUB_STATE_DIR", self.stub_state());
        c
    }

    /// Run and assert the exit code.
    pub fn ok(&self, args: &[&str], code: i32) -> Run {
        let r = self.orch(args);
        assert_eq!(r.code, code, "orch {args:?}:\n{r:?}");
        r
    }

    /// Add a task, return its work item.
    pub fn add(&self, title: &str, extra: &[&str]) -> String {
        let mut args = vec!["task", "add", "--repo", "shop", "--title", title, "--json"];
        args.extend_from_slice(extra);
        let r = self.ok(&args, 0);
        r.json()["work_item"].as_str().unwrap().to_string()
    }

    /// `orch task show <wi> --json`.
    pub fn show(&self, wi: &str) -> Value {
        self.ok(&["task", "show", wi, "--json"], 0).json()
    }

    /// `orch advance <wi> --json`, asserting the exit code.
    pub fn advance(&self, wi: &str, code: i32) -> Value {
        self.ok(&["advance", wi, "--json"], code).json()
    }

    /// `orch queue --json`, of the documented schema version.
    pub fn queue(&self) -> Value {
        let q = self.ok(&["queue", "--json"], 0).json();
        assert_eq!(q["schema_version"], 1, "{q:#}");
        q
    }

    pub fn branch_of(&self, wi: &str) -> String {
        self.show(wi)["branch"].as_str().unwrap().to_string()
    }

    pub fn stage(&self, wi: &str) -> String {
        self.show(wi)["stage"].as_str().unwrap().to_string()
    }

    /// The database id of a task.
    pub fn task_id(&self, wi: &str) -> i64 {
        self.sql(&format!("SELECT id FROM tasks WHERE work_item = '{wi}'"))
            .parse()
            .unwrap()
    }

    /// The head of `branch` on the bare remote, if the branch exists there.
    pub fn remote_head(&self, branch: &str) -> Option<String> {
        branch_head(&self.remote, branch)
    }

    /// Commit `files` (path relative to the repo root → content) on the task branch and push it,
    /// as an agent would. Creates the branch from `origin/main` the first time.
    pub fn push_files(&self, wi: &str, files: &[(&str, &str)]) {
        let branch = self.branch_of(wi);
        git(&self.scratch, &["fetch", "-q", "origin"]);
        let remote_has = Command::new("git")
            .arg("-C")
            .arg(&self.scratch)
            .args([
                "rev-parse",
                "--verify",
                "-q",
                &format!("refs/remotes/origin/{branch}"),
            ])
            .output()
            .unwrap()
            .status
            .success();
        let base = if remote_has {
            format!("origin/{branch}")
        } else {
            "origin/main".to_string()
        };
        git(&self.scratch, &["checkout", "-q", "-B", &branch, &base]);
        for (path, content) in files {
            let p = self.scratch.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        git(&self.scratch, &["add", "-A"]);
        git(&self.scratch, &["commit", "-qm", &format!("{wi}: update")]);
        git(
            &self.scratch,
            &["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")],
        );
    }

    /// Push the four analysis files.
    pub fn push_analysis(&self, wi: &str) {
        let d = format!("docs/work-items/{wi}");
        self.push_files(
            wi,
            &[
                (
                    &format!("{d}/01-brd.md"),
                    "---\nstage: analysis\n---\n# BRD\n",
                ),
                (
                    &format!("{d}/02-trz.md"),
                    "---\nstage: analysis\n---\n# TRZ\n",
                ),
                (
                    &format!("{d}/03-acceptance-criteria.md"),
                    "---\nstage: analysis\n---\n# AC\n",
                ),
                (&format!("{d}/04-test-plan.yaml"), "cases: []\n"),
            ],
        );
    }

    pub fn push_adr(&self, wi: &str) {
        self.push_files(
            wi,
            &[(
                &format!("docs/work-items/{wi}/06-adr/0001-design.md"),
                "# ADR 1\n",
            )],
        );
    }

    /// A code change outside docs/work-items (with a unique line so every call makes a commit).
    pub fn push_code(&self, wi: &str, marker: &str) {
        self.push_files(
            wi,
            &[(
                &format!("src/{}.txt", wi.to_lowercase()),
                &format!("{marker}\n"),
            )],
        );
    }

    pub fn push_review(&self, wi: &str, verdict: &str, findings: &str, run: u32) {
        let body = format!(
            "---\nverdict: {verdict}\nwork_item: {wi}\nstage: review\nrun_id: {run}\n---\n# Review\n\n## Findings\n{findings}\n"
        );
        self.push_files(
            wi,
            &[(&format!("docs/work-items/{wi}/12-review.md"), &body)],
        );
    }

    pub fn push_test_report(&self, wi: &str, result: &str, output: &str, run: u32) {
        let status = if result == "PASS" {
            "success"
        } else {
            "failed"
        };
        let body = format!(
            "---\nresult: {result}\nstatus: {status}\nwork_item: {wi}\nrun_id: {run}\n---\n# Test report\n\n## Test output\n{output}\n\n## Conclusion\ndone\n"
        );
        self.push_files(
            wi,
            &[(&format!("docs/work-items/{wi}/13-test-report.md"), &body)],
        );
    }

    /// add → analysis + approve → architecture (or development on the bug track).
    pub fn approved(&self, title: &str, extra: &[&str]) -> String {
        let wi = self.add(title, extra);
        self.push_analysis(&wi);
        self.ok(&["approve", &wi, "--json"], 0);
        wi
    }

    /// A fresh task walked to `development` (one ADR on the branch).
    pub fn walk_to_development(&self, title: &str) -> String {
        let wi = self.approved(title, &[]);
        assert_eq!(self.stage(&wi), "architecture");
        self.push_adr(&wi);
        let r = self.advance(&wi, 0);
        assert_eq!(r["to"], "development", "{r:#}");
        wi
    }

    /// A fresh task walked to `review` (code pushed once).
    pub fn walk_to_review(&self, title: &str) -> String {
        let wi = self.walk_to_development(title);
        self.push_code(&wi, "first implementation");
        let r = self.advance(&wi, 0);
        assert_eq!(r["to"], "review", "{r:#}");
        wi
    }

    /// A fresh task walked to `testing` (review APPROVED with run id 1).
    pub fn walk_to_testing(&self, title: &str) -> String {
        let wi = self.walk_to_review(title);
        self.push_review(&wi, "APPROVED", "- none", 1);
        let r = self.advance(&wi, 0);
        assert_eq!(r["to"], "testing", "{r:#}");
        wi
    }

    /// Run SQL against the state database (for setting up states no command makes, such as a
    /// lease held by a dead process). Returns rows as `a|b` lines.
    pub fn sql(&self, sql: &str) -> String {
        let c = rusqlite::Connection::open(self.db_path()).expect("open db");
        c.busy_timeout(Duration::from_secs(10)).unwrap();
        let mut stmt = c.prepare(sql).expect("prepare");
        let n = stmt.column_count();
        let rows: Vec<String> = stmt
            .query_map([], |r| {
                Ok((0..n)
                    .map(|i| match r.get_ref(i).unwrap() {
                        rusqlite::types::ValueRef::Null => "NULL".to_string(),
                        rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                        rusqlite::types::ValueRef::Real(v) => v.to_string(),
                        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
                            String::from_utf8_lossy(t).into_owned()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("|"))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        rows.join("\n")
    }

    /// Every running (non-zombie) process that belongs to this world: its cwd is inside the
    /// world's directory, or its environment carries the world's `STUB_STATE_DIR`.
    pub fn pids(&self) -> Vec<i32> {
        let root = self
            .dir
            .path()
            .canonicalize()
            .unwrap_or_else(|_| self.dir.path().to_path_buf());
        let marker = format!("STUB_STATE_DIR={}", self.stub_state().display());
        procs::pids()
            .filter(|pid| procs::stat(*pid).is_some_and(|s| !s.zombie()))
            .filter(|pid| {
                let in_world = std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .is_ok_and(|cwd| cwd.starts_with(&root) || cwd.starts_with(self.dir.path()));
                in_world || procs::environ_has(*pid, &marker)
            })
            .collect()
    }

    /// `pid: command line` of every process of this world (for a failure message).
    pub fn procs(&self) -> Vec<String> {
        self.pids()
            .into_iter()
            .map(|p| format!("{p}: {}", procs::cmdline(p)))
            .collect()
    }
}

impl Drop for World {
    /// A failed test leaves nothing running: supervisors, agents and their children go first.
    fn drop(&mut self) {
        poll(Duration::from_secs(1), Duration::from_millis(50), || {
            let left = self.pids();
            for pid in &left {
                procs::kill(*pid);
            }
            left.is_empty()
        });
    }
}
