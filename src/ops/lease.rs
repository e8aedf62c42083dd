//! Transition-lease ownership (design §5.2) as a value: `TransitionLease` is held while a
//! transition is applied and released when dropped, errors and panics included. Also the
//! liveness view of every lease for `orch lease list` / `orch lease release`.

use std::path::PathBuf;

use anyhow::Result;
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::db::{self, Db, leases::LeaseRow};
use crate::domain::ids::TaskId;
use crate::domain::liveness::{self, Liveness, ProcIdentity};
use crate::domain::stage::Stage;
use crate::domain::time::{Ts, rfc3339};
use crate::ext::sys;

/// A held transition lease. Dropping it deletes the row, fenced on this owner's identity, over
/// its own connection (so the guard does not borrow the command's `Db`).
pub struct TransitionLease {
    db_path: PathBuf,
    task: TaskId,
    owner: ProcIdentity,
    /// For a long-lived owner: how long the lease lasts unrenewed.
    ttl: Option<i64>,
    released: bool,
}

/// Why a lease could not be taken.
#[derive(Debug, Clone)]
pub struct Busy {
    pub row: LeaseRow,
}

impl Busy {
    pub fn describe(&self) -> String {
        describe_owner(&self.row)
    }
}

pub fn describe_owner(row: &LeaseRow) -> String {
    format!(
        "transition lease held by {} pid {} since {}",
        row.owner_kind,
        row.owner.pid,
        rfc3339(row.acquired_at)
    )
}

impl TransitionLease {
    /// Take the task's lease: insert when free, reclaim a dead owner's (or an expired) row on
    /// sight, and report `Busy` when a live owner holds it. A long-lived process (`ctx.lease_ttl`
    /// set: `orch serve`) takes a lease that expires unless renewed, so one whose release
    /// failed does not stay held as long as the process lives.
    pub fn acquire(
        ctx: &Ctx,
        task: TaskId,
        kind: &str,
        stage: Stage,
    ) -> Result<std::result::Result<TransitionLease, Busy>> {
        let me = sys::self_identity()?;
        let now = ctx.now;
        let expires = ctx.lease_ttl.map(|t| now + t);
        let got = ctx.db.write(|tx| {
            if db::leases::transition_insert(tx, task, kind, &me, stage.as_str(), now, expires)? {
                return Ok(Ok(()));
            }
            let Some(row) = db::leases::transition_get(tx, task)? else {
                // Released between our insert and read: take it now.
                db::leases::transition_insert(tx, task, kind, &me, stage.as_str(), now, expires)?;
                return Ok(Ok(()));
            };
            match judge(&row, now) {
                Liveness::Alive => Ok(Err(Busy { row })),
                Liveness::Dead(why) => {
                    info!(
                        work_item = row.work_item.as_deref().unwrap_or("?"),
                        "reclaiming transition lease: {}",
                        why.display(row.owner.pid)
                    );
                    db::leases::transition_delete(tx, task)?;
                    db::leases::transition_insert(
                        tx,
                        task,
                        kind,
                        &me,
                        stage.as_str(),
                        now,
                        expires,
                    )?;
                    Ok(Ok(()))
                }
            }
        })?;
        Ok(got.map(|()| TransitionLease {
            db_path: ctx.config.db_path(),
            task,
            owner: me,
            ttl: ctx.lease_ttl,
            released: false,
        }))
    }

    /// Push the expiry of an expiring lease before a long step (no-op for other owners).
    pub fn renew(&self, db: &Db, now: Ts) -> Result<()> {
        if let Some(ttl) = self.ttl {
            db.write(|tx| db::leases::transition_renew(tx, self.task, &self.owner, now + ttl))?;
        }
        Ok(())
    }

    /// Release inside the caller's own transaction (so the release commits with the change).
    pub fn release_in(&mut self, tx: &rusqlite::Connection) -> Result<()> {
        db::leases::transition_delete_if_owner(tx, self.task, &self.owner)?;
        self.released = true;
        Ok(())
    }
}

impl Drop for TransitionLease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let res = Db::open(&self.db_path).and_then(|db| {
            db.write(|tx| db::leases::transition_delete_if_owner(tx, self.task, &self.owner))
        });
        if let Err(e) = res {
            warn!(
                "could not release the transition lease of task {}: {e:#}",
                self.task.0
            );
        }
    }
}

/// A lease row with its owner's liveness judged now.
pub struct LeaseView {
    pub row: LeaseRow,
    pub liveness: Liveness,
}

/// Judge every lease row at `now`: its owner's liveness, and its expiry when it has one.
pub fn view(rows: Vec<LeaseRow>, now: Ts) -> Vec<LeaseView> {
    rows.into_iter()
        .map(|row| LeaseView {
            liveness: judge(&row, now),
            row,
        })
        .collect()
}

