//! `orch advance <WI> [--expect-stage S] [--as ROLE] [--to STAGE --reason TEXT [--reset-retries]] [--dry-run]`

use anyhow::Result;
use serde::Serialize;

use crate::cli::AdvanceArgs;
use crate::ctx::Ctx;
use crate::domain::history::Actor;
use crate::domain::ids::TaskRef;
use crate::domain::stage::{Role, Stage};
use crate::error::{Code, usage};
use crate::ops::advance::{self, Override, Report, Request};
use crate::output;

#[derive(Serialize)]
pub struct ReportOut<'a> {
    schema_version: u32,
    work_item: &'a str,
    from: &'static str,
    to: &'static str,
    outcome: &'static str,
    reason: &'a str,
    enqueued_job: Option<i64>,
    dry_run: bool,
}

/// `orch advance --json`: the decision, and what the launch after it did.
#[derive(Serialize)]
struct AdvanceOut<'a> {
    #[serde(flatten)]
    report: ReportOut<'a>,
    next: Option<&'a crate::ops::launch::Next>,
}

pub fn report_out(r: &Report) -> ReportOut<'_> {
    ReportOut {
        schema_version: 1,
        work_item: &r.work_item,
        from: r.from.as_str(),
        to: r.to.as_str(),
        outcome: r.outcome.as_str(),
        reason: &r.reason,
        enqueued_job: r.enqueued_job.map(|j| j.0),
        dry_run: r.dry_run,
    }
}

fn stage_arg(s: &str) -> Result<Stage> {
    s.parse::<Stage>().map_err(|e| usage(e.to_string()))
}

pub fn run(ctx: &mut Ctx, a: AdvanceArgs) -> Result<Code> {
    let task = TaskRef::parse(&a.work_item).map_err(usage)?;
    let expect_stage = a.expect_stage.as_deref().map(stage_arg).transpose()?;
    let as_role = a
        .as_role
        .as_deref()
        .map(|r| r.parse::<Role>().map_err(|e| usage(e.to_string())))
        .transpose()?;
    if let Some(r) = &a.reason {
        crate::domain::ids::check_line("--reason", r, crate::domain::ids::MAX_LINE)
            .map_err(usage)?;
    }
    let to = match a.to.as_deref() {
        Some(s) => Some(Override {
            to: stage_arg(s)?,
            reason: a.reason.clone().unwrap_or_default(),
            reset_retries: a.reset_retries,
        }),
        None => None,
    };
    let req = Request {
        task,
        expect_stage,
        as_role,
        to,
        note: None,
        pushed: false,
        dry_run: a.dry_run,
        actor: if as_role.is_some() {
            Actor::Supervisor
        } else {
            Actor::Operator
        },
    };
    let rep = advance::advance(ctx, &req)?;
    // A decision that queued a job launches it now (a dry run changes nothing).
    let next = (!rep.dry_run && rep.enqueued_job.is_some())
        .then(|| crate::ops::launch::after_command(ctx, Some(&rep.work_item)));
    if ctx.json {
        output::json(&AdvanceOut {
            report: report_out(&rep),
            next: next.as_ref(),
        });
    } else {
        let prefix = if rep.dry_run { "dry run: " } else { "" };
        output::line(&format!(
            "{prefix}{}: {} ({} → {}): {}",
            rep.work_item,
            rep.outcome.as_str(),
            rep.from,
            rep.to,
            rep.reason
        ));
        if let Some(j) = rep.enqueued_job {
            output::line(&format!("enqueued job {}", j.0));
        }
        if let Some(n) = &next {
            output::line(&n.line());
        }
    }
    // A dry run explains; its exit code still tells what the real call would do.
    Ok(rep.outcome.code())
}
