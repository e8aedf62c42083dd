//! What the supervisor and the runners both do around a task's worktree: make sure it exists,
//! build the scrubbed environment of a child that works in it, commit and push as an identity,
//! and finally advance the task as the role that did the work.
//!
//! Deliberately not here: launching anything (agents are `ops::job`'s, suites are
//! `ops::runner`'s) and deciding what the work means (that is the gate's, through
//! `ops::advance`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::config::RepoCfg;
use crate::ctx::Ctx;
use crate::db;
use crate::db::tasks::TaskRow;
use crate::domain::history::Actor;
use crate::domain::ids::JobId;
use crate::domain::ids::{TaskRef, WorkItem};
use crate::domain::stage::{JobStatus, Role, Stage};
use crate::error::usage;
use crate::ext::env;
use crate::ext::failpoint;
use crate::ext::proc::Started;
use crate::ops::advance::{self, Request};

/// A git author orch commits as; no global git identity is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

impl Identity {
    /// The identity of an agent role: `orch-<role> <role@orch.invalid>`.
    pub fn of_role(role: Role) -> Identity {
        Identity {
            name: format!("orch-{role}"),
            email: format!("{role}@orch.invalid"),
        }
    }

    /// The identity of a deterministic runner: `<name> <name@orch.invalid>`.
    pub fn of_runner(name: &str) -> Identity {
        Identity {
            name: name.to_string(),
            email: format!("{name}@orch.invalid"),
        }
    }
}

/// Make sure the task worktree exists: created on the task's first job from fresh
/// `origin/<main>`, or checked out as it is when the remote already has the branch (design §4.4).
/// This is the job's one fetch, of `main` and the task's branch only: the gate after the work
/// reads without one (`gather::open_pushed`). The repo lock is held for the fetch and the
/// worktree creation only.
pub fn ensure(ctx: &Ctx, task: &TaskRow, repo: &RepoCfg) -> Result<PathBuf> {
    let git = ctx.git();
    let lock = git.lock(&repo.name)?;
    let r = repo.git_ref();
    git.ensure_clone(&lock, &r)
        .with_context(|| format!("cloning repo `{}`", repo.name))?;
    git.worktree_add(&lock, &r, &task.base_work_item, &task.branch)
        .with_context(|| format!("preparing the worktree of `{}`", task.work_item))
}

/// Give back the worktree of a task left with no live job (it waits for a human, a dependency
/// or a breakpoint, its job failed for good, or it is finished) when nothing would be lost:
/// the worktree is clean and its HEAD is what `origin/<branch>` holds (or is already in
/// `origin/<main>`, nothing committed). The next job re-creates it from the remote branch
/// (`ensure`). Every worktree the clone keeps costs each later `git worktree add` and each
/// fetch's connectivity check of the repo, which walk the HEAD of every worktree: kept for
/// the idle tasks, they made a job's git time grow with the number of tasks (design §4.4,
/// docs/decisions.md "Git on a job's path"). Removed under the repo lock, after checking again
/// that no job of the task is live: a job claimed meanwhile needs the lock to prepare its
/// worktree, so it either is seen here or re-creates the worktree after. Returns whether the
/// worktree was removed.
pub fn park_if_idle(ctx: &Ctx, task: &TaskRow) -> Result<bool> {
    let live = |ctx: &Ctx| -> Result<bool> {
        Ok(db::jobs::of_task(ctx.db.conn(), task.id)?
            .iter()
            .any(|j| matches!(j.status, JobStatus::Queued | JobStatus::Running)))
    };
    if live(ctx)? {
        return Ok(false);
    }
    let repo = ctx.repo_of(task)?;
    let git = ctx.git();
    let dir = git.worktree_dir(&repo.name, &task.base_work_item);
    if !dir.join(".git").exists() {
        return Ok(false);
    }
    // Read before the lock (it is held only to change the registry): no job of the task is
    // live, so nothing writes the worktree, and a job that starts now needs the lock first.
    if git.is_dirty(&dir)? {
        return Ok(false);
    }
    let head = git.rev_parse(&dir, "HEAD")?;
    let pushed = git
        .rev_parse(&dir, &format!("origin/{}", task.branch))
        .is_ok_and(|remote| remote == head)
        || git.in_history(&dir, &head, &format!("origin/{}", repo.main))?;
    if !pushed {
        return Ok(false);
    }
    let lock = git.lock(&repo.name)?;
    tracing::debug!("repo lock taken to give the worktree back");
    if live(ctx)? {
        return Ok(false);
    }
    git.worktree_remove(&lock, &repo.git_ref(), &task.base_work_item)?;
    Ok(true)
}

