//! `orch task add | list | show`.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::cli::{TaskAddArgs, TaskCmd};
use crate::ctx::Ctx;
use crate::domain::history::Actor;
use crate::domain::time::human_duration;
use crate::error::{Code, usage};
use crate::ops::show::{self, TaskOut};
use crate::ops::task::{self, AddRequest};
use crate::output;

#[derive(Serialize)]
struct AddedOut<'a> {
    schema_version: u32,
    work_item: &'a str,
    stage: &'static str,
    branch: &'a str,
    enqueued_job: i64,
    next: &'a crate::ops::launch::Next,
}

#[derive(Serialize)]
struct ListOut<'a> {
    schema_version: u32,
    tasks: &'a [TaskOut],
}

pub fn run(ctx: &mut Ctx, cmd: TaskCmd) -> Result<Code> {
    match cmd {
        TaskCmd::Add(a) => add(ctx, a),
        TaskCmd::List {
            all,
            repo,
            stage,
            failed,
        } => {
            let tasks = show::list(ctx, all, repo.as_deref(), stage.as_deref(), failed)?;
            if ctx.json {
                output::json(&ListOut {
                    schema_version: 1,
                    tasks: &tasks,
                });
            } else {
                output::table(
                    None,
                    &[
                        "work item",
                        "repo",
                        "stage",
                        "in stage",
                        "retries",
                        "cost",
                        "flags",
                        "title",
                    ],
                    tasks
                        .iter()
                        .map(|t| {
                            vec![
                                t.work_item.clone(),
                                t.repo.clone(),
                                t.stage.clone(),
                                human_duration(t.age_in_stage_s),
                                t.dev_retries.to_string(),
                                format!("${:.2}", t.cost_usd),
                                t.flags.join(","),
                                t.title.clone(),
                            ]
                        })
                        .collect(),
                    if all {
                        "no tasks"
                    } else {
                        "no active tasks; `orch task list --all` also shows finished ones"
                    },
                );
            }
            Ok(Code::Ok)
        }
        TaskCmd::Show { work_item } => {
            let d = show::show(ctx, &work_item)?;
            if ctx.json {
                output::json(&d);
                return Ok(Code::Ok);
            }
            output::line(&format!("{} — {}", d.work_item, d.title));
            output::line(&format!(
                "repo {} · stage {} · track {} · branch {} · developer retries {}",
                d.repo, d.stage, d.track, d.branch, d.dev_retries
            ));
            let total = &d.cost.total;
            output::line(&format!(
                "agents: {} run(s), tokens in / out {} / {}, cache r / w {} / {}, ${:.4}, wall {}{}",
                total.runs,
                total.input_tokens,
                total.output_tokens,
                total.cache_read_tokens,
                total.cache_write_tokens,
                total.cost_usd,
                human_duration(total.wall_s as i64),
                d.cost
                    .budget_usd
                    .map(|b| format!(" (budget ${b:.2})"))
                    .unwrap_or_default()
            ));
            for (label, v) in [
                (
                    "labels",
                    (!d.labels.is_empty()).then(|| d.labels.join(", ")),
                ),
                (
                    "depends on",
                    (!d.depends_on.is_empty()).then(|| d.depends_on.join(", ")),
                ),
                (
                    "paused",
                    d.paused_at
                        .as_ref()
                        .map(|at| format!("{at}: {}", d.paused_reason.clone().unwrap_or_default())),
                ),
                ("breakpoint before", d.pause_before.clone()),
                ("approved", d.approved_at.clone()),
                ("deploy confirmed", d.deploy_confirmed_at.clone()),
                (
                    "blocked",
                    d.blocked_at.as_ref().map(|at| {
                        format!("{at}: {}", d.blocked_reason.clone().unwrap_or_default())
                    }),
                ),
                (
                    "held",
                    d.held_at
                        .as_ref()
                        .map(|at| format!("{at}: {}", d.held_reason.clone().unwrap_or_default())),
                ),
                ("cancelled", d.cancelled_at.clone()),
                ("flags", (!d.flags.is_empty()).then(|| d.flags.join(", "))),
            ] {
                if let Some(v) = v {
                    output::line(&format!("{label}: {v}"));
                }
            }
            output::table(
                Some("jobs"),
                &[
                    "id",
                    "role",
                    "stage",
                    "status",
                    "attempts",
                    "available",
                    "note",
                ],
                d.jobs
                    .iter()
                    .map(|j| {
                        // A running job says for how long and where its log is.
                        let note = match j.elapsed_s {
                            Some(s) => format!("running {}; log {}", human_duration(s), j.log),
                            None => j
                                .error
                                .clone()
                                .or_else(|| j.note.clone())
                                .unwrap_or_default(),
                        };
                        vec![
                            j.id.to_string(),
                            j.role.clone(),
                            j.stage.clone(),
                            j.status.clone(),
                            format!("{}/{}", j.attempts, j.max_attempts),
                            j.available_at.clone(),
                            note,
                        ]
                    })
                    .collect(),
                "no jobs",
            );
            if !d.cost.stages.is_empty() {
                output::table(
                    Some("agent cost per stage"),
                    &[
                        "stage",
                        "runs",
                        "tokens in / out",
                        "cache r / w",
                        "cost",
                        "wall",
                    ],
                    d.cost
                        .stages
                        .iter()
                        .map(|s| {
                            vec![
                                s.stage.clone(),
                                s.spent.runs.to_string(),
                                format!("{} / {}", s.spent.input_tokens, s.spent.output_tokens),
                                format!(
                                    "{} / {}",
                                    s.spent.cache_read_tokens, s.spent.cache_write_tokens
                                ),
                                format!("${:.4}", s.spent.cost_usd),
                                human_duration(s.spent.wall_s as i64),
                            ]
                        })
                        .collect(),
                    "none",
                );
            }
            output::table(
                Some("history"),
                &["at", "from", "to", "actor", "outcome", "reason"],
                d.transitions
                    .iter()
                    .map(|t| {
                        let mut reason = t.reason.clone();
                        if let Some(v) = &t.overridden_verdict {
                            reason.push_str(&format!(" [overrode: {v}]"));
                        }
                        vec![
                            t.at.clone(),
                            t.from.clone(),
                            t.to.clone(),
                            match &t.by {
                                Some(p) => format!("{} ({p})", t.actor),
                                None => t.actor.clone(),
                            },
                            t.outcome.clone(),
                            reason,
                        ]
                    })
                    .collect(),
                "no history",
            );
            output::table(
                Some("artifacts"),
                &["file", "present", "verdict"],
                d.artifacts
                    .iter()
                    .map(|a| {
                        vec![
                            a.file.clone(),
                            if a.present { "yes".into() } else { "no".into() },
                            match (&a.key, &a.value) {
                                (Some(k), Some(v)) => format!("{k}: {v}"),
                                (None, Some(v)) => v.clone(),
                                _ => String::new(),
                            },
                        ]
                    })
                    .collect(),
                "not cloned yet",
            );
            Ok(Code::Ok)
        }
    }
}

