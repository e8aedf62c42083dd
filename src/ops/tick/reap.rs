//! Step 2 of a tick (design §4.3): finalise running jobs whose supervisor is gone, or that ran
//! past `scheduler.reaper_max_running_s`. What the job started is killed first (two workers must
//! never share one worktree); then a job that recorded exit 0 is finished and its task
//! advanced, a job whose supervisor never started gets its attempt back, and any other is
//! retried or failed. Each job is one isolated row.

use std::time::Duration;

use anyhow::Result;
use tracing::warn;

use super::pass::Pass;
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow};
use crate::domain::history::Actor;
use crate::domain::ids::{TaskRef, WorkItem};
use crate::domain::liveness::Liveness;
use crate::domain::stage::JobStatus;
use crate::ext::{failpoint, sys};
use crate::ops::advance::{self, Request};
use crate::ops::attempt::{self, AttemptOutcome};

pub(super) fn reap(p: &mut Pass<'_>) -> Result<()> {
    let running: Vec<JobRow> = db::jobs::live(p.ctx.db.conn())?
        .into_iter()
        .filter(|j| j.status == JobStatus::Running)
        .collect();
    for j in running {
        let r = reap_one(p.ctx, p.plan, &j);
        if let Some(Some(line)) = p.isolate(&format!("reap job {}", j.id.0), r) {
            p.act_with(super::pass::Action::new(line).job(j.id.0, j.role));
            p.rep.reaped += 1;
        }
    }
    Ok(())
}

/// Why a running job must be reaped now, if it must.
enum Verdict {
    /// Its supervisor never recorded itself: a launch interrupted between claim and start.
    NeverStarted,
    Dead(String),
    Overdue(String),
}

/// Reap one job; the line to report when it was reaped (or, planning, would be).
fn reap_one(ctx: &Ctx, plan: bool, j: &JobRow) -> Result<Option<String>> {
    let cap = ctx.config.scheduler.reaper_max_running_s as i64;
    let age = ctx.now - j.started_at.unwrap_or(ctx.now);
    let sup = j.supervisor();
    let verdict = match &sup {
        Some(s) => match sys::is_live(s) {
            Liveness::Dead(r) => Some(Verdict::Dead(r.display(s.pid).to_string())),
            Liveness::Alive if age > cap => Some(Verdict::Overdue(format!(
                "running {age}s, over reaper_max_running_s {cap}"
            ))),
            Liveness::Alive => None,
        },
        None if age > ctx.config.scheduler.launch_grace_s as i64 => Some(Verdict::NeverStarted),
        None => None,
    };
    let Some(verdict) = verdict else {
        return Ok(None);
    };
    let overdue = matches!(verdict, Verdict::Overdue(_));
    // A live owner of the task's transition lease is still working on it; past the cap even it
    // is overruled.
    if !overdue
        && let Some(l) = db::leases::transition_get(ctx.db.conn(), j.task_id)?
        && crate::ops::lease::judge(&l, ctx.now).is_alive()
    {
        return Ok(None);
    }
    let why = match &verdict {
        Verdict::NeverStarted => "its supervisor never started (attempt given back)".to_string(),
        Verdict::Dead(d) => format!("supervisor dead: {d}"),
        Verdict::Overdue(o) => o.clone(),
    };
    let line = format!("reap job {} ({}): {why}", j.id.0, j.role);
    if plan {
        return Ok(Some(line));
    }
    // Two workers must never share one worktree: kill what is left before anything else runs.
    let victims = [j.child_group(), if overdue { sup } else { None }];
    for who in victims.into_iter().flatten() {
        if let Err(e) = sys::terminate_group(&who, Duration::from_secs(5)) {
            warn!("could not stop process group {}: {e:#}", who.pid);
        }
    }
    failpoint::hit("reap.after-kill");
    if overdue {
        ctx.db
            .write(|tx| db::leases::transition_delete(tx, j.task_id).map(|_| ()))?;
    }
    let task = db::tasks::get(ctx.db.conn(), j.task_id)?;
    // Every write is fenced on the attempt: a job that finished since the snapshot is left as
    // it is and not counted.
    let wrote = match verdict {
        Verdict::NeverStarted => ctx
            .db
            .write(|tx| db::jobs::requeue(tx, j.id, j.attempts, ctx.now, &why, true))?,
        Verdict::Dead(_) | Verdict::Overdue(_) if j.exit_code == Some(0) => {
            let done = ctx.db.write(|tx| {
                db::jobs::finish(tx, j.id, j.attempts, JobStatus::Done, None, ctx.now)
            })?;
            if done {
                advance_after(ctx, &task.base_work_item, j);
            }
            done
        }
        Verdict::Dead(_) | Verdict::Overdue(_) => {
            attempt::retry_or_fail(ctx, j, j.attempts, &task, &format!("reaped: {why}"))?
                != AttemptOutcome::Stale
        }
    };
    Ok(wrote.then_some(line))
}

/// The advance a dead supervisor did not get to make (its job had finished its work).
fn advance_after(ctx: &Ctx, wi: &str, j: &JobRow) {
    let Ok(wi) = WorkItem::parse(wi) else {
        return;
    };
    let req = Request {
        task: TaskRef::WorkItem(wi),
        expect_stage: Some(j.stage),
        as_role: None,
        to: None,
        dry_run: false,
        actor: Actor::Tick,
        note: None,
        pushed: false,
    };
    if let Err(e) = advance::advance(ctx, &req) {
        warn!("advance after reaping job {} failed: {e:#}", j.id.0);
    }
}
