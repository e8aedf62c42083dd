//! What every piece of release work shares: the job and task it runs for (`Rel`), how it
//! ends (`Ending`), recording a step, and publishing a step's report on the task branch.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::config::RepoCfg;
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, release::NewStep, tasks::TaskRow};
use crate::domain::history::{Actor, Outcome};
use crate::domain::release::{ReportHead, Step, StepStatus};
use crate::domain::time::rfc3339;
use crate::ops::apply::record_here;
use crate::ops::worktree::{self, Identity};

/// How a piece of release work ends for its job.
pub(crate) enum Ending {
    /// The steps are recorded: advance (unless `advance` is false) and finish the job.
    Done { detail: String, advance: bool },
    /// Not now (a busy merge lease, an infrastructure hiccup): the job waits, its attempt
    /// given back.
    Requeue { delay_s: i64, why: String },
    /// A human must look: the task is held (the job is done).
    Held(String),
}

/// One job's release work, with what every step needs.
pub(crate) struct Rel<'a> {
    pub ctx: &'a Ctx,
    pub job: &'a JobRow,
    pub attempt: u32,
    pub task: &'a TaskRow,
    pub repo: &'a RepoCfg,
    /// The history row that entered the job's stage (the visit the steps belong to).
    pub visit: i64,
}

/// The identity orch commits its release reports as.
pub(crate) fn identity() -> Identity {
    Identity::of_runner("orch-releaser")
}

impl Rel<'_> {
    pub fn steps(&self) -> Result<Vec<db::release::StepRow>> {
        db::release::steps(self.ctx.db.conn(), self.task.id, self.visit)
    }

    pub fn step(&self, step: Step) -> Result<Option<db::release::StepRow>> {
        Ok(self.steps()?.into_iter().rev().find(|r| r.step == step))
    }

    pub fn new_step<'b>(
        &self,
        step: Step,
        status: StepStatus,
        sha: Option<&'b str>,
        value: Option<f64>,
        detail: &'b str,
    ) -> NewStep<'b> {
        NewStep {
            task: self.task.id,
            visit: self.visit,
            stage: self.job.stage,
            step,
            status,
            sha,
            value,
            detail,
            job: Some(self.job.id),
            at: crate::ctx::now(),
        }
    }

    /// Record a step's outcome (in a transaction of its own, or the caller's `tx`).
    pub fn record(
        &self,
        tx: &rusqlite::Connection,
        step: Step,
        status: StepStatus,
        sha: Option<&str>,
        value: Option<f64>,
        detail: &str,
    ) -> Result<()> {
        db::release::record(tx, &self.new_step(step, status, sha, value, detail))?;
        let note = format!(
            "{}: {} ({})",
            step.as_str(),
            status.as_str(),
            first_line(detail)
        );
        record_here(
            self.ctx,
            tx,
            self.task,
            Actor::Supervisor,
            Outcome::Checked,
            &note,
        )
    }

    pub fn head(&self) -> ReportHead<'_> {
        ReportHead {
            work_item: &self.task.base_work_item,
            stage: self.job.stage.as_str(),
            created_at: "",
            run_id: "",
        }
    }

    /// Write `text` as the step's report in the worktree, commit it as the releaser and push
    /// the branch. Returns the commit (or `None` when the same report was there already).
    pub fn publish(&self, wt: &Path, step: Step, text: &str) -> Result<Option<String>> {
        let rel = format!(
            "docs/work-items/{}/{}",
            self.task.base_work_item,
            step.file()
        );
        let path = wt.join(&rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing `{}`", path.display()))?;
        let msg = format!("{}: {} report", self.task.base_work_item, step.as_str());
        let sha = worktree::commit(self.ctx, wt, Some(&[rel.as_str()]), &msg, &identity())?;
        worktree::push(self.ctx, self.repo, self.task, wt)?;
        Ok(sha)
    }
}

/// A report's frontmatter head with the time and a run id filled in.
pub(crate) fn stamp(text: impl FnOnce(&ReportHead<'_>) -> String, base: &ReportHead<'_>) -> String {
    let now = crate::ctx::now();
    let created = rfc3339(now);
    let run = format!("{now}-{}", std::process::id());
    text(&ReportHead {
        work_item: base.work_item,
        stage: base.stage,
        created_at: &created,
        run_id: &run,
    })
}

pub(crate) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The task's worktree, made when missing (a release job may be the first job of a re-drive).
pub(crate) fn worktree_of(rel: &Rel<'_>) -> Result<PathBuf> {
    worktree::ensure(rel.ctx, rel.task, rel.repo)
}
