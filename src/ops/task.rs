//! The human gestures on tasks and repos: add (create + start), approve, confirm-deploy,
//! cancel, pause, resume, freeze, unfreeze (design §3.5–§3.7). Each validates its input first and
//! changes nothing when it is bad; each state change is one write transaction with its history
//! row.

use std::time::Duration;

use anyhow::{Context, Result};
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::db::{self, tasks::NewTask};
use crate::domain::claim::dependency_cycle;
use crate::domain::history::{Actor, Outcome};
use crate::domain::ids::{self, JobId, TaskRef, WorkItem, printable};
use crate::domain::liveness::Liveness;
use crate::domain::stage::{Role, Stage, Track};
use crate::error::{Code, exit, usage};
use crate::ext::{failpoint, sys};
use crate::ops::advance;
use crate::ops::apply::{enqueue, record, record_here, role_on_entry};

pub struct AddRequest<'a> {
    pub repo: &'a str,
    pub title: &'a str,
    pub work_item: Option<&'a str>,
    /// The task's description (Markdown), at most 1 MiB; empty when there is none.
    pub description: &'a str,
    pub bug: bool,
    pub labels: &'a [String],
    pub depends_on: &'a [String],
    /// Who starts it: an operator (`task add`) or the tracker (`webhook`).
    pub actor: Actor,
}

/// The largest description a task may carry.
pub const MAX_DESCRIPTION: usize = 1 << 20;

pub struct Added {
    pub work_item: String,
    pub branch: String,
    pub job: JobId,
}

fn valid_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 64
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/ ".contains(&b))
}

/// `orch task add`: create the task at `created` and start it (→ `analysis`, one analyst job).
pub fn add(ctx: &Ctx, req: &AddRequest<'_>) -> Result<Added> {
    let repo = ctx.config.repo(req.repo).ok_or_else(|| {
        let known: Vec<&str> = ctx.config.repos.iter().map(|r| r.name.as_str()).collect();
        usage(format!(
            "unknown repo `{}`; configured repos: {}",
            printable(req.repo),
            if known.is_empty() {
                "none (add one to `repos:` in the config)".to_string()
            } else {
                known.join(", ")
            }
        ))
    })?;
    let title = req.title.trim();
    ids::check_line("--title", title, ids::MAX_LINE).map_err(usage)?;
    let wi = match req.work_item {
        Some(w) => WorkItem::parse(w).map_err(usage)?,
        None => {
            let n = db::tasks::max_number(ctx.db.conn(), &repo.prefix)? + 1;
            WorkItem::parse(&format!("{}-{n}", repo.prefix)).map_err(usage)?
        }
    };
    let mut labels: Vec<String> = repo.default_labels.clone();
    for l in req.labels {
        if !valid_label(l) {
            return Err(usage(format!(
                "invalid label `{}`: use letters, digits and `-_.:/`",
                printable(l)
            )));
        }
        if !labels.contains(l) {
            labels.push(l.clone());
        }
    }
    let description = req.description;
    if description.len() > MAX_DESCRIPTION {
        return Err(usage("the description is larger than 1 MiB"));
    }
    let mut deps = Vec::new();
    for d in req.depends_on {
        let r = TaskRef::parse(d).map_err(usage)?;
        deps.push(ctx.task(&r)?);
    }
    let branch = ids::branch_name(&wi, title);
    if !crate::domain::names::valid_branch_name(&branch) {
        return Err(usage(format!(
            "cannot make a branch name from `{}`",
            printable(title)
        )));
    }
    let track = if req.bug || labels.iter().any(|l| l == "bug") {
        Track::Bug
    } else {
        Track::Feature
    };

    ctx.write(|ctx, tx| {
        if db::tasks::work_item_taken(tx, wi.as_str())? {
            let existing = db::tasks::find(tx, &TaskRef::WorkItem(wi.clone()))?;
            let stage = existing.map(|t| t.stage.to_string()).unwrap_or_default();
            return Err(usage(format!(
                "work item `{wi}` already exists (stage `{stage}`); `orch task show {wi}` shows it"
            )));
        }
        let id = db::tasks::insert(
            tx,
            &NewTask {
                work_item: wi.as_str(),
                repo: &repo.name,
                title,
                description,
                track,
                branch: &branch,
                labels: &labels,
            },
            ctx.now,
        )?;
        let edges = db::misc::all_deps(tx)?;
        for dep in &deps {
            if let Some(cycle) = dependency_cycle(&edges, id.0, dep.id.0) {
                let names = db::tasks::stages_of(tx, &cycle)?;
                let path: Vec<String> = cycle
                    .iter()
                    .map(|c| {
                        names
                            .iter()
                            .find(|(i, _, _)| i == c)
                            .map(|(_, w, _)| w.clone())
                            .unwrap_or_else(|| wi.to_string())
                    })
                    .collect();
                return Err(usage(format!(
                    "dependency cycle refused: {}",
                    path.join(" → ")
                )));
            }
            db::misc::add_dep(tx, id, dep.id)?;
        }
        let task = db::tasks::get(tx, id)?;
        if !db::tasks::cas_stage(tx, id, Stage::Created, Stage::Analysis, None, ctx.now)? {
            anyhow::bail!("task `{wi}` moved while it was being created");
        }
        record(
            ctx,
            tx,
            &task,
            Stage::Created,
            Stage::Analysis,
            req.actor,
            Outcome::Advanced,
            "pipeline started",
        )?;
        let job = enqueue(ctx, tx, &task, Role::Analyst, Stage::Analysis, None)?;
        Ok(Added {
            work_item: wi.to_string(),
            branch: branch.clone(),
            job,
        })
    })
}

