//! `orch freeze <repo> --reason TEXT` (design §3.7).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;

pub fn run(ctx: &mut Ctx, repo: &str, reason: &str) -> Result<Code> {
    let (changed, msg) = crate::ops::task::freeze(ctx, repo, reason)?;
    Ok(super::print_change(ctx.json, ("repo", repo), changed, &msg))
}
