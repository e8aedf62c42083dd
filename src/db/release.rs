//! The release steps of design §7 (`release_steps`), the coverage baseline and its one-way
//! ratchet, and the merge lease as a task holds it across jobs.

use anyhow::Result;
use rusqlite::{Connection, OptionalExtension, params};

use crate::domain::ids::{JobId, TaskId};
use crate::domain::liveness::ProcIdentity;
use crate::domain::release::{Step, StepStatus};
use crate::domain::stage::Stage;
use crate::domain::time::Ts;

/// One recorded step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    pub visit: i64,
    pub stage: String,
    pub step: Step,
    pub status: StepStatus,
    pub sha: Option<String>,
    pub value: Option<f64>,
    pub detail: String,
    pub job: Option<JobId>,
    pub at: Ts,
}

/// The visit of `stage` the task is in: the id of the newest history row that entered it.
pub fn visit_of(c: &Connection, task: TaskId, stage: Stage) -> Result<Option<i64>> {
    Ok(c.query_row(
        "SELECT id FROM transitions WHERE task_id = ?1 AND to_stage = ?2 AND from_stage <> ?2 \
         ORDER BY id DESC LIMIT 1",
        params![task.0, stage.as_str()],
        |r| r.get(0),
    )
    .optional()?)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Option<StepRow>> {
    let step: String = r.get(2)?;
    let status: String = r.get(3)?;
    let (Some(step), Some(status)) = (Step::parse(&step), StepStatus::parse(&status)) else {
        return Ok(None);
    };
    Ok(Some(StepRow {
        visit: r.get(0)?,
        stage: r.get(1)?,
        step,
        status,
        sha: r.get(4)?,
        value: r.get(5)?,
        detail: r.get(6)?,
        job: r.get::<_, Option<i64>>(7)?.map(JobId),
        at: r.get(8)?,
    }))
}

const COLS: &str = "visit, stage, step, status, sha, value, detail, job_id, at";

/// The steps recorded for one visit, in the order they were recorded.
pub fn steps(c: &Connection, task: TaskId, visit: i64) -> Result<Vec<StepRow>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {COLS} FROM release_steps WHERE task_id = ? AND visit = ? ORDER BY id"
    ))?;
    let rows = stmt
        .query_map(params![task.0, visit], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().flatten().collect())
}

/// Every step of a task, oldest first (`orch task show`, `orch fsck`).
pub fn all_of_task(c: &Connection, task: TaskId) -> Result<Vec<StepRow>> {
    let mut stmt = c.prepare_cached(&format!(
        "SELECT {COLS} FROM release_steps WHERE task_id = ? ORDER BY id"
    ))?;
    let rows = stmt
        .query_map(params![task.0], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().flatten().collect())
}

/// What one step says, to record.
#[derive(Debug, Clone)]
pub struct NewStep<'a> {
    pub task: TaskId,
    pub visit: i64,
    pub stage: Stage,
    pub step: Step,
    pub status: StepStatus,
    pub sha: Option<&'a str>,
    pub value: Option<f64>,
    pub detail: &'a str,
    pub job: Option<JobId>,
    pub at: Ts,
}

/// Record a step of a visit, replacing what an earlier run of the same step in the same visit
/// recorded (a re-run after a crash). Never used for the deploy hook's outcome, which is
/// fenced on its `initiated` row ([`finish_initiated`]).
pub fn record(c: &Connection, s: &NewStep<'_>) -> Result<()> {
    c.execute(
        "INSERT INTO release_steps (task_id, visit, stage, step, status, sha, value, detail, \
         job_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
         ON CONFLICT (task_id, visit, step) DO UPDATE SET status = excluded.status, \
         sha = excluded.sha, value = excluded.value, detail = excluded.detail, \
         job_id = excluded.job_id, at = excluded.at",
        params![
            s.task.0,
            s.visit,
            s.stage.as_str(),
            s.step.as_str(),
            s.status.as_str(),
            s.sha,
            s.value,
            crate::db::scrub(s.detail),
            s.job.map(|j| j.0),
            s.at
        ],
    )?;
    Ok(())
}

/// Insert the `initiated` marker of a step that must never run twice; false when the visit
/// already has a row for it (started before, finished or not).
pub fn initiate(c: &Connection, s: &NewStep<'_>) -> Result<bool> {
    let n = c.execute(
        "INSERT OR IGNORE INTO release_steps (task_id, visit, stage, step, status, sha, value, \
         detail, job_id, at) VALUES (?1, ?2, ?3, ?4, 'initiated', ?5, NULL, ?6, ?7, ?8)",
        params![
            s.task.0,
            s.visit,
            s.stage.as_str(),
            s.step.as_str(),
            s.sha,
            crate::db::scrub(s.detail),
            s.job.map(|j| j.0),
            s.at
        ],
    )?;
    Ok(n == 1)
}