/// The result of a human gesture: what happened and the exit code it maps to.
pub struct Gesture {
    pub work_item: String,
    pub code: Code,
    pub message: String,
    pub advance: Option<advance::Report>,
}

fn parse_ref(s: &str) -> Result<TaskRef> {
    TaskRef::parse(s).map_err(usage)
}

/// `orch approve`: record the approval, then advance if the analysis files exist.
pub fn approve(ctx: &Ctx, wi: &str, actor: Actor) -> Result<Gesture> {
    let r = parse_ref(wi)?;
    let task = ctx.task(&r)?;
    if task.stage != Stage::Analysis {
        return Err(usage(format!(
            "cannot approve `{}`: it is in `{}`, not `analysis`",
            task.work_item, task.stage
        )));
    }
    ctx.write(|ctx, tx| {
        db::tasks::set_approved(tx, task.id, ctx.now)?;
        record_here(
            ctx,
            tx,
            &task,
            actor,
            Outcome::Approved,
            "analysis approved",
        )
    })?;
    let rep = advance::advance(
        ctx,
        &advance::Request {
            task: r,
            expect_stage: Some(Stage::Analysis),
            as_role: None,
            to: None,
            dry_run: false,
            actor,
            note: None,
            pushed: false,
        },
    )?;
    let (code, message) = match rep.outcome {
        Outcome::Advanced => (
            Code::Ok,
            format!("approved `{}`: {}", task.work_item, rep.reason),
        ),
        Outcome::NotSatisfied => (
            Code::No,
            format!("approval of `{}` recorded; {}", task.work_item, rep.reason),
        ),
        other => (
            other.code(),
            format!("approval of `{}` recorded; {}", task.work_item, rep.reason),
        ),
    };
    Ok(Gesture {
        work_item: task.work_item.clone(),
        code,
        message,
        advance: Some(rep),
    })
}

