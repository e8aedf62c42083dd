//! Read-only aggregates behind `GET /metrics` of `orch serve`: tasks per stage with the oldest
//! stage entry, live job counts, running jobs with their processes, and agent cost totals.
//!
//! It only counts; turning counts into ages and the JSON document is `serve::metrics`'s job. The
//! stage and live-job queries read the partial indexes, so they follow the number of *active*
//! tasks and jobs; the cost totals are sums over `agent_runs`, one row per agent run.

use anyhow::Result;
use rusqlite::{Connection, params};

use crate::domain::stage::{Role, Stage};
use crate::domain::time::Ts;

/// Active tasks in one stage and when the longest-waiting of them entered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageCount {
    pub stage: Stage,
    pub count: u64,
    pub oldest_entered_at: Ts,
}

pub const STAGES_SQL: &str = "SELECT stage, count(*), min(stage_entered_at) FROM tasks \
     WHERE stage NOT IN ('done', 'cancelled') GROUP BY stage ORDER BY stage";

/// Active (not `done`, not `cancelled`) tasks grouped by stage.
pub fn stages(c: &Connection) -> Result<Vec<StageCount>> {
    let mut stmt = c.prepare_cached(STAGES_SQL)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(StageCount {
                stage: super::parse_col(r, 0)?,
                count: r.get::<_, i64>(1)? as u64,
                oldest_entered_at: r.get(2)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Queued and running jobs (served by `jobs_live`) and jobs finished since `since` (served by
/// `jobs_finished`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub queued: u64,
    pub running: u64,
    pub done_since: u64,
    pub failed_since: u64,
}

pub const LIVE_COUNTS_SQL: &str =
    "SELECT status, count(*) FROM jobs WHERE status IN ('queued', 'running') GROUP BY status";

pub fn job_counts(c: &Connection, since: Ts) -> Result<JobCounts> {
    let mut out = JobCounts::default();
    let mut stmt = c.prepare_cached(LIVE_COUNTS_SQL)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let n = r.get::<_, i64>(1)? as u64;
        match r.get_ref(0)?.as_str()? {
            "queued" => out.queued = n,
            "running" => out.running = n,
            _ => {}
        }
    }
    for (status, n) in super::jobs::finished_since(c, since)? {
        match status {
            crate::domain::stage::JobStatus::Done => out.done_since = n,
            crate::domain::stage::JobStatus::Failed => out.failed_since = n,
            crate::domain::stage::JobStatus::Queued
            | crate::domain::stage::JobStatus::Running
            | crate::domain::stage::JobStatus::Cancelled => {}
        }
    }
    Ok(out)
}

/// A running job with the processes that run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningAgent {
    pub job_id: i64,
    pub work_item: String,
    pub role: Role,
    /// The agent's process group leader, once the supervisor has started it.
    pub agent_pid: Option<i64>,
    pub supervisor_pid: Option<i64>,
    pub started_at: Option<Ts>,
}

// The `IN` term repeats the partial index `jobs_live` word for word: SQLite uses a partial index
// only when the query names its condition.
pub const RUNNING_SQL: &str = "SELECT j.id, t.work_item, j.role, j.agent_pgid, j.supervisor_pid, \
     j.started_at FROM jobs j JOIN tasks t ON t.id = j.task_id \
     WHERE j.status IN ('queued', 'running') AND j.status = 'running' ORDER BY j.id";

pub fn running(c: &Connection) -> Result<Vec<RunningAgent>> {
    let mut stmt = c.prepare_cached(RUNNING_SQL)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(RunningAgent {
                job_id: r.get(0)?,
                work_item: r.get(1)?,
                role: super::parse_col(r, 2)?,
                agent_pid: r.get(3)?,
                supervisor_pid: r.get(4)?,
                started_at: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Cost and token sums of agent runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CostTotals {
    pub total_usd: f64,
    pub since_usd: f64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// Totals over every agent run, and the cost of the runs started since `since`.
pub fn cost(c: &Connection, since: Ts) -> Result<CostTotals> {
    let mut stmt = c.prepare_cached(
        "SELECT coalesce(sum(cost_usd), 0.0), \
                coalesce(sum(CASE WHEN started_at >= ?1 THEN cost_usd END), 0.0), \
                coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) \
         FROM agent_runs",
    )?;
    Ok(stmt.query_row(params![since], |r| {
        Ok(CostTotals {
            total_usd: r.get(0)?,
            since_usd: r.get(1)?,
            tokens_in: r.get::<_, i64>(2)?.max(0) as u64,
            tokens_out: r.get::<_, i64>(3)?.max(0) as u64,
        })
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    fn db() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("orch.db")).unwrap();
        (dir, db)
    }

    fn task(db: &Db, id: i64, stage: &str, entered: Ts) {
        db.conn()
            .execute(
                "INSERT INTO tasks (id, work_item, base_work_item, repo, title, stage, branch, \
                 stage_entered_at, created_at, updated_at) \
                 VALUES (?1, ?2, ?2, 'shop', 't', ?3, 'b', ?4, 0, 0)",
                params![id, format!("SHOP-{id}"), stage, entered],
            )
            .unwrap();
    }

    fn job(db: &Db, id: i64, task: i64, status: &str, finished: Option<Ts>) {
        db.conn()
            .execute(
                "INSERT INTO jobs (id, task_id, role, stage, repo, status, available_at, \
                 created_at, started_at, finished_at, supervisor_pid, agent_pgid) \
                 VALUES (?1, ?2, 'developer', 'development', 'shop', ?3, 0, 0, 100, ?4, 41, 42)",
                params![id, task, status, finished],
            )
            .unwrap();
    }

    #[test]
    fn stages_count_only_active_tasks_with_the_oldest_entry() {
        let (_d, db) = db();
        task(&db, 1, "development", 500);
        task(&db, 2, "development", 300);
        task(&db, 3, "analysis", 900);
        task(&db, 4, "done", 10);
        task(&db, 5, "cancelled", 10);
        let s = stages(db.conn()).unwrap();
        assert_eq!(
            s,
            vec![
                StageCount {
                    stage: Stage::Analysis,
                    count: 1,
                    oldest_entered_at: 900
                },
                StageCount {
                    stage: Stage::Development,
                    count: 2,
                    oldest_entered_at: 300
                },
            ]
        );
    }

    #[test]
    fn job_counts_split_live_and_the_window() {
        let (_d, db) = db();
        task(&db, 1, "development", 0);
        job(&db, 1, 1, "queued", None);
        job(&db, 2, 1, "queued", None);
        job(&db, 3, 1, "running", None);
        job(&db, 4, 1, "done", Some(1_000));
        job(&db, 5, 1, "done", Some(10));
        job(&db, 6, 1, "failed", Some(2_000));
        job(&db, 7, 1, "cancelled", Some(2_000));
        let c = job_counts(db.conn(), 500).unwrap();
        assert_eq!(
            c,
            JobCounts {
                queued: 2,
                running: 1,
                done_since: 1,
                failed_since: 1
            }
        );
        let r = running(db.conn()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].job_id, 3);
        assert_eq!(r[0].work_item, "SHOP-1");
        assert_eq!(r[0].role, Role::Developer);
        assert_eq!(r[0].agent_pid, Some(42));
        assert_eq!(r[0].supervisor_pid, Some(41));
    }

    #[test]
    fn cost_sums_every_run_and_the_window() {
        let (_d, db) = db();
        assert_eq!(cost(db.conn(), 0).unwrap(), CostTotals::default());
        task(&db, 1, "development", 0);
        job(&db, 1, 1, "done", Some(5));
        for (started, usd, tin, tout) in [(100, 1.5, 10, 20), (2_000, 0.25, 1, 2)] {
            db.conn()
                .execute(
                    "INSERT INTO agent_runs (job_id, task_id, role, started_at, input_tokens, \
                     output_tokens, cost_usd) VALUES (1, 1, 'developer', ?1, ?2, ?3, ?4)",
                    params![started, tin, tout, usd],
                )
                .unwrap();
        }
        // A run that reported nothing counts as zero.
        db.conn()
            .execute(
                "INSERT INTO agent_runs (job_id, task_id, role, started_at) \
                 VALUES (1, 1, 'developer', 3000)",
                [],
            )
            .unwrap();
        let c = cost(db.conn(), 1_000).unwrap();
        assert_eq!(
            c,
            CostTotals {
                total_usd: 1.75,
                since_usd: 0.25,
                tokens_in: 11,
                tokens_out: 22
            }
        );
    }

    #[test]
    fn live_queries_use_indexes() {
        let (_d, db) = db();
        for sql in [STAGES_SQL, LIVE_COUNTS_SQL, RUNNING_SQL] {
            let plan: Vec<String> = db
                .conn()
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(
                plan.iter().any(|l| l.contains("INDEX")),
                "{sql} reads no index: {plan:?}"
            );
        }
    }
}
