//! Queries on `tasks`. A stage is only ever written by `cas_stage`, a compare-and-swap.

use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::domain::ids::{TaskId, TaskRef, tombstone};
use crate::domain::stage::{Stage, Track};
use crate::domain::time::Ts;

/// One task as stored.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub id: TaskId,
    pub work_item: String,
    pub base_work_item: String,
    pub repo: String,
    pub title: String,
    pub description: String,
    pub stage: Stage,
    pub track: Track,
    pub branch: String,
    pub labels: Vec<String>,
    pub dev_retries: u32,
    pub stage_entered_at: Ts,
    pub entry_marker: Option<String>,
    pub paused_at: Option<Ts>,
    pub paused_reason: Option<String>,
    pub paused_by: Option<String>,
    pub pause_before: Option<Stage>,
    pub approved_at: Option<Ts>,
    pub deploy_confirmed_at: Option<Ts>,
    pub blocked_at: Option<Ts>,
    pub blocked_reason: Option<String>,
    pub held_at: Option<Ts>,
    pub held_reason: Option<String>,
    pub cancel_requested_at: Option<Ts>,
    pub cancelled_at: Option<Ts>,
    pub created_at: Ts,
    pub updated_at: Ts,
}

impl TaskRow {
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }
}

const COLS: &str = "id, work_item, base_work_item, repo, title, description, stage, track, branch, \
    labels, dev_retries, stage_entered_at, entry_marker, paused_at, paused_reason, paused_by, \
    pause_before, approved_at, deploy_confirmed_at, blocked_at, blocked_reason, held_at, \
    held_reason, cancel_requested_at, cancelled_at, created_at, updated_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<TaskRow> {
    let labels: String = r.get(9)?;
    Ok(TaskRow {
        id: TaskId(r.get(0)?),
        work_item: r.get(1)?,
        base_work_item: r.get(2)?,
        repo: r.get(3)?,
        title: r.get(4)?,
        description: r.get(5)?,
        stage: super::parse_col(r, 6)?,
        track: r
            .get::<_, String>(7)?
            .parse::<Track>()
            .map_err(|e| super::conv_err(7, e))?,
        branch: r.get(8)?,
        labels: serde_json::from_str(&labels).map_err(|e| super::conv_err(9, e))?,
        dev_retries: r.get(10)?,
        stage_entered_at: r.get(11)?,
        entry_marker: r.get(12)?,
        paused_at: r.get(13)?,
        paused_reason: r.get(14)?,
        paused_by: r.get(15)?,
        pause_before: match r.get::<_, Option<String>>(16)? {
            Some(s) => Some(s.parse::<Stage>().map_err(|e| super::conv_err(16, e))?),
            None => None,
        },
        approved_at: r.get(17)?,
        deploy_confirmed_at: r.get(18)?,
        blocked_at: r.get(19)?,
        blocked_reason: r.get(20)?,
        held_at: r.get(21)?,
        held_reason: r.get(22)?,
        cancel_requested_at: r.get(23)?,
        cancelled_at: r.get(24)?,
        created_at: r.get(25)?,
        updated_at: r.get(26)?,
    })
}

/// A new task, inserted at stage `created`.
pub struct NewTask<'a> {
    pub work_item: &'a str,
    pub repo: &'a str,
    pub title: &'a str,
    pub description: &'a str,
    pub track: Track,
    pub branch: &'a str,
    pub labels: &'a [String],
}

pub fn insert(c: &Connection, t: &NewTask<'_>, now: Ts) -> Result<TaskId> {
    c.execute(
        "INSERT INTO tasks (work_item, base_work_item, repo, title, description, stage, track, \
         branch, labels, stage_entered_at, created_at, updated_at) \
         VALUES (?1, ?1, ?2, ?3, ?4, 'created', ?5, ?6, ?7, ?8, ?8, ?8)",
        params![
            t.work_item,
            t.repo,
            t.title,
            t.description,
            t.track.as_str(),
            t.branch,
            serde_json::to_string(t.labels)?,
            now
        ],
    )
    .with_context(|| format!("inserting task `{}`", t.work_item))?;
    Ok(TaskId(c.last_insert_rowid()))
}

pub fn get(c: &Connection, id: TaskId) -> Result<TaskRow> {
    c.prepare_cached(&format!("SELECT {COLS} FROM tasks WHERE id = ?"))?
        .query_row([id.0], from_row)
        .with_context(|| format!("reading task row {}", id.0))
}

