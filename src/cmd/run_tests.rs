//! `orch run-tests <WI> [--no-advance]` and `orch run-staging <WI> [--no-advance]` (design §6):
//! one adapter for both runners, which share their use-case.

use anyhow::Result;

use crate::ctx::Ctx;
use crate::domain::runner::Kind;
use crate::error::Code;
use crate::ops::runner::{self, Caller};
use crate::output;

pub fn run(ctx: &mut Ctx, kind: Kind, wi: &str, no_advance: bool) -> Result<Code> {
    let rep = runner::run(ctx, kind, wi, no_advance, Caller::Operator)?;
    if ctx.json {
        output::json(&rep);
    } else {
        output::line(&format!(
            "{}: {} {} ({}{}): {}",
            rep.work_item,
            rep.runner,
            rep.outcome,
            rep.class,
            rep.verdict.map(|v| format!(", {v}")).unwrap_or_default(),
            rep.reason
        ));
        if let Some(p) = &rep.report {
            output::line(&format!("report: {p}"));
        }
    }
    Ok(rep.code)
}
