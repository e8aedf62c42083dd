//! `orch job run <id>` — the supervisor of one job attempt (design §4.4). Started detached by
//! `orch tick` (or by hand): claims or takes over the attempt, records itself as its supervisor,
//! then hands the job to a runner (tester and deployer jobs of repos with a contract) or to
//! `ops::agent`, which runs the agent in the task worktree. Every write about the attempt is
//! fenced on `(id, status = 'running', attempts)`, so a stale supervisor can never overwrite a
//! newer one.

use std::time::Duration;

use anyhow::Result;
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::ids::JobId;
use crate::domain::stage::JobStatus;
use crate::error::{Code, exit, usage};
use crate::ext::{failpoint, sys};
use crate::ops::agent;
use crate::ops::attempt::{AttemptOutcome, JobReport, finish_done, retry_or_fail};
use crate::ops::worktree;

/// A job that found its repo busy is tried again this much later, at no cost in attempts.
const BUSY_RETRY_S: i64 = 30;

/// Run job `id` as its supervisor.
pub fn run(ctx: &Ctx, id: JobId) -> Result<JobReport> {
    let job = db::jobs::get(ctx.db.conn(), id)?.ok_or_else(|| {
        usage(format!(
            "job {} not found; `orch queue` lists live jobs",
            id.0
        ))
    })?;
    let me = sys::self_identity()?;
    let attempt = match job.status {
        JobStatus::Running => job.attempts,
        // By hand: claim it ourselves (the same row guard the tick uses).
        JobStatus::Queued => ctx
            .db
            .write(|tx| db::jobs::claim(tx, id, ctx.now))?
            .ok_or_else(|| {
                exit(
                    Code::Busy,
                    format!("job {} was claimed by someone else", id.0),
                )
            })?,
        // A failed job is a human's to re-run once the cause is fixed: it gets one more attempt.
        JobStatus::Failed => {
            let task = db::tasks::get(ctx.db.conn(), job.task_id)?;
            if task.stage != job.stage {
                return Err(usage(format!(
                    "job {} is for `{}` but `{}` is in `{}` now; nothing to re-run",
                    id.0, job.stage, task.work_item, task.stage
                )));
            }
            ctx.db
                .write(|tx| db::jobs::rerun_failed(tx, id, ctx.now))?
                .ok_or_else(|| {
                    exit(
                        Code::Busy,
                        format!("job {} changed meanwhile; look again", id.0),
                    )
                })?
        }
        JobStatus::Done | JobStatus::Cancelled => {
            return Err(usage(format!(
                "job {} is already `{}`; nothing to run",
                id.0, job.status
            )));
        }
    };
    if let (JobStatus::Running, Some(pid)) = (job.status, job.supervisor_pid)
        && pid as i32 != me.pid
    {
        let other = crate::domain::liveness::ProcIdentity {
            pid: pid as i32,
            start_time: job.supervisor_start.unwrap_or(0) as u64,
            boot_id: job.supervisor_boot.clone().unwrap_or_default(),
        };
        if sys::is_live(&other).is_alive() {
            return Err(exit(
                Code::Busy,
                format!("job {} is already supervised by live pid {pid}", id.0),
            ));
        }
    }
    // Taking over a running job whose supervisor died: its agent may still be working the
    // worktree, and two agents must never share one.
    if job.status == JobStatus::Running
        && let (Some(pgid), Some(start)) = (job.agent_pgid, job.agent_start)
    {
        let agent = crate::domain::liveness::ProcIdentity {
            pid: pgid as i32,
            start_time: start as u64,
            boot_id: job.supervisor_boot.clone().unwrap_or_default(),
        };
        if let Err(e) = sys::terminate_group(&agent, Duration::from_secs(5)) {
            warn!("could not stop the previous agent group {pgid}: {e:#}");
        }
    }
    let recorded = ctx.db.write(|tx| {
        db::jobs::set_supervisor(
            tx,
            id,
            attempt,
            me.pid as i64,
            me.start_time as i64,
            &me.boot_id,
        )
    })?;
    if !recorded {
        return Err(exit(
            Code::Busy,
            format!("job {} attempt {attempt} is no longer ours to run", id.0),
        ));
    }
    failpoint::hit("job.after-start");
    let task = db::tasks::get(ctx.db.conn(), job.task_id)?;
    let span = tracing::info_span!("job", work_item = %task.work_item, job = id.0);
    let _g = span.enter();
    let report = supervise_or_requeue(ctx, &job, attempt, &task);
    if let Ok(r) = &report {
        info!("job {} settled: {}", id.0, r.status);
    }
    // The job's outcome is recorded and its slot free: start what may run now (the next
    // stage's job, or another task's), as a tick would, instead of waiting for the timer.
    if report.is_ok() {
        crate::ops::launch::after_job(ctx);
    }
    // A task left with nothing to run gives its worktree back (best effort; the next job
    // re-creates it).
    match worktree::park_if_idle(ctx, &task) {
        Ok(true) => tracing::debug!("worktree of {} given back: no live job", task.work_item),
        Ok(false) => {}
        Err(e) => tracing::debug!("worktree of {} kept: {e:#}", task.work_item),
    }
    report
}

