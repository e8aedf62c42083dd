//! A temp world for integration tests: a bare git remote seeded with one commit on `main`, an
//! `orch.yaml` pointing at it, and helpers to run the real `orch` binary and to push artifacts to
//! a task branch the way an agent would.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct World {
    pub dir: tempfile::TempDir,
    pub remote: PathBuf,
    pub config: PathBuf,
    /// A scratch clone used to push commits to the remote.
    pub scratch: PathBuf,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
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

pub fn orch_bin() -> &'static str {
    env!("CARGO_BIN_EXE_orch")
}

impl World {
    /// One repo `shop` (prefix `SHOP`) with the given extra YAML lines for that repo entry.
    pub fn new() -> World {
        Self::with_repo_extra("")
    }

    pub fn with_repo_extra(extra: &str) -> World {
        let dir = tempfile::tempdir().expect("tempdir");
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
        };
        w.write_config(extra);
        w
    }

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

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn db_path(&self) -> PathBuf {
        self.state_dir().join("orch.db")
    }

    /// Run `orch --config <cfg> args…`.
    pub fn orch(&self, args: &[&str]) -> Run {
        let out = self.orch_cmd(args).output().expect("orch runs");
        to_run(out)
    }

    pub fn orch_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(orch_bin());
        c.arg("--config").arg(&self.config).args(args);
        c.env_remove("ORCH_CONFIG").env_remove("ORCH_STATE_DIR");
        c.env("ORCH_LOG", "warn");
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

    pub fn branch_of(&self, wi: &str) -> String {
        let r = self.ok(&["task", "show", wi, "--json"], 0);
        r.json()["branch"].as_str().unwrap().to_string()
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

    pub fn stage(&self, wi: &str) -> String {
        self.ok(&["task", "show", wi, "--json"], 0).json()["stage"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Run SQL against the state database (for setting up states no command makes, such as a
    /// lease held by a dead process). Returns rows as `a|b` lines.
    pub fn sql(&self, sql: &str) -> String {
        let c = rusqlite::Connection::open(self.db_path()).expect("open db");
        c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
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
}

fn to_run(out: Output) -> Run {
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn wait_output(child: std::process::Child) -> Run {
    to_run(child.wait_with_output().expect("child finishes"))
}
