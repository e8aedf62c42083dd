//! `orch tick` — one scheduler pass (design §4.3): tick lock, reap dead supervisors, reclaim dead
//! leases, poll the forge for lost CI webhooks, reconcile stuck tasks whose gate already
//! decided, claim and launch detached supervisors, drain the outbox. Each step is isolated: one
//! bad task is logged and skipped, the pass goes on. `--plan` computes the same and changes
//! nothing.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use tracing::{info, warn};

use crate::config::RepoCfg;
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::gate::{self, GateResult};
use crate::domain::history::Actor;
use crate::domain::ids::{TaskRef, WorkItem};
use crate::domain::liveness::{Liveness, ProcIdentity};
use crate::domain::stage::{JobStatus, Stage};
use crate::ext::lock::FileLock;
use crate::ext::{proc, sys};
use crate::ops::advance::{self, Request};
use crate::ops::{claim, gather, job};

#[derive(Debug, Default, Serialize)]
pub struct TickReport {
    pub schema_version: u32,
    pub plan: bool,
    pub skipped: Option<String>,
    pub reaped: u32,
    pub reclaimed: u32,
    pub reconciled: u32,
    pub launched: u32,
    pub running: u32,
    pub max_concurrency: u32,
    pub queued: u32,
    /// Outbound effects delivered by step 6 (the outbox).
    pub sent: u32,
    /// One line per action taken (or, with `--plan`, that would be taken), with its reason.
    pub actions: Vec<String>,
    pub errors: Vec<String>,
}

impl TickReport {
    pub fn summary(&self) -> String {
        format!(
            "tick: reaped {}, reclaimed {}, reconciled {}, launched {}, running {}/{}, queued {}, sent {}",
            self.reaped,
            self.reclaimed,
            self.reconciled,
            self.launched,
            self.running,
            self.max_concurrency,
            self.queued,
            self.sent
        )
    }
}

fn supervisor_of(j: &JobRow) -> Option<ProcIdentity> {
    Some(ProcIdentity {
        pid: j.supervisor_pid? as i32,
        start_time: j.supervisor_start? as u64,
        boot_id: j.supervisor_boot.clone().unwrap_or_default(),
    })
}

fn agent_of(j: &JobRow) -> Option<ProcIdentity> {
    Some(ProcIdentity {
        pid: j.agent_pgid? as i32,
        start_time: j.agent_start? as u64,
        boot_id: j.supervisor_boot.clone().unwrap_or_default(),
    })
}

/// A running job whose supervisor was never recorded gets this long to record itself.
const LAUNCH_GRACE_S: i64 = 60;

pub fn tick(ctx: &Ctx, plan: bool) -> Result<TickReport> {
    let mut rep = TickReport {
        schema_version: 1,
        plan,
        max_concurrency: ctx.config.max_concurrency,
        ..TickReport::default()
    };
    let lock_path = ctx.config.state_dir.join("tick.lock");
    let _lock = if plan {
        None
    } else {
        match FileLock::try_acquire(&lock_path)? {
            Some(l) => Some(l),
            None => {
                let pid = crate::ext::lock::holder_pid(&lock_path)
                    .map(|p| p.to_string())
                    .unwrap_or_else(|| "?".into());
                rep.skipped = Some(format!("another tick is running (pid {pid})"));
                return Ok(rep);
            }
        }
    };
    let mut step = |name: &str, r: Result<()>| {
        if let Err(e) = r {
            warn!("tick {name}: {e:#}");
            rep.errors.push(format!("{name}: {e:#}"));
        }
    };
    let mut reap_rep = Vec::new();
    let mut n = 0;
    step("reap", reap(ctx, plan, &mut n, &mut reap_rep));
    let mut reclaim_rep = Vec::new();
    let mut m = 0;
    step("reclaim", reclaim(ctx, plan, &mut m, &mut reclaim_rep));
    let mut rec_rep = Vec::new();
    let mut k = 0;
    step("poll-ci", poll_ci(ctx, plan, &mut rec_rep));
    step("reconcile", reconcile(ctx, plan, &mut k, &mut rec_rep));
    let mut launch_rep = Vec::new();
    let mut l = 0;
    step("launch", launch(ctx, plan, &mut l, &mut launch_rep));
    rep.reaped = n;
    rep.reclaimed = m;
    rep.reconciled = k;
    rep.launched = l;
    rep.actions.extend(reap_rep);
    rep.actions.extend(reclaim_rep);
    rep.actions.extend(rec_rep);
    rep.actions.extend(launch_rep);
    // Step 6: deliver the outbox (design §9), best effort within a time budget.
    if plan {
        match crate::ops::outbox::due_count(ctx) {
            Ok(0) => {}
            Ok(n) => rep.actions.push(format!("deliver {n} outbox row(s)")),
            Err(e) => rep.errors.push(format!("outbox: {e:#}")),
        }
    } else {
        match crate::ops::outbox::drain(ctx, crate::ops::outbox::TICK_LIMIT) {
            Ok(d) => rep.sent = d.sent,
            Err(e) => {
                warn!("tick outbox: {e:#}");
                rep.errors.push(format!("outbox: {e:#}"));
            }
        }
    }
    let live = db::jobs::live(ctx.db.conn())?;
    rep.running = live
        .iter()
        .filter(|j| j.status == JobStatus::Running)
        .count() as u32;
    rep.queued = live
        .iter()
        .filter(|j| j.status == JobStatus::Queued)
        .count() as u32;
    Ok(rep)
}

