//! Queries on the `outbox` (design §9) and the small tables the outbound clients keep beside it:
//! the tracker's states per project (a cache with a TTL), the reconciler's forge polls, and the
//! numbers a tracker comment quotes from `agent_runs`.
//!
//! A row is inserted in the transaction of the state change that causes it, keyed by an
//! idempotency key (a second insert with the same key does nothing). A drainer owns a row by a
//! fenced claim (`attempts` + 1 and `next_attempt_at` pushed past the send), and every later
//! write is fenced on that attempt, so two drainers never send one row at once and a slow one
//! cannot overwrite a newer outcome.

use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::domain::ids::TaskId;
use crate::domain::liveness::ProcIdentity;
use crate::domain::time::Ts;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRow {
    pub id: i64,
    pub kind: String,
    pub target: String,
    pub seq_key: Option<String>,
    pub payload: String,
    pub idem_key: String,
    pub status: String,
    pub attempts: u32,
    pub next_attempt_at: Ts,
    pub last_error: Option<String>,
    pub result: Option<String>,
    pub created_at: Ts,
    pub done_at: Option<Ts>,
}

const COLS: &str = "id, kind, target, seq_key, payload, idem_key, status, attempts, \
    next_attempt_at, last_error, result, created_at, done_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<OutboxRow> {
    Ok(OutboxRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        target: r.get(2)?,
        seq_key: r.get(3)?,
        payload: r.get(4)?,
        idem_key: r.get(5)?,
        status: r.get(6)?,
        attempts: r.get(7)?,
        next_attempt_at: r.get(8)?,
        last_error: r.get(9)?,
        result: r.get(10)?,
        created_at: r.get(11)?,
        done_at: r.get(12)?,
    })
}

/// Insert an effect; `false` when a row with `idem_key` already exists (nothing changes).
pub fn insert(
    c: &Connection,
    kind: &str,
    target: &str,
    payload_json: &str,
    idem_key: &str,
    now: Ts,
) -> Result<bool> {
    insert_ordered(c, kind, target, None, payload_json, idem_key, now)
}

/// Like `insert`, with a `seq_key`: rows sharing it are delivered in insertion order.
pub fn insert_ordered(
    c: &Connection,
    kind: &str,
    target: &str,
    seq_key: Option<&str>,
    payload_json: &str,
    idem_key: &str,
    now: Ts,
) -> Result<bool> {
    let n = c
        .execute(
            "INSERT INTO outbox (kind, target, seq_key, payload, idem_key, status, attempts, \
             next_attempt_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', 0, ?6, ?6) \
             ON CONFLICT(idem_key) DO NOTHING",
            params![
                kind,
                target,
                seq_key,
                super::scrub(payload_json),
                idem_key,
                now
            ],
        )
        .with_context(|| format!("queueing outbound `{kind}` to `{target}`"))?;
    Ok(n == 1)
}

/// The SQL of `due`, exposed for the index test.
pub const DUE_SQL: &str = "SELECT id, kind, target, seq_key, payload, idem_key, status, attempts, \
    next_attempt_at, last_error, result, created_at, done_at FROM outbox o \
    WHERE o.status = 'pending' AND o.next_attempt_at <= ?1 \
    AND (o.seq_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox p \
         WHERE p.seq_key = o.seq_key AND p.status = 'pending' AND p.id < o.id)) \
    ORDER BY o.next_attempt_at, o.id LIMIT ?2";