/// Record the outcome of an `initiated` step (fenced on that status); false when the row is
/// not `initiated` any more.
#[allow(clippy::too_many_arguments)]
pub fn finish_initiated(
    c: &Connection,
    task: TaskId,
    visit: i64,
    step: Step,
    status: StepStatus,
    value: Option<f64>,
    detail: &str,
    at: Ts,
) -> Result<bool> {
    let n = c.execute(
        "UPDATE release_steps SET status = ?1, value = ?2, detail = ?3, at = ?4 \
         WHERE task_id = ?5 AND visit = ?6 AND step = ?7 AND status = 'initiated'",
        params![
            status.as_str(),
            value,
            crate::db::scrub(detail),
            at,
            task.0,
            visit,
            step.as_str()
        ],
    )?;
    Ok(n == 1)
}

/// The proven merge of a task, if any (any visit).
pub fn proof(c: &Connection, task: TaskId) -> Result<Option<StepRow>> {
    Ok(c.query_row(
        &format!(
            "SELECT {COLS} FROM release_steps WHERE task_id = ? AND step = 'merge' \
             AND status = 'pass' ORDER BY id DESC LIMIT 1"
        ),
        [task.0],
        row,
    )
    .optional()?
    .flatten())
}

/// The coverage baseline of a repo.
pub fn coverage_baseline(c: &Connection, repo: &str) -> Result<Option<f64>> {
    Ok(c.query_row(
        "SELECT percent FROM coverage_baseline WHERE repo = ?",
        [repo],
        |r| r.get(0),
    )
    .optional()?)
}

/// Move the baseline up to `percent` in one compare-and-swap; never down. True when it moved.
pub fn ratchet_coverage(c: &Connection, repo: &str, percent: f64, now: Ts) -> Result<bool> {
    let n = c.execute(
        "INSERT INTO coverage_baseline (repo, percent, updated_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (repo) DO UPDATE SET percent = excluded.percent, \
         updated_at = excluded.updated_at WHERE coverage_baseline.percent < excluded.percent",
        params![repo, percent, now],
    )?;
    Ok(n == 1)
}

/// Take a free merge lease for `task`; false when a row exists (the caller judges it).
pub fn merge_insert(
    c: &Connection,
    repo: &str,
    task: TaskId,
    owner: &ProcIdentity,
    now: Ts,
) -> Result<bool> {
    let n = c.execute(
        "INSERT OR IGNORE INTO merge_lease (repo, task_id, owner_kind, pid, start_time, boot_id, \
         acquired_at) VALUES (?1, ?2, 'releaser', ?3, ?4, ?5, ?6)",
        params![
            repo,
            task.0,
            owner.pid,
            owner.start_time as i64,
            owner.boot_id,
            now
        ],
    )?;
    Ok(n == 1)
}

/// Hand the merge lease row that was judged (fenced on its task and owner) to `task`/`owner`.
pub fn merge_take_over(
    c: &Connection,
    repo: &str,
    from_task: Option<TaskId>,
    from_owner: &ProcIdentity,
    task: TaskId,
    owner: &ProcIdentity,
    now: Ts,
) -> Result<bool> {
    let n = c.execute(
        "UPDATE merge_lease SET task_id = ?1, owner_kind = 'releaser', pid = ?2, \
         start_time = ?3, boot_id = ?4, acquired_at = ?5, expires_at = NULL \
         WHERE repo = ?6 AND task_id IS ?7 AND pid = ?8 AND start_time = ?9 AND boot_id = ?10",
        params![
            task.0,
            owner.pid,
            owner.start_time as i64,
            owner.boot_id,
            now,
            repo,
            from_task.map(|t| t.0),
            from_owner.pid,
            from_owner.start_time as i64,
            from_owner.boot_id
        ],
    )?;
    Ok(n == 1)
}

/// Release the merge lease `task` holds, if it holds one (a rollback, `done`, a cancel).
pub fn merge_release_of_task(c: &Connection, task: TaskId) -> Result<bool> {
    Ok(c.execute("DELETE FROM merge_lease WHERE task_id = ?", [task.0])? > 0)
}

/// The newest passed row of `step` of a task in any visit (the merge reads the merge gate's
/// validated head and the coverage figure of the `deploy-staging` visit before it).
pub fn last_pass(c: &Connection, task: TaskId, step: Step) -> Result<Option<StepRow>> {
    Ok(c.query_row(
        &format!(
            "SELECT {COLS} FROM release_steps WHERE task_id = ? AND step = ? AND status = 'pass' \
             ORDER BY id DESC LIMIT 1"
        ),
        params![task.0, step.as_str()],
        row,
    )
    .optional()?
    .flatten())
}

/// The `done` tasks of a repo that went through the release steps (a task finished before the
/// repo opted in has none): `(task, work item)`.
pub fn done_of_repo(c: &Connection, repo: &str) -> Result<Vec<(TaskId, String)>> {
    let mut stmt = c.prepare_cached(
        "SELECT t.id, t.work_item FROM tasks t WHERE t.repo = ? AND t.stage = 'done' \
         AND EXISTS (SELECT 1 FROM release_steps s WHERE s.task_id = t.id)",
    )?;
    let rows = stmt
        .query_map([repo], |r| Ok((TaskId(r.get(0)?), r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}
