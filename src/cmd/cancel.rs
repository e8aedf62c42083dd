//! `orch cancel <WI>` (STOP, design §3.6).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::domain::history::Actor;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, wi: &str, reason: Option<&str>) -> Result<Code> {
    let g = crate::ops::task::cancel(ctx, wi, reason, Actor::Operator)?;
    let next = crate::ops::launch::after_command(ctx, None);
    Ok(super::print_gesture(ctx.json, &g, Some(&next)))
}
