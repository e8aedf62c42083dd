//! `orch tick [--plan]`: one scheduler pass (design §4.3).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;
use crate::output;

/// `verbose`: print the summary line even when the pass did nothing (a timer runs a tick every
/// 10 s; an idle one writes nothing to the journal).
pub fn run(ctx: &mut Ctx, plan: bool, verbose: bool) -> Result<Code> {
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
    for a in &rep.actions {
        output::line(&format!("  {}", a.text));
    }
    if plan || verbose || !rep.idle() {
        output::line(&rep.summary());
    }
    Ok(code)
}
