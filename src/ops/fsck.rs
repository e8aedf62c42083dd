//! `orch fsck`: gather what the invariants of `domain::fsck` read — the live tasks and jobs,
//! the liveness of every supervisor and lease owner, pending outbox rows, worktree directories,
//! SQLite's own checks — and ask for the violations. Read-only: it repairs nothing, and it never
//! touches the network or a repo lock.

use std::collections::HashMap;

use anyhow::Result;
use serde::Serialize;

use crate::config::{CiMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::claim::dependency_cycle;
use crate::domain::fsck::{self, Facts, LeaseFacts, OutboxFacts, RunningJob, TaskFacts, Violation};
use crate::domain::gate;
use crate::domain::ids::{TaskRef, WorkItem};
use crate::domain::liveness::Liveness;
use crate::domain::stage::{JobStatus, Stage};
use crate::ext::git::Git;
use crate::ext::sys;
use crate::ops::apply::role_on_entry;

/// The audit's result.
#[derive(Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub clean: bool,
    pub checked: Checked,
    pub violations: Vec<Violation>,
}

/// How much was looked at.
#[derive(Debug, Default, Serialize)]
pub struct Checked {
    pub tasks: usize,
    pub running_jobs: usize,
    pub leases: usize,
    pub pending_outbox: usize,
    pub worktrees: usize,
}

/// Run the audit.
pub fn fsck(ctx: &Ctx) -> Result<Report> {
    let facts = ctx.db.read(|c| gather(ctx, c))?;
    let checked = Checked {
        tasks: facts.0.tasks.len(),
        running_jobs: facts.0.running.len(),
        leases: facts.0.leases.len(),
        pending_outbox: facts.0.outbox.len(),
        worktrees: facts.1,
    };
    let violations = fsck::violations(&facts.0);
    Ok(Report {
        schema_version: 1,
        clean: violations.is_empty(),
        checked,
        violations,
    })
}

fn gather(ctx: &Ctx, c: &rusqlite::Connection) -> Result<(Facts, usize)> {
    let now = ctx.now;
    let git = ctx.git();
    let active = db::tasks::active(c)?;
    let live = db::jobs::live(c)?;
    let mut by_id: HashMap<i64, TaskRow> = active.iter().map(|t| (t.id.0, t.clone())).collect();
    let mut facts = Facts {
        now,
        grace_s: ctx.config.scheduler.reconcile_grace_s as i64,
        launch_grace_s: ctx.config.scheduler.launch_grace_s as i64,
        ..Facts::default()
    };
    for j in &live {
        if !by_id.contains_key(&j.task_id.0) {
            let t = db::tasks::get(c, j.task_id)?;
            by_id.insert(t.id.0, t);
        }
    }
    for j in live.iter().filter(|j| j.status == JobStatus::Running) {
        let task = &by_id[&j.task_id.0];
        let supervisor_dead = match j.supervisor() {
            Some(s) => match sys::is_live(&s) {
                Liveness::Alive => None,
                Liveness::Dead(r) => Some(format!("its supervisor is gone ({})", r.display(s.pid))),
            },
            None if now - j.started_at.unwrap_or(now)
                > ctx.config.scheduler.launch_grace_s as i64 =>
            {
                Some("no supervisor was ever recorded".into())
            }
            None => None,
        };
        facts.running.push(RunningJob {
            id: j.id.0,
            work_item: task.work_item.clone(),
            started_at: j.started_at,
            supervisor_dead,
            // The post-deploy watch works without one (the worktree goes once merged).
            worktree_exists: j.role == crate::domain::stage::Role::Monitor
                || git.worktree_dir(&task.repo, &task.base_work_item).is_dir(),
        });
    }
    for j in live.iter().filter(|j| j.status == JobStatus::Queued) {
        let task = &by_id[&j.task_id.0];
        if task.stage.is_terminal() {
            facts
                .queued_of_finished
                .push((j.id.0, task.work_item.clone()));
        }
    }
    for t in &active {
        let jobs: Vec<&JobRow> = live.iter().filter(|j| j.task_id == t.id).collect();
        let last = db::jobs::last_for_stage(c, t.id, t.stage)?;
        facts.tasks.push(TaskFacts {
            work_item: t.work_item.clone(),
            stage: t.stage,
            stage_entered_at: t.stage_entered_at,
            last_move_to: db::audit::last_move_to(c, t.id)?,
            queued_jobs: jobs
                .iter()
                .filter(|j| j.status == JobStatus::Queued)
                .count() as u32,
            running_jobs: jobs
                .iter()
                .filter(|j| j.status == JobStatus::Running)
                .map(|j| j.id.0)
                .collect(),
            wait: wait_of(t, ctx.config.repo(&t.repo), last.as_ref()),
            last_job_finished_at: last.as_ref().and_then(|j| j.finished_at),
        });
    }
    let views = [
        (
            crate::ops::lease::view(db::leases::transition_all(c)?, now),
            false,
        ),
        (
            crate::ops::lease::view_merge(c, db::leases::merge_all(c)?, now)?,
            true,
        ),
    ];
    for (rows, merge) in views {
        for l in rows {
            let (what, release) = if merge {
                (
                    format!("merge lease of repo `{}`", l.row.repo),
                    format!("orch lease release --merge {}", l.row.repo),
                )
            } else {
                let wi = l.row.work_item.clone().unwrap_or_default();
                (
                    format!("transition lease of `{wi}`"),
                    format!("orch lease release {wi}"),
                )
            };
            facts.leases.push(LeaseFacts {
                what,
                release,
                owner_dead: match l.liveness {
                    Liveness::Alive => None,
                    Liveness::Dead(r) => Some(r.display(l.row.owner.pid).to_string()),
                },
            });
        }
    }
    for row in db::outbox::list(c, false)?
        .into_iter()
        .filter(|r| r.status == "pending")
    {
        facts.outbox.push(OutboxFacts {
            id: row.id,
            kind: row.kind,
            next_attempt_at: row.next_attempt_at,
            // A tick every few seconds delivers a due row; a row being sent is pushed past its
            // send by the claim's lease. Allow the retry backoff and then some.
            allowance_s: crate::ops::outbox::backoff_s(row.attempts.max(1)).max(600),
        });
    }
    let mut worktrees = 0;
    for repo in &ctx.config.repos {
        worktrees += orphans(c, &git, repo, &mut facts.orphan_worktrees)?;
        if repo.merge.is_some() {
            for (id, wi) in db::release::done_of_repo(c, &repo.name)? {
                if db::release::proof(c, id)?.is_none() {
                    facts.done_without_proof.push(wi);
                }
            }
        }
    }
    let edges = db::misc::all_deps(c)?;
    for (i, &(from, to)) in edges.iter().enumerate() {
        let others: Vec<(i64, i64)> = edges
            .iter()
            .enumerate()
            .filter(|(k, _)| *k != i)
            .map(|(_, e)| *e)
            .collect();
        if let Some(cycle) = dependency_cycle(&others, from, to) {
            let names = db::tasks::stages_of(c, &cycle)?;
            facts.dependency_cycle = Some(
                cycle
                    .iter()
                    .map(|id| {
                        names
                            .iter()
                            .find(|(i, _, _)| i == id)
                            .map(|(_, w, _)| w.clone())
                            .unwrap_or_else(|| format!("task {id}"))
                    })
                    .collect(),
            );
            break;
        }
    }
    facts.integrity = db::audit::integrity(c)?;
    facts.foreign_keys = db::audit::foreign_keys(c)?;
    Ok((facts, worktrees))
}

