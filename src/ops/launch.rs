//! Launch passes (design §4.3 step 5): claim what may run now and start the supervisor of each
//! claimed job (`orch job run <id>`, a session of its own), one job at a time. The tick runs a
//! pass as its step 5; so does a supervisor whose job just ended (its slot is free and its
//! advance may have queued the next stage's job), a human gesture that changed state and an
//! ingest that did, so the next job starts the moment it may, not at the next timer tick
//! (`scheduler.launch_on_finish`). It is one code path: the same claim (`ops::claim`, with
//! the claim rules of `orch queue` and `orch why`, the caps, the serial gate, freezes, pauses,
//! the breaker, the budget), the same spawn and record.
//!
//! Passes exclude each other with `<state_dir>/launch.lock` (waited for, at most
//! [`LOCK_WAIT`]): a pass that waits finds the world as the pass before it left it, so a job
//! queued while another pass ran is never missed, and never started twice (the claim is a
//! fenced row guard anyway). A tick keeps its own lock for the other steps.
//!
//! Where a gesture runs in another environment than the scheduler's (an operator's shell under
//! a systemd install, without the units' secrets and `TMPDIR`), it does not start supervisors
//! itself: it wakes the scheduler (`scheduler.wake`) by touching `<state_dir>/wake`, which the
//! shipped `orch-wake.path` unit turns into an immediate `orch-tick.service`, and waits for its
//! task's job to start. `orch serve` under systemd wakes too: a supervisor started from its
//! cgroup would die with it.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::config::WakeMode;
use crate::ctx::Ctx;
use crate::db;
use crate::domain::ids::TaskRef;
use crate::domain::stage::JobStatus;
use crate::ext::lock::FileLock;
use crate::ext::{failpoint, proc, sys};
use crate::ops::claim::{self, Claimed};

/// A supervisor that could not be started is tried again this much later, its attempt back.
const LAUNCH_RETRY_S: i64 = 30;

/// The longest a pass waits for another pass to end.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// How long a gesture that woke the scheduler waits for its task's job to start.
const WAKE_WAIT: Duration = Duration::from_secs(10);

/// What one pass did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Each claimed job, with whether its supervisor started (`false`: it went back to the
    /// queue with its attempt).
    pub launched: Vec<(Claimed, Result<bool, String>)>,
    /// Another pass held the launch lock past [`LOCK_WAIT`]: it is launching.
    pub busy: bool,
}

/// Run one launch pass.
pub fn pass(ctx: &Ctx) -> Result<Pass> {
    let path = ctx.config.state_dir.join("launch.lock");
    let Some(_lock) = FileLock::acquire_within(&path, LOCK_WAIT)? else {
        return Ok(Pass {
            busy: true,
            ..Pass::default()
        });
    };
    // The clock of the pass, not of the command that runs it (a supervisor's ran for an hour).
    let fresh;
    let ctx = if crate::ctx::now() != ctx.now {
        fresh = ctx.reopen()?;
        &fresh
    } else {
        ctx
    };
    let mut out = Pass::default();
    let mut reuse = None;
    while let Some(c) = claim::claim_next(ctx, &mut reuse)? {
        failpoint::hit("launch.after-claim");
        let r = start(ctx, &c);
        if !matches!(r, Ok(true)) {
            // The job went back to the queue (or the record failed): the world kept by the
            // claim no longer says what the database does.
            reuse = None;
        }
        let last = c.last_slot;
        out.launched.push((c, r.map_err(|e| format!("{e:#}"))));
        if last {
            // Every slot is taken now; a slot freed meanwhile is the next pass's.
            break;
        }
    }
    Ok(out)
}

/// The pass a supervisor runs once its job is settled. Never fails its job: what goes wrong is
/// logged, and the next tick launches instead.
pub fn after_job(ctx: &Ctx) {
    if !ctx.config.scheduler.launch_on_finish {
        return;
    }
    failpoint::hit("job.before-launch");
    let began = Instant::now();
    match pass(ctx) {
        Ok(p) => {
            for (c, r) in &p.launched {
                match r {
                    Ok(true) => info!(
                        "launched job {} ({} {}, attempt {}) as this job ended",
                        c.job.0, c.work_item, c.role, c.attempt
                    ),
                    Ok(false) => {}
                    Err(e) => warn!("launching job {} failed: {e}", c.job.0),
                }
            }
            if p.busy {
                debug!("another launch pass is running; it launches what may run");
            }
            debug!(elapsed = ?began.elapsed(), launched = p.launched.len(), "launch pass");
        }
        Err(e) => warn!("the launch pass after this job failed (the next tick launches): {e:#}"),
    }
}

/// What the launch after a gesture did, for the command's answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Next {
    /// `launched` (the task's job started), `running` (it was already), `waits` (it may not
    /// run yet: `detail` says why), `woken` (the scheduler was woken and had not started it
    /// within the wait), `none` (the task has no queued job), `off`
    /// (`scheduler.launch_on_finish: false`: the next tick starts it).
    pub status: &'static str,
    pub job_id: Option<i64>,
    pub role: Option<String>,
    pub detail: String,
    /// Every job the pass started, the task's and others' (a gesture may free a slot).
    pub launched: Vec<i64>,
}

impl Next {
    /// The line a person reads.
    pub fn line(&self) -> String {
        match (self.status, self.job_id, self.role.as_deref()) {
            (_, Some(id), Some(role)) if !self.detail.is_empty() => {
                format!("next: job {id} ({role}) {}: {}", self.status, self.detail)
            }
            (_, Some(id), Some(role)) => format!("next: job {id} ({role}) {}", self.status),
            _ => format!("next: {}", self.detail),
        }
    }
}