/// The environment of a child working in the task's worktree (an agent, a suite, a CI
/// command): this process's environment scrubbed of secrets (design §9), plus `ORCH_SANDBOX=1`,
/// `ORCH_WORK_ITEM` and the caller's `extra` variables.
pub fn child_env(ctx: &Ctx, task: &TaskRow, extra: &[(&str, String)]) -> Vec<(OsString, OsString)> {
    let mut set = vec![
        ("ORCH_SANDBOX", "1".to_string()),
        ("ORCH_WORK_ITEM", task.base_work_item.clone()),
    ];
    set.extend(extra.iter().cloned());
    let names = ctx.config.secret_env_names();
    env::child_env(std::env::vars_os(), &scrub(ctx, &names), &set)
}

/// The config's rules for inherited variables (design §9.1), over `names`, the config's `*_env`
/// secrets.
pub fn scrub<'a>(ctx: &'a Ctx, names: &'a [String]) -> env::Scrub<'a> {
    env::Scrub {
        deny_names: names,
        deny_globs: &ctx.config.agent.env_deny,
        allow: &ctx.config.agent.env_allow,
    }
}

/// Commit as `who` what changed in `worktree`: everything, or only `paths` (a runner commits
/// its report and nothing the suite left behind). `None` when there was nothing to commit.
pub fn commit(
    ctx: &Ctx,
    worktree: &Path,
    paths: Option<&[&str]>,
    message: &str,
    who: &Identity,
) -> Result<Option<String>> {
    let git = ctx.git();
    match paths {
        None => git.commit_all(worktree, message, &who.name, &who.email),
        Some(p) => git.commit_paths(worktree, p, message, &who.name, &who.email),
    }
}

/// Push the task branch from its worktree (never a main branch: `ext::git` refuses).
pub fn push(ctx: &Ctx, repo: &RepoCfg, task: &TaskRow, worktree: &Path) -> Result<()> {
    ctx.git()
        .push_branch(&repo.git_ref(), worktree, &task.branch)
        .with_context(|| format!("pushing `{}`", task.branch))
}

/// Advance the task as the role that just worked `stage`, with a fresh clock and connection
/// (the work may have taken an hour): a task that moved on meanwhile is a `stage-cas-lost`
/// no-op, never a second transition. The caller has just pushed the worktree it worked in, so
/// the gate reads it without a fetch.
pub fn advance_as(
    ctx: &Ctx,
    task: &TaskRow,
    stage: Stage,
    role: Role,
    actor: Actor,
    note: Option<String>,
) -> Result<advance::Report> {
    let wi = WorkItem::parse(&task.base_work_item).map_err(usage)?;
    advance::advance(
        &ctx.reopen()?,
        &Request {
            task: TaskRef::WorkItem(wi),
            expect_stage: Some(stage),
            as_role: Some(role),
            to: None,
            dry_run: false,
            actor,
            note,
            pushed: true,
        },
    )
}

/// The `on_start` of a child that works the job's worktree (the agent, the CI command, a
/// runner's suite): record its process group as the job's, so the reaper and `orch cancel`
/// stop it when the supervisor is gone. Over its own connection: the caller's is borrowed.
pub fn record_group(
    ctx: &Ctx,
    id: JobId,
    attempt: u32,
    point: &'static str,
) -> impl FnOnce(&Started) + use<> {
    let db_path = ctx.config.db_path();
    move |s: &Started| {
        let res = db::Db::open(&db_path).and_then(|db| {
            db.write(|tx| db::jobs::set_agent(tx, id, attempt, s.pgid as i64, s.start_time as i64))
        });
        if let Err(e) = res {
            tracing::warn!("could not record the process group {}: {e:#}", s.pgid);
        }
        failpoint::hit(point);
    }
}
