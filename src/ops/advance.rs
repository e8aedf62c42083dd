//! `orch advance`: evaluate the exit gate of the task's current stage and apply exactly one
//! decision (design §3.3, §5, §12). Gather (git, under the repo lock) → decide (`domain::gate`) →
//! apply (one `BEGIN IMMEDIATE` transaction of compare-and-swap stage writes, superseded jobs,
//! the next job, and one history row per hop). The transition lease is held across all three,
//! so two actors never apply the same edge.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use tracing::info;

use crate::config::RepoCfg;
use crate::ctx::Ctx;
use crate::db::{self, tasks::TaskRow};
use crate::domain::gate::{self, FailPlan, GateResult};
use crate::domain::history::{Actor, Outcome};
use crate::domain::ids::{JobId, TaskRef};
use crate::domain::prompt::Rollback;
use crate::domain::stage::{Role, Stage};
use crate::error::usage;
use crate::ext::failpoint;
use crate::ops::apply::{
    Audit, enqueue, record, record_alone, record_full, record_here, role_on_entry,
};
use crate::ops::gather::{self, GitView};
use crate::ops::lease::TransitionLease;

/// An operator override (`--to STAGE --reason TEXT [--reset-retries]`).
#[derive(Debug, Clone)]
pub struct Override {
    pub to: Stage,
    pub reason: String,
    pub reset_retries: bool,
}

#[derive(Debug, Clone)]
pub struct Request {
    pub task: TaskRef,
    pub expect_stage: Option<Stage>,
    pub as_role: Option<Role>,
    pub to: Option<Override>,
    pub dry_run: bool,
    pub actor: Actor,
    /// Appended to the reason of the history rows this advance writes (a runner's outcome
    /// class, exit code and duration).
    pub note: Option<String>,
    /// The caller has just pushed the task branch from the task's worktree (the supervisor, a
    /// runner): the gate reads that worktree without a fetch (`gather::open_pushed`).
    pub pushed: bool,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub work_item: String,
    pub from: Stage,
    pub to: Stage,
    pub outcome: Outcome,
    pub reason: String,
    pub enqueued_job: Option<JobId>,
    pub dry_run: bool,
    /// Set when the gate was not satisfied because the stage's work is missing or invalid
    /// (not when it waits for a person or CI): what is missing.
    pub work_missing: Option<String>,
}

