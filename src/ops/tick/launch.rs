//! Step 5 of a tick (design §4.3): one launch pass (`ops::launch::pass`, the pass a finishing
//! supervisor and a gesture run too), its claims reported as the tick's actions. With
//! `--plan`, what the pass would claim.

use anyhow::Result;

use super::pass::{Action, Pass};
use crate::ops::claim::{self, Claimed};

pub(super) fn launch(p: &mut Pass<'_>) -> Result<()> {
    if p.plan {
        for c in claim::plan(p.ctx)? {
            p.act_with(line(&c));
            p.rep.launched += 1;
        }
        return Ok(());
    }
    let pass = crate::ops::launch::pass(p.ctx)?;
    if pass.busy {
        p.act("launch: another launch pass is running".to_string());
    }
    for (c, r) in pass.launched {
        p.act_with(line(&c));
        p.rep.launched += 1;
        p.isolate(
            &format!("launch job {}", c.job.0),
            r.map_err(anyhow::Error::msg),
        );
    }
    Ok(())
}

/// The action line of a launch: the job, its task and role, the attempt.
fn line(c: &Claimed) -> Action {
    Action::new(format!(
        "launch job {} ({} {}, attempt {})",
        c.job.0, c.work_item, c.role, c.attempt
    ))
    .task(&c.work_item)
    .job(c.job.0, c.role)
}
