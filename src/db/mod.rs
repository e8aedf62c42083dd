//! The only module that speaks SQL. Opens `<state_dir>/orch.db` (WAL, busy timeout, foreign
//! keys), runs the append-only migrations of `schema`, and offers typed queries. Every write goes
//! through `Db::write`, a `BEGIN IMMEDIATE` transaction, so writers queue on SQLite's lock instead
//! of failing halfway; stage writes are compare-and-swap (`tasks::cas_stage`).

pub mod audit;
pub mod events;
pub mod jobs;
pub mod leases;
pub mod metrics;
pub mod misc;
pub mod outbox;
pub mod release;
mod schema;
pub mod tasks;
pub mod transitions;
pub mod usage;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};

pub use rusqlite::OptionalExtension;

pub struct Db {
    conn: Connection,
}

/// The size of the WAL past which a writer checkpoints and truncates it (`Db::trim_wal`): 256
/// pages of 4 KiB, each read by every command that opens the database.
pub const WAL_TRIM_AT: u64 = 1 << 20;

impl Db {
    /// Open (creating when missing) and migrate.
    pub fn open(path: &Path) -> Result<Db> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("opening database `{}`", path.display()))?;
        conn.busy_timeout(Duration::from_secs(10))
            .context("setting the busy timeout")?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
        )
        .context("setting database pragmas")?;
        // Every orch command is a short process: checkpointing the WAL into the database (four
        // fsyncs) on every close would dominate its latency. The WAL is trimmed instead when
        // it has grown (`trim_wal`).
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .context("disabling the checkpoint on close")?;
        let mut db = Db { conn };
        db.migrate()
            .with_context(|| format!("migrating database `{}`", path.display()))?;
        db.trim_wal(path);
        Ok(db)
    }

    /// Checkpoint the WAL into the database and truncate it when it is over [`WAL_TRIM_AT`].
    ///
    /// A process that opens the database while no other connection is open rebuilds SQLite's
    /// WAL index by reading the whole WAL. Every orch command is such a process, and with no
    /// checkpoint on close (see `open`) nothing ever reset the WAL: after 2,000 `task add`s it
    /// held 81 MB, and every command, `queue` included, read all of it (20,000 reads, 50 ms).
    /// Trimmed here, a command reads at most the WAL of the few commands since the last trim.
    /// Best effort and never waiting: with a reader in the WAL the checkpoint is busy at once
    /// (busy timeout 0) and the next writer tries again.
    fn trim_wal(&self, path: &Path) {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let big = std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_TRIM_AT);
        if !big {
            return;
        }
        let trimmed = self
            .conn
            .busy_timeout(Duration::ZERO)
            .and_then(|()| {
                self.conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                        r.get::<_, i64>(0)
                    })
            })
            .map(|busy| busy == 0);
        tracing::debug!("WAL over {WAL_TRIM_AT} bytes: checkpoint and truncate: {trimmed:?}");
        if let Err(e) = self.conn.busy_timeout(Duration::from_secs(10)) {
            tracing::warn!("could not restore the busy timeout: {e}");
        }
    }

    /// Open an existing database for reading only: never creates, never migrates, never
    /// writes (an operator with read access to the state directory can run the read commands).
    /// A database whose schema is older than this orch is refused with the fix, because the
    /// queries of this binary name columns the old schema lacks (docs/decisions.md).
    pub fn open_read_only(path: &Path) -> Result<Db> {
        if !path.is_file() {
            return Err(crate::error::usage(format!(
                "no database at `{}`: nothing has run with this state directory (a mistyped \
                 `--state-dir` or `state_dir`?); a writing command such as `orch init`, \
                 `orch task add` or `orch tick` creates it",
                path.display()
            )));
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("opening database `{}` read-only", path.display()))?;
        conn.busy_timeout(Duration::from_secs(10))
            .context("setting the busy timeout")?;
        let db = Db { conn };
        let target = schema::MIGRATIONS.len() as i64;
        let current = db
            .schema_version()
            .with_context(|| format!("reading database `{}`", path.display()))?;
        if current < target {
            bail!(
                "database `{}` has schema version {current} and this orch reads version {target}; \
                 a writing command (`orch tick`, run as the owner of the state) migrates it",
                path.display()
            );
        }
        if current > target {
            bail!(
                "database schema version {current} is newer than this orch ({target}); upgrade orch"
            );
        }
        Ok(db)
    }

    fn migrate(&mut self) -> Result<()> {
        let target = schema::MIGRATIONS.len() as i64;
        let current: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if current == target {
            return Ok(());
        }
        if current > target {
            bail!(
                "database schema version {current} is newer than this orch ({target}); upgrade orch"
            );
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the lock.
        let current: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(current as usize) {
            tx.execute_batch(sql)
                .with_context(|| format!("applying migration {}", i + 1))?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Read-only access (outside a write transaction).
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Run `f` in a `BEGIN IMMEDIATE` transaction; commit when it returns `Ok`.
    ///
    /// Takes `&self` so a caller can lend its whole context to `f` alongside the transaction;
    /// nesting is prevented by SQLite itself (a nested `BEGIN` is an error).
    pub fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T>) -> Result<T> {
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .context("starting a write transaction")?;
        let out = f(&tx)?;
        tx.commit().context("committing a write transaction")?;
        Ok(out)
    }

    /// Run `f` in one read transaction: one consistent snapshot, one lock instead of one per
    /// statement.
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Deferred)
            .context("starting a read transaction")?;
        let out = f(&tx)?;
        tx.commit().context("ending a read transaction")?;
        Ok(out)
    }

    pub fn schema_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }
}

