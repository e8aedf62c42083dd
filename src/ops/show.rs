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
use crate::domain::stage::{ADR_DIR, ANALYSIS_FILES, Stage};
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
    pub error: Option<String>,
    pub prompt: String,
}

#[derive(Debug, Serialize)]
pub struct TransitionOut {
    pub from: String,
    pub to: String,
    pub actor: String,
    pub outcome: String,
    pub reason: String,
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overridden_verdict: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
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
    pub dev_retries: u32,
    pub age_in_stage_s: i64,
    pub created_at: String,
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
    pub dev_retries: u32,
    pub labels: Vec<String>,
    pub depends_on: Vec<String>,
    pub jobs: Vec<JobOut>,
    pub transitions: Vec<TransitionOut>,
    pub artifacts: Vec<ArtifactOut>,
}

pub fn task_out(t: &TaskRow, now: i64) -> TaskOut {
    TaskOut {
        work_item: t.work_item.clone(),
        repo: t.repo.clone(),
        title: t.title.clone(),
        stage: t.stage.to_string(),
        track: t.track.to_string(),
        branch: t.branch.clone(),
        paused: t.paused_at.is_some(),
        blocked: t.blocked_at.is_some(),
        held: t.held_at.is_some(),
        dev_retries: t.dev_retries,
        age_in_stage_s: (now - t.stage_entered_at).max(0),
        created_at: rfc3339(t.created_at),
    }
}

pub fn list(ctx: &Ctx, all: bool, repo: Option<&str>, stage: Option<&str>) -> Result<Vec<TaskOut>> {
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
    let rows = db::tasks::list(ctx.db.conn(), all, repo, stage, 10_000)?;
    Ok(rows.iter().map(|t| task_out(t, ctx.now)).collect())
}

pub fn show(ctx: &Ctx, wi: &str) -> Result<TaskDetail> {
    let r = TaskRef::parse(wi).map_err(usage)?;
    let t = ctx.task(&r)?;
    let c = ctx.db.conn();
    let jobs = db::jobs::of_task(c, t.id)?
        .into_iter()
        .map(|j| JobOut {
            id: j.id.0,
            role: j.role.to_string(),
            stage: j.stage.to_string(),
            status: j.status.to_string(),
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            available_at: rfc3339(j.available_at),
            finished_at: j.finished_at.map(rfc3339),
            error: j.error,
            prompt: j.prompt,
        })
        .collect();
    let transitions = db::transitions::of_task(c, t.id)?
        .into_iter()
        .map(|h| TransitionOut {
            from: h.from.to_string(),
            to: h.to.to_string(),
            actor: h.actor.to_string(),
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
        dev_retries: t.dev_retries,
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