/// `supervise`, with a busy repo deferred and any other error spending the attempt.
fn supervise_or_requeue(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
) -> Result<JobReport> {
    let id = job.id;
    match supervise(ctx, job, attempt, task) {
        Ok(r) => Ok(r),
        // A busy repo (its lock not free in time) is no fault of the job: try again later
        // without spending the attempt.
        Err(e) if crate::error::code_of(&e) == Code::Busy => {
            let detail = format!("{e:#}");
            info!("deferred: {detail}");
            let requeued = ctx.db.write(|tx| {
                db::jobs::requeue(
                    tx,
                    id,
                    attempt,
                    crate::ctx::now() + BUSY_RETRY_S,
                    &detail,
                    true,
                )
            })?;
            Ok(JobReport {
                job: id,
                work_item: task.work_item.clone(),
                role: job.role,
                status: AttemptOutcome::unless_stale(requeued, AttemptOutcome::Queued),
                detail,
                advance: None,
            })
        }
        Err(e) => {
            // Anything that went wrong around the agent (git, config) spends the attempt.
            warn!("job failed before or after the agent: {e:#}");
            let detail = format!("{e:#}");
            let status = retry_or_fail(ctx, job, attempt, task, &detail)?;
            Ok(JobReport {
                job: id,
                work_item: task.work_item.clone(),
                role: job.role,
                status,
                detail,
                advance: None,
            })
        }
    }
}

fn supervise(ctx: &Ctx, job: &JobRow, attempt: u32, task: &TaskRow) -> Result<JobReport> {
    let repo = ctx.repo_of(task)?.clone();
    // The post-deploy watch is the one job of a finished task.
    let watch = job.role == crate::domain::stage::Role::Monitor
        && task.stage == crate::domain::stage::Stage::Done;
    if task.stage != job.stage || (task.stage.is_terminal() && !watch) {
        // The task left the stage: the job is stale, its work would be a CAS no-op.
        ctx.db.write(|tx| {
            db::jobs::finish(
                tx,
                job.id,
                attempt,
                JobStatus::Cancelled,
                Some("superseded"),
                ctx.now,
            )
        })?;
        return Ok(JobReport {
            job: job.id,
            work_item: task.work_item.clone(),
            role: job.role,
            status: AttemptOutcome::Cancelled,
            detail: format!("task is in `{}` now", task.stage),
            advance: None,
        });
    }
    // The last mile (design §7): deterministic release work, never an agent.
    if let Some(work) = crate::ops::release::intercept(job.role, job.stage, &repo) {
        return crate::ops::release::run(ctx, job, attempt, task, &repo, work);
    }
    if !job.role.is_agent() {
        anyhow::bail!(
            "job {} is a `{}` job at `{}`, which nothing runs for repo `{}`",
            job.id.0,
            job.role,
            job.stage,
            repo.name
        );
    }
    // No LLM where the verdict is derivable from exit codes: a runner instead of an agent.
    if let Some(kind) = crate::ops::runner::intercept(job.role, job.stage, &repo) {
        let rep = crate::ops::runner::run(
            ctx,
            kind,
            &task.base_work_item,
            false,
            crate::ops::runner::Caller::Supervisor {
                job: job.id,
                attempt,
            },
        )?;
        let detail = format!("{} {}: {}", rep.runner, rep.outcome, rep.reason);
        return Ok(JobReport {
            job: job.id,
            work_item: task.work_item.clone(),
            role: job.role,
            status: finish_done(ctx, job.id, attempt, &detail)?,
            detail,
            advance: None,
        });
    }
    let worktree = worktree::ensure(ctx, task, &repo)?;
    agent::run(ctx, job, attempt, task, &repo, &worktree)
}