/// The task an operator means: the exact tombstone, or the newest task with that work item.
pub fn find(c: &Connection, r: &TaskRef) -> Result<Option<TaskRow>> {
    let row = match r {
        TaskRef::Tombstone(t) => c
            .query_row(
                &format!("SELECT {COLS} FROM tasks WHERE work_item = ?"),
                [t],
                from_row,
            )
            .optional()?,
        TaskRef::WorkItem(wi) => c
            .query_row(
                &format!(
                    "SELECT {COLS} FROM tasks WHERE base_work_item = ? ORDER BY id DESC LIMIT 1"
                ),
                [wi.as_str()],
                from_row,
            )
            .optional()?,
    };
    Ok(row)
}

/// Whether a task currently holds this work item id (tombstoned ones do not).
pub fn work_item_taken(c: &Connection, wi: &str) -> Result<bool> {
    Ok(
        c.query_row("SELECT 1 FROM tasks WHERE work_item = ?", [wi], |_| Ok(()))
            .optional()?
            .is_some(),
    )
}

/// The highest number used with this prefix, tombstones included.
pub fn max_number(c: &Connection, prefix: &str) -> Result<u64> {
    let mut stmt = c.prepare(
        "SELECT base_work_item FROM tasks WHERE base_work_item >= ?1 AND base_work_item < ?2",
    )?;
    let lo = format!("{prefix}-");
    let hi = format!("{prefix}.");
    let mut max = 0u64;
    for wi in stmt.query_map(params![lo, hi], |r| r.get::<_, String>(0))? {
        let wi = wi?;
        if let Some(n) = wi.strip_prefix(&lo).and_then(|n| n.parse::<u64>().ok()) {
            max = max.max(n);
        }
    }
    Ok(max)
}

pub const ACTIVE_TASKS_SQL: &str =
    "SELECT id FROM tasks WHERE stage NOT IN ('done', 'cancelled') ORDER BY repo, id";

