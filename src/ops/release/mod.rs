//! The last mile (design §7): the deterministic jobs the supervisor runs instead of an agent.
//!
//! - `edge.rs`: the `deploy-staging → deploy` sub-gates, in order: the secret scan, the merge
//!   gate (the repo's merge lease, a rebase onto fresh main, a push with a lease, the re-test)
//!   and coverage; each recorded as a step of the visit, each with its report.
//! - `hook.rs`: `deploy.mode: hook` — phase B writes the `initiated` marker before the hook
//!   starts, phase C records its exit code and writes `14-deploy-log.md`; a re-drive that finds
//!   `initiated` without an outcome never runs the hook again and holds the task.
//! - `merge.rs`: the merge of `deploy → done` (git fast-forward or the Gitea API) and its proof
//!   after a fresh fetch; not proven → held, never `done`.
//! - `monitor.rs`: the post-deploy watch of a `done` task.
//!
//! Every step is re-driven by facts: its row for this visit, the commits in main. The stage
//! moves only through `orch advance`, whose gate reads those rows (`domain::gate`).

mod edge;
mod hook;
mod merge;
mod monitor;
mod work;

use anyhow::Result;
use tracing::{info, warn};

use crate::config::{DeployMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::history::{Actor, Outcome};
use crate::domain::stage::{JobStatus, Role, Stage};
use crate::ops::apply::record_here;
use crate::ops::attempt::{AttemptOutcome, JobReport, finish_done};
use crate::ops::worktree;
use work::{Ending, Rel};

/// Which release work a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    Edge,
    Hook,
    Merge,
    Monitor,
}

/// The release work of a job, or `None` when an agent or a runner does it.
pub fn intercept(role: Role, stage: Stage, repo: &RepoCfg) -> Option<Work> {
    match (role, stage) {
        (Role::Releaser, Stage::DeployStaging) => Some(Work::Edge),
        (Role::Releaser, Stage::Deploy) => Some(Work::Merge),
        (Role::Deployer, Stage::Deploy) if repo.deploy_mode() == DeployMode::Hook => {
            Some(Work::Hook)
        }
        (Role::Monitor, Stage::Done) => Some(Work::Monitor),
        _ => None,
    }
}

/// Run one job's release work as its supervisor, then finish the job.
pub fn run(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    work: Work,
) -> Result<JobReport> {
    let visit = match db::release::visit_of(ctx.db.conn(), task.id, job.stage)? {
        Some(v) => v,
        None => anyhow::bail!(
            "`{}` has no history row entering `{}`; cannot tell which visit the release steps belong to",
            task.work_item,
            job.stage
        ),
    };
    let rel = Rel {
        ctx,
        job,
        attempt,
        task,
        repo,
        visit,
    };
    let ending = match work {
        Work::Edge => edge::run(&rel)?,
        Work::Hook => hook::run(&rel)?,
        Work::Merge => merge::run(&rel)?,
        Work::Monitor => monitor::run(&rel)?,
    };
    finish(ctx, job, attempt, task, ending)
}

fn finish(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    ending: Ending,
) -> Result<JobReport> {
    let report = |status, detail: String, advance| JobReport {
        job: job.id,
        work_item: task.work_item.clone(),
        role: job.role,
        status,
        detail,
        advance,
    };
    match ending {
        Ending::Requeue { delay_s, why } => {
            info!(work_item = %task.work_item, "release work deferred: {why}");
            let requeued = ctx.write(|ctx, tx| {
                let moved = db::jobs::requeue(
                    tx,
                    job.id,
                    attempt,
                    crate::ctx::now() + delay_s,
                    &why,
                    true,
                )?;
                if moved {
                    let fresh = db::tasks::get(tx, task.id)?;
                    record_here(ctx, tx, &fresh, Actor::Supervisor, Outcome::Deferred, &why)?;
                }
                Ok(moved)
            })?;
            let status = AttemptOutcome::unless_stale(requeued, AttemptOutcome::Queued);
            Ok(report(status, why, None))
        }
        Ending::Held(why) => {
            warn!(work_item = %task.work_item, "release work held: {why}");
            let fresh = db::tasks::get(ctx.db.conn(), task.id)?;
            let finished = ctx.write(|ctx, tx| {
                db::tasks::set_held(tx, task.id, Some(&why), ctx.now)?;
                db::misc::journal(tx, Some(task.id), "held", &why, ctx.now)?;
                record_here(ctx, tx, &fresh, Actor::Supervisor, Outcome::Held, &why)?;
                let text = format!("{} held: {why}", task.work_item);
                crate::ops::notify::alert(ctx, tx, Some(&fresh), &text);
                db::jobs::finish(tx, job.id, attempt, JobStatus::Done, Some(&why), ctx.now)
            })?;
            let status = AttemptOutcome::unless_stale(finished, AttemptOutcome::Done);
            Ok(report(status, why, None))
        }
        Ending::Done { detail, advance } => {
            let adv = if advance {
                Some(worktree::advance_as(
                    ctx,
                    task,
                    job.stage,
                    job.role,
                    Actor::Supervisor,
                    Some(detail.clone()),
                )?)
            } else {
                None
            };
            let status = finish_done(ctx, job.id, attempt, &detail)?;
            Ok(report(status, detail, adv))
        }
    }
}
