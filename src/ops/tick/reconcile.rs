//! Steps 3b and 4 of a tick (design §4.3, §9): poll the forge for CI statuses a lost webhook did
//! not bring, and reconcile idle tasks — advance one whose gate has already decided (a lost
//! webhook, a supervisor that died between its work and its advance), give the role a second
//! run when its job ended without its work (then hold), apply a cancel requested during an
//! irreversible step, cancel queued jobs of finished tasks, and alert once on a task that sits
//! in one stage too long. Each task is one isolated row; a candidate's gate fetches `main` and its
//! own branch only, so a pass costs what its candidates cost, whatever the remote holds.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Result;
use tracing::warn;

use super::pass::Pass;
use crate::config::{CiMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::gate::{self, GateResult};
use crate::domain::history::Actor;
use crate::domain::ids::{TaskRef, WorkItem};
use crate::domain::stage::{JobStatus, Stage};
use crate::domain::time::human_duration;
use crate::ext::sys;
use crate::ops::advance::{self, Request};
use crate::ops::apply::{self, Missing};
use crate::ops::gather;

/// Polls of one task's branch status are at least this far apart.
const CI_POLL_EVERY_S: i64 = 60;
/// At most this many forge polls per pass, so a tick stays fast.
const CI_POLLS_PER_TICK: usize = 20;

/// Step 3b, lost-webhook recovery: for each idle `development` task of a repo with `ci.mode:
/// status`, ask the forge for the combined status of the branch head (at most once a minute per
/// task) and record it into `ci_status`; step 4 then advances or rolls back as if the webhook
/// had come. A forge that does not answer ends the polling for this pass.
pub(super) fn poll_ci(p: &mut Pass<'_>) -> Result<()> {
    use crate::ext::http::CallError;
    let ctx = p.ctx;
    let Some(forge) = ctx.config.gitea() else {
        return Ok(());
    };
    let Some(base) = forge.base_url.as_deref() else {
        return Ok(());
    };
    let c = ctx.db.conn();
    let live = db::jobs::live(c)?;
    let idle: Vec<TaskRow> = db::tasks::active(c)?
        .into_iter()
        .filter(|t| {
            t.stage == Stage::Development
                && t.paused_at.is_none()
                && t.blocked_at.is_none()
                && t.held_at.is_none()
                && ctx
                    .config
                    .repo(&t.repo)
                    .is_some_and(|r| r.ci.mode == CiMode::Status)
                && !live.iter().any(|j| j.task_id == t.id)
        })
        .collect();
    if idle.is_empty() {
        return Ok(());
    }
    let token = crate::ext::secrets::read(forge.token_where()).unwrap_or_else(|e| {
        tracing::warn!("{e:#}; polling the forge unauthenticated");
        None
    });
    let http = crate::ext::http::Http::new(Duration::from_secs(5));
    let gitea = crate::ext::gitea::Gitea::new(&http, base, token.as_deref());
    let mut polls = 0;
    for t in idle {
        if polls >= CI_POLLS_PER_TICK {
            break;
        }
        if db::outbox::ci_polled_at(c, t.id)?.is_some_and(|at| ctx.now - at < CI_POLL_EVERY_S) {
            continue;
        }
        let Some(fr) = ctx.config.repo(&t.repo).and_then(RepoCfg::forge) else {
            continue;
        };
        polls += 1;
        if p.plan {
            p.act_with(
                super::pass::Action::new(format!(
                    "poll ci status of {} ({})",
                    t.work_item, t.branch
                ))
                .task(&t.work_item),
            );
            continue;
        }
        ctx.db
            .write(|tx| db::outbox::set_ci_polled(tx, t.id, ctx.now))?;
        match gitea.combined_status(&fr, &t.branch) {
            Ok(s) if s.sha.len() >= 7 && s.sha.bytes().all(|b| b.is_ascii_hexdigit()) => {
                let n = s.statuses.len();
                let stored = ctx.db.write(|tx| {
                    for st in s.statuses.iter().filter(|st| !st.context.is_empty()) {
                        let context: String = st.context.chars().take(200).collect();
                        let detail: String = st.description.chars().take(500).collect();
                        db::misc::set_ci_status(
                            tx, &t.repo, &s.sha, &context, &st.state, &detail, ctx.now,
                        )?;
                    }
                    Ok(())
                });
                if p.isolate(&format!("poll ci of {}", t.work_item), stored)
                    .is_some()
                    && n > 0
                {
                    p.act(format!(
                        "poll ci status of {}: {} at {} ({n} context(s))",
                        t.work_item,
                        s.state,
                        &s.sha[..s.sha.len().min(12)]
                    ));
                }
            }
            Ok(_) => {}
            Err(e) => {
                warn!(work_item = %t.work_item, "could not poll the forge: {e}");
                if matches!(
                    e,
                    CallError::Transient {
                        unreachable: true,
                        ..
                    }
                ) {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Step 4.
pub(super) fn reconcile(p: &mut Pass<'_>) -> Result<()> {
    let ctx = p.ctx;
    let c = ctx.db.conn();
    // A queued job of a finished task can never run (and `orch fsck` names it).
    for (job, _task) in db::jobs::queued_of_finished(c)? {
        p.act(format!("cancel job {} of a finished task", job.0));
        if !p.plan {
            let r = ctx.db.write(|tx| db::jobs::supersede(tx, job, ctx.now));
            p.isolate(&format!("cancel job {}", job.0), r);
        }
    }
    // The active tasks own their worktrees: one query, not one lookup per worktree.
    let tasks = db::tasks::active(c)?;
    let active: HashSet<(String, String)> = tasks
        .iter()
        .map(|t| (t.repo.clone(), t.work_item.clone()))
        .collect();
    for repo in &ctx.config.repos {
        let r = sweep_worktrees(ctx, p.plan, repo, &active);
        if let Some(lines) = p.isolate(&format!("worktrees of {}", repo.name), r) {
            for l in lines {
                p.act(l);
            }
        }
    }
    let live = db::jobs::live(c)?;
    let alerted = db::misc::journaled_in_stage(c, "stage-age")?;
    for t in tasks {
        let r = reconcile_one(ctx, p.plan, &t, &live);
        if let Some(Some(line)) = p.isolate(&format!("reconcile {}", t.work_item), r) {
            p.act_with(super::pass::Action::new(line).task(&t.work_item));
            p.rep.reconciled += 1;
        }
        let r = stage_age(ctx, p.plan, &t, alerted.contains(&t.id));
        if let Some(Some(line)) = p.isolate(&format!("stage age of {}", t.work_item), r) {
            p.act_with(super::pass::Action::new(line).task(&t.work_item));
        }
    }
    Ok(())
}

/// Reconcile one task; the line to report when something was done (or, planning, would be).
fn reconcile_one(ctx: &Ctx, plan: bool, t: &TaskRow, live: &[JobRow]) -> Result<Option<String>> {
    if t.cancel_requested_at.is_some() {
        return requested_cancel(ctx, plan, t);
    }
    let grace = ctx.config.scheduler.reconcile_grace_s as i64;
    // Analysis is a human gate: reconciled only once the approval is in (a crash right after
    // `orch approve` recorded it).
    let approved = t.approved_at.is_some() || t.has_label("auto-approve");
    if (t.stage == Stage::Analysis && !approved)
        || t.stage == Stage::Created
        || t.paused_at.is_some()
        || t.blocked_at.is_some()
        || t.held_at.is_some()
        || ctx.now - t.stage_entered_at < grace
        || live.iter().any(|j| j.task_id == t.id)
    {
        return Ok(None);
    }
    // Not after a failed job (a human decides), and not while the job that just finished may
    // still be advancing on its own: its supervisor alive, or finished within the grace.
    let last = db::jobs::last_for_stage(ctx.db.conn(), t.id, t.stage)?;
    if last.as_ref().is_some_and(|j| {
        j.status == JobStatus::Failed
            || j.finished_at.is_some_and(|f| ctx.now - f < grace)
            || j.supervisor().is_some_and(|s| sys::is_live(&s).is_alive())
    }) {
        return Ok(None);
    }
    let Some(repo) = ctx.config.repo(&t.repo) else {
        return Ok(None);
    };
    // Someone is working the repo right now: look again next pass.
    let Some(view) = gather::try_open(ctx, t, repo)? else {
        return Ok(None);
    };
    let verdict = gate::evaluate(t.stage, &gather::facts(ctx, t, repo, &view)?);
    drop(view);
    let decided = match verdict {
        GateResult::Pass(r) => format!("gate green: {r}"),
        GateResult::Fail { reason, .. } => format!("verdict written: {reason}"),
        // A release step is due and no job runs it (its job was lost): queue it.
        GateResult::Pending { why, role } => format!("{role} due: {why}"),
        GateResult::Waiting(_) => return Ok(None),
        // The stage's job ended done without its work (its supervisor died before it could
        // say so): a second run, then a hold.
        GateResult::NotSatisfied(problem) => {
            let Some(j) = last.filter(|j| j.status == JobStatus::Done) else {
                return Ok(None);
            };
            if plan {
                return Ok(Some(format!(
                    "re-run the {} of {} (its work is missing: {problem})",
                    j.role, t.work_item
                )));
            }
            return Ok(
                match apply::missing_work(ctx, t, j.role, Actor::Reconciler, &problem)? {
                    Missing::Rerun(job) => Some(format!(
                        "re-run the {} of {} as job {} (its work is missing: {problem})",
                        j.role, t.work_item, job.0
                    )),
                    Missing::Held(why) => Some(format!("hold {}: {why}", t.work_item)),
                    Missing::Busy => None,
                },
            );
        }
    };
    let line = format!("reconcile {} in {}: {decided}", t.work_item, t.stage);
    if plan {
        return Ok(Some(line));
    }
    let req = Request {
        task: TaskRef::WorkItem(WorkItem::parse(&t.base_work_item).map_err(anyhow::Error::msg)?),
        expect_stage: Some(t.stage),
        as_role: None,
        to: None,
        dry_run: false,
        actor: Actor::Reconciler,
        note: None,
        pushed: false,
    };
    advance::advance(ctx, &req)?;
    Ok(Some(line))
}

/// Remove the worktrees of cancelled tasks (and of no task): a cancel removes its worktree at
/// once, but one that died before doing so leaves it behind. Skipped while the repo is busy.
fn sweep_worktrees(
    ctx: &Ctx,
    plan: bool,
    repo: &RepoCfg,
    active: &HashSet<(String, String)>,
) -> Result<Vec<String>> {
    let git = ctx.git();
    let dir = git.repos_dir().join("_wt").join(&repo.name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut orphans = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(wi) = WorkItem::parse(&name) else {
            continue;
        };
        if active.contains(&(repo.name.clone(), name.clone())) {
            continue;
        }
        let owner = db::tasks::find(ctx.db.conn(), &TaskRef::WorkItem(wi))?;
        // A merged task's work is in main (design §7.2): its worktree goes too.
        let merged = |t: &TaskRow| {
            t.stage == Stage::Done
                && repo.merge.is_some()
                && db::release::proof(ctx.db.conn(), t.id).is_ok_and(|p| p.is_some())
        };
        if owner.is_none_or(|t| t.repo != repo.name || t.stage == Stage::Cancelled || merged(&t)) {
            orphans.push(name);
        }
    }
    if orphans.is_empty() || plan {
        return Ok(orphans
            .into_iter()
            .map(|wi| format!("remove the worktree of {wi} (no live task, or merged)"))
            .collect());
    }
    let Some(lock) = git.try_lock(&repo.name)? else {
        return Ok(Vec::new());
    };
    let mut done = Vec::new();
    for wi in orphans {
        git.worktree_remove(&lock, &repo.git_ref(), &wi)?;
        done.push(format!(
            "remove the worktree of {wi} (no live task, or merged)"
        ));
    }
    Ok(done)
}

/// A cancel requested during an irreversible step (design §3.6) applies once no live owner
/// holds the task's transition lease any more.
fn requested_cancel(ctx: &Ctx, plan: bool, t: &TaskRow) -> Result<Option<String>> {
    if let Some(l) = db::leases::transition_get(ctx.db.conn(), t.id)?
        && crate::ops::lease::judge(&l, ctx.now).is_alive()
    {
        return Ok(None);
    }
    if !plan {
        crate::ops::task::cancel(
            ctx,
            &t.work_item,
            Some("cancel requested earlier, applied by tick"),
            Actor::Tick,
        )?;
    }
    Ok(Some(format!(
        "apply the requested cancel of {}",
        t.work_item
    )))
}

/// One alert per visit when a task sits in its stage past `scheduler.stage_alert_after_s`
/// (not paused, held or blocked: those said so already); `alerted`: this visit's alert is in
/// the journal already.
fn stage_age(ctx: &Ctx, plan: bool, t: &TaskRow, alerted: bool) -> Result<Option<String>> {
    let limit = ctx.config.scheduler.stage_alert_after_s as i64;
    let age = ctx.now - t.stage_entered_at;
    if limit == 0
        || age <= limit
        || t.paused_at.is_some()
        || t.held_at.is_some()
        || t.blocked_at.is_some()
        || alerted
    {
        return Ok(None);
    }
    let text = format!(
        "`{}` has been in `{}` for {} (over {}); `orch why {}` says what it waits for",
        t.work_item,
        t.stage,
        human_duration(age),
        human_duration(limit),
        t.work_item
    );
    if !plan {
        ctx.write(|ctx, tx| {
            db::misc::journal(tx, Some(t.id), "stage-age", &text, ctx.now)?;
            crate::ops::notify::alert(ctx, tx, Some(t), &text);
            Ok(())
        })?;
    }
    Ok(Some(format!("alert: {text}")))
}