/// Step 2: finalise running jobs whose supervisor is gone (or that ran past the cap).
fn reap(ctx: &Ctx, plan: bool, n: &mut u32, out: &mut Vec<String>) -> Result<()> {
    let running: Vec<JobRow> = db::jobs::live(ctx.db.conn())?
        .into_iter()
        .filter(|j| j.status == JobStatus::Running)
        .collect();
    let cap = ctx.config.scheduler.reaper_max_running_s as i64;
    for j in running {
        let age = ctx.now - j.started_at.unwrap_or(ctx.now);
        let sup = supervisor_of(&j);
        let dead = match &sup {
            Some(s) => match sys::is_live(s) {
                Liveness::Alive => None,
                Liveness::Dead(r) => Some(r.display(s.pid).to_string()),
            },
            None if age > LAUNCH_GRACE_S => Some("no supervisor was ever recorded".into()),
            None => None,
        };
        let overdue = age > cap;
        let why = match (dead, overdue) {
            (Some(d), _) => format!("supervisor dead: {d}"),
            (None, true) => {
                // Past the cap even a live lease owner is overruled.
                format!("running {age}s, over reaper_max_running_s {cap}")
            }
            (None, false) => continue,
        };
        if !overdue
            && let Some(l) = db::leases::transition_get(ctx.db.conn(), j.task_id)?
            && sys::is_live(&l.owner).is_alive()
        {
            continue;
        }
        let line = format!("reap job {} ({}): {why}", j.id.0, j.role);
        if plan {
            out.push(line);
            *n += 1;
            continue;
        }
        // Two agents must never work one worktree: kill what is left before re-queueing.
        for who in [agent_of(&j), if overdue { sup.clone() } else { None }]
            .into_iter()
            .flatten()
        {
            if let Err(e) = sys::terminate_group(&who, Duration::from_secs(5)) {
                warn!("could not stop process group {}: {e:#}", who.pid);
            }
        }
        if overdue {
            ctx.db
                .write(|tx| db::leases::transition_delete(tx, j.task_id).map(|_| ()))?;
        }
        let task = db::tasks::get(ctx.db.conn(), j.task_id)?;
        // Every write is fenced on the attempt: a job that finished since the snapshot is left
        // as it is and not counted.
        let wrote = if j.exit_code == Some(0) {
            let done = ctx.db.write(|tx| {
                db::jobs::finish(tx, j.id, j.attempts, JobStatus::Done, None, ctx.now)
            })?;
            if done {
                try_advance(ctx, &task, &j, Actor::Tick);
            }
            done
        } else {
            job::retry_or_fail(ctx, &j, j.attempts, &task, &format!("reaped: {why}"))?
                != job::AttemptOutcome::Stale
        };
        if wrote {
            out.push(line);
            *n += 1;
        }
    }
    Ok(())
}

fn try_advance(ctx: &Ctx, task: &TaskRow, j: &JobRow, actor: Actor) -> Option<advance::Report> {
    let req = Request {
        task: TaskRef::WorkItem(WorkItem::parse(&task.base_work_item).ok()?),
        expect_stage: Some(j.stage),
        as_role: None,
        to: None,
        dry_run: false,
        actor,
        note: None,
    };
    match advance::advance(ctx, &req) {
        Ok(r) => Some(r),
        Err(e) => {
            warn!(work_item = %task.work_item, "advance failed: {e:#}");
            None
        }
    }
}

