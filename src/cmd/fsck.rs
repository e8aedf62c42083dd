//! `orch fsck`: audit the invariants of the state (`ops::fsck`) and print each violation with
//! the command that repairs it, or the report as JSON. Exit 0 clean, 5 with violations (a human
//! decides), 1 when the audit itself failed. Read-only.

use anyhow::Result;

use crate::ctx::Ctx;
use crate::error::Code;
use crate::ops::fsck;
use crate::output;

pub fn run(ctx: &mut Ctx) -> Result<Code> {
    let rep = fsck::fsck(ctx)?;
    if ctx.json {
        output::json(&rep);
    } else if rep.clean {
        output::line(&format!(
            "clean: {} active task(s), {} running job(s), {} lease(s), {} pending outbox row(s), {} worktree(s)",
            rep.checked.tasks,
            rep.checked.running_jobs,
            rep.checked.leases,
            rep.checked.pending_outbox,
            rep.checked.worktrees
        ));
    } else {
        for v in &rep.violations {
            output::line(&format!("{}: {}\n  fix: {}", v.check, v.detail, v.fix));
        }
        output::line(&format!("{} violation(s)", rep.violations.len()));
    }
    Ok(if rep.clean { Code::Ok } else { Code::Held })
}
