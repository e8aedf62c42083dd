//! What the agents cost, and the jobs an operator must act on: sums over `agent_runs` per task,
//! per stage and per repo (`orch task show`, `orch queue`, `orch report cost`, the budget), and
//! the failed job that ends a task's stage (`orch retry`, the `failed` flag). Every query is
//! served by an index on the task (`agent_runs_task`, `jobs_task`) or reads one time window.

use std::collections::HashMap;

use anyhow::Result;
use rusqlite::{Connection, OptionalExtension, params};

use crate::domain::ids::{JobId, TaskId};
use crate::domain::stage::Stage;
use crate::domain::time::Ts;

/// Sums over some agent runs. Unknown numbers (a run whose agent printed no usage) count as 0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spent {
    pub runs: u64,
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache, and written to it.
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub wall_ms: u64,
}

const SUMS: &str = "count(*), coalesce(sum(a.cost_usd), 0.0), coalesce(sum(a.input_tokens), 0), \
    coalesce(sum(a.output_tokens), 0), coalesce(sum(a.cache_read_tokens), 0), \
    coalesce(sum(a.cache_write_tokens), 0), coalesce(sum(a.duration_ms), 0)";

fn spent_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Spent> {
    let n = |k: usize| -> rusqlite::Result<u64> { Ok(r.get::<_, i64>(i + k)?.max(0) as u64) };
    Ok(Spent {
        runs: n(0)?,
        cost_usd: r.get(i + 1)?,
        input_tokens: n(2)?,
        output_tokens: n(3)?,
        cache_read_tokens: n(4)?,
        cache_write_tokens: n(5)?,
        wall_ms: n(6)?,
    })
}

/// Everything a task's agents have spent.
pub fn of_task(c: &Connection, task: TaskId) -> Result<Spent> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {SUMS} FROM agent_runs a WHERE a.task_id = ?1"
    ))?;
    Ok(stmt.query_row([task.0], |r| spent_at(r, 0))?)
}

/// What the agents of every active task have cost, in one query (`orch queue`); a task
/// without runs is absent.
/// `CROSS JOIN` keeps the active tasks (`tasks_active`) as the outer loop: a plain join let
/// SQLite scan every run of the history instead.
pub const COST_OF_ACTIVE_SQL: &str = "SELECT a.task_id, coalesce(sum(a.cost_usd), 0.0) \
     FROM tasks t CROSS JOIN agent_runs a ON a.task_id = t.id \
     WHERE t.stage NOT IN ('done', 'cancelled') GROUP BY a.task_id";

pub fn cost_of_active(c: &Connection) -> Result<HashMap<TaskId, f64>> {
    let mut stmt = c.prepare_cached(COST_OF_ACTIVE_SQL)?;
    let rows = stmt
        .query_map([], |r| Ok((TaskId(r.get(0)?), r.get(1)?)))?
        .collect::<rusqlite::Result<HashMap<_, _>>>()?;
    Ok(rows)
}