/// Every non-terminal task, by repo then id (served by the partial index `tasks_active`).
pub fn active(c: &Connection) -> Result<Vec<TaskRow>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {COLS} FROM tasks WHERE stage NOT IN ('done', 'cancelled') ORDER BY repo, id"
    ))?;
    let rows = stmt
        .query_map([], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Tasks for `orch task list`.
pub fn list(
    c: &Connection,
    all: bool,
    repo: Option<&str>,
    stage: Option<Stage>,
    limit: u32,
) -> Result<Vec<TaskRow>> {
    let mut sql = format!("SELECT {COLS} FROM tasks WHERE 1=1");
    if !all && stage.is_none() {
        sql.push_str(" AND stage NOT IN ('done', 'cancelled')");
    }
    if repo.is_some() {
        sql.push_str(" AND repo = :repo");
    }
    if stage.is_some() {
        sql.push_str(" AND stage = :stage");
    }
    sql.push_str(" ORDER BY id DESC LIMIT :limit");
    let mut stmt = c.prepare(&sql)?;
    let mut named: Vec<(&str, &dyn rusqlite::ToSql)> = Vec::new();
    let stage_s = stage.map(|s| s.as_str());
    if let Some(r) = &repo {
        named.push((":repo", r));
    }
    if let Some(s) = &stage_s {
        named.push((":stage", s));
    }
    named.push((":limit", &limit));
    let mut rows = stmt
        .query_map(named.as_slice(), from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.reverse();
    Ok(rows)
}

/// The compare-and-swap stage write: moves the task only if it is still at `from`. Entering a
/// stage resets its entry time and marker; returns whether exactly one row changed.
pub fn cas_stage(
    c: &Connection,
    id: TaskId,
    from: Stage,
    to: Stage,
    marker: Option<&str>,
    now: Ts,
) -> Result<bool> {
    let n = c.execute(
        "UPDATE tasks SET stage = ?1, stage_entered_at = ?2, entry_marker = ?3, updated_at = ?2 \
         WHERE id = ?4 AND stage = ?5",
        params![to.as_str(), now, marker, id.0, from.as_str()],
    )?;
    Ok(n == 1)
}

pub fn set_dev_retries(c: &Connection, id: TaskId, n: u32, now: Ts) -> Result<()> {
    c.execute(
        "UPDATE tasks SET dev_retries = ?1, updated_at = ?2 WHERE id = ?3",
        params![n, now, id.0],
    )?;
    Ok(())
}

pub fn set_blocked(c: &Connection, id: TaskId, reason: Option<&str>, now: Ts) -> Result<()> {
    c.execute(
        "UPDATE tasks SET blocked_at = CASE WHEN ?1 IS NULL THEN NULL ELSE ?2 END, \
         blocked_reason = ?1, updated_at = ?2 WHERE id = ?3",
        params![reason.map(super::scrub), now, id.0],
    )?;
    Ok(())
}

pub fn set_held(c: &Connection, id: TaskId, reason: Option<&str>, now: Ts) -> Result<()> {
    c.execute(
        "UPDATE tasks SET held_at = CASE WHEN ?1 IS NULL THEN NULL ELSE ?2 END, \
         held_reason = ?1, updated_at = ?2 WHERE id = ?3",
        params![reason.map(super::scrub), now, id.0],
    )?;
    Ok(())
}

pub fn set_paused(c: &Connection, id: TaskId, pause: Option<(&str, &str)>, now: Ts) -> Result<()> {
    let (reason, by) = pause.unzip();
    c.execute(
        "UPDATE tasks SET paused_at = CASE WHEN ?1 IS NULL THEN NULL ELSE ?3 END, \
         paused_reason = ?1, paused_by = ?2, updated_at = ?3 WHERE id = ?4",
        params![reason, by, now, id.0],
    )?;
    Ok(())
}

pub fn set_pause_before(c: &Connection, id: TaskId, stage: Option<Stage>, now: Ts) -> Result<()> {
    c.execute(
        "UPDATE tasks SET pause_before = ?1, updated_at = ?2 WHERE id = ?3",
        params![stage.map(|s| s.as_str()), now, id.0],
    )?;
    Ok(())
}

pub fn set_approved(c: &Connection, id: TaskId, now: Ts) -> Result<()> {
    c.execute(
        "UPDATE tasks SET approved_at = ?1, updated_at = ?1 WHERE id = ?2",
        params![now, id.0],
    )?;
    Ok(())
}

pub fn set_deploy_confirmed(c: &Connection, id: TaskId, now: Ts) -> Result<()> {
    c.execute(
        "UPDATE tasks SET deploy_confirmed_at = ?1, updated_at = ?1 WHERE id = ?2",
        params![now, id.0],
    )?;
    Ok(())
}

pub fn set_cancel_requested(c: &Connection, id: TaskId, now: Ts) -> Result<()> {
    c.execute(
        "UPDATE tasks SET cancel_requested_at = ?1, updated_at = ?1 WHERE id = ?2",
        params![now, id.0],
    )?;
    Ok(())
}

/// Cancel: CAS to `cancelled` from `from` and tombstone the work item so it can be reused.
pub fn cancel(c: &Connection, id: TaskId, wi: &str, from: Stage, now: Ts) -> Result<bool> {
    let n = c.execute(
        "UPDATE tasks SET stage = 'cancelled', cancelled_at = ?1, stage_entered_at = ?1, \
         work_item = ?2, paused_at = NULL, pause_before = NULL, updated_at = ?1 \
         WHERE id = ?3 AND stage = ?4",
        params![now, tombstone(wi, id), id.0, from.as_str()],
    )?;
    Ok(n == 1)
}

/// Work items of the given tasks, by id (for naming dependencies).
pub fn stages_of(c: &Connection, ids: &[i64]) -> Result<Vec<(i64, String, Stage)>> {
    let mut out = Vec::with_capacity(ids.len());
    let mut stmt = c.prepare_cached("SELECT id, work_item, stage FROM tasks WHERE id = ?")?;
    for id in ids {
        if let Some(row) = stmt
            .query_row([id], |r| {
                Ok((r.get(0)?, r.get(1)?, super::parse_col(r, 2)?))
            })
            .optional()?
        {
            out.push(row);
        }
    }
    Ok(out)
}

/// Link a task to its tracker issue (the Plane issue id it was created from), or unlink it.
/// Only a linked task's transitions are mirrored to the tracker (`ops::notify`).
pub fn set_tracker_ref(
    c: &Connection,
    id: TaskId,
    tracker_ref: Option<&str>,
    now: Ts,
) -> Result<()> {
    c.execute(
        "UPDATE tasks SET tracker_ref = ?1, updated_at = ?2 WHERE id = ?3",
        params![tracker_ref, now, id.0],
    )?;
    Ok(())
}

/// The tracker issue a task is linked to, if any.
pub fn tracker_ref(c: &Connection, id: TaskId) -> Result<Option<String>> {
    Ok(
        c.prepare_cached("SELECT tracker_ref FROM tasks WHERE id = ?")?
            .query_row([id.0], |r| r.get::<_, Option<String>>(0))
            .optional()?
            .flatten(),
    )
}

/// An active task (not `done`, not `cancelled`) working on `branch`, if any: a branch delete
/// queued by an earlier cancel must leave it alone.
pub fn active_on_branch(c: &Connection, branch: &str) -> Result<Option<String>> {
    Ok(c.query_row(
        "SELECT work_item FROM tasks WHERE branch = ?1 AND stage NOT IN ('done', 'cancelled') \
         ORDER BY id DESC LIMIT 1",
        [branch],
        |r| r.get(0),
    )
    .optional()?)
}
