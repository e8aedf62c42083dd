//! `orch tick [--plan]`: one scheduler pass (design §4.3).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;
use crate::output;

pub fn run(ctx: &mut Ctx, plan: bool) -> Result<Code> {
    let rep = crate::ops::tick::tick(ctx, plan)?;
    let code = if rep.errors.is_empty() {
        Code::Ok
    } else {
        Code::Runtime
    };
    if ctx.json {
        output::json(&rep);
        return Ok(code);
    }
    if let Some(s) = &rep.skipped {
        output::line(s);
        return Ok(Code::Ok);
    }
    if plan {
        output::line("plan (nothing was done):");
        if rep.actions.is_empty() {
            output::line("  nothing to do");
        }
    }
    if plan || !rep.actions.is_empty() {
        for a in &rep.actions {
            output::line(&format!("  {a}"));
        }
    }
    output::line(&rep.summary());
    Ok(code)
}