/// A task's spending per stage (the stage of the job each run belonged to), in run order.
pub fn of_task_by_stage(c: &Connection, task: TaskId) -> Result<Vec<(Stage, Spent)>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT j.stage, {SUMS} FROM agent_runs a JOIN jobs j ON j.id = a.job_id \
         WHERE a.task_id = ?1 GROUP BY j.stage ORDER BY min(a.id)"
    ))?;
    let rows = stmt
        .query_map([task.0], |r| Ok((super::parse_col(r, 0)?, spent_at(r, 1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// One row of `orch report cost`: what one task's agents spent in one stage.
#[derive(Debug, Clone)]
pub struct TaskSpent {
    pub work_item: String,
    pub repo: String,
    /// The stage the runs worked (their job's), not the task's stage now.
    pub stage: Stage,
    pub spent: Spent,
}

/// Spending per task and stage of the runs started at or after `since`, optionally of one
/// repo: the most expensive task first, its stages in the order they ran.
pub fn report(c: &Connection, since: Ts, repo: Option<&str>) -> Result<Vec<TaskSpent>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT t.work_item, t.repo, j.stage, {SUMS} FROM agent_runs a \
         JOIN tasks t ON t.id = a.task_id JOIN jobs j ON j.id = a.job_id \
         WHERE a.started_at >= ?1 AND (?2 IS NULL OR t.repo = ?2) \
         GROUP BY a.task_id, j.stage \
         ORDER BY sum(sum(coalesce(a.cost_usd, 0))) OVER (PARTITION BY a.task_id) DESC, \
         t.id, min(a.id)"
    ))?;
    let rows = stmt
        .query_map(params![since, repo], |r| {
            Ok(TaskSpent {
                work_item: r.get(0)?,
                repo: r.get(1)?,
                stage: super::parse_col(r, 2)?,
                spent: spent_at(r, 3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The job that ended a task's current stage by failing for good: the task's newest job, when
/// it is `failed` and of the task's stage.
pub fn failed_job(c: &Connection, task: TaskId, stage: Stage) -> Result<Option<JobId>> {
    let mut stmt = c.prepare_cached(
        "SELECT id, status, stage FROM jobs WHERE task_id = ?1 ORDER BY id DESC LIMIT 1",
    )?;
    let row: Option<(i64, String, String)> = stmt
        .query_row([task.0], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    Ok(row
        .filter(|(_, status, s)| status == "failed" && s == stage.as_str())
        .map(|(id, _, _)| JobId(id)))
}

/// Put a failed job back in the queue with its attempts reset (`orch retry`). Fenced on
/// `failed`: `false` when the job was not failed any more.
pub fn requeue_failed(c: &Connection, id: JobId, now: Ts) -> Result<bool> {
    Ok(c.execute(
        "UPDATE jobs SET status = 'queued', attempts = 0, available_at = ?1, finished_at = NULL, \
         exit_code = NULL, supervisor_pid = NULL, supervisor_start = NULL, \
         supervisor_boot = NULL, agent_pgid = NULL, agent_start = NULL \
         WHERE id = ?2 AND status = 'failed'",
        params![now, id.0],
    )? == 1)
}

/// The kind of a journal row holding an alert no journal has shown yet.
pub const UNRELAYED: &str = "alert-unrelayed";

/// Alerts waiting to be repeated in the tick's log: `(row id, work item, text)`, oldest first.
pub fn unrelayed_alerts(c: &Connection) -> Result<Vec<(i64, Option<String>, String)>> {
    let mut stmt = c.prepare_cached(
        "SELECT l.id, t.work_item, l.detail FROM lessons l LEFT JOIN tasks t ON t.id = l.task_id \
         WHERE l.kind = 'alert-unrelayed' ORDER BY l.id LIMIT 100",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Mark an alert as shown (`alert` rows stay in the journal).
pub fn mark_relayed(c: &Connection, id: i64) -> Result<()> {
    c.execute(
        "UPDATE lessons SET kind = 'alert' WHERE id = ?1 AND kind = 'alert-unrelayed'",
        [id],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    #[test]
    fn sums_per_task_stage_and_window() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("orch.db")).unwrap();
        let c = db.conn();
        c.execute_batch(
            "INSERT INTO tasks (id, work_item, base_work_item, repo, title, stage, branch, \
               stage_entered_at, created_at, updated_at) VALUES \
               (1, 'SHOP-1', 'SHOP-1', 'shop', 't', 'review', 'b', 0, 0, 0), \
               (2, 'WEB-1', 'WEB-1', 'web', 't', 'analysis', 'b', 0, 0, 0); \
             INSERT INTO jobs (id, task_id, role, stage, repo, status, available_at, created_at) \
               VALUES (1, 1, 'analyst', 'analysis', 'shop', 'done', 0, 0), \
                      (2, 1, 'developer', 'development', 'shop', 'done', 0, 0), \
                      (3, 1, 'reviewer', 'review', 'shop', 'failed', 0, 0), \
                      (4, 2, 'analyst', 'analysis', 'web', 'done', 0, 0); \
             INSERT INTO agent_runs (job_id, task_id, role, started_at, duration_ms, \
               input_tokens, output_tokens, cost_usd) VALUES \
               (1, 1, 'analyst', 100, 1000, 10, 1, 0.5), \
               (2, 1, 'developer', 200, 2000, 20, 2, 1.5), \
               (2, 1, 'developer', 300, 3000, NULL, NULL, NULL), \
               (4, 2, 'analyst', 400, 4000, 40, 4, 4.0);",
        )
        .unwrap();
        let t = of_task(c, TaskId(1)).unwrap();
        assert_eq!(
            (t.runs, t.cost_usd, t.input_tokens, t.wall_ms),
            (3, 2.0, 30, 6000)
        );
        let s = of_task_by_stage(c, TaskId(1)).unwrap();
        assert_eq!(s[0].0, Stage::Analysis);
        assert_eq!(
            (s[1].0, s[1].1.runs, s[1].1.cost_usd),
            (Stage::Development, 2, 1.5)
        );
        let r = report(c, 0, None).unwrap();
        assert_eq!(r[0].work_item, "WEB-1", "most expensive first");
        assert_eq!(report(c, 250, Some("shop")).unwrap()[0].spent.runs, 1);
        assert!(report(c, 0, Some("nope")).unwrap().is_empty());
        assert_eq!(
            failed_job(c, TaskId(1), Stage::Review).unwrap(),
            Some(JobId(3))
        );
        assert_eq!(failed_job(c, TaskId(1), Stage::Testing).unwrap(), None);
        assert!(requeue_failed(c, JobId(3), 9).unwrap());
        assert!(!requeue_failed(c, JobId(3), 9).unwrap(), "fenced on failed");
        assert_eq!(failed_job(c, TaskId(1), Stage::Review).unwrap(), None);
    }
}
