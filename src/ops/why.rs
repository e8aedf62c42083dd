//! `orch why <WI>`: one paragraph saying where a task is and exactly what it waits for. Uses the
//! claim's own eligibility function for queued jobs and a dry gate evaluation when nothing is
//! queued, so the answer is what the scheduler and `orch advance` would actually do.

use anyhow::Result;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::domain::claim::WaitReason;
use crate::domain::gate::{self, GateResult};
use crate::domain::ids::TaskRef;
use crate::domain::stage::{JobStatus, Stage};
use crate::domain::time::{human_duration, rfc3339};
use crate::error::usage;
use crate::ops::gather;
use crate::ops::queue::World;

#[derive(Debug, Serialize)]
pub struct Why {
    pub schema_version: u32,
    pub work_item: String,
    pub stage: String,
    /// One keyword: `running`, `queued`, `claimable`, `gate`, `confirm`, `paused`, `blocked`,
    /// `held`, `done`, `cancelled`, plus the claim reasons of design §4.2.
    pub waits_for: String,
    pub paragraph: String,
}

pub fn why(ctx: &Ctx, wi: &str) -> Result<Why> {
    let r = TaskRef::parse(wi).map_err(usage)?;
    let task = ctx.task(&r)?;
    let age = human_duration(ctx.now - task.stage_entered_at);
    let mut parts = vec![format!(
        "{} ({}, repo {}) is in `{}` since {} ({age}); developer retries {}/{}.",
        task.work_item,
        task.title,
        task.repo,
        task.stage,
        rfc3339(task.stage_entered_at),
        task.dev_retries,
        ctx.config.max_developer_retries
    )];
    let mut key = String::new();
    let mut set = |k: &str| {
        if key.is_empty() {
            key = k.to_string();
        }
    };
    if task.stage.is_terminal() {
        set(task.stage.as_str());
        parts.push(format!("It is finished ({}); nothing waits.", task.stage));
    }
    if let Some(at) = task.paused_at {
        set("paused");
        parts.push(format!(
            "Paused since {} by {}: {}; `orch resume {}` continues it.",
            rfc3339(at),
            task.paused_by.as_deref().unwrap_or("operator"),
            task.paused_reason.as_deref().unwrap_or(""),
            task.work_item
        ));
    }
    if let Some(bp) = task.pause_before {
        parts.push(format!("A breakpoint pauses it before it enters `{bp}`."));
    }
    if let Some(at) = task.blocked_at {
        set("blocked");
        parts.push(format!(
            "Blocked since {}: {}; after fixing the cause run `orch advance {} --to development --reason …` or `orch cancel {}`.",
            rfc3339(at),
            task.blocked_reason.as_deref().unwrap_or(""),
            task.work_item,
            task.work_item
        ));
    }
    if let Some(at) = task.held_at {
        set("held");
        parts.push(format!(
            "Held since {}: {}; a human must fix the environment, then re-run or `orch resume {}`.",
            rfc3339(at),
            task.held_reason.as_deref().unwrap_or(""),
            task.work_item
        ));
    }
    if task.cancel_requested_at.is_some() {
        parts.push("A cancel was requested and applies when the step under way finishes.".into());
    }

    let world = World::gather(ctx)?;
    let live: Vec<_> = world.jobs.iter().filter(|j| j.task_id == task.id).collect();
    // The release steps (design §7): which sub-gate the task is at.
    if let Some(line) = release_line(ctx, &task, &live)? {
        parts.push(line);
    }
    for j in &live {
        match j.status {
            JobStatus::Running => {
                set("running");
                parts.push(format!(
                    "Job {} ({}) is running since {} ({}; supervisor pid {}, attempt {}/{}); \
                     its log is `{}` (`orch logs {} -f` follows it).",
                    j.id.0,
                    j.role,
                    j.started_at.map(rfc3339).unwrap_or_else(|| "?".into()),
                    j.started_at
                        .map(|t| human_duration(ctx.now - t))
                        .unwrap_or_else(|| "?".into()),
                    j.supervisor_pid
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "?".into()),
                    j.attempts,
                    j.max_attempts,
                    crate::ops::logs::path(&ctx.config, j.id, false).display(),
                    j.id.0
                ));
            }
            JobStatus::Queued => match world.wait(j) {
                Some(w) => {
                    set(w.reason.as_str());
                    let when = match w.reason {
                        WaitReason::Concurrency | WaitReason::SerialGate | WaitReason::TaskBusy
                            if ctx.config.scheduler.launch_on_finish =>
                        {
                            " It starts as soon as that clears: the job that ends launches the next."
                        }
                        _ => "",
                    };
                    parts.push(format!(
                        "Job {} ({}) is queued and waits: {} — {}.{when}",
                        j.id.0,
                        j.role,
                        w.reason.as_str(),
                        w.detail
                    ));
                }
                None => {
                    set("claimable");
                    parts.push(format!(
                        "Job {} ({}) is queued and claimable: {}.",
                        j.id.0,
                        j.role,
                        next_pass(ctx, &world)
                    ));
                }
            },
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled => {}
        }
    }
    // A job that failed for good waits for a human (the reconciler leaves such a task alone).
    let failed = if live.is_empty() && !task.stage.is_terminal() {
        crate::db::jobs::last_for_stage(ctx.db.conn(), task.id, task.stage)?
            .filter(|j| j.status == JobStatus::Failed)
    } else {
        None
    };
    if let Some(j) = &failed {
        set("failed");
        let err = j
            .error
            .as_deref()
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("");
        parts.push(format!(
            "Its {} job {} failed after {} attempt(s) ({err}); fix the cause, then `orch retry {}` re-queues it, or `orch advance {} --to …` moves on.",
            j.role, j.id.0, j.attempts, j.id.0, task.work_item
        ));
    }
    // A blocked or held task waits for a human, whatever its gate says.
    if live.is_empty()
        && failed.is_none()
        && !task.stage.is_terminal()
        && task.blocked_at.is_none()
        && task.held_at.is_none()
    {
        let repo = ctx.repo_of(&task)?;
        if task.stage == Stage::Deploy
            && crate::ops::apply::role_on_entry(Stage::Deploy, repo, &task).is_none()
            && repo.deploy_mode() != crate::config::DeployMode::None
        {
            set("confirm");
            parts.push(format!(
                "It waits for the deploy confirmation: `orch confirm-deploy {}`.",
                task.work_item
            ));
        } else {
            set("gate");
            let gate = gather::open(ctx, &task, repo)
                .and_then(|view| gather::facts(ctx, &task, repo, &view))
                .map(|f| gate::evaluate(task.stage, &f));
            parts.push(match gate {
                Ok(GateResult::Pass(r)) => format!(
                    "No job is queued; its exit gate is green ({r}): `orch advance {}` (or the reconciler) moves it on.",
                    task.work_item
                ),
                Ok(GateResult::NotSatisfied(r) | GateResult::Waiting(r)) => {
                    format!("No job is queued; its exit gate is not satisfied: {r}.")
                }
                Ok(GateResult::Fail { reason, .. }) => format!(
                    "No job is queued; its exit gate failed ({reason}): `orch advance {}` rolls it back.",
                    task.work_item
                ),
                Ok(GateResult::Pending { why, role }) => format!(
                    "No job is queued; a {role} step is due ({why}): `orch advance {}` (or the reconciler) queues it.",
                    task.work_item
                ),
                Err(e) => format!("No job is queued; its gate could not be read: {e:#}."),
            });
        }
    }
    Ok(Why {
        schema_version: 1,
        work_item: task.work_item.clone(),
        stage: task.stage.to_string(),
        waits_for: key,
        paragraph: parts.join(" "),
    })
}

