//! Queries on `jobs`: enqueue, supersede, cancel, and the live/finished views `orch queue` needs.

use anyhow::Result;
use rusqlite::{Connection, Row, params};

use crate::domain::ids::{JobId, TaskId};
use crate::domain::liveness::ProcIdentity;
use crate::domain::stage::{JobStatus, Role, Stage};
use crate::domain::time::Ts;

#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: JobId,
    pub task_id: TaskId,
    pub role: Role,
    pub stage: Stage,
    pub repo: String,
    pub status: JobStatus,
    pub attempts: u32,
    pub max_attempts: u32,
    pub available_at: Ts,
    pub created_at: Ts,
    pub started_at: Option<Ts>,
    pub finished_at: Option<Ts>,
    pub supervisor_pid: Option<i64>,
    pub supervisor_start: Option<i64>,
    pub supervisor_boot: Option<String>,
    pub agent_pgid: Option<i64>,
    pub agent_start: Option<i64>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub prompt: String,
}

impl JobRow {
    /// The recorded supervisor, when one was recorded.
    pub fn supervisor(&self) -> Option<ProcIdentity> {
        Some(ProcIdentity {
            pid: self.supervisor_pid? as i32,
            start_time: self.supervisor_start? as u64,
            boot_id: self.supervisor_boot.clone().unwrap_or_default(),
        })
    }

    /// The leader of the recorded child group (the agent, a suite, the CI command).
    pub fn child_group(&self) -> Option<ProcIdentity> {
        Some(ProcIdentity {
            pid: self.agent_pgid? as i32,
            start_time: self.agent_start? as u64,
            boot_id: self.supervisor_boot.clone().unwrap_or_default(),
        })
    }
}

const COLS: &str = "id, task_id, role, stage, repo, status, attempts, max_attempts, available_at, \
    created_at, started_at, finished_at, supervisor_pid, supervisor_start, supervisor_boot, \
    agent_pgid, agent_start, exit_code, error, prompt";

fn from_row(r: &Row<'_>) -> rusqlite::Result<JobRow> {
    Ok(JobRow {
        id: JobId(r.get(0)?),
        task_id: TaskId(r.get(1)?),
        role: super::parse_col(r, 2)?,
        stage: super::parse_col(r, 3)?,
        repo: r.get(4)?,
        status: super::parse_col(r, 5)?,
        attempts: r.get(6)?,
        max_attempts: r.get(7)?,
        available_at: r.get(8)?,
        created_at: r.get(9)?,
        started_at: r.get(10)?,
        finished_at: r.get(11)?,
        supervisor_pid: r.get(12)?,
        supervisor_start: r.get(13)?,
        supervisor_boot: r.get(14)?,
        agent_pgid: r.get(15)?,
        agent_start: r.get(16)?,
        exit_code: r.get(17)?,
        error: r.get(18)?,
        prompt: r.get(19)?,
    })
}

pub struct NewJob<'a> {
    pub task_id: TaskId,
    pub role: Role,
    pub stage: Stage,
    pub repo: &'a str,
    pub available_at: Ts,
    pub max_attempts: u32,
    pub prompt: &'a str,
}

pub fn insert(c: &Connection, j: &NewJob<'_>, now: Ts) -> Result<JobId> {
    c.execute(
        "INSERT INTO jobs (task_id, role, stage, repo, status, max_attempts, available_at, \
         created_at, prompt) VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?6, ?7, ?8)",
        params![
            j.task_id.0,
            j.role.as_str(),
            j.stage.as_str(),
            j.repo,
            j.max_attempts,
            j.available_at,
            now,
            j.prompt
        ],
    )?;
    Ok(JobId(c.last_insert_rowid()))
}

/// Leaving a stage: its queued jobs are cancelled as `superseded` (design §4.1). A running job
/// finishes; its own advance is then a compare-and-swap no-op.
pub fn supersede_queued(c: &Connection, task: TaskId, stage: Stage, now: Ts) -> Result<usize> {
    Ok(c.execute(
        "UPDATE jobs SET status = 'cancelled', error = 'superseded', finished_at = ?1 \
         WHERE task_id = ?2 AND stage = ?3 AND status = 'queued'",
        params![now, task.0, stage.as_str()],
    )?)
}

/// Queued jobs whose task is finished (`done` or `cancelled`): `(job, task)`. Such a job can
/// never run; the tick cancels it. The post-deploy watch of a `done` task is not one of them.
/// The redundant `IN` term lets SQLite use the partial index `jobs_live` (it does not infer it
/// from `status = 'queued'`): without it every tick scanned the whole history of jobs.
pub const QUEUED_OF_FINISHED_SQL: &str = "SELECT j.id, j.task_id FROM jobs j \
     JOIN tasks t ON t.id = j.task_id \
     WHERE j.status IN ('queued', 'running') AND j.status = 'queued' \
     AND t.stage IN ('done', 'cancelled') \
     AND NOT (j.role = 'monitor' AND t.stage = 'done')";

