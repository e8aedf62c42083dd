//! Read-only queries of `orch fsck`: SQLite's own consistency checks and the history facts the
//! audit compares with the tasks table. Nothing here is on the hot path.

use anyhow::Result;
use rusqlite::Connection;

use crate::domain::ids::TaskId;
use crate::domain::stage::Stage;

/// Lines of `PRAGMA integrity_check` other than `ok`.
pub fn integrity(c: &Connection) -> Result<Vec<String>> {
    let mut stmt = c.prepare("PRAGMA integrity_check")?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().filter(|l| l != "ok").collect())
}

/// One line per row that `PRAGMA foreign_key_check` reports.
pub fn foreign_keys(c: &Connection) -> Result<Vec<String>> {
    let mut stmt = c.prepare("PRAGMA foreign_key_check")?;
    let rows = stmt
        .query_map([], |r| {
            Ok(format!(
                "{} row {} refers to a missing {} row",
                r.get::<_, String>(0)?,
                r.get::<_, Option<i64>>(1)?
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "?".into()),
                r.get::<_, String>(2)?
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The `to` stage of the newest history row that moved `task` (advanced, rolled back, an
/// override, cancelled), if any.
pub fn last_move_to(c: &Connection, task: TaskId) -> Result<Option<Stage>> {
    use rusqlite::OptionalExtension;
    Ok(c.query_row(
        "SELECT to_stage FROM transitions WHERE task_id = ?1 \
         AND outcome IN ('advanced', 'rolled-back', 'override', 'cancelled') \
         ORDER BY id DESC LIMIT 1",
        [task.0],
        |r| super::parse_col(r, 0),
    )
    .optional()?)
}
