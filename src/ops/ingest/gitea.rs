//! The Gitea routes: a commit status is recorded and, on the head of an idle `development` task
//! of a `ci.mode: status` repo, runs its gate; a merged pull request releases the repo's merge
//! lease held for its branch.

use anyhow::Result;
use serde_json::Value;
use tracing::info;

use crate::config::{CiMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db::{self, tasks::TaskRow};
use crate::domain::history::Actor;
use crate::domain::ids::{TaskRef, printable};
use crate::domain::stage::{JobStatus, Stage};
use crate::domain::webhook::{self, GiteaEvent};
use crate::error::usage;
use crate::ops::advance;
use crate::ops::gather;

use super::routed::{Routed, repo_entries};

pub(super) fn route_gitea(ctx: &Ctx, v: &Value, header_event: Option<&str>) -> Result<Routed> {
    let ev = match webhook::gitea_event(v, header_event) {
        Ok(e) => e,
        Err(why) => return Ok(Routed::ignored(why, None)),
    };
    match ev {
        GiteaEvent::Status {
            repo,
            sha,
            state,
            context,
            description,
        } => {
            let idx = match webhook::gitea_target(&repo, &repo_entries(ctx)) {
                Ok(i) => i,
                Err(why) => return Ok(Routed::ignored(why, None).event("status")),
            };
            let repo = &ctx.config.repos[idx];
            Ok(status(ctx, repo, &sha, state, &context, &description)?.event("status"))
        }
        GiteaEvent::PullRequestMerged {
            repo,
            head_ref,
            base_ref,
            merge_commit_sha,
        } => {
            let idx = match webhook::gitea_target(&repo, &repo_entries(ctx)) {
                Ok(i) => i,
                Err(why) => return Ok(Routed::ignored(why, None).event("pull_request")),
            };
            let repo = &ctx.config.repos[idx];
            Ok(
                merged(ctx, repo, &head_ref, &base_ref, merge_commit_sha.as_deref())?
                    .event("pull_request"),
            )
        }
    }
}

/// A commit status: record it; when it decides and it is the head of a `development` task of a
/// `ci.mode: status` repo, run that task's gate (success advances, failure rolls back).
fn status(
    ctx: &Ctx,
    repo: &RepoCfg,
    sha: &str,
    state: webhook::CommitState,
    context: &str,
    description: &str,
) -> Result<Routed> {
    ctx.db.write(|tx| {
        db::misc::set_ci_status(
            tx,
            &repo.name,
            sha,
            context,
            state.as_str(),
            description,
            ctx.now,
        )
    })?;
    let short = &sha[..12];
    let recorded = format!(
        "recorded `{context}` = {} for {short} in `{}`",
        state.as_str(),
        repo.name
    );
    if !state.decisive() {
        return Ok(Routed::processed(recorded, None));
    }
    if repo.ci.mode != CiMode::Status {
        return Ok(Routed::processed(
            format!(
                "{recorded}; no gate runs: repo `{}` does not have `ci.mode: status`",
                repo.name
            ),
            None,
        ));
    }
    let candidates: Vec<TaskRow> = db::tasks::active(ctx.db.conn())?
        .into_iter()
        .filter(|t| t.repo == repo.name && t.stage == Stage::Development)
        .collect();
    let mut notes = Vec::new();
    let mut acted = None;
    for t in candidates {
        // The gate reads the same head (the task's worktree, else its remote branch); the view
        // holds the repo lock, so it is dropped before `advance` takes it again.
        let head = {
            let view = gather::open(ctx, &t, repo)?;
            view.head()?
        };
        if head.as_deref() != Some(sha) {
            continue;
        }
        if t.paused_at.is_some() {
            notes.push(format!(
                "`{}` is paused; its gate runs after `orch resume {}`",
                t.work_item, t.work_item
            ));
            continue;
        }
        // A job is running: its own advance decides when it ends (a status arriving while the
        // developer still works must not move the task under it). A queued job that has not
        // started is superseded by the advance, as on any other path.
        if db::jobs::of_task(ctx.db.conn(), t.id)?
            .iter()
            .any(|j| j.status == JobStatus::Running)
        {
            notes.push(format!(
                "`{}` has a job in progress; its gate runs when the job ends",
                t.work_item
            ));
            continue;
        }
        let rep = advance::advance(
            ctx,
            &advance::Request {
                task: TaskRef::parse(&t.work_item).map_err(usage)?,
                expect_stage: Some(Stage::Development),
                as_role: None,
                to: None,
                dry_run: false,
                actor: Actor::Webhook,
                note: Some(format!("ci status `{context}` {}", state.as_str())),
                pushed: false,
            },
        )?;
        notes.push(format!(
            "`{}`: {} ({} → {}): {}",
            rep.work_item,
            rep.outcome.as_str(),
            rep.from,
            rep.to,
            rep.reason
        ));
        acted = Some(t.base_work_item.clone());
    }
    let reason = if notes.is_empty() {
        format!("{recorded}; no `development` task has this head")
    } else {
        format!("{recorded}; {}", notes.join("; "))
    };
    Ok(Routed::processed(reason, acted))
}

/// A merged pull request: release the repo's merge lease when it is held for that branch, then
/// re-check `deploy → done` for the task that held it.
fn merged(
    ctx: &Ctx,
    repo: &RepoCfg,
    head_ref: &str,
    base_ref: &str,
    merge_sha: Option<&str>,
) -> Result<Routed> {
    let what = format!(
        "pull request `{}` → `{base_ref}` merged{}",
        printable(head_ref),
        merge_sha
            .map(|s| format!(" as {}", &s[..12]))
            .unwrap_or_default()
    );
    if base_ref != repo.main {
        return Ok(Routed::ignored(
            format!("{what}; not into `{}`, nothing to release", repo.main),
            None,
        ));
    }
    let Some(lease) = db::leases::merge_get(ctx.db.conn(), &repo.name)? else {
        return Ok(Routed::ignored(
            format!("{what}; no merge lease of `{}` is held", repo.name),
            None,
        ));
    };
    let holder = match lease.task_id {
        Some(id) => Some(db::tasks::get(ctx.db.conn(), id)?),
        None => None,
    };
    if let Some(t) = &holder
        && t.branch != head_ref
    {
        return Ok(Routed::ignored(
            format!(
                "{what}; the merge lease of `{}` is held by `{}` for branch `{}`, not this one",
                repo.name, t.work_item, t.branch
            ),
            Some(t.base_work_item.clone()),
        ));
    }
    let detail = format!("{}: merge lease released: {what}", repo.name);
    let released = ctx.db.write(|tx| {
        let released = db::leases::merge_delete(tx, &repo.name)?;
        if released {
            db::misc::journal(
                tx,
                holder.as_ref().map(|t| t.id),
                "merge-lease-released",
                &detail,
                ctx.now,
            )?;
        }
        Ok(released)
    })?;
    if !released {
        return Ok(Routed::ignored(
            format!(
                "{what}; the merge lease of `{}` was released meanwhile",
                repo.name
            ),
            None,
        ));
    }
    info!(repo = %repo.name, "{detail}");
    let mut reason = format!("{what}; released the merge lease of `{}`", repo.name);
    if let Some(t) = holder.as_ref().filter(|t| t.stage == Stage::Deploy) {
        let rep = advance::advance(
            ctx,
            &advance::Request {
                task: TaskRef::parse(&t.work_item).map_err(usage)?,
                expect_stage: Some(Stage::Deploy),
                as_role: None,
                to: None,
                dry_run: false,
                actor: Actor::Webhook,
                note: Some("pull request merged".into()),
                pushed: false,
            },
        )?;
        reason.push_str(&format!(
            "; `{}`: {} ({} → {}): {}",
            rep.work_item,
            rep.outcome.as_str(),
            rep.from,
            rep.to,
            rep.reason
        ));
    }
    Ok(Routed::processed(reason, holder.map(|t| t.base_work_item)))
}