pub fn queued_of_finished(c: &Connection) -> Result<Vec<(JobId, TaskId)>> {
    let mut stmt = c.prepare_cached(QUEUED_OF_FINISHED_SQL)?;
    let rows = stmt
        .query_map([], |r| Ok((JobId(r.get(0)?), TaskId(r.get(1)?))))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Cancel one queued job as superseded (its task left the stage, or finished).
pub fn supersede(c: &Connection, id: JobId, now: Ts) -> Result<bool> {
    Ok(c.execute(
        "UPDATE jobs SET status = 'cancelled', error = 'superseded', finished_at = ?1 \
         WHERE id = ?2 AND status = 'queued'",
        params![now, id.0],
    )? == 1)
}

/// Cancel every live job of a task; returns the running ones as they were (to be killed).
pub fn cancel_live(c: &Connection, task: TaskId, why: &str, now: Ts) -> Result<Vec<JobRow>> {
    let running = of_task(c, task)?
        .into_iter()
        .filter(|j| j.status == JobStatus::Running)
        .collect();
    c.execute(
        "UPDATE jobs SET status = 'cancelled', error = ?1, finished_at = ?2 \
         WHERE task_id = ?3 AND status IN ('queued', 'running')",
        params![super::scrub(why), now, task.0],
    )?;
    Ok(running)
}

pub fn of_task(c: &Connection, task: TaskId) -> Result<Vec<JobRow>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {COLS} FROM jobs WHERE task_id = ? ORDER BY id"
    ))?;
    let rows = stmt
        .query_map([task.0], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub const LIVE_JOBS_SQL: &str =
    "SELECT id FROM jobs WHERE status IN ('queued', 'running') ORDER BY id";

/// Every queued or running job, FIFO by id (served by the partial index `jobs_live`). The
/// prompts are left out (`prompt` is empty): the queue, the claim and the tick never read
/// them, and they are most of a live row's bytes; `get` and `of_task` carry them.
pub fn live(c: &Connection) -> Result<Vec<JobRow>> {
    let cols = COLS.replace(", prompt", ", '' AS prompt");
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {cols} FROM jobs WHERE status IN ('queued', 'running') ORDER BY id"
    ))?;
    let rows = stmt
        .query_map([], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub const RUNNING_COUNT_SQL: &str =
    "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running') AND status = 'running'";

/// How many jobs are running, from the partial index `jobs_live`: SQLite uses a partial index
/// only when the query repeats its condition (`status = 'running'` alone scans every job ever
/// run, 27 ms at 100,000).
pub fn running_count(c: &Connection) -> Result<u32> {
    let n: i64 = c
        .prepare_cached(RUNNING_COUNT_SQL)?
        .query_row([], |r| r.get(0))?;
    Ok(n as u32)
}

pub const FINISHED_SINCE_SQL: &str =
    "SELECT status, count(*) FROM jobs WHERE finished_at >= ? GROUP BY status";

/// Counts of jobs finished since `since`, by status (served by `jobs_finished`).
pub fn finished_since(c: &Connection, since: Ts) -> Result<Vec<(JobStatus, u64)>> {
    let mut stmt = c.prepare_cached(FINISHED_SINCE_SQL)?;
    let rows = stmt
        .query_map([since], |r| {
            Ok((
                r.get::<_, String>(0)?
                    .parse()
                    .map_err(|e| super::conv_err(0, e))?,
                r.get::<_, i64>(1)? as u64,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn get(c: &Connection, id: JobId) -> Result<Option<JobRow>> {
    use rusqlite::OptionalExtension;
    Ok(c.query_row(
        &format!("SELECT {COLS} FROM jobs WHERE id = ?"),
        [id.0],
        from_row,
    )
    .optional()?)
}

/// Claim one queued job: `queued → running`, attempts + 1. Returns the new attempt number, or
/// `None` when another claimer got it first (the row guard of design §4.2).
pub fn claim(c: &Connection, id: JobId, now: Ts) -> Result<Option<u32>> {
    use rusqlite::OptionalExtension;
    Ok(c
        .query_row(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, started_at = ?1, \
             finished_at = NULL, exit_code = NULL, error = NULL, supervisor_pid = NULL, \
             supervisor_start = NULL, supervisor_boot = NULL, agent_pgid = NULL, agent_start = NULL \
             WHERE id = ?2 AND status = 'queued' RETURNING attempts",
            params![now, id.0],
            |r| r.get(0),
        )
        .optional()?)
}

/// Mark a freshly enqueued job as an infrastructure retry: the marker goes into its prompt
/// (the runners count these for their budget) and it waits until `available_at`.
pub fn mark_retry(c: &Connection, id: JobId, marker: &str, available_at: Ts) -> Result<()> {
    c.execute(
        "UPDATE jobs SET prompt = prompt || ?1, available_at = ?2 WHERE id = ?3",
        params![format!("\n\n{marker}\n"), available_at, id.0],
    )?;
    Ok(())
}

/// Re-run a failed job by hand: `failed → running` with one more attempt allowed.
pub fn rerun_failed(c: &Connection, id: JobId, now: Ts) -> Result<Option<u32>> {
    use rusqlite::OptionalExtension;
    Ok(c.query_row(
        "UPDATE jobs SET status = 'running', attempts = attempts + 1, \
             max_attempts = max(max_attempts, attempts + 1), started_at = ?1, finished_at = NULL, \
             exit_code = NULL, error = NULL, supervisor_pid = NULL, supervisor_start = NULL, \
             supervisor_boot = NULL, agent_pgid = NULL, agent_start = NULL \
             WHERE id = ?2 AND status = 'failed' RETURNING attempts",
        params![now, id.0],
        |r| r.get(0),
    )
    .optional()?)
}

/// Record the supervisor of an attempt (fenced on the attempt).
pub fn set_supervisor(
    c: &Connection,
    id: JobId,
    attempt: u32,
    pid: i64,
    start: i64,
    boot: &str,
) -> Result<bool> {
    Ok(c.execute(
        "UPDATE jobs SET supervisor_pid = ?1, supervisor_start = ?2, supervisor_boot = ?3 \
         WHERE id = ?4 AND status = 'running' AND attempts = ?5",
        params![pid, start, boot, id.0, attempt],
    )? == 1)
}

/// Record the agent's process group of an attempt (fenced).
pub fn set_agent(c: &Connection, id: JobId, attempt: u32, pgid: i64, start: i64) -> Result<bool> {
    Ok(c.execute(
        "UPDATE jobs SET agent_pgid = ?1, agent_start = ?2 \
         WHERE id = ?3 AND status = 'running' AND attempts = ?4",
        params![pgid, start, id.0, attempt],
    )? == 1)
}

/// Record the exit code of an attempt (fenced), before anything else is done about it, so a
/// reaper that finds the supervisor dead knows how the run ended.
pub fn set_exit(
    c: &Connection,
    id: JobId,
    attempt: u32,
    code: Option<i64>,
    error: Option<&str>,
) -> Result<bool> {
    Ok(c.execute(
        "UPDATE jobs SET exit_code = ?1, error = ?2 WHERE id = ?3 AND status = 'running' AND attempts = ?4",
        params![code, error.map(super::scrub), id.0, attempt],
    )? == 1)
}

/// Finish an attempt as `done` or `failed` (fenced: a stale supervisor's outcome is dropped).
pub fn finish(
    c: &Connection,
    id: JobId,
    attempt: u32,
    status: JobStatus,
    error: Option<&str>,
    now: Ts,
) -> Result<bool> {
    Ok(c.execute(
        "UPDATE jobs SET status = ?1, error = COALESCE(?2, error), finished_at = ?3 \
         WHERE id = ?4 AND status = 'running' AND attempts = ?5",
        params![status.as_str(), error.map(super::scrub), now, id.0, attempt],
    )? == 1)
}

/// Put an attempt back in the queue (fenced). `refund` gives the attempt back (usage limits and
/// deferrals do not spend one).
pub fn requeue(
    c: &Connection,
    id: JobId,
    attempt: u32,
    available_at: Ts,
    error: &str,
    refund: bool,
) -> Result<bool> {
    Ok(c.execute(
        "UPDATE jobs SET status = 'queued', available_at = ?1, error = ?2, \
         attempts = attempts - ?3, supervisor_pid = NULL, supervisor_start = NULL, \
         supervisor_boot = NULL, agent_pgid = NULL, agent_start = NULL \
         WHERE id = ?4 AND status = 'running' AND attempts = ?5",
        params![
            available_at,
            super::scrub(error),
            refund as i64,
            id.0,
            attempt
        ],
    )? == 1)
}

/// The newest job of a task for a stage.
pub fn last_for_stage(c: &Connection, task: TaskId, stage: Stage) -> Result<Option<JobRow>> {
    use rusqlite::OptionalExtension;
    Ok(c.query_row(
        &format!(
            "SELECT {COLS} FROM jobs WHERE task_id = ?1 AND stage = ?2 ORDER BY id DESC LIMIT 1"
        ),
        params![task.0, stage.as_str()],
        from_row,
    )
    .optional()?)
}

/// One `agent_runs` row; usage fields are `None` when the agent did not report them.
pub struct AgentRun<'a> {
    pub job_id: JobId,
    pub task_id: TaskId,
    pub role: Role,
    pub model: Option<&'a str>,
    pub effort: Option<&'a str>,
    pub started_at: Ts,
    pub finished_at: Ts,
    pub duration_ms: i64,
    pub exit_code: Option<i64>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    pub session_id: Option<&'a str>,
    /// How the run ended when it did not succeed (`domain::agent::RunClass::fault`).
    pub fault: Option<&'a str>,
}

pub fn insert_agent_run(c: &Connection, r: &AgentRun<'_>) -> Result<()> {
    c.execute(
        "INSERT INTO agent_runs (job_id, task_id, role, model, effort, started_at, finished_at, \
         duration_ms, exit_code, input_tokens, output_tokens, cache_read_tokens, \
         cache_write_tokens, cost_usd, session_id, fault) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        params![
            r.job_id.0,
            r.task_id.0,
            r.role.as_str(),
            r.model,
            r.effort,
            r.started_at,
            r.finished_at,
            r.duration_ms,
            r.exit_code,
            r.input_tokens,
            r.output_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens,
            r.cost_usd,
            r.session_id,
            r.fault
        ],
    )?;
    Ok(())
}

/// How many runs of job `id` ended in a provider outage.
pub fn outages_of(c: &Connection, id: JobId) -> Result<u32> {
    Ok(c.query_row(
        "SELECT count(*) FROM agent_runs WHERE job_id = ?1 AND fault = 'outage'",
        [id.0],
        |r| r.get(0),
    )?)
}

/// The faults of the newest `n` agent runs of any job, newest first (`None`: a success).
pub fn last_faults(c: &Connection, n: u32) -> Result<Vec<Option<String>>> {
    let mut stmt = c.prepare_cached("SELECT fault FROM agent_runs ORDER BY id DESC LIMIT ?1")?;
    let rows = stmt
        .query_map([n], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The session id of the newest run of a job (to resume it on retry). It goes into the agent's
/// argv, so a stored one that is not a valid id (a row written before ids were checked) is
/// dropped with a warning, never returned.
pub fn last_session(c: &Connection, id: JobId) -> Result<Option<String>> {
    use rusqlite::OptionalExtension;
    let found: Option<String> = c
        .query_row(
            "SELECT session_id FROM agent_runs WHERE job_id = ? AND session_id IS NOT NULL \
             ORDER BY id DESC LIMIT 1",
            [id.0],
            |r| r.get(0),
        )
        .optional()?;
    Ok(found.filter(|s| {
        let ok = crate::domain::agent::valid_session_id(s);
        if !ok {
            tracing::warn!(
                "not resuming the stored session id `{}` of job {}: not a valid session id",
                crate::domain::ids::printable(s),
                id.0
            );
        }
        ok
    }))
}

/// A running job's progress note (`orch why` shows it: "merge retry 2/5: …").
pub fn set_note(c: &Connection, id: JobId, note: &str) -> Result<()> {
    c.execute(
        "UPDATE jobs SET error = ?1 WHERE id = ?2 AND status = 'running'",
        params![super::scrub(note), id.0],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    #[test]
    fn a_stored_session_id_that_is_not_valid_is_never_resumed() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("orch.db")).unwrap();
        let c = db.conn();
        c.execute_batch(
            "INSERT INTO tasks (id, work_item, base_work_item, repo, title, stage, branch, \
             stage_entered_at, created_at, updated_at) \
             VALUES (1, 'SHOP-1', 'SHOP-1', 'shop', 't', 'analysis', 'feature/SHOP-1-t', 0, 0, 0); \
             INSERT INTO jobs (id, task_id, role, stage, repo, status, available_at, created_at) \
             VALUES (1, 1, 'analyst', 'analysis', 'shop', 'running', 0, 0);",
        )
        .unwrap();
        let run = |sid: Option<&str>| {
            c.execute(
                "INSERT INTO agent_runs (job_id, task_id, role, started_at, session_id) \
                 VALUES (1, 1, 'analyst', 0, ?1)",
                [sid],
            )
            .unwrap()
        };
        assert_eq!(last_session(c, JobId(1)).unwrap(), None);
        run(Some("s-1"));
        run(None);
        assert_eq!(last_session(c, JobId(1)).unwrap().as_deref(), Some("s-1"));
        // A row written before ids were checked.
        run(Some("x; touch /tmp/orch-pwned"));
        assert_eq!(last_session(c, JobId(1)).unwrap(), None);
    }
}
