//! `orch why <WI>`: one paragraph on where the task is and what it waits for.

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;
use crate::output;

pub fn run(ctx: &mut Ctx, wi: &str) -> Result<Code> {
    let w = crate::ops::why::why(ctx, wi)?;
    if ctx.json {
        output::json(&w);
    } else {
        output::line(&w.paragraph);
    }
    Ok(Code::Ok)
}