/// `orch confirm-deploy`: the only trigger of a production deploy when `require_confirm`.
pub fn confirm_deploy(ctx: &Ctx, wi: &str, actor: Actor) -> Result<Gesture> {
    let task = ctx.task(&parse_ref(wi)?)?;
    if task.stage != Stage::Deploy {
        return Err(usage(format!(
            "cannot confirm the deploy of `{}`: it is in `{}`, not `deploy`",
            task.work_item, task.stage
        )));
    }
    let repo = ctx.repo_of(&task)?;
    let mut confirmed = task.clone();
    confirmed.deploy_confirmed_at = Some(ctx.now);
    let role = role_on_entry(Stage::Deploy, repo, &confirmed);
    let live = db::jobs::of_task(ctx.db.conn(), task.id)?
        .into_iter()
        .any(|j| {
            j.stage == Stage::Deploy
                && matches!(
                    j.status,
                    crate::domain::stage::JobStatus::Queued
                        | crate::domain::stage::JobStatus::Running
                )
        });
    let job = ctx.write(|ctx, tx| {
        db::tasks::set_deploy_confirmed(tx, task.id, ctx.now)?;
        record_here(ctx, tx, &task, actor, Outcome::Approved, "deploy confirmed")?;
        match (role, live) {
            (Some(r), false) => Ok(Some(enqueue(ctx, tx, &task, r, Stage::Deploy, None)?)),
            _ => Ok(None),
        }
    })?;
    let (code, message) = match (job, live) {
        (Some(j), _) => (
            Code::Ok,
            format!(
                "deploy of `{}` confirmed; deployer job {} queued",
                task.work_item, j.0
            ),
        ),
        (None, true) => (
            Code::Ok,
            format!(
                "deploy of `{}` confirmed; its deployer job is already queued",
                task.work_item
            ),
        ),
        (None, false) => (
            Code::No,
            format!(
                "deploy of `{}` confirmed, but repo `{}` has no deploy contract to run",
                task.work_item, task.repo
            ),
        ),
    };
    Ok(Gesture {
        work_item: task.work_item.clone(),
        code,
        message,
        advance: None,
    })
}