/// The whole use-case.
pub fn advance(ctx: &Ctx, req: &Request) -> Result<Report> {
    let task = ctx.task(&req.task)?;
    let report = |outcome, to: Stage, reason: String| Report {
        work_item: task.work_item.clone(),
        from: task.stage,
        to,
        outcome,
        reason,
        enqueued_job: None,
        dry_run: req.dry_run,
        work_missing: None,
    };

    // A caller that names what it expects (a supervisor, a runbook) gets a CAS no-op when the
    // task moved on; a plain operator call on a finished task is a usage error.
    let stale = match (req.expect_stage, req.as_role) {
        (Some(s), _) if s != task.stage => Some(format!(
            "`{}` is in `{}`, not `{}`",
            task.work_item, task.stage, s
        )),
        (_, Some(r)) if !works(task.stage, r) => Some(format!(
            "`{}` is in `{}`, which `{}` does not work",
            task.work_item, task.stage, r
        )),
        _ => None,
    };
    if let Some(reason) = stale {
        if !req.dry_run {
            record_alone(ctx, &task, req.actor, Outcome::StageCasLost, &reason)?;
        }
        return Ok(report(Outcome::StageCasLost, task.stage, reason));
    }
    if task.stage.is_terminal() {
        // Only a cancelled task's id is free again (it was tombstoned); a done task keeps it.
        let fix = match (req.to.is_some(), task.stage) {
            (true, Stage::Cancelled) => format!(
                "; start it again with `orch task add --repo {} --work-item {} --title …`",
                task.repo, task.base_work_item
            ),
            (true, _) => format!(
                "; more work on it is a new task: `orch task add --repo {} --title …`",
                task.repo
            ),
            (false, _) => String::new(),
        };
        return Err(usage(format!(
            "cannot advance `{}`: it is already `{}`{fix}",
            task.work_item, task.stage
        )));
    }
    let repo = ctx.repo_of(&task)?.clone();

    if let Some(ov) = &req.to {
        return override_to(ctx, &task, &repo, ov, req);
    }
    if let (Some(at), Some(why)) = (task.blocked_at, &task.blocked_reason) {
        let reason = format!(
            "`{}` is blocked since {}: {}; after fixing it run `orch advance {} --to development --reason …`",
            task.work_item,
            crate::domain::time::rfc3339(at),
            why,
            task.work_item
        );
        if !req.dry_run {
            record_alone(ctx, &task, req.actor, Outcome::Blocked, why)?;
        }
        return Ok(report(Outcome::Blocked, task.stage, reason));
    }

    // Take ownership of the transition before looking, so what we decide is what we apply.
    let lease = if req.dry_run {
        None
    } else {
        match TransitionLease::acquire(ctx, task.id, "advance", task.stage)? {
            Ok(l) => Some(l),
            Err(busy) => {
                let reason = format!("deferred: {}", busy.describe());
                record_alone(ctx, &task, req.actor, Outcome::Deferred, &reason)?;
                return Ok(report(Outcome::Deferred, task.stage, reason));
            }
        }
    };

    if lease.is_some() {
        failpoint::hit("advance.lease-taken");
    }
    let opened = if req.pushed {
        gather::open_pushed(ctx, &task, &repo)
    } else {
        gather::open(ctx, &task, &repo)
    };
    let view = match opened {
        Ok(v) => v,
        // The repo stayed locked past its deadline: nothing was decided, try later.
        Err(e) if crate::error::code_of(&e) == crate::error::Code::Busy => {
            let reason = format!("deferred: {e:#}");
            if !req.dry_run {
                record_alone(ctx, &task, req.actor, Outcome::Deferred, &reason)?;
            }
            return Ok(report(Outcome::Deferred, task.stage, reason));
        }
        Err(e) => return Err(e),
    };
    if let Some(l) = &lease {
        // The fetch may have taken a while: an expiring lease is pushed before deciding.
        l.renew(&ctx.db, crate::ctx::now())?;
    }
    let facts = gather::facts(ctx, &task, &repo, &view)?;
    let result = gate::evaluate(task.stage, &facts);
    info!(work_item = %task.work_item, stage = %task.stage, "gate: {result:?}");

    let out = match result.clone() {
        GateResult::NotSatisfied(why) | GateResult::Waiting(why) => {
            let reason = format!(
                "cannot advance `{}` from `{}`: {}",
                task.work_item, task.stage, why
            );
            if !req.dry_run {
                record_alone(ctx, &task, req.actor, Outcome::NotSatisfied, &why)?;
            }
            let mut r = report(Outcome::NotSatisfied, task.stage, reason);
            if matches!(result, GateResult::NotSatisfied(_)) {
                r.work_missing = Some(why);
            }
            r
        }
        GateResult::Pending { why, role } => apply_pending(ctx, &task, &why, role, req)?,
        GateResult::Pass(why) => apply_forward(ctx, &task, &repo, &view, &why, req)?,
        GateResult::Fail { reason, feedback } => {
            apply_failure(ctx, &task, &view, &reason, &feedback, req)?
        }
    };
    drop(view);
    drop(lease);
    Ok(out)
}

