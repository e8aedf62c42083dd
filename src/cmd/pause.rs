//! `orch pause <WI> --reason TEXT [--before STAGE]` (design §3.7).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, wi: &str, reason: &str, before: Option<&str>) -> Result<Code> {
    let g = crate::ops::task::pause(ctx, wi, reason, before)?;
    Ok(super::print_gesture(ctx.json, &g, None))
}
