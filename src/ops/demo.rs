//! `orch demo`: builds a throwaway world — a bare git remote holding a tiny project, a config
//! whose agent is orch's own compiled-in copy of the stub agent, a repo with the `auto-approve`
//! label that opts in to the secret scan and the git merge (design §7) — adds one task, and
//! drives it with real `orch tick` processes until it is `done`, its work merged into the
//! remote's `main`.
//! Nothing here reaches the network: the remote is a local path.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::config;
use crate::db;
use crate::domain::history::{Actor, Outcome};
use crate::domain::ids::{TaskRef, WorkItem};
use crate::domain::stage::Stage;
use crate::domain::time::Ts;
use crate::ext::git;
use crate::ext::proc::Cmd;
use crate::ops::task::{self, AddRequest};

pub const STUB_AGENT: &str = include_str!("../../scripts/stub-agent");
pub const WORK_ITEM: &str = "DEMO-1";
const TIMEOUT: Duration = Duration::from_secs(300);

/// Progress as shown while the demo runs.
pub struct Progress {
    pub stage: Stage,
    pub elapsed: Duration,
    pub jobs_run: u64,
    pub ticks: u64,
}

/// One row of the closing summary.
#[derive(serde::Serialize)]
pub struct Row {
    pub stage: String,
    pub role: String,
    pub status: String,
    pub duration_s: Option<i64>,
    pub verdict: String,
}

pub struct DemoResult {
    pub dir: PathBuf,
    pub reached_done: bool,
    pub stage: Stage,
    pub elapsed: Duration,
    pub ticks: u64,
    pub rows: Vec<Row>,
}

/// Build the world under `dir` and return the config file's path.
pub fn build_world(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating `{}`", dir.display()))?;
    let remote = dir.join("remote.git");
    if remote.exists() {
        bail!(
            "`{}` already holds a demo world; pick another `--dir`",
            dir.display()
        );
    }
    let files: [(&str, &[u8]); 3] = [
        ("README.md", b"# demo\n\nA tiny project driven by orch's demo.\n"),
        ("src/greeting.txt", b"hello\n"),
        (
            "test.sh",
            b"#!/bin/sh\n# The project's test suite: the greeting must exist.\nset -e\ntest -s src/greeting.txt\necho '1 passed, 0 failed'\n",
        ),
    ];
    git::Git::new(dir).seed_remote(
        &remote,
        &dir.join("seed"),
        "main",
        &files,
        "orch-demo",
        "demo@orch.invalid",
    )?;
    let stub = dir.join("stub-agent");
    std::fs::write(&stub, STUB_AGENT).context("writing the stub agent")?;
    set_executable(&stub)?;
    let stub_state = dir.join("stub-state");
    std::fs::create_dir_all(&stub_state).context("creating the stub agent's state")?;
    let cfg = dir.join("orch.yaml");
    // Under the sandbox the agent sees a private /tmp (where the demo usually lives): it is
    // shown the stub (read-only) and its counters (writable).
    let yaml = format!(
        "# Written by `orch demo`: a throwaway world with a local bare remote and the stub agent.\n\
state_dir: state\n\
repos_dir: state/repos\n\
max_concurrency: 2\n\
agent:\n  argv: [{stub:?}, \"--print\", \"--output-format\", \"json\", \"--system-prompt-file\", \"{{prompt_file}}\"]\n  inactivity_timeout_s: 120\n  roles:\n    developer: {{ timeout_s: 300 }}\n  sandbox_readable: [{stub:?}]\n  sandbox_writable: [{stub_state:?}]\n\
scheduler:\n  reconcile_grace_s: 2\n\
repos:\n  - name: demo\n    remote: {remote:?}\n    main: main\n    prefix: DEMO\n    serial_gate: true\n    default_labels: [auto-approve]\n    ci: {{ mode: none }}\n    tests: {{ argv: [\"sh\", \"test.sh\"], timeout_s: 120 }}\n    security: {{ enabled: true }}\n    merge: {{ mode: git, style: merge }}\n",
        stub = stub.display().to_string(),
        stub_state = stub_state.display().to_string(),
        remote = remote.display().to_string(),
    );
    std::fs::write(&cfg, yaml).context("writing the demo config")?;
    Ok(cfg)
}

