//! `orch tick` — one scheduler pass (design §4.3): take the tick lock, reap dead supervisors
//! (`reap`), reclaim dead leases, poll the forge for lost CI webhooks and reconcile idle tasks
//! (`reconcile`), claim and launch supervisors one job at a time (`launch`, the pass of
//! `ops::launch` that finishing supervisors and gestures run too; again at the end when a
//! gesture woke the scheduler meanwhile), drain the outbox.
//! Each step is isolated, and so is each row of a step: one bad task is logged and skipped, the
//! pass goes on. `--plan` computes the same and changes nothing.

mod launch;
mod pass;
mod reap;
mod reconcile;

use anyhow::Result;

use crate::ctx::Ctx;
use crate::db;
use crate::domain::liveness::Liveness;
use crate::domain::stage::JobStatus;
use crate::ext::failpoint;
use crate::ext::lock::FileLock;

pub use pass::{Action, TickReport};

use pass::Pass;

pub fn tick(ctx: &Ctx, plan: bool) -> Result<TickReport> {
    let mut p = Pass {
        ctx,
        plan,
        rep: TickReport {
            schema_version: 1,
            plan,
            max_concurrency: ctx.config.max_concurrency,
            ..TickReport::default()
        },
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
                p.rep.skipped = Some(format!("another tick is running (pid {pid})"));
                return Ok(p.rep);
            }
        }
    };
    failpoint::hit("tick.after-lock");
    let r = reap::reap(&mut p);
    p.isolate("reap", r);
    failpoint::hit("tick.after-reap");
    let r = reclaim(&mut p);
    p.isolate("reclaim", r);
    failpoint::hit("tick.after-reclaim");
    let r = reconcile::poll_ci(&mut p);
    p.isolate("poll-ci", r);
    let r = reconcile::reconcile(&mut p);
    p.isolate("reconcile", r);
    failpoint::hit("tick.after-reconcile");
    let launch_began = std::time::SystemTime::now();
    let r = launch::launch(&mut p);
    p.isolate("launch", r);
    if !plan {
        let r = relay_alerts(ctx);
        p.isolate("relay alerts", r);
    }
    // Step 6: deliver the outbox (design §9), best effort within a time budget.
    failpoint::hit("tick.before-drain");
    if plan {
        match crate::ops::outbox::due_count(ctx) {
            Ok(0) => {}
            Ok(n) => p.act(format!("deliver {n} outbox row(s)")),
            Err(e) => p.rep.errors.push(format!("outbox: {e:#}")),
        }
    } else {
        let r = crate::ops::outbox::drain(ctx, crate::ops::outbox::TICK_LIMIT);
        if let Some(d) = p.isolate("outbox", r) {
            p.rep.sent = d.sent;
        }
    }
    // A gesture that woke the scheduler while this pass was past its launch step (a wake the
    // path unit could not turn into a second tick, this one being active) is served here.
    if !plan && woken_since(ctx, launch_began) {
        let r = launch::launch(&mut p);
        p.isolate("launch", r);
    }
    let live = db::jobs::live(ctx.db.conn())?;
    p.rep.running = live
        .iter()
        .filter(|j| j.status == JobStatus::Running)
        .count() as u32;
    p.rep.queued = live
        .iter()
        .filter(|j| j.status == JobStatus::Queued)
        .count() as u32;
    Ok(p.rep)
}

/// Whether `<state_dir>/wake` was touched since `t`.
fn woken_since(ctx: &Ctx, t: std::time::SystemTime) -> bool {
    std::fs::metadata(ctx.config.state_dir.join("wake"))
        .and_then(|m| m.modified())
        .is_ok_and(|m| m >= t)
}

/// Repeat in this tick's log (the journal) the alerts supervisors raised in their job logs
/// since the last pass, once each.
fn relay_alerts(ctx: &Ctx) -> Result<()> {
    for (id, wi, text) in db::usage::unrelayed_alerts(ctx.db.conn())? {
        tracing::warn!(work_item = wi.as_deref().unwrap_or("-"), "alert: {text}");
        ctx.db.write(|tx| db::usage::mark_relayed(tx, id))?;
    }
    Ok(())
}

/// Step 3: delete lease rows whose owner is dead (or whose lease expired).
fn reclaim(p: &mut Pass<'_>) -> Result<()> {
    let ctx = p.ctx;
    let c = ctx.db.conn();
    // Each delete is fenced on the owner judged dead, and only a delete that happened counts:
    // an owner that released its lease since the read, or a new owner, is left alone.
    for l in crate::ops::lease::view(db::leases::transition_all(c)?, ctx.now) {
        let (Liveness::Dead(r), Some(t)) = (l.liveness, l.row.task_id) else {
            continue;
        };
        let done = p.plan || {
            let w = ctx
                .db
                .write(|tx| db::leases::transition_delete_if_owner(tx, t, &l.row.owner));
            p.isolate("reclaim", w).unwrap_or(false)
        };
        if done {
            p.act(format!(
                "reclaim transition lease of {}: {}",
                l.row.work_item.as_deref().unwrap_or("?"),
                r.display(l.row.owner.pid)
            ));
            p.rep.reclaimed += 1;
        }
    }
    // A merge lease lives as long as its task holds it (design §7.1), whatever its last
    // owner process: only one whose task left the release stages is reclaimed.
    for l in crate::ops::lease::view_merge(c, db::leases::merge_all(c)?, ctx.now)? {
        let Liveness::Dead(r) = l.liveness else {
            continue;
        };
        let done = p.plan || {
            let w = ctx
                .db
                .write(|tx| db::leases::merge_delete_if_owner(tx, &l.row.repo, &l.row.owner));
            p.isolate("reclaim", w).unwrap_or(false)
        };
        if done {
            p.act(format!(
                "reclaim merge lease of repo {}: {}",
                l.row.repo,
                r.display(l.row.owner.pid)
            ));
            p.rep.reclaimed += 1;
        }
    }
    Ok(())
}
