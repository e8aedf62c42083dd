//! Small tables: repo freezes, task dependencies, the dispatch breaker and recorded CI status.

use std::collections::HashSet;

use anyhow::Result;
use rusqlite::{Connection, OptionalExtension, params};

use crate::domain::ids::TaskId;
use crate::domain::time::Ts;

#[derive(Debug, Clone)]
pub struct Freeze {
    pub repo: String,
    pub reason: String,
    pub frozen_by: String,
    pub frozen_at: Ts,
}

pub fn freeze(c: &Connection, repo: &str, reason: &str, by: &str, now: Ts) -> Result<bool> {
    Ok(c.execute(
        "INSERT INTO repo_freeze (repo, reason, frozen_by, frozen_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT(repo) DO NOTHING",
        params![repo, reason, by, now],
    )? == 1)
}

pub fn unfreeze(c: &Connection, repo: &str) -> Result<bool> {
    Ok(c.execute("DELETE FROM repo_freeze WHERE repo = ?", [repo])? == 1)
}

pub fn freezes(c: &Connection) -> Result<Vec<Freeze>> {
    let mut stmt = c.prepare_cached(
        "SELECT repo, reason, frozen_by, frozen_at FROM repo_freeze ORDER BY repo",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(Freeze {
                repo: r.get(0)?,
                reason: r.get(1)?,
                frozen_by: r.get(2)?,
                frozen_at: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn add_dep(c: &Connection, task: TaskId, depends_on: TaskId) -> Result<()> {
    c.execute(
        "INSERT OR IGNORE INTO job_deps (task_id, depends_on) VALUES (?1, ?2)",
        params![task.0, depends_on.0],
    )?;
    Ok(())
}

/// Every dependency edge (task, depends_on): small, read for cycle checks.
pub fn all_deps(c: &Connection) -> Result<Vec<(i64, i64)>> {
    let mut stmt = c.prepare_cached("SELECT task_id, depends_on FROM job_deps")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn deps_of(c: &Connection, task: TaskId) -> Result<Vec<i64>> {
    let mut stmt = c.prepare_cached("SELECT depends_on FROM job_deps WHERE task_id = ?")?;
    let rows = stmt
        .query_map([task.0], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Every dependency on a task that is not finished: (task, the other's work item, its stage).
pub fn open_deps(c: &Connection) -> Result<Vec<(i64, String, crate::domain::stage::Stage)>> {
    let mut stmt = c.prepare_cached(
        "SELECT d.task_id, t.work_item, t.stage FROM job_deps d JOIN tasks t ON t.id = d.depends_on \
         WHERE t.stage NOT IN ('done', 'cancelled') ORDER BY d.task_id, t.id",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, super::parse_col(r, 2)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The breaker when it is set: (open until, reason).
pub fn breaker(c: &Connection) -> Result<Option<(Ts, String)>> {
    Ok(c.query_row(
        "SELECT open_until, reason FROM breaker WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .optional()?)
}

/// `PRAGMA data_version`: it changes when another connection (any process) commits, and only
/// then. Read in a write transaction, equal values mean nobody else wrote in between.
pub fn data_version(c: &Connection) -> Result<i64> {
    Ok(c.query_row("PRAGMA data_version", [], |r| r.get(0))?)
}

/// CI status rows recorded for one commit: (context, state, detail).
pub fn ci_status(c: &Connection, repo: &str, sha: &str) -> Result<Vec<(String, String, String)>> {
    let mut stmt = c.prepare_cached(
        "SELECT context, state, detail FROM ci_status WHERE repo = ?1 AND sha = ?2 ORDER BY context",
    )?;
    let rows = stmt
        .query_map(params![repo, sha], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Append to the `lessons` journal (repo-level events such as freezes, gate failures, holds).
pub fn journal(
    c: &Connection,
    task: Option<TaskId>,
    kind: &str,
    detail: &str,
    now: Ts,
) -> Result<()> {
    c.execute(
        "INSERT INTO lessons (task_id, kind, detail, at) VALUES (?1, ?2, ?3, ?4)",
        params![task.map(|t| t.0), kind, super::scrub(detail), now],
    )?;
    Ok(())
}

/// The active tasks whose journal has a `kind` row written since they entered their current
/// stage: one query for the whole pass (it reads the active tasks, then each one's rows of that
/// kind through `lessons_task`), not one per task.
pub fn journaled_in_stage(c: &Connection, kind: &str) -> Result<HashSet<TaskId>> {
    let mut stmt = c.prepare_cached(
        "SELECT DISTINCT t.id FROM tasks t JOIN lessons l \
         ON l.task_id = t.id AND l.kind = ?1 AND l.at >= t.stage_entered_at \
         WHERE t.stage NOT IN ('done', 'cancelled')",
    )?;
    let ids = stmt
        .query_map([kind], |r| r.get(0).map(TaskId))?
        .collect::<rusqlite::Result<HashSet<_>>>()?;
    Ok(ids)
}

/// Open (or extend) the dispatch breaker until `until`.
pub fn open_breaker(c: &Connection, until: Ts, reason: &str) -> Result<()> {
    c.execute(
        "INSERT INTO breaker (id, open_until, reason) VALUES (1, ?1, ?2) \
         ON CONFLICT(id) DO UPDATE SET open_until = max(open_until, ?1), reason = ?2",
        params![until, super::scrub(reason)],
    )?;
    Ok(())
}

/// Record a CI status of a commit (from the forge, or from `ci.mode: command`).
pub fn set_ci_status(
    c: &Connection,
    repo: &str,
    sha: &str,
    context: &str,
    state: &str,
    detail: &str,
    now: Ts,
) -> Result<()> {
    c.execute(
        "INSERT INTO ci_status (repo, sha, context, state, detail, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(repo, sha, context) \
         DO UPDATE SET state = ?4, detail = ?5, updated_at = ?6",
        params![repo, sha, context, state, super::scrub(detail), now],
    )?;
    Ok(())
}
