//! The write half every use-case shares: a history row (with its tracker mirror queued in the
//! same transaction), the job a stage starts with, and which role that is. Callers pass their
//! own write transaction, so a state change, its history row and its outbox rows commit or roll
//! back together.
//!
//! Deliberately not here: deciding anything about gates (that is `domain::gate`, applied by
//! `ops::advance`), and any I/O but the database.

use anyhow::Result;
use rusqlite::Connection;

use crate::config::RepoCfg;
use crate::ctx::Ctx;
use crate::db::{self, jobs::NewJob, tasks::TaskRow, transitions::NewTransition};
use crate::domain::gate;
use crate::domain::history::{Actor, Outcome};
use crate::domain::ids::JobId;
use crate::domain::prompt::{self, Rollback, TaskText};
use crate::domain::stage::{Role, Stage};
use crate::ops::notify;

/// The role whose job is enqueued when `task` enters `stage`, if any. `deploy` with
/// `require_confirm` waits for `orch confirm-deploy` (or the `auto-deploy` label) first.
pub fn role_on_entry(stage: Stage, repo: &RepoCfg, task: &TaskRow) -> Option<Role> {
    let contracts = repo.contracts();
    match stage {
        // Done: the post-deploy watch of a repo that configures one (design §7.4).
        Stage::Done => repo.post_deploy.is_some().then_some(Role::Monitor),
        _ if gate::not_applicable(stage, contracts).is_some() => None,
        // Without a staging contract the stage's work is the release steps alone.
        Stage::DeployStaging if !contracts.staging => Some(Role::Releaser),
        Stage::Deploy if !contracts.deploy => Some(Role::Releaser),
        Stage::Deploy => {
            let confirmed = !repo.require_confirm()
                || task.has_label("auto-deploy")
                || task.deploy_confirmed_at.is_some();
            confirmed.then_some(Role::Deployer)
        }
        Stage::Created
        | Stage::Analysis
        | Stage::Architecture
        | Stage::Development
        | Stage::Review
        | Stage::Testing
        | Stage::DeployStaging
        | Stage::Cancelled => stage.spec().role,
    }
}

fn task_text(task: &TaskRow) -> TaskText<'_> {
    TaskText {
        work_item: &task.base_work_item,
        title: &task.title,
        description: &task.description,
        repo: &task.repo,
        branch: &task.branch,
    }
}

/// Enqueue the job of `role` for `task` at `stage`, its prompt built from the task (and the
/// rollback feedback, when there is one).
pub fn enqueue(
    ctx: &Ctx,
    tx: &Connection,
    task: &TaskRow,
    role: Role,
    stage: Stage,
    rollback: Option<&Rollback<'_>>,
) -> Result<JobId> {
    let text = prompt::job_prompt(&task_text(task), role, stage, rollback);
    db::jobs::insert(
        tx,
        &NewJob {
            task_id: task.id,
            role,
            stage,
            repo: &task.repo,
            available_at: ctx.now,
            max_attempts: ctx.config.agent.max_attempts,
            prompt: &text,
        },
        ctx.now,
    )
}

/// Append one history row and queue its tracker mirror (design §3.3, §9).
#[allow(clippy::too_many_arguments)]
pub fn record(
    ctx: &Ctx,
    tx: &Connection,
    task: &TaskRow,
    from: Stage,
    to: Stage,
    actor: Actor,
    outcome: Outcome,
    reason: &str,
) -> Result<()> {
    record_full(ctx, tx, task, from, to, actor, outcome, reason, None)
}

/// The person recorded beside an `operator` row (the other actors are programs).
pub fn by_person(ctx: &Ctx, actor: Actor) -> Option<&str> {
    match actor {
        Actor::Operator => ctx.person.as_deref(),
        Actor::Supervisor | Actor::Tick | Actor::Webhook | Actor::Reconciler => None,
    }
}

/// What an operator override overrode, for the audit trail (`orch report overrides`).
pub struct Audit<'a> {
    pub verdict: &'a str,
    pub artifact_sha256: Option<&'a str>,
}

