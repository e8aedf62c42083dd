//! The claim (design §4.2): inside one `BEGIN IMMEDIATE` transaction, gather the live world and
//! claim queued jobs FIFO by id while `domain::claim::wait_reason` — the very function behind
//! `orch queue` and `orch why` — says they are claimable. Each claim is also a row guard
//! (`WHERE status = 'queued'`), so two tick processes can never claim one job twice.

use anyhow::Result;

use crate::ctx::Ctx;
use crate::db;
use crate::domain::claim::Global;
use crate::domain::ids::JobId;
use crate::domain::stage::JobStatus;
use crate::ops::queue::World;

/// A claimed job, its attempt number, and whose it is.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub job: JobId,
    pub attempt: u32,
    pub work_item: String,
    pub role: crate::domain::stage::Role,
    /// This claim took the last free slot: a next claim in the same pass would find every
    /// slot taken, so the pass need not gather the world again to learn it.
    pub last_slot: bool,
}

/// What a pass would claim now, in claim order, changing nothing (`orch tick --plan`). Jobs
/// planned earlier in the pass count as running, for `max_concurrency` and for their task.
pub fn plan(ctx: &Ctx) -> Result<Vec<Claimed>> {
    let mut world = World::gather_in(ctx.db.conn(), &ctx.config, ctx.now)?;
    let queued: Vec<_> = world
        .jobs
        .iter()
        .filter(|j| j.status == JobStatus::Queued)
        .cloned()
        .collect();
    let mut out = Vec::new();
    let mut busy = std::collections::HashSet::new();
    for j in queued {
        if world.dispatch_closed() {
            break;
        }
        if busy.contains(&j.task_id.0) || world.wait(&j).is_some() {
            continue;
        }
        out.push(Claimed {
            job: j.id,
            attempt: j.attempts + 1,
            work_item: world
                .task(j.task_id.0)
                .map(|t| t.work_item.clone())
                .unwrap_or_default(),
            role: j.role,
            last_slot: world.running() + world.claimed + 1 >= world.max_concurrency,
        });
        busy.insert(j.task_id.0);
        world.claimed += 1;
    }
    Ok(out)
}

/// The budget (`agent.budget_usd`): hold the task of an agent job that would take its spending
/// past the budget, in the claim's transaction, instead of claiming the job. A runner's job
/// costs nothing and always runs.
fn hold_over_budget(
    ctx: &Ctx,
    tx: &rusqlite::Connection,
    world: &World,
    j: &db::jobs::JobRow,
) -> Result<bool> {
    let Some(budget) = ctx.config.agent.budget_usd else {
        return Ok(false);
    };
    let (Some(task), Some(repo)) = (world.task(j.task_id.0), ctx.config.repo(&j.repo)) else {
        return Ok(false);
    };
    if crate::ops::runner::intercept(j.role, j.stage, repo).is_some() {
        return Ok(false);
    }
    let spent = db::usage::of_task(tx, j.task_id)?;
    let Some(why) = crate::domain::agent::over_budget(spent.cost_usd, spent.runs, budget) else {
        return Ok(false);
    };
    db::tasks::set_held(tx, j.task_id, Some(&why), ctx.now)?;
    crate::ops::apply::record_here(
        ctx,
        tx,
        task,
        crate::domain::history::Actor::Tick,
        crate::domain::history::Outcome::Held,
        &why,
    )?;
    crate::ops::notify::alert(
        ctx,
        tx,
        Some(task),
        &format!("`{}` held: {why}", task.work_item),
    );
    Ok(true)
}

/// The world an earlier claim of the same pass gathered, with the database's `data_version` of
/// then and this process's own claims since applied to it.
pub struct Gathered {
    world: World,
    version: i64,
}

/// Claim the oldest claimable job, if any, in a transaction of its own. The tick claims one
/// job, starts its supervisor and records it before it claims the next, so a crash between a
/// claim and its launch strands at most one job (and the reaper gives that one its attempt
/// back).
///
/// `reuse` carries the world from one claim of a pass to the next: when no other connection
/// has committed since (`PRAGMA data_version`, read under the write lock), the world a new
/// gather would return is that one with this process's claim applied, so it is not gathered
/// again (with thousands of queued jobs a gather is most of a tick's cost). Anything else this
/// process writes in between (a launch that failed) must drop it (`None`).
pub fn claim_next(ctx: &Ctx, reuse: &mut Option<Gathered>) -> Result<Option<Claimed>> {
    let cached = reuse.take();
    let (claimed, kept) = ctx.db.write(|tx| {
        // Every slot taken or the breaker open closes dispatch for every job alike; a count and
        // a row say so without gathering the world (most ticks of a busy queue end here).
        let breaker = db::misc::breaker(tx)?;
        let global = Global {
            now: ctx.now,
            running: db::jobs::running_count(tx)?,
            max_concurrency: ctx.config.max_concurrency,
            breaker: breaker.as_ref().map(|(t, r)| (*t, r.as_str())),
        };
        if global.closed() {
            return Ok((None, None));
        }
        let version = db::misc::data_version(tx)?;
        let mut world = match cached {
            Some(g) if g.version == version => {
                tracing::debug!("claim: the world of the last claim still holds");
                g.world
            }
            _ => World::gather_in(tx, &ctx.config, ctx.now)?,
        };
        if world.dispatch_closed() {
            return Ok((None, None));
        }
        let mut held = false;
        let mut claimed = None;
        for j in world.jobs.iter().filter(|j| j.status == JobStatus::Queued) {
            if world.wait(j).is_some() {
                continue;
            }
            if hold_over_budget(ctx, tx, &world, j)? {
                held = true;
                continue;
            }
            if let Some(attempt) = db::jobs::claim(tx, j.id, ctx.now)? {
                claimed = Some(Claimed {
                    job: j.id,
                    attempt,
                    work_item: world
                        .task(j.task_id.0)
                        .map(|t| t.work_item.clone())
                        .unwrap_or_default(),
                    role: j.role,
                    last_slot: world.running() + 1 >= world.max_concurrency,
                });
                break;
            }
        }
        // A hold written here changed the world; only an unchanged one is worth keeping.
        let kept = match &claimed {
            Some(c) if !held => {
                world.mark_claimed(c.job);
                Some(Gathered { world, version })
            }
            _ => None,
        };
        Ok((claimed, kept))
    })?;
    // Kept only once the claim is committed.
    *reuse = kept;
    Ok(claimed)
}
