//! `orch resume <WI>` (design §3.7).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, wi: &str) -> Result<Code> {
    let g = crate::ops::task::resume(ctx, wi)?;
    let next = crate::ops::launch::after_command(ctx, Some(&g.work_item));
    Ok(super::print_gesture(ctx.json, &g, Some(&next)))
}