/// The text of `--description-file`: at most 1 MiB of UTF-8, read before anything changes.
fn read_description(path: &Path) -> Result<String> {
    let bytes =
        std::fs::read(path).map_err(|e| usage(format!("cannot read `{}`: {e}", path.display())))?;
    if bytes.len() > task::MAX_DESCRIPTION {
        return Err(usage(format!("`{}` is larger than 1 MiB", path.display())));
    }
    String::from_utf8(bytes).map_err(|_| usage(format!("`{}` is not UTF-8 text", path.display())))
}

fn add(ctx: &mut Ctx, a: TaskAddArgs) -> Result<Code> {
    let description = match &a.description_file {
        Some(p) => read_description(p)?,
        None => String::new(),
    };
    let added = task::add(
        ctx,
        &AddRequest {
            repo: &a.repo,
            title: &a.title,
            work_item: a.work_item.as_deref(),
            description: &description,
            bug: a.bug,
            labels: &a.labels,
            depends_on: &a.depends_on,
            actor: Actor::Operator,
        },
    )?;
    let next = crate::ops::launch::after_command(ctx, Some(&added.work_item));
    if ctx.json {
        output::json(&AddedOut {
            schema_version: 1,
            work_item: &added.work_item,
            stage: "analysis",
            branch: &added.branch,
            enqueued_job: added.job.0,
            next: &next,
        });
    } else {
        output::line(&format!(
            "added {} on branch {} (not created yet); stage analysis, analyst job {} queued",
            added.work_item, added.branch, added.job.0
        ));
        output::line(&next.line());
    }
    Ok(Code::Ok)
}