/// Whether a lease row still counts as held at `now`.
pub fn judge(row: &LeaseRow, now: Ts) -> Liveness {
    liveness::judge_lease(sys::is_live(&row.owner), row.expires_at, now)
}

/// Whether a merge lease row still counts as held (design §7.1): its holder task is in
/// `deploy-staging` or `deploy` and not cancelled (a task holds it across its jobs, from the
/// merge gate to `done` or a rollback), or its owner process lives.
pub fn merge_held(c: &rusqlite::Connection, row: &LeaseRow) -> Result<bool> {
    if let Some(t) = row.task_id {
        let task = db::tasks::get(c, t)?;
        if matches!(task.stage, Stage::DeployStaging | Stage::Deploy) && task.cancelled_at.is_none()
        {
            return Ok(true);
        }
    }
    Ok(sys::is_live(&row.owner).is_alive())
}

/// `judge` for a merge lease row: alive while its holder task holds it.
pub fn judge_merge(c: &rusqlite::Connection, row: &LeaseRow, now: Ts) -> Result<Liveness> {
    if row
        .task_id
        .map(|t| db::tasks::get(c, t))
        .transpose()?
        .is_some_and(|t| {
            matches!(t.stage, Stage::DeployStaging | Stage::Deploy) && t.cancelled_at.is_none()
        })
    {
        return Ok(Liveness::Alive);
    }
    Ok(judge(row, now))
}

/// `view` of merge lease rows, judged by `judge_merge`.
pub fn view_merge(
    c: &rusqlite::Connection,
    rows: Vec<LeaseRow>,
    now: Ts,
) -> Result<Vec<LeaseView>> {
    rows.into_iter()
        .map(|row| {
            Ok(LeaseView {
                liveness: judge_merge(c, &row, now)?,
                row,
            })
        })
        .collect()
}

/// `orch lease release <WI> [--force]` and `--merge <repo>`: refuse a live owner unless forced.
pub fn release(ctx: &crate::ctx::Ctx, target: ReleaseTarget<'_>, force: bool) -> Result<String> {
    use crate::error::{Code, exit, usage};
    let c = ctx.db.conn();
    let (row, what) = match target {
        ReleaseTarget::Task(wi) => {
            let r = crate::domain::ids::TaskRef::parse(wi).map_err(usage)?;
            let task = ctx.task(&r)?;
            (
                db::leases::transition_get(c, task.id)?,
                format!("transition lease of `{}`", task.work_item),
            )
        }
        ReleaseTarget::Merge(repo) => {
            if ctx.config.repo(repo).is_none() {
                return Err(usage(format!(
                    "unknown repo `{}`",
                    crate::domain::ids::printable(repo)
                )));
            }
            (
                db::leases::merge_get(c, repo)?,
                format!("merge lease of repo `{repo}`"),
            )
        }
    };
    let Some(row) = row else {
        return Ok(format!("{what} is not held; nothing to do"));
    };
    let live = match target {
        ReleaseTarget::Merge(_) => judge_merge(c, &row, ctx.now)?,
        ReleaseTarget::Task(_) => judge(&row, ctx.now),
    };
    if live == Liveness::Alive && !force {
        return Err(exit(
            Code::Busy,
            format!(
                "{what} is held by `{}` pid {} since {}, which is alive; if that process is stuck, run again with `--force`",
                row.owner_kind,
                row.owner.pid,
                rfc3339(row.acquired_at)
            ),
        ));
    }
    // Delete only the row we judged: a lease that changed hands meanwhile is not ours to drop.
    let deleted = ctx.db.write(|tx| {
        let deleted = match (&target, row.task_id) {
            (ReleaseTarget::Task(_), Some(t)) => {
                db::leases::transition_delete_if_owner(tx, t, &row.owner)
            }
            (ReleaseTarget::Merge(repo), _) => {
                db::leases::merge_delete_if_owner(tx, repo, &row.owner)
            }
            (ReleaseTarget::Task(_), None) => Ok(false),
        }?;
        if deleted && live == Liveness::Alive {
            let task = match row.task_id {
                Some(t) => Some(db::tasks::get(tx, t)?),
                None => None,
            };
            let text = format!(
                "{what} force-released from live `{}` pid {}",
                row.owner_kind, row.owner.pid
            );
            crate::ops::notify::alert(ctx, tx, task.as_ref(), &text);
        }
        Ok(deleted)
    })?;
    if !deleted {
        return Err(exit(
            Code::Busy,
            format!("{what} changed hands while it was being released; run the command again"),
        ));
    }
    Ok(match live {
        Liveness::Alive => {
            format!(
                "force-released the {what} from live `{}` pid {}",
                row.owner_kind, row.owner.pid
            )
        }
        Liveness::Dead(r) => format!("released the {what}: {}", r.display(row.owner.pid)),
    })
}

pub enum ReleaseTarget<'a> {
    Task(&'a str),
    Merge(&'a str),
}