/// `orch cancel` (STOP), design §3.6.
pub fn cancel(ctx: &Ctx, wi: &str, reason: Option<&str>, actor: Actor) -> Result<Gesture> {
    let task = ctx.task(&parse_ref(wi)?)?;
    if task.stage.is_terminal() {
        return Err(usage(format!(
            "cannot cancel `{}`: it is already `{}`",
            task.work_item, task.stage
        )));
    }
    if let Some(r) = reason {
        ids::check_line("--reason", r, ids::MAX_LINE).map_err(usage)?;
    }
    let why = reason.unwrap_or("cancelled by operator");
    // Inside an irreversible step with a live owner: record the request, apply it later.
    if matches!(task.stage, Stage::DeployStaging | Stage::Deploy)
        && let Some(l) = db::leases::transition_get(ctx.db.conn(), task.id)?
        && crate::ops::lease::judge(&l, ctx.now) == Liveness::Alive
    {
        ctx.write(|ctx, tx| {
            db::tasks::set_cancel_requested(tx, task.id, ctx.now)?;
            record_here(
                ctx,
                tx,
                &task,
                actor,
                Outcome::Deferred,
                &format!(
                    "cancel requested while {}",
                    crate::ops::lease::describe_owner(&l)
                ),
            )
        })?;
        return Ok(Gesture {
            work_item: task.work_item.clone(),
            code: Code::Busy,
            message: format!(
                "cancel of `{}` recorded; it applies when the {} step under way finishes ({})",
                task.work_item,
                task.stage,
                crate::ops::lease::describe_owner(&l)
            ),
            advance: None,
        });
    }
    // The intent first: if this process dies anywhere below, the next tick finishes the cancel
    // (and no new job of the task is claimed meanwhile).
    if task.cancel_requested_at.is_none() {
        ctx.write(|ctx, tx| db::tasks::set_cancel_requested(tx, task.id, ctx.now))?;
    }
    // Stop what runs before the jobs are marked: two workers must never share the worktree,
    // and a supervisor that outlives the kill cannot apply its outcome anyway (its writes are
    // fenced on `status = 'running'`, which the transaction below ends).
    let running: Vec<_> = db::jobs::of_task(ctx.db.conn(), task.id)?
        .into_iter()
        .filter(|j| j.status == crate::domain::stage::JobStatus::Running)
        .collect();
    for j in &running {
        for who in [j.child_group(), j.supervisor()].into_iter().flatten() {
            match sys::terminate_group(&who, Duration::from_secs(5)) {
                Ok(true) => info!(work_item = %task.work_item, "stopped process group {}", who.pid),
                Ok(false) => {}
                Err(e) => {
                    warn!(work_item = %task.work_item, "could not stop process group {}: {e:#}", who.pid)
                }
            }
        }
    }
    failpoint::hit("cancel.after-kill");
    // Where the remote branch is now: its delete (through the outbox, later) happens only while
    // it still points there, so a task started again with this id keeps its new branch.
    let sha = match ctx.config.repo(&task.repo) {
        Some(repo) => {
            let git = ctx.git();
            // Asked of the remote; without network, what the clone last saw (our own pushes
            // move it too).
            git.remote_branch_sha(&repo.git_ref(), &task.branch)
                .or_else(|e| {
                    warn!(work_item = %task.work_item, "cannot ask the remote for the branch head: {e:#}");
                    git.remote_branch_head(&repo.git_ref(), &task.branch)
                })
                .unwrap_or_else(|e| {
                    warn!(work_item = %task.work_item, "cannot read the branch head: {e:#}");
                    None
                })
        }
        None => None,
    };
    ctx.write(|ctx, tx| {
        db::jobs::cancel_live(tx, task.id, "cancelled", ctx.now)?;
        db::leases::release_all_of_task(tx, task.id)?;
        if !db::tasks::cancel(tx, task.id, &task.work_item, task.stage, ctx.now)? {
            return Err(exit(
                Code::Busy,
                format!(
                    "`{}` moved while being cancelled; run `orch cancel {}` again",
                    task.work_item, task.base_work_item
                ),
            ));
        }
        record(
            ctx,
            tx,
            &task,
            task.stage,
            Stage::Cancelled,
            actor,
            Outcome::Cancelled,
            why,
        )?;
        crate::ops::notify::on_cancel(ctx, tx, &task, sha.as_deref())
    })?;
    failpoint::hit("cancel.after-commit");
    let mut notes = Vec::new();
    if let Some(repo) = ctx.config.repo(&task.repo)
        && let Err(e) = remove_worktree(ctx, repo, &task.base_work_item)
    {
        warn!(work_item = %task.work_item, "could not remove the worktree: {e:#}");
        notes.push(format!("worktree not removed: {e:#}"));
    }
    let tomb = ids::tombstone(&task.work_item, task.id);
    Ok(Gesture {
        work_item: tomb.clone(),
        code: Code::Ok,
        message: format!(
            "cancelled `{}` (now `{tomb}`); stopped {} running job(s); its artifacts stay in the history of branch `{}` (the remote branch is deleted through the outbox){}",
            task.work_item,
            running.len(),
            task.branch,
            if notes.is_empty() {
                String::new()
            } else {
                format!("; {}", notes.join("; "))
            }
        ),
        advance: None,
    })
}

fn remove_worktree(ctx: &Ctx, repo: &crate::config::RepoCfg, wi: &str) -> Result<()> {
    let g = ctx.git();
    if !g.worktree_dir(&repo.name, wi).exists() {
        return Ok(());
    }
    let r = repo.git_ref();
    let lock = g.lock(&repo.name)?;
    g.worktree_remove(&lock, &r, wi)
        .with_context(|| format!("removing the worktree of `{wi}`"))
}