/// Step 3: delete lease rows whose owner is dead.
fn reclaim(ctx: &Ctx, plan: bool, n: &mut u32, out: &mut Vec<String>) -> Result<()> {
    let c = ctx.db.conn();
    // Each delete is fenced on the owner judged dead, and only a delete that happened counts:
    // an owner that released its lease since the read, or a new owner, is left alone.
    for l in crate::ops::lease::view(db::leases::transition_all(c)?) {
        let (Liveness::Dead(r), Some(t)) = (l.liveness, l.row.task_id) else {
            continue;
        };
        let done = plan
            || ctx
                .db
                .write(|tx| db::leases::transition_delete_if_owner(tx, t, &l.row.owner))?;
        if done {
            out.push(format!(
                "reclaim transition lease of {}: {}",
                l.row.work_item.as_deref().unwrap_or("?"),
                r.display(l.row.owner.pid)
            ));
            *n += 1;
        }
    }
    for l in crate::ops::lease::view(db::leases::merge_all(c)?) {
        let Liveness::Dead(r) = l.liveness else {
            continue;
        };
        let done = plan
            || ctx
                .db
                .write(|tx| db::leases::merge_delete_if_owner(tx, &l.row.repo, &l.row.owner))?;
        if done {
            out.push(format!(
                "reclaim merge lease of repo {}: {}",
                l.row.repo,
                r.display(l.row.owner.pid)
            ));
            *n += 1;
        }
    }
    Ok(())
}

/// Polls of one task's branch status are at least this far apart.
const CI_POLL_EVERY_S: i64 = 60;
/// At most this many forge polls per pass, so a tick stays fast.
const CI_POLLS_PER_TICK: usize = 20;

