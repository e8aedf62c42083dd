//! `orch task show` and `orch task list`: a task with its jobs, history and artifacts (with the
//! verdict each artifact carries). Artifacts are read from the local clone only; `show` never
//! fetches, so it stays fast and works offline.

use anyhow::Result;
use serde::Serialize;
use tracing::warn;

use crate::ctx::Ctx;
use crate::db::{self, tasks::TaskRow};
use crate::domain::frontmatter;
use crate::domain::ids::TaskRef;
use crate::domain::stage::{ADR_DIR, ANALYSIS_FILES, JobStatus, Stage};
use crate::domain::time::rfc3339;
use crate::error::usage;
use crate::ops::gather;

#[derive(Debug, Serialize)]
pub struct JobOut {
    pub id: i64,
    pub role: String,
    pub stage: String,
    pub status: String,
    pub attempts: u32,
    pub max_attempts: u32,
    pub available_at: String,
    pub finished_at: Option<String>,
    /// Why the job failed, was cancelled, or why its last attempt did not count; null for a
    /// job that is done (see `note`).
    pub error: Option<String>,
    /// What a finished job's runner or supervisor said about it (a done job's summary).
    pub note: Option<String>,
    /// Seconds since the running attempt started; null unless running.
    pub elapsed_s: Option<i64>,
    /// The supervisor's log (`orch logs <id>`); the agent's output is beside it as
    /// `job-<id>.agent.log`.
    pub log: String,
    pub prompt: String,
}

