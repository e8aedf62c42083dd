//! The transition lease (one row per task) and the merge lease (one row per repo), design §5.
//! Rows record who holds them as a process identity; whether that owner is alive is decided by
//! `domain::liveness` over facts from `ext::sys`, never here.

use anyhow::Result;
use rusqlite::{Connection, OptionalExtension, params};

use crate::domain::ids::TaskId;
use crate::domain::liveness::ProcIdentity;
use crate::domain::time::Ts;

#[derive(Debug, Clone)]
pub struct LeaseRow {
    /// The task (transition lease) or the task holding the repo (merge lease; may be unknown).
    pub task_id: Option<TaskId>,
    pub work_item: Option<String>,
    pub repo: String,
    pub owner_kind: String,
    pub owner: ProcIdentity,
    pub stage: Option<String>,
    pub acquired_at: Ts,
    /// When set, the lease counts as released after this time unless renewed (owners that
    /// live long, like `orch serve`).
    pub expires_at: Option<Ts>,
}

pub fn transition_get(c: &Connection, task: TaskId) -> Result<Option<LeaseRow>> {
    Ok(c.query_row(
        "SELECT l.task_id, k.work_item, k.repo, l.owner_kind, l.pid, l.start_time, l.boot_id, \
         l.stage, l.acquired_at, l.expires_at FROM transition_lease l \
         JOIN tasks k ON k.id = l.task_id WHERE l.task_id = ?",
        [task.0],
        transition_row,
    )
    .optional()?)
}

fn transition_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LeaseRow> {
    Ok(LeaseRow {
        task_id: Some(TaskId(r.get(0)?)),
        work_item: Some(r.get(1)?),
        repo: r.get(2)?,
        owner_kind: r.get(3)?,
        owner: ProcIdentity {
            pid: r.get(4)?,
            start_time: r.get::<_, i64>(5)? as u64,
            boot_id: r.get(6)?,
        },
        stage: Some(r.get(7)?),
        acquired_at: r.get(8)?,
        expires_at: r.get(9)?,
    })
}

/// Insert the lease row; false when a row already exists (the caller judges its owner).
pub fn transition_insert(
    c: &Connection,
    task: TaskId,
    kind: &str,
    owner: &ProcIdentity,
    stage: &str,
    now: Ts,
    expires_at: Option<Ts>,
) -> Result<bool> {
    let n = c.execute(
        "INSERT INTO transition_lease (task_id, owner_kind, pid, start_time, boot_id, stage, \
         acquired_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT(task_id) DO NOTHING",
        params![
            task.0,
            kind,
            owner.pid,
            owner.start_time as i64,
            owner.boot_id,
            stage,
            now,
            expires_at
        ],
    )?;
    Ok(n == 1)
}

/// Push the expiry of a lease this owner still holds (a fenced renewal); false when the lease
/// is no longer this owner's.
pub fn transition_renew(
    c: &Connection,
    task: TaskId,
    owner: &ProcIdentity,
    expires_at: Ts,
) -> Result<bool> {
    let n = c.execute(
        "UPDATE transition_lease SET expires_at = ?1 WHERE task_id = ?2 AND pid = ?3 \
         AND start_time = ?4 AND boot_id = ?5",
        params![
            expires_at,
            task.0,
            owner.pid,
            owner.start_time as i64,
            owner.boot_id
        ],
    )?;
    Ok(n == 1)
}

/// Delete the lease only if it is still held by exactly this owner (a fenced release).
pub fn transition_delete_if_owner(
    c: &Connection,
    task: TaskId,
    owner: &ProcIdentity,
) -> Result<bool> {
    let n = c.execute(
        "DELETE FROM transition_lease WHERE task_id = ?1 AND pid = ?2 AND start_time = ?3 \
         AND boot_id = ?4",
        params![task.0, owner.pid, owner.start_time as i64, owner.boot_id],
    )?;
    Ok(n == 1)
}

pub fn transition_delete(c: &Connection, task: TaskId) -> Result<bool> {
    Ok(c.execute("DELETE FROM transition_lease WHERE task_id = ?", [task.0])? == 1)
}

pub fn transition_all(c: &Connection) -> Result<Vec<LeaseRow>> {
    let mut stmt = c.prepare_cached(
        "SELECT l.task_id, k.work_item, k.repo, l.owner_kind, l.pid, l.start_time, l.boot_id, \
         l.stage, l.acquired_at, l.expires_at FROM transition_lease l \
         JOIN tasks k ON k.id = l.task_id ORDER BY l.acquired_at",
    )?;
    let rows = stmt
        .query_map([], transition_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

fn merge_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LeaseRow> {
    Ok(LeaseRow {
        repo: r.get(0)?,
        task_id: r.get::<_, Option<i64>>(1)?.map(TaskId),
        work_item: r.get(2)?,
        owner_kind: r.get(3)?,
        owner: ProcIdentity {
            pid: r.get(4)?,
            start_time: r.get::<_, i64>(5)? as u64,
            boot_id: r.get(6)?,
        },
        stage: None,
        acquired_at: r.get(7)?,
        expires_at: r.get(8)?,
    })
}

const MERGE_SELECT: &str = "SELECT m.repo, m.task_id, k.work_item, m.owner_kind, m.pid, \
    m.start_time, m.boot_id, m.acquired_at, m.expires_at FROM merge_lease m \
    LEFT JOIN tasks k ON k.id = m.task_id";

pub fn merge_get(c: &Connection, repo: &str) -> Result<Option<LeaseRow>> {
    Ok(c.query_row(
        &format!("{MERGE_SELECT} WHERE m.repo = ?"),
        [repo],
        merge_row,
    )
    .optional()?)
}

pub fn merge_all(c: &Connection) -> Result<Vec<LeaseRow>> {
    let mut stmt = c.prepare_cached(&format!("{MERGE_SELECT} ORDER BY m.repo"))?;
    let rows = stmt
        .query_map([], merge_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn merge_delete(c: &Connection, repo: &str) -> Result<bool> {
    Ok(c.execute("DELETE FROM merge_lease WHERE repo = ?", [repo])? == 1)
}

/// Delete the merge lease only if it is still held by exactly this owner.
pub fn merge_delete_if_owner(c: &Connection, repo: &str, owner: &ProcIdentity) -> Result<bool> {
    let n = c.execute(
        "DELETE FROM merge_lease WHERE repo = ?1 AND pid = ?2 AND start_time = ?3 AND boot_id = ?4",
        params![repo, owner.pid, owner.start_time as i64, owner.boot_id],
    )?;
    Ok(n == 1)
}

/// Release every lease a task holds (cancel).
pub fn release_all_of_task(c: &Connection, task: TaskId) -> Result<()> {
    c.execute("DELETE FROM transition_lease WHERE task_id = ?", [task.0])?;
    c.execute("DELETE FROM merge_lease WHERE task_id = ?", [task.0])?;
    Ok(())
}
