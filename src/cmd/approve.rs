//! `orch approve <WI>`: the human approval of the analysis (design §3.5).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::domain::history::Actor;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, wi: &str) -> Result<Code> {
    let g = crate::ops::task::approve(ctx, wi, Actor::Operator)?;
    let next = crate::ops::launch::after_command(ctx, Some(&g.work_item));
    Ok(super::print_gesture(ctx.json, &g, Some(&next)))
}