#[derive(Debug, Serialize)]
pub struct TransitionOut {
    pub from: String,
    pub to: String,
    pub actor: String,
    /// The person behind an `operator` row (`--by`, `SUDO_USER`, `USER`); null for programs.
    pub by: Option<String>,
    pub outcome: String,
    pub reason: String,
    pub at: String,
    pub overridden_verdict: Option<String>,
    pub artifact_sha256: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ArtifactOut {
    pub file: String,
    pub present: bool,
    pub key: Option<String>,
    pub value: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TaskOut {
    pub work_item: String,
    pub repo: String,
    pub title: String,
    pub stage: String,
    pub track: String,
    pub branch: String,
    pub paused: bool,
    pub blocked: bool,
    pub held: bool,
    /// Every flag that asks for a human: `paused`, `blocked`, `held`, `failed` (a job failed
    /// for good: `orch retry`), `awaiting-approval`, `awaiting-confirm`.
    pub flags: Vec<&'static str>,
    /// The job that failed for good and ended the current stage, if any.
    pub failed_job: Option<i64>,
    pub dev_retries: u32,
    pub age_in_stage_s: i64,
    pub cost_usd: f64,
    pub created_at: String,
}

/// Tokens, dollars and wall time of some agent runs.
#[derive(Debug, Serialize)]
pub struct SpentOut {
    pub runs: u64,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub wall_s: u64,
}

impl From<&db::usage::Spent> for SpentOut {
    fn from(s: &db::usage::Spent) -> SpentOut {
        SpentOut {
            runs: s.runs,
            cost_usd: s.cost_usd,
            input_tokens: s.input_tokens,
            output_tokens: s.output_tokens,
            cache_read_tokens: s.cache_read_tokens,
            cache_write_tokens: s.cache_write_tokens,
            wall_s: s.wall_ms / 1000,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct StageSpentOut {
    pub stage: String,
    #[serde(flatten)]
    pub spent: SpentOut,
}

/// What a task's agents cost, in total and per stage, and the budget (`agent.budget_usd`).
#[derive(Debug, Serialize)]
pub struct CostOut {
    pub total: SpentOut,
    pub stages: Vec<StageSpentOut>,
    pub budget_usd: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct TaskDetail {
    pub schema_version: u32,
    pub work_item: String,
    pub repo: String,
    pub title: String,
    pub stage: String,
    pub track: String,
    pub branch: String,
    pub paused: bool,
    pub paused_at: Option<String>,
    pub paused_reason: Option<String>,
    pub pause_before: Option<String>,
    pub approved_at: Option<String>,
    pub deploy_confirmed_at: Option<String>,
    pub blocked_at: Option<String>,
    pub blocked_reason: Option<String>,
    pub held_at: Option<String>,
    pub held_reason: Option<String>,
    pub cancelled_at: Option<String>,
    pub flags: Vec<&'static str>,
    pub dev_retries: u32,
    pub cost: CostOut,
    pub labels: Vec<String>,
    pub depends_on: Vec<String>,
    pub jobs: Vec<JobOut>,
    pub transitions: Vec<TransitionOut>,
    pub artifacts: Vec<ArtifactOut>,
}

/// The flags of a task (see `TaskOut::flags`) and its failed job. `live_job`: whether the task
/// has a queued or running job (then nothing waits for a human's approval yet).
pub fn flags(
    ctx: &Ctx,
    c: &rusqlite::Connection,
    t: &TaskRow,
    live_job: bool,
) -> Result<(Vec<&'static str>, Option<i64>)> {
    let mut out = Vec::new();
    for (on, name) in [
        (t.paused_at.is_some(), "paused"),
        (t.blocked_at.is_some(), "blocked"),
        (t.held_at.is_some(), "held"),
    ] {
        if on {
            out.push(name);
        }
    }
    if t.stage.is_terminal() {
        return Ok((out, None));
    }
    let failed = if live_job {
        None
    } else {
        db::usage::failed_job(c, t.id, t.stage)?.map(|j| j.0)
    };
    if failed.is_some() {
        out.push("failed");
    }
    if !live_job && failed.is_none() {
        let repo = ctx.config.repo(&t.repo);
        if t.stage == Stage::Analysis && t.approved_at.is_none() && !t.has_label("auto-approve") {
            out.push("awaiting-approval");
        }
        if t.stage == Stage::Deploy
            && repo.is_some_and(|r| {
                crate::domain::gate::not_applicable(Stage::Deploy, r.contracts()).is_none()
                    && r.require_confirm()
            })
            && !t.has_label("auto-deploy")
            && t.deploy_confirmed_at.is_none()
        {
            out.push("awaiting-confirm");
        }
    }
    Ok((out, failed))
}

pub fn task_out(
    ctx: &Ctx,
    c: &rusqlite::Connection,
    t: &TaskRow,
    live_job: bool,
) -> Result<TaskOut> {
    let (flags, failed_job) = flags(ctx, c, t, live_job)?;
    let now = ctx.now;
    Ok(TaskOut {
        work_item: t.work_item.clone(),
        repo: t.repo.clone(),
        title: t.title.clone(),
        stage: t.stage.to_string(),
        track: t.track.to_string(),
        branch: t.branch.clone(),
        paused: t.paused_at.is_some(),
        blocked: t.blocked_at.is_some(),
        held: t.held_at.is_some(),
        flags,
        failed_job,
        dev_retries: t.dev_retries,
        age_in_stage_s: (now - t.stage_entered_at).max(0),
        cost_usd: db::usage::of_task(c, t.id)?.cost_usd,
        created_at: rfc3339(t.created_at),
    })
}

pub fn list(
    ctx: &Ctx,
    all: bool,
    repo: Option<&str>,
    stage: Option<&str>,
    failed_only: bool,
) -> Result<Vec<TaskOut>> {
    let stage = match stage {
        Some(s) => Some(s.parse::<Stage>().map_err(|e| usage(e.to_string()))?),
        None => None,
    };
    if let Some(r) = repo
        && ctx.config.repo(r).is_none()
    {
        return Err(usage(format!(
            "unknown repo `{}`",
            crate::domain::ids::printable(r)
        )));
    }
    let c = ctx.db.conn();
    let rows = db::tasks::list(c, all, repo, stage, 10_000)?;
    let live: std::collections::HashSet<i64> =
        db::jobs::live(c)?.iter().map(|j| j.task_id.0).collect();
    let mut out = Vec::new();
    for t in &rows {
        let o = task_out(ctx, c, t, live.contains(&t.id.0))?;
        if !failed_only || o.failed_job.is_some() {
            out.push(o);
        }
    }
    Ok(out)
}

pub fn show(ctx: &Ctx, wi: &str) -> Result<TaskDetail> {
    let r = TaskRef::parse(wi).map_err(usage)?;
    let t = ctx.task(&r)?;
    let c = ctx.db.conn();
    let job_rows = db::jobs::of_task(c, t.id)?;
    let live_job = job_rows
        .iter()
        .any(|j| matches!(j.status, JobStatus::Queued | JobStatus::Running));
    let jobs = job_rows
        .into_iter()
        .map(|j| {
            let done = j.status == JobStatus::Done;
            JobOut {
                id: j.id.0,
                role: j.role.to_string(),
                stage: j.stage.to_string(),
                status: j.status.to_string(),
                attempts: j.attempts,
                max_attempts: j.max_attempts,
                available_at: rfc3339(j.available_at),
                finished_at: j.finished_at.map(rfc3339),
                elapsed_s: (j.status == JobStatus::Running)
                    .then(|| j.started_at.map(|s| (ctx.now - s).max(0)))
                    .flatten(),
                log: crate::ops::logs::path(&ctx.config, j.id, false)
                    .display()
                    .to_string(),
                error: if done { None } else { j.error.clone() },
                note: if done { j.error } else { None },
                prompt: j.prompt,
            }
        })
        .collect();
    let (flags, _) = flags(ctx, c, &t, live_job)?;
    let cost = CostOut {
        total: SpentOut::from(&db::usage::of_task(c, t.id)?),
        stages: db::usage::of_task_by_stage(c, t.id)?
            .iter()
            .map(|(stage, s)| StageSpentOut {
                stage: stage.to_string(),
                spent: SpentOut::from(s),
            })
            .collect(),
        budget_usd: ctx.config.agent.budget_usd,
    };
    let transitions = db::transitions::of_task(c, t.id)?
        .into_iter()
        .map(|h| TransitionOut {
            from: h.from.to_string(),
            to: h.to.to_string(),
            actor: h.actor.to_string(),
            by: h.by,
            outcome: h.outcome.to_string(),
            reason: h.reason,
            at: rfc3339(h.at),
            overridden_verdict: h.overridden_verdict,
            artifact_sha256: h.artifact_sha256,
        })
        .collect();
    let deps = db::misc::deps_of(c, t.id)?;
    let depends_on = db::tasks::stages_of(c, &deps)?
        .into_iter()
        .map(|(_, w, _)| w)
        .collect();
    let artifacts = match artifacts(ctx, &t) {
        Ok(a) => a,
        Err(e) => {
            warn!(work_item = %t.work_item, "artifacts unavailable: {e:#}");
            Vec::new()
        }
    };
    let ts = |v: Option<i64>| v.map(rfc3339);
    Ok(TaskDetail {
        schema_version: 1,
        work_item: t.work_item.clone(),
        repo: t.repo.clone(),
        title: t.title.clone(),
        stage: t.stage.to_string(),
        track: t.track.to_string(),
        branch: t.branch.clone(),
        paused: t.paused_at.is_some(),
        paused_at: ts(t.paused_at),
        paused_reason: t.paused_reason.clone(),
        pause_before: t.pause_before.map(|s| s.to_string()),
        approved_at: ts(t.approved_at),
        deploy_confirmed_at: ts(t.deploy_confirmed_at),
        blocked_at: ts(t.blocked_at),
        blocked_reason: t.blocked_reason.clone(),
        held_at: ts(t.held_at),
        held_reason: t.held_reason.clone(),
        cancelled_at: ts(t.cancelled_at),
        flags,
        dev_retries: t.dev_retries,
        cost,
        labels: t.labels.clone(),
        depends_on,
        jobs,
        transitions,
        artifacts,
    })
}

/// Every artifact of the stage table with its verdict key and value, from the local clone.
fn artifacts(ctx: &Ctx, t: &TaskRow) -> Result<Vec<ArtifactOut>> {
    let Some(repo) = ctx.config.repo(&t.repo) else {
        return Ok(Vec::new());
    };
    let Some(view) = gather::open_local(ctx, t, repo)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for f in ANALYSIS_FILES {
        let a = view.read(f)?;
        out.push(ArtifactOut {
            file: f.to_string(),
            present: a.bytes.is_some(),
            key: None,
            value: None,
        });
    }
    let adrs = view.list_dir(ADR_DIR)?;
    out.push(ArtifactOut {
        file: format!("{ADR_DIR}/"),
        present: adrs.iter().any(|n| n.ends_with(".md")),
        key: None,
        value: None,
    });
    for stage in [
        Stage::Review,
        Stage::Testing,
        Stage::DeployStaging,
        Stage::Deploy,
    ] {
        let spec = stage.spec();
        let (Some(file), Some(v)) = (spec.verdict_file, spec.verdict) else {
            continue;
        };
        let a = view.read(file)?;
        let (key, value) = match &a.bytes {
            Some(b) => match frontmatter::parse(b) {
                // Show the key that decides the verdict (a negative one wins), else the first
                // verdict key present.
                Ok(fm) => match frontmatter::evaluate(&fm, v) {
                    frontmatter::Verdict::Pass { key, value }
                    | frontmatter::Verdict::Fail { key, value } => (Some(key), Some(value)),
                    frontmatter::Verdict::NotSatisfied { .. } => v
                        .keys
                        .iter()
                        .find_map(|k| {
                            frontmatter::field(&fm, k)
                                .map(|val| (Some(k.to_string()), Some(val.to_string())))
                        })
                        .unwrap_or((None, None)),
                },
                Err(e) => (None, Some(format!("unreadable: {e}"))),
            },
            None => (None, None),
        };
        out.push(ArtifactOut {
            file: file.to_string(),
            present: a.bytes.is_some(),
            key,
            value,
        });
    }
    Ok(out)
}