/// Pending rows whose time has come and that no older pending row of their sequence holds
/// back, oldest first.
pub fn due(c: &Connection, now: Ts, limit: usize) -> Result<Vec<OutboxRow>> {
    let mut stmt = c.prepare_cached(DUE_SQL)?;
    let mut rows = stmt
        .query_map(params![now, limit as i64], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.sort_by_key(|r| r.id);
    Ok(rows)
}

/// Own row `id` for one attempt: only if it is still pending, due, and at `attempts_seen`.
/// Pushes `next_attempt_at` to `lease_until`, so another drainer skips it while we send.
/// Returns the attempt number now owned.
pub fn claim(
    c: &Connection,
    id: i64,
    attempts_seen: u32,
    now: Ts,
    lease_until: Ts,
    me: &ProcIdentity,
) -> Result<Option<u32>> {
    let n = c.execute(
        "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = ?1, claimed_pid = ?5, \
         claimed_start = ?6, claimed_boot = ?7 \
         WHERE id = ?2 AND status = 'pending' AND attempts = ?3 AND next_attempt_at <= ?4",
        params![
            lease_until,
            id,
            attempts_seen,
            now,
            me.pid,
            me.start_time as i64,
            me.boot_id
        ],
    )?;
    Ok((n == 1).then_some(attempts_seen + 1))
}

/// Pending rows claimed for a send that is not due yet: `(id, attempts, claimer)`. The claimer
/// of one may have died mid-send (served by the `outbox_pending` index).
pub fn claimed(c: &Connection, now: Ts) -> Result<Vec<(i64, u32, ProcIdentity)>> {
    let mut stmt = c.prepare_cached(
        "SELECT id, attempts, claimed_pid, claimed_start, claimed_boot FROM outbox \
         WHERE status = 'pending' AND next_attempt_at > ?1 AND claimed_pid IS NOT NULL",
    )?;
    let rows = stmt
        .query_map([now], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                ProcIdentity {
                    pid: r.get(2)?,
                    start_time: r.get::<_, i64>(3)? as u64,
                    boot_id: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
                },
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Free a row whose claimer died mid-send: due now, at the attempt it was claimed with.
pub fn unclaim(c: &Connection, id: i64, attempts: u32, now: Ts) -> Result<bool> {
    let n = c.execute(
        "UPDATE outbox SET next_attempt_at = ?1, claimed_pid = NULL, claimed_start = NULL, \
         claimed_boot = NULL WHERE id = ?2 AND status = 'pending' AND attempts = ?3",
        params![now, id, attempts],
    )?;
    Ok(n == 1)
}

/// The attempt succeeded.
pub fn complete(c: &Connection, id: i64, attempt: u32, result: &str, now: Ts) -> Result<bool> {
    let n = c.execute(
        "UPDATE outbox SET status = 'done', result = ?1, done_at = ?2, last_error = NULL \
         WHERE id = ?3 AND status = 'pending' AND attempts = ?4",
        params![super::scrub(result), now, id, attempt],
    )?;
    Ok(n == 1)
}

/// The attempt failed; try again at `next_at`.
pub fn retry(c: &Connection, id: i64, attempt: u32, next_at: Ts, error: &str) -> Result<bool> {
    let n = c.execute(
        "UPDATE outbox SET next_attempt_at = ?1, last_error = ?2, claimed_pid = NULL, \
         claimed_start = NULL, claimed_boot = NULL \
         WHERE id = ?3 AND status = 'pending' AND attempts = ?4",
        params![next_at, super::scrub(error), id, attempt],
    )?;
    Ok(n == 1)
}

/// Give up: the row is `failed` (listed by `orch outbox --failed`).
pub fn fail(c: &Connection, id: i64, attempt: u32, error: &str, now: Ts) -> Result<bool> {
    let n = c.execute(
        "UPDATE outbox SET status = 'failed', last_error = ?1, done_at = ?2 \
         WHERE id = ?3 AND status = 'pending' AND attempts = ?4",
        params![super::scrub(error), now, id, attempt],
    )?;
    Ok(n == 1)
}

/// Note why a row was not attempted (the sandbox) without spending an attempt.
pub fn note(c: &Connection, id: i64, attempts_seen: u32, why: &str) -> Result<()> {
    c.execute(
        "UPDATE outbox SET last_error = ?1 WHERE id = ?2 AND status = 'pending' AND attempts = ?3",
        params![super::scrub(why), id, attempts_seen],
    )?;
    Ok(())
}

/// Pending and failed rows (`failed_only`: failed ones), oldest first.
pub fn list(c: &Connection, failed_only: bool) -> Result<Vec<OutboxRow>> {
    let sql = if failed_only {
        format!("SELECT {COLS} FROM outbox WHERE status = 'failed' ORDER BY id")
    } else {
        format!(
            "SELECT {COLS} FROM outbox WHERE status = 'pending' \
             UNION ALL SELECT {COLS} FROM outbox WHERE status = 'failed' ORDER BY id"
        )
    };
    let mut stmt = c.prepare(&sql)?;
    let rows = stmt
        .query_map([], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// One row by id.
pub fn get(c: &Connection, id: i64) -> Result<Option<OutboxRow>> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLS} FROM outbox WHERE id = ?"))?
            .query_row([id], from_row)
            .optional()?,
    )
}

/// The row with this idempotency key.
pub fn by_key(c: &Connection, idem_key: &str) -> Result<Option<OutboxRow>> {
    Ok(
        c.prepare_cached(&format!("SELECT {COLS} FROM outbox WHERE idem_key = ?"))?
            .query_row([idem_key], from_row)
            .optional()?,
    )
}

// ------------------------------------------------------------------------- tracker states

/// One cached state of a tracker project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedState {
    pub id: String,
    pub name: String,
    pub group: String,
    pub default: bool,
}

/// The cached states of `project` and when they were fetched (the oldest row), if any.
pub fn tracker_states(c: &Connection, project: &str) -> Result<Option<(Ts, Vec<CachedState>)>> {
    let mut stmt = c.prepare_cached(
        "SELECT state_id, name, grp, is_default, fetched_at FROM tracker_states \
         WHERE project = ?1 ORDER BY position",
    )?;
    let mut fetched: Option<Ts> = None;
    let rows = stmt
        .query_map([project], |r| {
            Ok((
                CachedState {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    group: r.get(2)?,
                    default: r.get::<_, i64>(3)? != 0,
                },
                r.get::<_, Ts>(4)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if rows.is_empty() {
        return Ok(None);
    }
    let states = rows
        .into_iter()
        .map(|(s, at)| {
            fetched = Some(fetched.map_or(at, |f: Ts| f.min(at)));
            s
        })
        .collect();
    Ok(Some((fetched.unwrap_or(0), states)))
}

/// Replace the cached states of `project`.
pub fn set_tracker_states(
    c: &Connection,
    project: &str,
    states: &[CachedState],
    now: Ts,
) -> Result<()> {
    c.execute("DELETE FROM tracker_states WHERE project = ?1", [project])?;
    let mut stmt = c.prepare_cached(
        "INSERT OR REPLACE INTO tracker_states (project, state_id, name, grp, is_default, \
         position, fetched_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (i, s) in states.iter().enumerate() {
        stmt.execute(params![
            project,
            s.id,
            s.name,
            s.group,
            s.default as i64,
            i as i64,
            now
        ])?;
    }
    Ok(())
}

// ------------------------------------------------------------------------- forge polls

/// When the reconciler last asked the forge about `task`'s branch.
pub fn ci_polled_at(c: &Connection, task: TaskId) -> Result<Option<Ts>> {
    Ok(
        c.prepare_cached("SELECT polled_at FROM ci_polls WHERE task_id = ?")?
            .query_row([task.0], |r| r.get(0))
            .optional()?,
    )
}

pub fn set_ci_polled(c: &Connection, task: TaskId, now: Ts) -> Result<()> {
    c.execute(
        "INSERT INTO ci_polls (task_id, polled_at) VALUES (?1, ?2) \
         ON CONFLICT(task_id) DO UPDATE SET polled_at = ?2",
        params![task.0, now],
    )?;
    Ok(())
}

// ------------------------------------------------------------------------- run numbers

/// What a tracker comment quotes about the agent run that ended a stage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunNumbers {
    pub duration_ms: Option<i64>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
}

/// The newest finished agent run of `role` for `task` that finished at or after `since`.
pub fn last_run(c: &Connection, task: TaskId, role: &str, since: Ts) -> Result<Option<RunNumbers>> {
    Ok(c.prepare_cached(
        "SELECT duration_ms, input_tokens, output_tokens, cost_usd FROM agent_runs \
             WHERE task_id = ?1 AND role = ?2 AND finished_at IS NOT NULL AND finished_at >= ?3 \
             ORDER BY id DESC LIMIT 1",
    )?
    .query_row(params![task.0, role, since], |r| {
        Ok(RunNumbers {
            duration_ms: r.get(0)?,
            input_tokens: r.get(1)?,
            output_tokens: r.get(2)?,
            cost_usd: r.get(3)?,
        })
    })
    .optional()?)
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

    #[test]
    fn inserts_are_idempotent_by_key() {
        let (_d, db) = db();
        let c = db.conn();
        assert!(insert(c, "chat.message", "telegram:-1", "{}", "k1", 100).unwrap());
        assert!(!insert(c, "chat.message", "telegram:-1", "{\"x\":1}", "k1", 101).unwrap());
        let rows = list(c, false).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].payload, "{}");
    }

    fn me() -> ProcIdentity {
        ProcIdentity {
            pid: 4242,
            start_time: 7,
            boot_id: "boot".into(),
        }
    }

    #[test]
    fn a_claim_records_its_drainer_and_an_unclaim_makes_the_row_due() {
        let (_d, db) = db();
        let c = db.conn();
        insert(c, "k", "git:shop", "{}", "a", 100).unwrap();
        let row = due(c, 100, 10).unwrap().remove(0);
        assert_eq!(claim(c, row.id, 0, 100, 400, &me()).unwrap(), Some(1));
        assert_eq!(claimed(c, 100).unwrap(), vec![(row.id, 1, me())]);
        // Fenced on the attempt it was claimed with.
        assert!(!unclaim(c, row.id, 0, 100).unwrap());
        assert!(unclaim(c, row.id, 1, 100).unwrap());
        assert!(claimed(c, 100).unwrap().is_empty());
        assert_eq!(due(c, 100, 10).unwrap().len(), 1);
        // A send that failed and waits for its backoff is nobody's claim any more.
        assert_eq!(claim(c, row.id, 1, 100, 400, &me()).unwrap(), Some(2));
        assert!(retry(c, row.id, 2, 500, "HTTP 503").unwrap());
        assert!(claimed(c, 100).unwrap().is_empty());
    }

    #[test]
    fn a_claimed_row_is_owned_by_one_drainer_and_fenced() {
        let (_d, db) = db();
        let c = db.conn();
        insert(c, "k", "git:shop", "{}", "a", 100).unwrap();
        let row = due(c, 100, 10).unwrap().remove(0);
        assert_eq!(claim(c, row.id, 0, 100, 400, &me()).unwrap(), Some(1));
        // A second drainer with the same snapshot loses, and the row is no longer due.
        assert_eq!(claim(c, row.id, 0, 100, 400, &me()).unwrap(), None);
        assert!(due(c, 100, 10).unwrap().is_empty());
        // An outcome of a stale attempt is ignored.
        assert!(!complete(c, row.id, 0, "late", 101).unwrap());
        assert!(retry(c, row.id, 1, 130, "HTTP 503").unwrap());
        assert!(due(c, 129, 10).unwrap().is_empty());
        assert_eq!(claim(c, row.id, 1, 130, 430, &me()).unwrap(), Some(2));
        assert!(complete(c, row.id, 2, "ok", 131).unwrap());
        let r = get(c, row.id).unwrap().unwrap();
        assert_eq!(
            (r.status.as_str(), r.attempts, r.done_at),
            ("done", 2, Some(131))
        );
        assert!(list(c, false).unwrap().is_empty());
    }

    #[test]
    fn rows_of_one_sequence_wait_for_the_older_ones() {
        let (_d, db) = db();
        let c = db.conn();
        insert_ordered(
            c,
            "plane.state",
            "plane:p",
            Some("plane:p:i"),
            "{}",
            "s1",
            100,
        )
        .unwrap();
        insert_ordered(
            c,
            "plane.comment",
            "plane:p",
            Some("plane:p:i"),
            "{}",
            "c1",
            100,
        )
        .unwrap();
        insert_ordered(
            c,
            "plane.state",
            "plane:p",
            Some("plane:p:j"),
            "{}",
            "s2",
            100,
        )
        .unwrap();
        let ids = |v: Vec<OutboxRow>| v.into_iter().map(|r| r.idem_key).collect::<Vec<_>>();
        assert_eq!(ids(due(c, 100, 10).unwrap()), ["s1", "s2"]);
        // The first row backs off: its sequence waits, the other issue does not.
        let s1 = due(c, 100, 10).unwrap().remove(0);
        claim(c, s1.id, 0, 100, 200, &me()).unwrap();
        retry(c, s1.id, 1, 160, "down").unwrap();
        assert_eq!(ids(due(c, 150, 10).unwrap()), ["s2"]);
        claim(c, s1.id, 1, 160, 300, &me()).unwrap();
        fail(c, s1.id, 2, "gave up", 161).unwrap();
        assert_eq!(ids(due(c, 161, 10).unwrap()), ["c1", "s2"]);
        assert_eq!(ids(list(c, true).unwrap()), ["s1"]);
    }

    #[test]
    fn due_rows_are_found_through_an_index() {
        let (_d, db) = db();
        let plan: Vec<String> = db
            .conn()
            .prepare(&format!("EXPLAIN QUERY PLAN {DUE_SQL}"))
            .unwrap()
            .query_map(params![0, 10], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .all(|l| !l.contains("SCAN") || l.contains("USING")),
            "{plan:?}"
        );
    }

    #[test]
    fn tracker_states_are_replaced_per_project() {
        let (_d, db) = db();
        let c = db.conn();
        assert_eq!(tracker_states(c, "p").unwrap(), None);
        let s = |id: &str, name: &str, group: &str| CachedState {
            id: id.into(),
            name: name.into(),
            group: group.into(),
            default: false,
        };
        set_tracker_states(
            c,
            "p",
            &[s("1", "Todo", "unstarted"), s("2", "Done", "completed")],
            50,
        )
        .unwrap();
        set_tracker_states(c, "p", &[s("3", "Doing", "started")], 60).unwrap();
        let (at, states) = tracker_states(c, "p").unwrap().unwrap();
        assert_eq!(at, 60);
        assert_eq!(states, [s("3", "Doing", "started")]);
    }
}
