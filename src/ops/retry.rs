//! `orch retry <job-id | WORK-ITEM>`: put a job that failed for good back in the queue, with
//! its attempts reset, and record who did it in the history (`retried`). The next tick runs it
//! like any other queued job, so nothing runs in the operator's terminal.
//!
//! Deliberately not here: re-running a job that is not `failed` (a queued or running one needs
//! nothing; a done or cancelled one is history), or one whose task has left that job's stage
//! (the stage's new job is the one to look at).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow};
use crate::domain::history::{Actor, Outcome};
use crate::domain::ids::{JobId, TaskRef};
use crate::domain::stage::JobStatus;
use crate::error::{Code, usage};
use crate::ops::apply::record_here;
use crate::ops::task::Gesture;

/// A job named by its id, or the newest job of a task (by work item).
pub fn resolve(ctx: &Ctx, target: &str) -> Result<JobRow> {
    job_named(ctx, target, "job", |jobs| {
        jobs.iter().max_by_key(|j| j.id.0)
    })
}

/// The job `target` names: by its id, or the one `pick` chooses among the jobs of the task a
/// work item names (`orch retry`, `orch logs`).
pub fn job_named(
    ctx: &Ctx,
    target: &str,
    what: &str,
    pick: impl Fn(&[JobRow]) -> Option<&JobRow>,
) -> Result<JobRow> {
    let c = ctx.db.conn();
    if let Ok(id) = target.parse::<i64>() {
        return db::jobs::get(c, JobId(id))?.ok_or_else(|| {
            usage(format!(
                "job {id} not found; `orch task show <WI>` lists a task's jobs"
            ))
        });
    }
    let task = ctx.task(&TaskRef::parse(target).map_err(usage)?)?;
    let jobs = db::jobs::of_task(c, task.id)?;
    pick(&jobs)
        .cloned()
        .ok_or_else(|| usage(format!("`{}` has no {what} yet", task.work_item)))
}

pub fn retry(ctx: &Ctx, target: &str) -> Result<Gesture> {
    let job = resolve(ctx, target)?;
    let task = db::tasks::get(ctx.db.conn(), job.task_id)?;
    if job.status != JobStatus::Failed {
        return Err(usage(format!(
            "job {} ({} of `{}`) is `{}`, not `failed`; only a failed job is retried",
            job.id.0, job.role, task.work_item, job.status
        )));
    }
    if task.stage.is_terminal() || task.stage != job.stage {
        return Err(usage(format!(
            "job {} worked `{}` and `{}` is in `{}` now; nothing to retry",
            job.id.0, job.stage, task.work_item, task.stage
        )));
    }
    let live = db::jobs::of_task(ctx.db.conn(), task.id)?
        .into_iter()
        .find(|j| matches!(j.status, JobStatus::Queued | JobStatus::Running));
    if let Some(j) = live {
        return Err(usage(format!(
            "`{}` already has job {} `{}`; wait for it (`orch logs {}`)",
            task.work_item, j.id.0, j.status, j.id.0
        )));
    }
    let reason = format!(
        "job {} ({}) re-queued with its attempts reset; it had failed: {}",
        job.id.0,
        job.role,
        crate::ops::attempt::tail_lines(job.error.as_deref().unwrap_or("-"), 1)
    );
    let requeued = ctx.write(|ctx, tx| {
        if !db::usage::requeue_failed(tx, job.id, ctx.now)? {
            return Ok(false);
        }
        record_here(ctx, tx, &task, Actor::Operator, Outcome::Retried, &reason)?;
        Ok(true)
    })?;
    if !requeued {
        return Err(crate::error::exit(
            Code::Busy,
            format!(
                "job {} changed while it was being retried; look again",
                job.id.0
            ),
        ));
    }
    Ok(Gesture {
        work_item: task.work_item.clone(),
        code: Code::Ok,
        message: format!(
            "re-queued job {} ({} of `{}`, attempts reset); the next tick runs it",
            job.id.0, job.role, task.work_item
        ),
        advance: None,
    })
}