/// `record` with the audit facts of an override.
#[allow(clippy::too_many_arguments)]
pub fn record_full(
    ctx: &Ctx,
    tx: &Connection,
    task: &TaskRow,
    from: Stage,
    to: Stage,
    actor: Actor,
    outcome: Outcome,
    reason: &str,
    audit: Option<&Audit<'_>>,
) -> Result<()> {
    db::transitions::insert(
        tx,
        &NewTransition {
            task_id: task.id,
            from,
            to,
            actor,
            outcome,
            reason,
            overridden_verdict: audit.map(|a| a.verdict),
            artifact_sha256: audit.and_then(|a| a.artifact_sha256),
            by: by_person(ctx, actor),
        },
        ctx.now,
    )?;
    let hop = notify::Hop {
        id: tx.last_insert_rowid(),
        from,
        to,
        actor,
        outcome,
        reason,
        by: by_person(ctx, actor),
    };
    // The merge lease is the task's from the merge gate until `done` or a rollback (design
    // §7.1): any move out of the release stages gives it back, in the same transaction.
    let releasing = |s: Stage| matches!(s, Stage::DeployStaging | Stage::Deploy);
    if from != to && releasing(from) && !releasing(to) {
        db::release::merge_release_of_task(tx, task.id)?;
    }
    notify::on_transition(ctx, tx, task, &hop)
}

/// Append one history row that does not move the task (`from = to = ` its stage).
pub fn record_here(
    ctx: &Ctx,
    tx: &Connection,
    task: &TaskRow,
    actor: Actor,
    outcome: Outcome,
    reason: &str,
) -> Result<()> {
    record(
        ctx, tx, task, task.stage, task.stage, actor, outcome, reason,
    )
}

/// `record_here` in a transaction of its own.
pub fn record_alone(
    ctx: &Ctx,
    task: &TaskRow,
    actor: Actor,
    outcome: Outcome,
    reason: &str,
) -> Result<()> {
    ctx.write(|ctx, tx| record_here(ctx, tx, task, actor, outcome, reason))
}

/// The marker in the prompt of a job that re-runs a stage whose work was missing; such jobs
/// since stage entry are the second chances already given (counted from the database).
pub const MISSING_MARKER: &str = "orch: missing-work rerun";

/// What `missing_work` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// A new job of the role, told what is missing.
    Rerun(JobId),
    /// The second chance was spent: the task is held with an alert.
    Held(String),
    /// A job of the stage is already queued or running: nothing to do.
    Busy,
}

/// A role's job ended `done` but its stage's work is missing or invalid (`problem`, the gate's
/// reason): re-run the role once with the problem in its prompt, then hold the task for a
/// human with an alert (design §3.3). Without this the task sat with no job and no alert,
/// holding its repo's serial gate.
pub fn missing_work(
    ctx: &Ctx,
    task: &TaskRow,
    role: Role,
    actor: Actor,
    problem: &str,
) -> Result<Missing> {
    let stage = task.stage;
    let jobs = db::jobs::of_task(ctx.db.conn(), task.id)?;
    if jobs.iter().any(|j| {
        j.stage == stage
            && matches!(
                j.status,
                crate::domain::stage::JobStatus::Queued | crate::domain::stage::JobStatus::Running
            )
    }) {
        return Ok(Missing::Busy);
    }
    let reruns = jobs
        .iter()
        .filter(|j| {
            j.stage == stage
                && j.created_at >= task.stage_entered_at
                && j.prompt.contains(MISSING_MARKER)
        })
        .count() as u32;
    match gate::on_missing(reruns) {
        gate::MissingPlan::Rerun => ctx.write(|ctx, tx| {
            let job = enqueue(ctx, tx, task, role, stage, None)?;
            let note = format!(
                "## The previous run left its work missing\n\nThe {role} job of this stage \
                 ended without the stage's work: {problem}. Do the stage's work and write its \
                 artifact now.\n\n{MISSING_MARKER}"
            );
            db::jobs::mark_retry(tx, job, &note, ctx.now)?;
            db::misc::journal(
                tx,
                Some(task.id),
                "rerun",
                &format!("{role} re-run: {problem}"),
                ctx.now,
            )?;
            Ok(Missing::Rerun(job))
        }),
        gate::MissingPlan::Hold => {
            let why = format!("the {role} finished twice without the work of `{stage}`: {problem}");
            ctx.write(|ctx, tx| {
                db::tasks::set_held(tx, task.id, Some(&why), ctx.now)?;
                db::misc::journal(tx, Some(task.id), "held", &why, ctx.now)?;
                record_here(ctx, tx, task, actor, Outcome::Held, &why)?;
                let text = format!("{} held: {why}", task.work_item);
                notify::alert(ctx, tx, Some(task), &text);
                Ok(())
            })?;
            Ok(Missing::Held(why))
        }
    }
}