/// Where a task of a repo that opts into the last mile stands: the release steps recorded in
/// this visit, the one due next, and what its job waits for (the merge lease and its holder, a
/// merge retry).
fn release_line(
    ctx: &Ctx,
    task: &crate::db::tasks::TaskRow,
    live: &[&crate::db::jobs::JobRow],
) -> Result<Option<String>> {
    use crate::domain::release::{Step, StepStatus};
    let Some(repo) = ctx.config.repo(&task.repo) else {
        return Ok(None);
    };
    let c = ctx.db.conn();
    let Some(facts) = gather::release_facts(ctx, task, repo)? else {
        return Ok(None);
    };
    let mut done = Vec::new();
    let mut next = None;
    for (fact, step, label) in [
        (&facts.security, Step::Security, "security scan"),
        (
            &facts.merge_gate,
            Step::MergeGate,
            "merge gate (merge lease, rebase, push, re-test)",
        ),
        (&facts.coverage, Step::Coverage, "coverage"),
        (&facts.merge, Step::Merge, "merge into main and its proof"),
    ] {
        match fact {
            None => {}
            Some(Some(f)) => done.push(format!(
                "{} {}",
                step.as_str(),
                match f.status {
                    StepStatus::Pass => "passed",
                    StepStatus::Fail => "failed",
                    StepStatus::Initiated => "started (outcome unknown)",
                    StepStatus::Unproven => "not proven",
                }
            )),
            Some(None) if next.is_none() => next = Some(label),
            Some(None) => {}
        }
    }
    let mut line = String::from("Release steps:");
    if done.is_empty() {
        line.push_str(" none recorded in this visit");
    } else {
        line.push_str(&format!(" {}", done.join(", ")));
    }
    if let Some(n) = next {
        line.push_str(&format!("; next: the {n}"));
    }
    line.push('.');
    for j in live
        .iter()
        .filter(|j| j.role == crate::domain::stage::Role::Releaser)
    {
        if let Some(note) = j.error.as_deref().filter(|e| !e.is_empty()) {
            line.push_str(&format!(
                " Job {}: {}.",
                j.id.0,
                note.lines().next().unwrap_or("")
            ));
        }
    }
    if let Some(l) = crate::db::leases::merge_get(c, &repo.name)? {
        let holder = l
            .work_item
            .clone()
            .unwrap_or_else(|| format!("pid {}", l.owner.pid));
        if l.task_id != Some(task.id) {
            line.push_str(&format!(
                " The merge lease of `{}` is held by {holder} since {}.",
                repo.name,
                rfc3339(l.acquired_at)
            ));
        } else {
            line.push_str(&format!(" It holds the merge lease of `{}`.", repo.name));
        }
    }
    Ok(Some(line))
}

/// Which launch pass will start a claimable job.
fn next_pass(ctx: &Ctx, world: &World) -> String {
    let running: Vec<i64> = world
        .jobs
        .iter()
        .filter(|j| j.status == JobStatus::Running)
        .map(|j| j.id.0)
        .collect();
    match (ctx.config.scheduler.launch_on_finish, running.first()) {
        (false, _) => {
            "the next `orch tick` starts it (`scheduler.launch_on_finish` is off)".to_string()
        }
        (true, Some(id)) => format!(
            "the supervisor of job {id} starts it when that job ends, unless a gesture or the \
             next `orch tick` does first"
        ),
        (true, None) => "the next `orch tick` starts it (no running job's end, and no gesture, \
                         has launched it)"
            .to_string(),
    }
}
