//! `orch unfreeze <repo>` (design §3.7).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, repo: &str) -> Result<Code> {
    let (changed, msg) = crate::ops::task::unfreeze(ctx, repo)?;
    // A thawed repo's analysts may start now.
    let msg = if changed {
        format!(
            "{msg}\n{}",
            crate::ops::launch::after_command(ctx, None).line()
        )
    } else {
        msg
    };
    Ok(super::print_change(ctx.json, ("repo", repo), changed, &msg))
}
