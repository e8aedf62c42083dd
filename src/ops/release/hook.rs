//! `deploy.mode: hook` (design §7.3). Phase A (the confirmation) is the claim's: the job exists
//! only once `orch confirm-deploy` (or `require_confirm: false`, or the `auto-deploy` label)
//! allowed it. Phase B: under the task's transition lease (so a cancel waits for the hook), the
//! `initiated` row is committed, then the hook runs as the job's process group. Phase C: its
//! exit code becomes the step's outcome and `14-deploy-log.md`, and the job advances.
//!
//! The hook never runs twice: a re-drive that finds `initiated` without an outcome (the process
//! died somewhere between the marker and the record) holds the task for a human ("deploy
//! initiated, outcome unknown"); one that finds an outcome writes the log from it.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Result;

use super::work::{Ending, Rel, stamp, worktree_of};
use crate::domain::release::{self, Step, StepStatus};
use crate::domain::stage::Stage;
use crate::ext::failpoint;
use crate::ext::proc::{self, Ending as ProcEnding, Spec};
use crate::ops::lease::TransitionLease;
use crate::ops::worktree;

/// A busy transition lease defers the hook this long.
const BUSY_RETRY_S: i64 = 30;
/// `deploy.timeout_s` when unset.
const DEFAULT_TIMEOUT_S: u64 = 1800;

pub(super) fn run(rel: &Rel<'_>) -> Result<Ending> {
    let ctx = rel.ctx;
    let wt = worktree_of(rel)?;
    if let Some(row) = rel.step(Step::DeployHook)? {
        return Ok(match row.status {
            StepStatus::Initiated => Ending::Held(format!(
                "deploy initiated, outcome unknown: the hook was started at {} and its end was \
                 never recorded; check the deployment, then move the task on by hand \
                 (`orch advance {} --to …`)",
                crate::domain::time::rfc3339(row.at),
                rel.task.work_item
            )),
            // The outcome is recorded: the log (again) from it, then the advance.
            _ => {
                let code = row.value.map(|v| v as i32);
                write_log(rel, &wt, code, &row.detail)?;
                Ending::Done {
                    detail: format!("deploy hook: {}", super::work::first_line(&row.detail)),
                    advance: true,
                }
            }
        });
    }
    let Some(d) = rel.repo.deploy.as_ref().filter(|d| !d.argv.is_empty()) else {
        anyhow::bail!("deploy.mode is `hook` but deploy.argv is empty");
    };
    // Phase B. The lease keeps a cancel (and every other actor) out while the hook runs.
    let lease = match TransitionLease::acquire(ctx, rel.task.id, "deploy-hook", Stage::Deploy)? {
        Ok(l) => l,
        Err(busy) => {
            return Ok(Ending::Requeue {
                delay_s: BUSY_RETRY_S,
                why: format!("deploy hook deferred: {}", busy.describe()),
            });
        }
    };
    let head = ctx.git().rev_parse(&wt, "HEAD")?;
    let started = ctx.db.write(|tx| {
        crate::db::release::initiate(
            tx,
            &rel.new_step(
                Step::DeployHook,
                StepStatus::Initiated,
                Some(&head),
                None,
                &format!(
                    "hook started by job {} attempt {}",
                    rel.job.id.0, rel.attempt
                ),
            ),
        )
    })?;
    if !started {
        drop(lease);
        return Ok(Ending::Held(
            "deploy initiated, outcome unknown: another run recorded the hook's start first".into(),
        ));
    }
    failpoint::hit("release.hook-initiated");
    let env = worktree::child_env(
        ctx,
        rel.task,
        &[
            ("ORCH_STAGE", Stage::Deploy.to_string()),
            ("ORCH_DEPLOY_SHA", head.clone()),
        ],
    );
    let mut spec = Spec::new(
        d.argv.iter().map(OsString::from),
        &wt,
        env,
        Duration::from_secs(d.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)),
    );
    spec.log = Some(
        ctx.config
            .state_dir
            .join("logs")
            .join(format!("deploy-hook-{}.log", rel.task.base_work_item)),
    );
    // The operator's own program, run on the host: not confined (it deploys).
    let out = proc::run_supervised(
        spec,
        worktree::record_group(ctx, rel.job.id, rel.attempt, "release.hook-running"),
    );
    failpoint::hit("release.after-hook");
    // Phase C.
    let code = match out.ending {
        ProcEnding::Exited(c) => Some(c),
        _ => None,
    };
    let status = if code == Some(0) {
        StepStatus::Pass
    } else {
        StepStatus::Fail
    };
    let tail = crate::ops::attempt::tail_lines(&out.combined_tail, 40);
    let detail = format!("the deploy hook {}\n{tail}", out.ending.describe());
    ctx.db.write(|tx| {
        crate::db::release::finish_initiated(
            tx,
            rel.task.id,
            rel.visit,
            Step::DeployHook,
            status,
            code.map(f64::from),
            &detail,
            crate::ctx::now(),
        )
    })?;
    failpoint::hit("release.after-hook-record");
    drop(lease);
    write_log(rel, &wt, code, &detail)?;
    Ok(Ending::Done {
        detail: format!("deploy hook: {}", out.ending.describe()),
        advance: true,
    })
}

fn write_log(rel: &Rel<'_>, wt: &std::path::Path, code: Option<i32>, detail: &str) -> Result<()> {
    let (ending, output) = detail.split_once('\n').unwrap_or((detail, ""));
    let ending = ending.trim_start_matches("the deploy hook ");
    let text = stamp(
        |h| release::deploy_log(h, code, ending, output),
        &rel.head(),
    );
    rel.publish(wt, Step::DeployHook, &text)?;
    Ok(())
}