/// The gate passed: walk forward (N/A stages included), honour a `--before` breakpoint.
fn apply_forward(
    ctx: &Ctx,
    task: &TaskRow,
    repo: &RepoCfg,
    view: &GitView,
    why: &str,
    req: &Request,
) -> Result<Report> {
    let plan = gate::forward(
        task.stage,
        task.track,
        why,
        repo.contracts(),
        task.pause_before,
    );
    let final_stage = plan.hops.last().map(|h| h.to).unwrap_or(task.stage);
    let marker = match plan.hops.last() {
        Some(h) => view.entry_marker(h.to)?,
        None => None,
    };
    let role = role_on_entry(final_stage, repo, task);
    let summary = match (&plan.hops[..], plan.breakpoint) {
        ([], Some(bp)) => format!("paused at breakpoint before `{bp}`"),
        (hops, bp) => {
            let path: Vec<&str> = std::iter::once(task.stage.as_str())
                .chain(hops.iter().map(|h| h.to.as_str()))
                .collect();
            let mut s = format!("{} ({why})", path.join(" → "));
            if let Some(bp) = bp {
                s.push_str(&format!("; paused at breakpoint before `{bp}`"));
            }
            s
        }
    };
    let outcome = if plan.hops.is_empty() {
        Outcome::Deferred
    } else {
        Outcome::Advanced
    };
    if req.dry_run {
        return Ok(Report {
            work_item: task.work_item.clone(),
            from: task.stage,
            to: final_stage,
            outcome,
            reason: format!("would advance: {summary}"),
            enqueued_job: None,
            dry_run: true,
            work_missing: None,
        });
    }
    failpoint::hit("advance.before-cas");
    let applied = ctx.write(|ctx, tx| {
        let mut from = task.stage;
        for (i, hop) in plan.hops.iter().enumerate() {
            if i > 0 {
                failpoint::hit("advance.between-hops");
            }
            let m = if hop.to == final_stage {
                marker.as_deref()
            } else {
                None
            };
            if !db::tasks::cas_stage(tx, task.id, from, hop.to, m, ctx.now)? {
                return Ok(None);
            }
            failpoint::hit("advance.after-cas");
            record(
                ctx,
                tx,
                task,
                hop.from,
                hop.to,
                req.actor,
                Outcome::Advanced,
                &with_note(&hop.reason, req),
            )?;
            from = hop.to;
        }
        if !plan.hops.is_empty() {
            db::jobs::supersede_queued(tx, task.id, task.stage, ctx.now)?;
            db::tasks::set_held(tx, task.id, None, ctx.now)?;
        }
        if let Some(bp) = plan.breakpoint {
            let reason = format!("breakpoint before `{bp}`");
            db::tasks::set_paused(tx, task.id, Some((&reason, "breakpoint")), ctx.now)?;
            db::tasks::set_pause_before(tx, task.id, None, ctx.now)?;
            record(
                ctx,
                tx,
                task,
                final_stage,
                final_stage,
                req.actor,
                Outcome::Paused,
                &reason,
            )?;
            let text = format!("paused at breakpoint: {summary}");
            crate::ops::notify::alert(ctx, tx, Some(task), &text);
        }
        let job = match (plan.hops.is_empty(), role) {
            (false, Some(role)) => Some(enqueue(ctx, tx, task, role, final_stage, None)?),
            _ => None,
        };
        Ok(Some(job))
    })?;
    failpoint::hit("advance.after-commit");
    let Some(job) = applied else {
        return lost(ctx, task, req);
    };
    Ok(Report {
        work_item: task.work_item.clone(),
        from: task.stage,
        to: final_stage,
        outcome,
        reason: summary,
        enqueued_job: job,
        dry_run: false,
        work_missing: None,
    })
}

/// The stage's own work is done and a deterministic step of `role` is due (a release step):
/// queue that role's job unless one of that role is live already (the caller's, say).
fn apply_pending(
    ctx: &Ctx,
    task: &TaskRow,
    why: &str,
    role: Role,
    req: &Request,
) -> Result<Report> {
    let mut rep = Report {
        work_item: task.work_item.clone(),
        from: task.stage,
        to: task.stage,
        outcome: Outcome::NotSatisfied,
        reason: format!(
            "cannot advance `{}` from `{}` yet: {why}",
            task.work_item, task.stage
        ),
        enqueued_job: None,
        dry_run: req.dry_run,
        work_missing: None,
    };
    if req.dry_run {
        rep.reason.push_str(&format!("; would queue the {role}"));
        return Ok(rep);
    }
    rep.enqueued_job = ctx.write(|ctx, tx| {
        // The job that asks (a staging runner finishing) may still be running: only a live job
        // of the due role makes another one unnecessary. The claim never runs two at once.
        let live = db::jobs::of_task(tx, task.id)?.into_iter().any(|j| {
            j.role == role
                && matches!(
                    j.status,
                    crate::domain::stage::JobStatus::Queued
                        | crate::domain::stage::JobStatus::Running
                )
        });
        let job = if live {
            None
        } else {
            Some(enqueue(ctx, tx, task, role, task.stage, None)?)
        };
        let note = match job {
            Some(j) => format!("{why}; queued the {role} (job {})", j.0),
            None => why.to_string(),
        };
        record_here(ctx, tx, task, req.actor, Outcome::NotSatisfied, &note)?;
        Ok(job)
    })?;
    if let Some(j) = rep.enqueued_job {
        rep.reason
            .push_str(&format!("; queued the {role} as job {}", j.0));
    }
    Ok(rep)
}

