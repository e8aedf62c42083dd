//! The append-only transition history (design §3.3): one row per decision, in §12's words.

use anyhow::Result;
use rusqlite::{Connection, params};

use crate::domain::history::{Actor, Outcome};
use crate::domain::ids::TaskId;
use crate::domain::stage::Stage;
use crate::domain::time::Ts;

#[derive(Debug, Clone)]
pub struct TransitionRow {
    pub id: i64,
    pub task_id: TaskId,
    pub work_item: String,
    pub from: Stage,
    pub to: Stage,
    pub actor: Actor,
    pub outcome: Outcome,
    pub reason: String,
    pub at: Ts,
    pub overridden_verdict: Option<String>,
    pub artifact_sha256: Option<String>,
    /// The person behind an operator's row.
    pub by: Option<String>,
}

pub struct NewTransition<'a> {
    pub task_id: TaskId,
    pub from: Stage,
    pub to: Stage,
    pub actor: Actor,
    pub outcome: Outcome,
    pub reason: &'a str,
    pub overridden_verdict: Option<&'a str>,
    pub artifact_sha256: Option<&'a str>,
    pub by: Option<&'a str>,
}

pub fn insert(c: &Connection, t: &NewTransition<'_>, now: Ts) -> Result<()> {
    c.execute(
        "INSERT INTO transitions (task_id, from_stage, to_stage, actor, outcome, reason, at, \
         overridden_verdict, artifact_sha256, by_person) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            t.task_id.0,
            t.from.as_str(),
            t.to.as_str(),
            t.actor.as_str(),
            t.outcome.as_str(),
            super::scrub(t.reason),
            now,
            t.overridden_verdict,
            t.artifact_sha256,
            t.by.map(super::scrub)
        ],
    )?;
    Ok(())
}

const SELECT: &str = "SELECT t.id, t.task_id, k.work_item, t.from_stage, t.to_stage, t.actor, \
    t.outcome, t.reason, t.at, t.overridden_verdict, t.artifact_sha256, t.by_person \
    FROM transitions t JOIN tasks k ON k.id = t.task_id";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TransitionRow> {
    Ok(TransitionRow {
        id: r.get(0)?,
        task_id: TaskId(r.get(1)?),
        work_item: r.get(2)?,
        from: super::parse_col(r, 3)?,
        to: super::parse_col(r, 4)?,
        actor: super::parse_col(r, 5)?,
        outcome: super::parse_col(r, 6)?,
        reason: r.get(7)?,
        at: r.get(8)?,
        overridden_verdict: r.get(9)?,
        artifact_sha256: r.get(10)?,
        by: r.get(11)?,
    })
}

/// A task's history, oldest first.
pub fn of_task(c: &Connection, task: TaskId) -> Result<Vec<TransitionRow>> {
    let mut stmt = c.prepare_cached(&format!("{SELECT} WHERE t.task_id = ? ORDER BY t.id"))?;
    let rows = stmt
        .query_map([task.0], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Every operator override, oldest first (`orch report overrides`).
pub fn overrides(c: &Connection) -> Result<Vec<TransitionRow>> {
    let mut stmt = c.prepare(&format!(
        "{SELECT} WHERE t.outcome = 'override' ORDER BY t.at, t.id"
    ))?;
    let rows = stmt
        .query_map([], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}