/// A text column parsed into one of the domain's types (a stage, a role, a history word…). An
/// unknown word is a conversion error naming the column, never a silent default.
/// Free text on its way into a column that is shown, logged or sent on (an error, a reason, a
/// journal line, an outbound payload), with credentials in URLs masked (design §9). Every
/// writer of such a column passes its text through here.
pub(crate) fn scrub(text: &str) -> std::borrow::Cow<'_, str> {
    crate::domain::redact::redact_urls(text)
}

pub(crate) fn parse_col<T: std::str::FromStr>(
    r: &rusqlite::Row<'_>,
    idx: usize,
) -> rusqlite::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    r.get::<_, String>(idx)?
        .parse::<T>()
        .map_err(|e| conv_err(idx, e))
}

/// A conversion error for column `idx`.
pub(crate) fn conv_err(
    idx: usize,
    e: impl std::error::Error + Send + Sync + 'static,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_truncates_a_wal_grown_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("orch.db");
        let wal = dir.path().join("orch.db-wal");
        let db = Db::open(&p).unwrap();
        // Grow the WAL past the limit, as many short commands without a checkpoint would.
        db.conn
            .execute_batch(
                "PRAGMA wal_autocheckpoint = 0; CREATE TABLE filler (x BLOB); \
                 WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 600) \
                 INSERT INTO filler SELECT randomblob(4000) FROM n;",
            )
            .unwrap();
        drop(db);
        assert!(std::fs::metadata(&wal).unwrap().len() > WAL_TRIM_AT);
        let db = Db::open(&p).unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
        let n: i64 = db
            .conn
            .query_row("SELECT count(*) FROM filler", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 600);
    }

    #[test]
    fn migrations_create_every_table_and_are_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("orch.db");
        let db = Db::open(&p).unwrap();
        assert_eq!(
            db.schema_version().unwrap(),
            schema::MIGRATIONS.len() as i64
        );
        drop(db);
        let db = Db::open(&p).unwrap();
        for table in [
            "tasks",
            "jobs",
            "job_deps",
            "transitions",
            "agent_runs",
            "events",
            "ci_status",
            "repo_freeze",
            "transition_lease",
            "merge_lease",
            "outbox",
            "coverage_baseline",
            "lessons",
        ] {
            let n: i64 = db
                .conn()
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?",
                    [table],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(n, 1, "{table}");
        }
        let mode: String = db
            .conn()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn free_text_is_stored_with_credentials_in_urls_masked() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("orch.db")).unwrap();
        let text = "cloning `https://user:t0ken@forge/x.git` failed";
        db.write(|tx| {
            misc::journal(tx, None, "k", text, 1)?;
            misc::open_breaker(tx, 2, text)?;
            misc::set_ci_status(tx, "shop", "a", "ci", "failure", text, 3)?;
            outbox::insert(
                tx,
                "chat.message",
                "telegram:1",
                &format!("{{\"html\":\"{text}\"}}"),
                "k1",
                4,
            )?;
            Ok(())
        })
        .unwrap();
        let stored: String = db
            .conn()
            .query_row(
                "SELECT group_concat(t, '\n') FROM (SELECT detail AS t FROM lessons \
                 UNION ALL SELECT reason FROM breaker UNION ALL SELECT detail FROM ci_status \
                 UNION ALL SELECT payload FROM outbox)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!stored.contains("t0ken"), "{stored}");
        assert_eq!(
            stored.matches("https://***@forge/x.git").count(),
            4,
            "{stored}"
        );
        let payload: serde_json::Value =
            serde_json::from_str(stored.lines().last().unwrap()).unwrap();
        assert!(payload["html"].is_string(), "the payload is still JSON");
    }

    #[test]
    fn read_only_open_never_creates_and_refuses_an_old_schema() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("orch.db");
        let e = format!("{:#}", Db::open_read_only(&p).err().unwrap());
        assert!(e.contains("no database at"), "{e}");
        assert!(!p.exists(), "a read-only open created the database");
        drop(Db::open(&p).unwrap());
        let db = Db::open_read_only(&p).unwrap();
        assert!(
            db.write(|tx| Ok(tx.execute("DELETE FROM tasks", [])?))
                .is_err()
        );
        drop(db);
        let c = Connection::open(&p).unwrap();
        c.pragma_update(None, "user_version", 1).unwrap();
        drop(c);
        let e = format!("{:#}", Db::open_read_only(&p).err().unwrap());
        assert!(
            e.contains("schema version 1") && e.contains("orch tick"),
            "{e}"
        );
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("orch.db");
        drop(Db::open(&p).unwrap());
        let c = Connection::open(&p).unwrap();
        c.pragma_update(None, "user_version", 999).unwrap();
        drop(c);
        let e = format!("{:#}", Db::open(&p).err().unwrap());
        assert!(e.contains("newer than this orch"), "{e}");
    }

    #[test]
    fn hot_queries_use_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("orch.db")).unwrap();
        for sql in [
            jobs::LIVE_JOBS_SQL,
            jobs::RUNNING_COUNT_SQL,
            jobs::QUEUED_OF_FINISHED_SQL,
            tasks::ACTIVE_TASKS_SQL,
            jobs::FINISHED_SINCE_SQL,
            events::ACCEPTED_BODY_SQL,
            usage::COST_OF_ACTIVE_SQL,
        ] {
            let plan: Vec<String> = db
                .conn()
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(
                    rusqlite::params_from_iter(std::iter::repeat_n(0i64, sql.matches('?').count())),
                    |r| r.get::<_, String>(3),
                )
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(
                plan.iter()
                    .all(|l| !l.contains("SCAN") || l.contains("USING")),
                "{sql} scans a table: {plan:?}"
            );
            assert!(plan.iter().any(|l| l.contains("INDEX")), "{sql}: {plan:?}");
        }
    }
}
