//! One attempt of a job as the supervisor and the reaper see it: how it ended
//! (`AttemptOutcome`), the supervisor's report, the fence every write about it checks, and what
//! a failed attempt becomes (a retry after a backoff, or `failed` with an alert).

use anyhow::Result;
use tracing::info;

use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::agent;
use crate::domain::ids::JobId;
use crate::domain::stage::{JobStatus, Role};
use crate::ops::advance;

/// What the supervisor did, for its log and exit code.
#[derive(Debug)]
pub struct JobReport {
    pub job: JobId,
    pub work_item: String,
    pub role: Role,
    pub status: AttemptOutcome,
    pub detail: String,
    pub advance: Option<advance::Report>,
}

/// How one attempt ended, from its supervisor's (or the reaper's) point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The job is `done`.
    Done,
    /// The job is `queued` again: a retry after a backoff, or a usage limit.
    Queued,
    /// The job is `failed`: its last attempt failed.
    Failed,
    /// The job is `cancelled` (superseded: its task left the stage).
    Cancelled,
    /// Another attempt (or a cancel, or the reaper) owns the job now; this outcome was dropped.
    Stale,
}

impl AttemptOutcome {
    /// `outcome` when the fenced write that records it landed, else `Stale`: another attempt
    /// (or a cancel, or the reaper) owned the job by then.
    pub fn unless_stale(landed: bool, outcome: AttemptOutcome) -> AttemptOutcome {
        if landed {
            outcome
        } else {
            AttemptOutcome::Stale
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Done => "done",
            AttemptOutcome::Queued => "queued",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::Stale => "stale",
        }
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Finish attempt `attempt` of `id` as `done` with `detail`, fenced: `Stale` when another
/// attempt owns the job now.
pub fn finish_done(ctx: &Ctx, id: JobId, attempt: u32, detail: &str) -> Result<AttemptOutcome> {
    let finished = ctx.db.write(|tx| {
        db::jobs::finish(
            tx,
            id,
            attempt,
            JobStatus::Done,
            Some(detail),
            crate::ctx::now(),
        )
    })?;
    Ok(AttemptOutcome::unless_stale(finished, AttemptOutcome::Done))
}

/// Whether attempt `attempt` of `id` is still this supervisor's to finish.
pub fn still_ours(ctx: &Ctx, id: JobId, attempt: u32) -> Result<bool> {
    Ok(db::jobs::get(ctx.db.conn(), id)?
        .is_some_and(|j| j.status == JobStatus::Running && j.attempts == attempt))
}

pub fn tail_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A failed attempt: re-queue with backoff while attempts remain, else `failed` + alert.
pub fn retry_or_fail(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    detail: &str,
) -> Result<AttemptOutcome> {
    let now = crate::ctx::now();
    if attempt < job.max_attempts {
        let delay = agent::backoff_s(
            ctx.config.scheduler.retry_backoff_s,
            attempt,
            (now as u64) ^ (job.id.0 as u64).wrapping_mul(2654435761),
        );
        let requeued = ctx
            .db
            .write(|tx| db::jobs::requeue(tx, job.id, attempt, now + delay, detail, false))?;
        info!(
            "attempt {attempt}/{} failed; retry in {delay}s",
            job.max_attempts
        );
        Ok(AttemptOutcome::unless_stale(
            requeued,
            AttemptOutcome::Queued,
        ))
    } else {
        let failed = ctx.db.write(|tx| {
            let failed =
                db::jobs::finish(tx, job.id, attempt, JobStatus::Failed, Some(detail), now)?;
            if failed {
                let text = format!(
                    "job {} ({}) of `{}` failed after {attempt} attempts: {}",
                    job.id.0,
                    job.role,
                    task.work_item,
                    tail_lines(detail, 3)
                );
                crate::ops::notify::alert(ctx, tx, Some(task), &text);
            }
            Ok(failed)
        })?;
        Ok(AttemptOutcome::unless_stale(failed, AttemptOutcome::Failed))
    }
}