/// `orch pause` (or a `--before STAGE` breakpoint).
pub fn pause(ctx: &Ctx, wi: &str, reason: &str, before: Option<&str>) -> Result<Gesture> {
    let task = ctx.task(&parse_ref(wi)?)?;
    let reason = reason.trim();
    ids::check_line("--reason", reason, ids::MAX_LINE).map_err(usage)?;
    if task.stage.is_terminal() {
        return Err(usage(format!(
            "cannot pause `{}`: it is already `{}`",
            task.work_item, task.stage
        )));
    }
    let by = operator_name(ctx);
    if let Some(b) = before {
        let stage: Stage = b
            .parse()
            .map_err(|e: crate::domain::stage::UnknownName| usage(e.to_string()))?;
        // Any stage the task can still enter (again, after a rollback) is a valid breakpoint.
        let never = matches!(stage, Stage::Created | Stage::Analysis | Stage::Cancelled)
            || (task.track == Track::Bug && stage == Stage::Architecture);
        if never {
            return Err(usage(format!(
                "cannot set a breakpoint before `{stage}`: `{}` ({} track) never enters it from `{}`",
                task.work_item, task.track, task.stage
            )));
        }
        let text = format!("breakpoint before `{stage}`: {reason}");
        ctx.write(|ctx, tx| {
            db::tasks::set_pause_before(tx, task.id, Some(stage), ctx.now)?;
            record_here(ctx, tx, &task, Actor::Operator, Outcome::Paused, &text)
        })?;
        // One breakpoint per task: a second one replaces the first, and says so.
        let replaced = match task.pause_before {
            Some(old) if old != stage => {
                format!(" (this replaces the breakpoint before `{old}`; a task has one)")
            }
            _ => String::new(),
        };
        return Ok(Gesture {
            work_item: task.work_item.clone(),
            code: Code::Ok,
            message: format!(
                "`{}` will pause before entering `{stage}`{replaced}",
                task.work_item
            ),
            advance: None,
        });
    }
    if let Some(at) = task.paused_at {
        return Ok(Gesture {
            work_item: task.work_item.clone(),
            code: Code::Ok,
            message: format!(
                "`{}` is already paused since {} ({}); nothing to do",
                task.work_item,
                crate::domain::time::rfc3339(at),
                task.paused_reason.as_deref().unwrap_or("")
            ),
            advance: None,
        });
    }
    ctx.write(|ctx, tx| {
        db::tasks::set_paused(tx, task.id, Some((reason, &by)), ctx.now)?;
        record_here(ctx, tx, &task, Actor::Operator, Outcome::Paused, reason)
    })?;
    Ok(Gesture {
        work_item: task.work_item.clone(),
        code: Code::Ok,
        message: format!("paused `{}` in `{}`: {reason}", task.work_item, task.stage),
        advance: None,
    })
}

/// The person behind the command (`Ctx::person`), `operator` when unknown.
fn operator_name(ctx: &Ctx) -> String {
    ctx.person.clone().unwrap_or_else(|| "operator".to_string())
}