fn set_executable(p: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making `{}` executable", p.display()))
}

/// Add the task and tick until it is done (or the timeout), reporting progress.
pub fn drive(
    dir: &Path,
    cfg_path: &Path,
    mut on_progress: impl FnMut(&Progress),
) -> Result<DemoResult> {
    let cfg = config::load(cfg_path, None)?;
    let ctx = crate::ctx::Ctx::with_config(cfg, false)?;
    task::add(
        &ctx,
        &AddRequest {
            repo: "demo",
            title: "Add a friendly greeting",
            work_item: Some(WORK_ITEM),
            description: "",
            bug: false,
            labels: &[],
            depends_on: &[],
            actor: Actor::Operator,
        },
    )?;
    let exe = std::env::current_exe().context("locating the orch binary")?;
    let stub_state = dir.join("stub-state");
    let started = Instant::now();
    let mut ticks = 0u64;
    let wi = TaskRef::WorkItem(WorkItem::parse(WORK_ITEM).map_err(anyhow::Error::msg)?);
    let stage = loop {
        let out = Cmd::new(&exe)
            .arg("--config")
            .arg(cfg_path)
            .arg("tick")
            .env("STUB_STATE_DIR", &stub_state)
            .output()
            .context("running `orch tick`")?;
        ticks += 1;
        if !out.success() {
            tracing::warn!("tick: {}", out.diagnostic_tail());
        }
        let task = db::tasks::find(ctx.db.conn(), &wi)?.context("the demo task vanished")?;
        let jobs_run = db::jobs::of_task(ctx.db.conn(), task.id)?
            .iter()
            .filter(|j| j.finished_at.is_some() && j.error.as_deref() != Some("superseded"))
            .count() as u64;
        on_progress(&Progress {
            stage: task.stage,
            elapsed: started.elapsed(),
            jobs_run,
            ticks,
        });
        if task.stage.is_terminal() || task.blocked_at.is_some() || started.elapsed() > TIMEOUT {
            break task.stage;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let task = db::tasks::find(ctx.db.conn(), &wi)?.context("the demo task vanished")?;
    let rows = summary(&ctx, &task)?;
    Ok(DemoResult {
        dir: dir.to_path_buf(),
        reached_done: stage == Stage::Done,
        stage,
        elapsed: started.elapsed(),
        ticks,
        rows,
    })
}

/// One row per job: its stage, role, how it ended, how long it ran, and the decision that
/// followed it in the history.
fn summary(ctx: &crate::ctx::Ctx, task: &db::tasks::TaskRow) -> Result<Vec<Row>> {
    let c = ctx.db.conn();
    let history = db::transitions::of_task(c, task.id)?;
    let mut rows = Vec::new();
    for j in db::jobs::of_task(c, task.id)? {
        let finished: Option<Ts> = j.finished_at;
        // The decision after the job, with the N/A hops applied in the same advance.
        let first = history.iter().position(|h| {
            h.from == j.stage
                && finished.is_some_and(|f| h.at >= f)
                && h.outcome != Outcome::Checked
        });
        let verdict = first
            .map(|i| {
                let h = &history[i];
                let mut path = vec![h.to.to_string()];
                let mut last = h;
                for next in &history[i + 1..] {
                    if next.outcome == Outcome::Advanced
                        && next.reason.contains("N/A")
                        && next.from == last.to
                        && next.at == last.at
                    {
                        path.push(next.to.to_string());
                        last = next;
                    } else {
                        break;
                    }
                }
                let mut r = format!("{} → {}: {}", h.outcome, path.join(" → "), h.reason);
                if r.chars().count() > 90 {
                    r = r.chars().take(89).collect::<String>() + "…";
                }
                r
            })
            .unwrap_or_default();
        rows.push(Row {
            stage: j.stage.to_string(),
            role: j.role.to_string(),
            status: j.status.to_string(),
            duration_s: match (j.started_at, j.finished_at) {
                (Some(s), Some(f)) => Some(f - s),
                _ => None,
            },
            verdict,
        });
    }
    Ok(rows)
}
