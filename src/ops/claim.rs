//! The claim (design §4.2): inside one `BEGIN IMMEDIATE` transaction, gather the live world and
//! claim queued jobs FIFO by id while `domain::claim::wait_reason` — the very function behind
//! `orch queue` and `orch why` — says they are claimable. Each claim is also a row guard
//! (`WHERE status = 'queued'`), so two tick processes can never claim one job twice.

use anyhow::Result;

use crate::ctx::Ctx;
use crate::db;
use crate::domain::ids::JobId;
use crate::domain::stage::JobStatus;
use crate::ops::queue::World;

/// A claimed job and its attempt number.
#[derive(Debug, Clone, Copy)]
pub struct Claimed {
    pub job: JobId,
    pub attempt: u32,
}

/// Claim as many jobs as the rules allow. With `dry_run` nothing is written: the list is what a
/// real pass would claim now.
pub fn claim(ctx: &Ctx, dry_run: bool) -> Result<Vec<Claimed>> {
    let pass = |c: &rusqlite::Connection, write: bool| -> Result<Vec<Claimed>> {
        let mut world = World::gather_in(c, &ctx.config, ctx.now)?;
        let queued: Vec<_> = world
            .jobs
            .iter()
            .filter(|j| j.status == JobStatus::Queued)
            .cloned()
            .collect();
        let mut out = Vec::new();
        for j in queued {
            if world.wait(&j).is_some() {
                continue;
            }
            if write {
                if let Some(attempt) = db::jobs::claim(c, j.id, ctx.now)? {
                    out.push(Claimed { job: j.id, attempt });
                    world.claimed += 1;
                }
            } else {
                out.push(Claimed {
                    job: j.id,
                    attempt: j.attempts + 1,
                });
                world.claimed += 1;
            }
        }
        Ok(out)
    };
    if dry_run {
        pass(ctx.db.conn(), false)
    } else {
        ctx.db.write(|tx| pass(tx, true))
    }
}