/// `orch resume`: clears a pause and a hold.
pub fn resume(ctx: &Ctx, wi: &str) -> Result<Gesture> {
    let task = ctx.task(&parse_ref(wi)?)?;
    if task.stage.is_terminal() {
        return Err(usage(format!(
            "cannot resume `{}`: it is already `{}`",
            task.work_item, task.stage
        )));
    }
    // A job that failed for good is not resumed: say what re-runs it.
    let failed = db::usage::failed_job(ctx.db.conn(), task.id, task.stage)?.map(|j| {
        format!(
            "; its job {} failed for good: `orch retry {}` re-queues it",
            j.0, j.0
        )
    });
    let failed = failed.unwrap_or_default();
    if task.paused_at.is_none() && task.held_at.is_none() && task.pause_before.is_none() {
        return Ok(Gesture {
            work_item: task.work_item.clone(),
            code: Code::Ok,
            message: format!("`{}` is not paused; nothing to do{failed}", task.work_item),
            advance: None,
        });
    }
    // A hold ended its stage's job; resuming gives the stage a fresh one, or nothing would run.
    let requeue = if task.held_at.is_some() {
        let live = db::jobs::of_task(ctx.db.conn(), task.id)?.iter().any(|j| {
            matches!(
                j.status,
                crate::domain::stage::JobStatus::Queued | crate::domain::stage::JobStatus::Running
            )
        });
        let repo = ctx.repo_of(&task)?;
        role_on_entry(task.stage, repo, &task).filter(|_| !live)
    } else {
        None
    };
    ctx.write(|ctx, tx| {
        if let Some(role) = requeue {
            enqueue(ctx, tx, &task, role, task.stage, None)?;
        }
        db::tasks::set_paused(tx, task.id, None, ctx.now)?;
        db::tasks::set_held(tx, task.id, None, ctx.now)?;
        // Resuming also clears a breakpoint that has not fired yet.
        db::tasks::set_pause_before(tx, task.id, None, ctx.now)?;
        record_here(
            ctx,
            tx,
            &task,
            Actor::Operator,
            Outcome::Resumed,
            "resumed by operator",
        )
    })?;
    // A breakpoint stopped a transition whose gate had passed: make it now, rather than leave
    // the task idle until the reconciler notices (its next job then starts at once).
    let advance = if task.paused_by.as_deref() == Some("breakpoint") && requeue.is_none() {
        let wi = crate::domain::ids::WorkItem::parse(&task.base_work_item).map_err(usage)?;
        Some(crate::ops::advance::advance(
            ctx,
            &crate::ops::advance::Request {
                task: TaskRef::WorkItem(wi),
                expect_stage: Some(task.stage),
                as_role: None,
                to: None,
                dry_run: false,
                actor: Actor::Operator,
                note: None,
                pushed: false,
            },
        )?)
    } else {
        None
    };
    Ok(Gesture {
        work_item: task.work_item.clone(),
        code: Code::Ok,
        message: format!(
            "resumed `{}` in `{}`{}{}",
            task.work_item,
            task.stage,
            if requeue.is_none() {
                failed.as_str()
            } else {
                ""
            },
            advance
                .as_ref()
                .map(|a| format!("; {} → {}: {}", a.from, a.to, a.reason))
                .unwrap_or_default()
        ),
        advance,
    })
}

fn known_repo<'a>(ctx: &'a Ctx, repo: &str) -> Result<&'a crate::config::RepoCfg> {
    if !crate::domain::names::valid_repo_name(repo) {
        return Err(usage(format!("invalid repo name `{}`", printable(repo))));
    }
    ctx.config
        .repo(repo)
        .ok_or_else(|| usage(format!("unknown repo `{repo}`; it is not in the config")))
}

/// `orch freeze`: no new task of the repo starts analysis. Journaled in `lessons`. Returns
/// whether it changed anything, and what to tell the operator.
pub fn freeze(ctx: &Ctx, repo: &str, reason: &str) -> Result<(bool, String)> {
    let repo = known_repo(ctx, repo)?;
    let reason = reason.trim();
    ids::check_line("--reason", reason, ids::MAX_LINE).map_err(usage)?;
    let by = operator_name(ctx);
    let done = ctx.write(|ctx, tx| {
        let inserted = db::misc::freeze(tx, &repo.name, reason, &by, ctx.now)?;
        if inserted {
            db::misc::journal(
                tx,
                None,
                "frozen",
                &format!("{}: {reason} (by {by})", repo.name),
                ctx.now,
            )?;
        }
        Ok(inserted)
    })?;
    Ok(if done {
        (true, format!("froze repo `{}`: {reason}", repo.name))
    } else {
        (
            false,
            format!("repo `{}` is already frozen; nothing to do", repo.name),
        )
    })
}

pub fn unfreeze(ctx: &Ctx, repo: &str) -> Result<(bool, String)> {
    let repo = known_repo(ctx, repo)?;
    let done = ctx.write(|ctx, tx| {
        let removed = db::misc::unfreeze(tx, &repo.name)?;
        if removed {
            db::misc::journal(tx, None, "unfrozen", &repo.name, ctx.now)?;
        }
        Ok(removed)
    })?;
    Ok(if done {
        (true, format!("unfroze repo `{}`", repo.name))
    } else {
        (
            false,
            format!("repo `{}` is not frozen; nothing to do", repo.name),
        )
    })
}
