//! `orch retry <job-id | WORK-ITEM>`: re-queue a job that failed for good (`ops::retry`).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, target: &str) -> Result<Code> {
    let g = crate::ops::retry::retry(ctx, target)?;
    let next = crate::ops::launch::after_command(ctx, Some(&g.work_item));
    Ok(super::print_gesture(ctx.json, &g, Some(&next)))
}