/// How a gesture of this process reaches the scheduler.
fn wakes(ctx: &Ctx, serve: bool) -> bool {
    match ctx.config.scheduler.wake {
        WakeMode::Direct => false,
        WakeMode::Systemd => true,
        // A systemd service (`orch serve`) would keep the supervisors in its cgroup; a shell
        // of a systemd install has another environment than the scheduler's.
        WakeMode::Auto => {
            let systemd = std::path::Path::new("/run/systemd/system").is_dir();
            let service = std::env::var_os("INVOCATION_ID").is_some();
            if serve {
                systemd && service
            } else {
                systemd
                    && !service
                    && std::path::Path::new(crate::ops::doctor::UNIT_DIR)
                        .join("orch-wake.path")
                        .exists()
            }
        }
    }
}

/// Touch `<state_dir>/wake`: the shipped `orch-wake.path` unit starts a tick, and a tick that
/// is running launches again before it ends.
pub fn wake(ctx: &Ctx) -> Result<()> {
    // Written, not only touched: `PathChanged=` sees the close after a write.
    let p = ctx.config.state_dir.join("wake");
    std::fs::write(&p, format!("{}\n", crate::ctx::now()))
        .with_context(|| format!("waking the scheduler through `{}`", p.display()))
}

/// After a gesture or an ingest that changed the state of `work_item` (or of nothing in
/// particular): launch what may run now, or wake the scheduler, and say what became of the
/// task's next job.
pub fn after_gesture(ctx: &Ctx, work_item: Option<&str>, serve: bool) -> Result<Next> {
    let task = match work_item {
        Some(w) => Some(ctx.task(&TaskRef::parse(w).map_err(crate::error::usage)?)?),
        None => None,
    };
    let next_job = |ctx: &Ctx| -> Result<Option<db::jobs::JobRow>> {
        let Some(t) = &task else { return Ok(None) };
        Ok(db::jobs::of_task(ctx.db.conn(), t.id)?
            .into_iter()
            .filter(|j| matches!(j.status, JobStatus::Queued | JobStatus::Running))
            .max_by_key(|j| j.id.0))
    };
    let mut next = Next {
        status: "none",
        job_id: None,
        role: None,
        detail: String::new(),
        launched: Vec::new(),
    };
    if !ctx.config.scheduler.launch_on_finish {
        next.status = "off";
        next.detail = "scheduler.launch_on_finish is off: the next tick starts it".into();
        if let Some(j) = next_job(ctx)? {
            next.job_id = Some(j.id.0);
            next.role = Some(j.role.to_string());
        }
        return Ok(next);
    }
    failpoint::hit("gesture.before-launch");
    if wakes(ctx, serve) {
        wake(ctx)?;
        next.status = "woken";
        next.detail = "the scheduler was woken (orch-wake.path); it starts the job".into();
        let Some(j) = next_job(ctx)? else {
            next.status = "none";
            next.detail = "no job is queued for it".into();
            return Ok(next);
        };
        next.job_id = Some(j.id.0);
        next.role = Some(j.role.to_string());
        if serve {
            return Ok(next);
        }
        let started = Instant::now();
        while started.elapsed() < WAKE_WAIT {
            let fresh = ctx.reopen()?;
            if db::jobs::get(fresh.db.conn(), j.id)?.is_some_and(|r| r.status != JobStatus::Queued)
            {
                next.status = "launched";
                next.detail.clear();
                return Ok(next);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        return Ok(next);
    }
    let p = pass(ctx)?;
    next.launched = p
        .launched
        .iter()
        .filter(|(_, r)| matches!(r, Ok(true)))
        .map(|(c, _)| c.job.0)
        .collect();
    let fresh = ctx.reopen()?;
    let Some(j) = next_job(&fresh)? else {
        let started: Vec<String> = next.launched.iter().map(|j| j.to_string()).collect();
        next.detail = match (&task, started.is_empty()) {
            (Some(t), true) => format!("`{}` has no job queued or running", t.work_item),
            (_, false) => {
                next.status = "launched";
                format!("started job(s) {}", started.join(", "))
            }
            (None, true) => "nothing may start now".into(),
        };
        return Ok(next);
    };
    next.job_id = Some(j.id.0);
    next.role = Some(j.role.to_string());
    if next.launched.contains(&j.id.0) {
        next.status = "launched";
    } else if j.status == JobStatus::Running {
        next.status = "running";
    } else {
        next.status = "waits";
        let world = crate::ops::queue::World::gather(&fresh)?;
        next.detail = match world.wait(&j) {
            Some(w) => format!("{}: {}", w.reason.as_str(), w.detail),
            None if p.busy => "another launch pass is running; it starts the job".into(),
            None => "claimable; the next launch pass starts it".into(),
        };
    }
    Ok(next)
}

/// `after_gesture` for a command that has already committed its change: a failure of the
/// launch is reported in the answer, never the command's.
pub fn after_command(ctx: &Ctx, work_item: Option<&str>) -> Next {
    after_gesture(ctx, work_item, false).unwrap_or_else(|e| Next {
        status: "error",
        job_id: None,
        role: None,
        detail: format!("the launch pass failed (the next tick launches): {e:#}"),
        launched: Vec::new(),
    })
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
            failpoint::hit("launch.after-spawn");
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
