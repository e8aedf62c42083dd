//! Step 5 of a tick (design §4.3): claim a job, start its supervisor `orch job run <id>` in a
//! session of its own, record it; then the next. One job at a time, so a crash between a claim
//! and its launch strands one job at most, and the reaper gives that one its attempt back.

use std::ffi::OsString;

use anyhow::Result;
use tracing::{info, warn};

use super::pass::{Action, Pass};
use crate::ctx::Ctx;
use crate::db;
use crate::ext::{failpoint, proc, sys};
use crate::ops::claim::{self, Claimed};

/// A supervisor that could not be started is tried again this much later, its attempt back.
const LAUNCH_RETRY_S: i64 = 30;

pub(super) fn launch(p: &mut Pass<'_>) -> Result<()> {
    if p.plan {
        for c in claim::plan(p.ctx)? {
            p.act_with(line(&c));
            p.rep.launched += 1;
        }
        return Ok(());
    }
    let mut reuse = None;
    while let Some(c) = claim::claim_next(p.ctx, &mut reuse)? {
        failpoint::hit("tick.after-claim");
        p.act_with(line(&c));
        p.rep.launched += 1;
        let r = start(p.ctx, &c);
        if !matches!(r, Ok(true)) {
            // The job went back to the queue (or the record failed): the world kept by the
            // claim no longer says what the database does.
            reuse = None;
        }
        p.isolate(&format!("launch job {}", c.job.0), r);
        if c.last_slot {
            // Every slot is taken now; a slot freed meanwhile is the next pass's.
            break;
        }
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

/// Start the supervisor of a claimed job and record it (the supervisor records itself too, so a
/// crash between the two loses nothing). `false` when it could not be started and the job went
/// back to the queue.
fn start(ctx: &Ctx, c: &Claimed) -> Result<bool> {
    let exe = std::env::current_exe()?;
    let mut argv: Vec<OsString> = vec![exe.into_os_string()];
    if let Some(f) = &ctx.config.file {
        argv.push("--config".into());
        argv.push(f.clone().into_os_string());
    }
    argv.push("--state-dir".into());
    argv.push(ctx.config.state_dir.clone().into_os_string());
    argv.extend(["job".into(), "run".into(), c.job.0.to_string().into()]);
    let log = ctx
        .config
        .state_dir
        .join("logs")
        .join(format!("job-{}.log", c.job.0));
    // The supervisor never holds a secret in its environment (design §9.1): an agent must not
    // find one in `/proc/<supervisor>/environ`.
    let names = ctx.config.secret_env_names();
    let env = crate::ext::env::supervisor_env(
        std::env::vars_os(),
        &crate::ops::worktree::scrub(ctx, &names),
    );
    match proc::spawn_detached(&argv, &env, &log) {
        Ok(s) => {
            failpoint::hit("tick.after-spawn");
            let boot = sys::boot_id().unwrap_or_default();
            ctx.db.write(|tx| {
                db::jobs::set_supervisor(
                    tx,
                    c.job,
                    c.attempt,
                    s.pgid as i64,
                    s.start_time as i64,
                    &boot,
                )
            })?;
            info!(job = c.job.0, pid = s.pgid, "launched supervisor");
            Ok(true)
        }
        Err(e) => {
            warn!("could not launch job {}: {e:#}", c.job.0);
            ctx.db.write(|tx| {
                db::jobs::requeue(
                    tx,
                    c.job,
                    c.attempt,
                    ctx.now + LAUNCH_RETRY_S,
                    &format!("launch failed: {e:#}"),
                    true,
                )
            })?;
            Ok(false)
        }
    }
}
