//! `orch unfreeze <repo>` (design §3.7).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, repo: &str) -> Result<Code> {
    let (changed, msg) = crate::ops::task::unfreeze(ctx, repo)?;
    Ok(super::print_change(ctx.json, ("repo", repo), changed, &msg))
}
