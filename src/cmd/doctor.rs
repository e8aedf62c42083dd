//! `orch doctor`: run the checks of `ops::doctor` and print one line per check (`ok   config  …`),
//! or `{schema_version, checks}` with `--json`. Exits 1 when any check failed, 0 otherwise
//! (warnings included).

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;
use crate::ops::doctor;
use crate::output;

pub fn run(ctx: &mut Ctx) -> Result<Code> {
    let rep = doctor::doctor(ctx);
    if ctx.json {
        output::json(&rep);
    } else {
        let width = rep.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &rep.checks {
            output::line(&format!(
                "{:<4} {:<width$}  {}",
                c.status.as_str(),
                c.name,
                c.detail
            ));
        }
    }
    Ok(if rep.failed() {
        Code::Runtime
    } else {
        Code::Ok
    })
}