fn lost(ctx: &Ctx, task: &TaskRow, req: &Request) -> Result<Report> {
    let now_stage = db::tasks::get(ctx.db.conn(), task.id)?.stage;
    let reason = format!(
        "another actor moved `{}` from `{}` to `{}` first",
        task.work_item, task.stage, now_stage
    );
    record_alone(ctx, task, req.actor, Outcome::StageCasLost, &reason)?;
    Ok(Report {
        work_item: task.work_item.clone(),
        from: task.stage,
        to: now_stage,
        outcome: Outcome::StageCasLost,
        reason,
        enqueued_job: None,
        dry_run: false,
        work_missing: None,
    })
}

/// A verdict failure: roll back to development (retry +1) or block at the cap.
fn apply_failure(
    ctx: &Ctx,
    task: &TaskRow,
    view: &GitView,
    reason: &str,
    feedback: &str,
    req: &Request,
) -> Result<Report> {
    let plan = gate::on_failure(task.dev_retries, ctx.config.max_developer_retries);
    let headline = format!(
        "cannot advance `{}` from `{}`: {}",
        task.work_item, task.stage, reason
    );
    let (outcome, to) = match plan {
        FailPlan::RollBack { .. } => (Outcome::RolledBack, Stage::Development),
        FailPlan::Block => (Outcome::Blocked, task.stage),
    };
    if req.dry_run {
        return Ok(Report {
            work_item: task.work_item.clone(),
            from: task.stage,
            to,
            outcome,
            reason: format!("would {}: {headline}", outcome.as_str()),
            enqueued_job: None,
            dry_run: true,
            work_missing: None,
        });
    }
    let artifact_path = task
        .stage
        .spec()
        .verdict_file
        .map(|f| view.artifact_path(f))
        .unwrap_or_else(|| format!("branch `{}`", task.branch));
    let marker = view.entry_marker(Stage::Development)?;
    let max = ctx.config.max_developer_retries;
    failpoint::hit("advance.before-cas");
    let applied = ctx.write(|ctx, tx| match plan {
        FailPlan::Block => {
            let why = format!(
                "{reason}; developer retries exhausted ({}/{max})",
                task.dev_retries
            );
            db::tasks::set_blocked(tx, task.id, Some(&why), ctx.now)?;
            db::jobs::supersede_queued(tx, task.id, task.stage, ctx.now)?;
            record_here(ctx, tx, task, req.actor, Outcome::Blocked, &why)?;
            let text = format!("task blocked: {headline}");
            crate::ops::notify::alert(ctx, tx, Some(task), &text);
            Ok(Some(None))
        }
        FailPlan::RollBack { new_retries } => {
            if !db::tasks::cas_stage(
                tx,
                task.id,
                task.stage,
                Stage::Development,
                marker.as_deref(),
                ctx.now,
            )? {
                return Ok(None);
            }
            failpoint::hit("advance.after-cas");
            db::tasks::set_dev_retries(tx, task.id, new_retries, ctx.now)?;
            db::tasks::set_held(tx, task.id, None, ctx.now)?;
            db::jobs::supersede_queued(tx, task.id, task.stage, ctx.now)?;
            record(
                ctx,
                tx,
                task,
                task.stage,
                Stage::Development,
                req.actor,
                Outcome::RolledBack,
                &with_note(reason, req),
            )?;
            let rb = Rollback {
                from: task.stage,
                reason,
                artifact_path: &artifact_path,
                feedback,
                retry: new_retries,
                max_retries: max,
            };
            Ok(Some(Some(enqueue(
                ctx,
                tx,
                task,
                Role::Developer,
                Stage::Development,
                Some(&rb),
            )?)))
        }
    })?;
    failpoint::hit("advance.after-commit");
    let Some(job) = applied else {
        return lost(ctx, task, req);
    };
    Ok(Report {
        work_item: task.work_item.clone(),
        from: task.stage,
        to,
        outcome,
        reason: headline,
        enqueued_job: job,
        dry_run: false,
        work_missing: None,
    })
}

