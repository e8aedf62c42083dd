//! The Plane routes: *To Analyse* starts a task (linked to its issue), *Approved* approves,
//! *Confirm Deploy* confirms, *STOP*/*Cancelled* cancels — each through the use-case an operator
//! calls, as actor `webhook`.

use anyhow::{Result, anyhow};
use serde_json::Value;

use crate::config::RepoCfg;
use crate::ctx::Ctx;
use crate::db::{self};
use crate::domain::history::Actor;
use crate::domain::ids::{TaskRef, WorkItem};
use crate::domain::webhook::{self, PlaneAction, PlaneIssue};
use crate::ops::task;

use super::routed::{Routed, repo_entries};

pub(super) fn route_plane(ctx: &Ctx, v: &Value, header_event: Option<&str>) -> Result<Routed> {
    let issue = match webhook::plane_issue(v, header_event) {
        Ok(i) => i,
        Err(why) => return Ok(Routed::ignored(why, None)),
    };
    let routed = plane_issue(ctx, &issue)?;
    Ok(routed.event(&issue.event))
}

fn plane_issue(ctx: &Ctx, issue: &PlaneIssue) -> Result<Routed> {
    let (idx, wi) = match webhook::plane_target(issue, &repo_entries(ctx)) {
        Ok(t) => t,
        Err(why) => return Ok(Routed::ignored(why, None)),
    };
    let some_wi = Some(wi.to_string());
    let Some(state_name) = issue.state.as_deref() else {
        return Ok(Routed::ignored(
            "the payload names no state (neither `data.state.name` nor `data.state_detail.name`)",
            some_wi,
        ));
    };
    let state = webhook::plane_state(state_name);
    let existing = db::tasks::find(ctx.db.conn(), &TaskRef::WorkItem(wi.clone()))?;
    let action = webhook::plane_action(&state, &wi, existing.as_ref().map(|t| t.stage));
    let gesture = match action {
        PlaneAction::Ignore(why) => return Ok(Routed::ignored(why, some_wi)),
        PlaneAction::Start => return start(ctx, &ctx.config.repos[idx], &wi, issue),
        PlaneAction::Approve => task::approve(ctx, wi.as_str(), Actor::Webhook)?,
        PlaneAction::ConfirmDeploy => task::confirm_deploy(ctx, wi.as_str(), Actor::Webhook)?,
        PlaneAction::Cancel => task::cancel(
            ctx,
            wi.as_str(),
            Some("STOP in the tracker"),
            Actor::Webhook,
        )?,
    };
    Ok(Routed::processed(gesture.message, some_wi))
}

/// *To Analyse*: create the task with the tracker's id and start it.
fn start(ctx: &Ctx, repo: &RepoCfg, wi: &WorkItem, issue: &PlaneIssue) -> Result<Routed> {
    let some_wi = Some(wi.to_string());
    let Some(title) = issue.name.as_deref().and_then(webhook::title_from_name) else {
        return Ok(Routed::ignored(
            format!("the issue of `{wi}` has no name to use as the task title"),
            some_wi,
        ));
    };
    let description = issue.description.as_deref().map(str::trim).unwrap_or("");
    let added = task::add(
        ctx,
        &task::AddRequest {
            repo: &repo.name,
            title: &title,
            work_item: Some(wi.as_str()),
            description,
            bug: false,
            labels: &issue.labels,
            depends_on: &[],
            actor: Actor::Webhook,
        },
    )?;
    if let Some(id) = &issue.issue_id {
        let task = db::tasks::find(ctx.db.conn(), &TaskRef::WorkItem(wi.clone()))?
            .ok_or_else(|| anyhow!("task `{wi}` vanished right after it was added"))?;
        // Linking also mirrors the task's first hop to the tracker.
        ctx.db
            .write(|tx| crate::ops::notify::link_tracker(ctx, tx, &task, id))?;
    }
    Ok(Routed::processed(
        format!(
            "started `{}` in repo `{}` (stage analysis, analyst job {} queued)",
            added.work_item, repo.name, added.job.0
        ),
        some_wi,
    ))
}