/// Step 3b, lost-webhook recovery (design §9): for each idle `development` task of a repo with
/// `ci.mode: status`, ask the forge for the combined status of the branch head (at most once a
/// minute per task) and record it into `ci_status`; step 4 then advances or rolls back as if
/// the webhook had come. A forge that does not answer ends the polling for this pass.
fn poll_ci(ctx: &Ctx, plan: bool, out: &mut Vec<String>) -> Result<()> {
    use crate::config::CiMode;
    use crate::ext::http::CallError;
    let Some(forge) = ctx.config.gitea() else {
        return Ok(());
    };
    let Some(base) = forge.base_url.as_deref() else {
        return Ok(());
    };
    let c = ctx.db.conn();
    let live = db::jobs::live(c)?;
    let idle: Vec<TaskRow> = db::tasks::active(c)?
        .into_iter()
        .filter(|t| {
            t.stage == Stage::Development
                && t.paused_at.is_none()
                && t.blocked_at.is_none()
                && t.held_at.is_none()
                && ctx
                    .config
                    .repo(&t.repo)
                    .is_some_and(|r| r.ci.mode == CiMode::Status)
                && !live.iter().any(|j| j.task_id == t.id)
        })
        .collect();
    if idle.is_empty() {
        return Ok(());
    }
    let token = forge
        .token_env
        .as_deref()
        .and_then(|n| std::env::var(n).ok());
    let http = crate::ext::http::Http::new(Duration::from_secs(5));
    let gitea = crate::ext::gitea::Gitea::new(&http, base, token.as_deref());
    let mut polls = 0;
    for t in idle {
        if polls >= CI_POLLS_PER_TICK {
            break;
        }
        if db::outbox::ci_polled_at(c, t.id)?.is_some_and(|at| ctx.now - at < CI_POLL_EVERY_S) {
            continue;
        }
        let Some(fr) = ctx.config.repo(&t.repo).and_then(RepoCfg::forge) else {
            continue;
        };
        polls += 1;
        if plan {
            out.push(format!("poll ci status of {} ({})", t.work_item, t.branch));
            continue;
        }
        ctx.db
            .write(|tx| db::outbox::set_ci_polled(tx, t.id, ctx.now))?;
        match gitea.combined_status(&fr, &t.branch) {
            Ok(s) if s.sha.len() >= 7 && s.sha.bytes().all(|b| b.is_ascii_hexdigit()) => {
                let n = s.statuses.len();
                ctx.db.write(|tx| {
                    for st in s.statuses.iter().filter(|st| !st.context.is_empty()) {
                        let context: String = st.context.chars().take(200).collect();
                        let detail: String = st.description.chars().take(500).collect();
                        db::misc::set_ci_status(
                            tx, &t.repo, &s.sha, &context, &st.state, &detail, ctx.now,
                        )?;
                    }
                    Ok(())
                })?;
                if n > 0 {
                    out.push(format!(
                        "poll ci status of {}: {} at {} ({n} context(s))",
                        t.work_item,
                        s.state,
                        &s.sha[..s.sha.len().min(12)]
                    ));
                }
            }
            Ok(_) => {}
            Err(e) => {
                warn!(work_item = %t.work_item, "could not poll the forge: {e}");
                if matches!(
                    e,
                    CallError::Transient {
                        unreachable: true,
                        ..
                    }
                ) {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Step 4: a task with no live job, unchanged past its grace period, whose gate has already
/// decided (a lost webhook, a supervisor that died between finishing and advancing) is
/// advanced. Never `analysis` (a human gate), never after a `failed` job, silent when the gate
/// is not satisfied.
fn reconcile(ctx: &Ctx, plan: bool, n: &mut u32, out: &mut Vec<String>) -> Result<()> {
    let c = ctx.db.conn();
    let live = db::jobs::live(c)?;
    let grace = ctx.config.scheduler.reconcile_grace_s as i64;
    for t in db::tasks::active(c)? {
        if t.cancel_requested_at.is_some() {
            apply_requested_cancel(ctx, plan, &t, n, out)?;
            continue;
        }
        if t.stage == Stage::Analysis
            || t.stage == Stage::Created
            || t.paused_at.is_some()
            || t.blocked_at.is_some()
            || t.held_at.is_some()
            || ctx.now - t.stage_entered_at < grace
            || live.iter().any(|j| j.task_id == t.id)
        {
            continue;
        }
        // Not after a failed job (a human decides), and not while the job that just finished
        // may still be advancing on its own: its supervisor alive, or finished within the grace.
        if db::jobs::last_for_stage(c, t.id, t.stage)?.is_some_and(|j| {
            j.status == JobStatus::Failed
                || j.finished_at.is_some_and(|f| ctx.now - f < grace)
                || supervisor_of(&j).is_some_and(|s| sys::is_live(&s).is_alive())
        }) {
            continue;
        }
        let Some(repo) = ctx.config.repo(&t.repo) else {
            continue;
        };
        let verdict = gather::try_open(ctx, &t, repo).and_then(|view| match view {
            Some(view) => {
                gather::facts(ctx, &t, repo, &view).map(|f| Some(gate::evaluate(t.stage, &f)))
            }
            // Someone is working the repo right now: look again next pass.
            None => Ok(None),
        });
        let decided = match verdict {
            Ok(None) => continue,
            Ok(Some(GateResult::Pass(r))) => format!("gate green: {r}"),
            Ok(Some(GateResult::Fail { reason, .. })) => format!("verdict written: {reason}"),
            Ok(Some(GateResult::NotSatisfied(_) | GateResult::Waiting(_))) => continue,
            Err(e) => {
                warn!(work_item = %t.work_item, "reconcile could not read the gate: {e:#}");
                continue;
            }
        };
        out.push(format!(
            "reconcile {} in {}: {decided}",
            t.work_item, t.stage
        ));
        *n += 1;
        if plan {
            continue;
        }
        let req = Request {
            task: TaskRef::WorkItem(match WorkItem::parse(&t.base_work_item) {
                Ok(w) => w,
                Err(_) => continue,
            }),
            expect_stage: Some(t.stage),
            as_role: None,
            to: None,
            dry_run: false,
            actor: Actor::Reconciler,
            note: None,
        };
        if let Err(e) = advance::advance(ctx, &req) {
            warn!(work_item = %t.work_item, "reconcile advance failed: {e:#}");
        }
    }
    Ok(())
}

/// A cancel requested during an irreversible step (design §3.6) applies once no live owner holds
/// the task's transition lease any more.
fn apply_requested_cancel(
    ctx: &Ctx,
    plan: bool,
    t: &TaskRow,
    n: &mut u32,
    out: &mut Vec<String>,
) -> Result<()> {
    if let Some(l) = db::leases::transition_get(ctx.db.conn(), t.id)?
        && sys::is_live(&l.owner).is_alive()
    {
        return Ok(());
    }
    out.push(format!("apply the requested cancel of {}", t.work_item));
    *n += 1;
    if !plan {
        crate::ops::task::cancel(
            ctx,
            &t.work_item,
            Some("cancel requested earlier, applied by tick"),
            Actor::Tick,
        )?;
    }
    Ok(())
}

/// Step 5: claim and hand each job to a detached supervisor `orch job run <id>`.
fn launch(ctx: &Ctx, plan: bool, n: &mut u32, out: &mut Vec<String>) -> Result<()> {
    let claimed = claim::claim(ctx, plan)?;
    for c in claimed {
        out.push(format!("launch job {} (attempt {})", c.job.0, c.attempt));
        *n += 1;
        if plan {
            continue;
        }
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
        match proc::spawn_detached(&argv, &log) {
            Ok(s) => {
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
            }
            Err(e) => {
                warn!("could not launch job {}: {e:#}", c.job.0);
                ctx.db.write(|tx| {
                    db::jobs::requeue(
                        tx,
                        c.job,
                        c.attempt,
                        ctx.now + 30,
                        &format!("launch failed: {e:#}"),
                        true,
                    )
                })?;
            }
        }
    }
    Ok(())
}