/// `--to STAGE --reason TEXT`: move whatever the gate says; record what was overridden.
fn override_to(
    ctx: &Ctx,
    task: &TaskRow,
    repo: &RepoCfg,
    ov: &Override,
    req: &Request,
) -> Result<Report> {
    if ov.reason.trim().is_empty() {
        return Err(usage("`--to` needs a non-empty `--reason`"));
    }
    if ov.to == Stage::Created {
        return Err(usage("cannot override a task back to `created`"));
    }
    if ov.to == Stage::Cancelled {
        return Err(usage(format!(
            "use `orch cancel {}` to cancel a task",
            task.work_item
        )));
    }
    // Own the transition before looking, as every other path does.
    let _lease = if req.dry_run {
        None
    } else {
        match TransitionLease::acquire(ctx, task.id, "operator", task.stage)? {
            Ok(l) => Some(l),
            Err(busy) => {
                let reason = format!("deferred: {}", busy.describe());
                record_alone(ctx, task, req.actor, Outcome::Deferred, &reason)?;
                return Ok(Report {
                    work_item: task.work_item.clone(),
                    from: task.stage,
                    to: task.stage,
                    outcome: Outcome::Deferred,
                    reason,
                    enqueued_job: None,
                    dry_run: false,
                    work_missing: None,
                });
            }
        }
    };
    // What the gate said, and the artifact as it was, for the audit trail. Git trouble must
    // not stop an operator from unsticking a task, so it is recorded instead.
    let (verdict, sha, marker) = match gather::open(ctx, task, repo) {
        Ok(view) => {
            let verdict = gather::facts(ctx, task, repo, &view)
                .map(|f| gate_text(&gate::evaluate(task.stage, &f)))
                .unwrap_or_else(|e| format!("gate unavailable: {e:#}"));
            let sha = match task.stage.spec().verdict_file {
                Some(file) => view
                    .read(file)
                    .ok()
                    .and_then(|a| a.bytes)
                    .map(|b| hex::encode(Sha256::digest(&b))),
                None => None,
            };
            let marker = view.entry_marker(ov.to).unwrap_or(None);
            (verdict, sha, marker)
        }
        Err(e) => (format!("gate unavailable: {e:#}"), None, None),
    };
    if req.dry_run {
        return Ok(Report {
            work_item: task.work_item.clone(),
            from: task.stage,
            to: ov.to,
            outcome: Outcome::Advanced,
            reason: format!("would override ({verdict}): {}", ov.reason),
            enqueued_job: None,
            dry_run: true,
            work_missing: None,
        });
    }
    let mut entered = task.clone();
    entered.stage = ov.to;
    let role = role_on_entry(ov.to, repo, &entered);
    let applied = ctx
        .write(|ctx, tx| {
            if !db::tasks::cas_stage(tx, task.id, task.stage, ov.to, marker.as_deref(), ctx.now)? {
                return Ok(None);
            }
            db::jobs::supersede_queued(tx, task.id, task.stage, ctx.now)?;
            db::tasks::set_blocked(tx, task.id, None, ctx.now)?;
            db::tasks::set_held(tx, task.id, None, ctx.now)?;
            if ov.reset_retries {
                db::tasks::set_dev_retries(tx, task.id, 0, ctx.now)?;
            }
            record_full(
                ctx,
                tx,
                task,
                task.stage,
                ov.to,
                Actor::Operator,
                Outcome::Override,
                &ov.reason,
                Some(&Audit {
                    verdict: &verdict,
                    artifact_sha256: sha.as_deref(),
                }),
            )?;
            let job = match role {
                Some(r) => Some(enqueue(ctx, tx, task, r, ov.to, None)?),
                None => None,
            };
            Ok(Some(job))
        })
        .context("applying the override")?;
    let Some(job) = applied else {
        return lost(ctx, task, req);
    };
    Ok(Report {
        work_item: task.work_item.clone(),
        from: task.stage,
        to: ov.to,
        outcome: Outcome::Advanced,
        reason: format!("override ({verdict}): {}", ov.reason),
        enqueued_job: job,
        dry_run: false,
        work_missing: None,
    })
}

/// Whether `role` works `stage`: its own role, or a deterministic one of the last mile (the
/// releaser's steps of `deploy-staging` and `deploy`).
fn works(stage: Stage, role: Role) -> bool {
    stage.spec().role == Some(role)
        || (role == Role::Releaser && matches!(stage, Stage::DeployStaging | Stage::Deploy))
}

/// A history reason with the caller's note (a runner's outcome class) appended.
fn with_note(reason: &str, req: &Request) -> String {
    match &req.note {
        Some(n) => format!("{reason} [{n}]"),
        None => reason.to_string(),
    }
}

fn gate_text(r: &GateResult) -> String {
    match r {
        GateResult::Pass(s) => format!("pass: {s}"),
        GateResult::NotSatisfied(s) | GateResult::Waiting(s) => format!("not satisfied: {s}"),
        GateResult::Fail { reason, .. } => format!("fail: {reason}"),
        GateResult::Pending { why, role } => format!("pending ({role}): {why}"),
    }
}