/// The worktree directories of `repo` that belong to no task (none with that work item, or
/// only a cancelled one: cancel removes its worktree). Returns how many directories it saw.
fn orphans(
    c: &rusqlite::Connection,
    git: &Git,
    repo: &RepoCfg,
    out: &mut Vec<(String, String)>,
) -> Result<usize> {
    let dir = git.repos_dir().join("_wt").join(&repo.name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(0);
    };
    let mut seen = 0;
    for e in entries.flatten() {
        if !e.path().is_dir() {
            continue;
        }
        seen += 1;
        let name = e.file_name().to_string_lossy().into_owned();
        let owner = match WorkItem::parse(&name) {
            Ok(wi) => db::tasks::find(c, &TaskRef::WorkItem(wi))?,
            Err(_) => None,
        };
        let owned = owner.is_some_and(|t| t.repo == repo.name && t.stage != Stage::Cancelled);
        if !owned {
            out.push((
                e.path().display().to_string(),
                git.clone_dir(&repo.name).display().to_string(),
            ));
        }
    }
    Ok(seen)
}

/// Why a task may rest with no live job, if anything explains it (design §3.5, §3.7, §3.4).
fn wait_of(t: &TaskRow, repo: Option<&RepoCfg>, last: Option<&JobRow>) -> Option<String> {
    if t.paused_at.is_some() {
        return Some("paused".into());
    }
    if let Some(r) = &t.held_reason {
        return Some(format!("held: {r}"));
    }
    if t.held_at.is_some() {
        return Some("held".into());
    }
    if t.blocked_at.is_some() {
        return Some("blocked".into());
    }
    if t.cancel_requested_at.is_some() {
        return Some("cancel requested".into());
    }
    if let Some(j) = last.filter(|j| j.status == JobStatus::Failed) {
        return Some(format!("job {} failed (alerted)", j.id.0));
    }
    let repo = repo?;
    match t.stage {
        Stage::Analysis if t.approved_at.is_none() && !t.has_label("auto-approve") => {
            Some("approval".into())
        }
        Stage::Development if repo.ci.mode == CiMode::Status => Some("CI status".into()),
        Stage::Deploy
            if gate::not_applicable(Stage::Deploy, repo.contracts()).is_none()
                && role_on_entry(Stage::Deploy, repo, t).is_none() =>
        {
            Some("deploy confirmation".into())
        }
        _ => None,
    }
}
