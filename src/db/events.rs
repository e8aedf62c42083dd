//! The webhook inbox (`events`): one row per delivery, duplicates and rejections included, with
//! its headers, raw body, outcome and reason. Rows are only ever appended; a replay appends a new
//! row that points at the one it re-drove.

use anyhow::{Context, Result};
use rusqlite::{Connection, OptionalExtension, params};

use crate::domain::time::Ts;

/// A row to append.
pub struct NewEvent<'a> {
    pub source: &'a str,
    pub event: &'a str,
    pub delivery_id: &'a str,
    /// JSON object of the (redacted) headers.
    pub headers: &'a str,
    pub body: &'a [u8],
    /// The size of the body as received (the stored one may be cut).
    pub body_size: usize,
    /// `domain::webhook::body_digest` of the body as received.
    pub body_sha256: &'a str,
    pub outcome: &'a str,
    pub reason: &'a str,
    pub work_item: Option<&'a str>,
    pub replay_of: Option<i64>,
}

pub fn insert(c: &Connection, e: &NewEvent<'_>, now: Ts) -> Result<i64> {
    c.execute(
        "INSERT INTO events (source, event, delivery_id, received_at, headers, body, outcome, \
         reason, work_item, body_size, replay_of, body_sha256) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            e.source,
            e.event,
            e.delivery_id,
            now,
            e.headers,
            e.body,
            e.outcome,
            super::scrub(e.reason),
            e.work_item,
            e.body_size as i64,
            e.replay_of,
            e.body_sha256
        ],
    )
    .with_context(|| format!("storing delivery `{}` in the inbox", e.delivery_id))?;
    Ok(c.last_insert_rowid())
}

/// The earliest accepted (`processed` or `ignored`) delivery of `source` with this id.
pub fn accepted(c: &Connection, source: &str, delivery_id: &str) -> Result<Option<i64>> {
    Ok(c.prepare_cached(
        "SELECT id FROM events WHERE source = ?1 AND delivery_id = ?2 \
         AND outcome IN ('processed', 'ignored') ORDER BY id LIMIT 1",
    )?
    .query_row(params![source, delivery_id], |r| r.get(0))
    .optional()?)
}

/// The lookup of [`accepted_body`], served by the partial index `events_body`.
pub const ACCEPTED_BODY_SQL: &str = "SELECT id, delivery_id FROM events \
    WHERE source = ?1 AND body_sha256 = ?2 AND received_at >= ?3 \
    AND outcome IN ('processed', 'ignored') ORDER BY received_at, id LIMIT 1";

/// The earliest accepted (`processed` or `ignored`) delivery of `source` with this body digest
/// received at or after `since`: its id and delivery id.
pub fn accepted_body(
    c: &Connection,
    source: &str,
    body_sha256: &str,
    since: Ts,
) -> Result<Option<(i64, String)>> {
    Ok(c.prepare_cached(ACCEPTED_BODY_SQL)?
        .query_row(params![source, body_sha256, since], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?)
}

/// One stored delivery, whole.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub id: i64,
    pub source: String,
    pub event: String,
    pub delivery_id: String,
    pub received_at: Ts,
    pub headers: String,
    pub body: Vec<u8>,
    pub body_size: i64,
    pub outcome: String,
    pub reason: String,
    pub work_item: Option<String>,
    pub replay_of: Option<i64>,
    /// The digest of the body as received (none on rows older than migration 5).
    pub body_sha256: Option<String>,
}

const COLS: &str = "id, source, event, delivery_id, received_at, headers, body, body_size, \
    outcome, reason, work_item, replay_of, body_sha256";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        id: r.get(0)?,
        source: r.get(1)?,
        event: r.get(2)?,
        delivery_id: r.get(3)?,
        received_at: r.get(4)?,
        headers: r.get(5)?,
        body: r.get(6)?,
        body_size: r.get(7)?,
        outcome: r.get(8)?,
        reason: r.get(9)?,
        work_item: r.get(10)?,
        replay_of: r.get(11)?,
        body_sha256: r.get(12)?,
    })
}

/// The newest stored delivery with this id (of `source` when given).
pub fn newest(c: &Connection, delivery_id: &str, source: Option<&str>) -> Result<Option<EventRow>> {
    let found = match source {
        Some(s) => c
            .prepare_cached(&format!(
                "SELECT {COLS} FROM events WHERE source = ?1 AND delivery_id = ?2 \
                 ORDER BY id DESC LIMIT 1"
            ))?
            .query_row(params![s, delivery_id], row)
            .optional()?,
        None => c
            .prepare_cached(&format!(
                "SELECT {COLS} FROM events WHERE delivery_id = ?1 ORDER BY id DESC LIMIT 1"
            ))?
            .query_row([delivery_id], row)
            .optional()?,
    };
    Ok(found)
}

/// A row of `orch events` (no headers or body).
#[derive(Debug, Clone)]
pub struct EventSummary {
    pub id: i64,
    pub source: String,
    pub event: String,
    pub delivery_id: String,
    pub received_at: Ts,
    pub outcome: String,
    pub reason: String,
    pub work_item: Option<String>,
    pub replay_of: Option<i64>,
}

/// The newest `limit` deliveries, newest first; only rejected ones with `rejected_only`.
pub fn list(c: &Connection, rejected_only: bool, limit: u32) -> Result<Vec<EventSummary>> {
    let filter = if rejected_only {
        "WHERE outcome = 'rejected'"
    } else {
        ""
    };
    let mut stmt = c.prepare_cached(&format!(
        "SELECT id, source, event, delivery_id, received_at, outcome, reason, work_item, replay_of \
         FROM events {filter} ORDER BY id DESC LIMIT ?"
    ))?;
    let rows = stmt
        .query_map([limit], |r| {
            Ok(EventSummary {
                id: r.get(0)?,
                source: r.get(1)?,
                event: r.get(2)?,
                delivery_id: r.get(3)?,
                received_at: r.get(4)?,
                outcome: r.get(5)?,
                reason: r.get(6)?,
                work_item: r.get(7)?,
                replay_of: r.get(8)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::Db;

    fn ev<'a>(source: &'a str, id: &'a str, outcome: &'a str) -> NewEvent<'a> {
        NewEvent {
            source,
            event: "issue",
            delivery_id: id,
            headers: "{}",
            body: b"{}",
            body_size: 2,
            body_sha256: "d1",
            outcome,
            reason: "r",
            work_item: None,
            replay_of: None,
        }
    }

    #[test]
    fn only_accepted_deliveries_of_the_same_source_count_for_dedup() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("orch.db")).unwrap();
        db.write(|tx| {
            insert(tx, &ev("plane", "d1", "rejected"), 1)?;
            insert(tx, &ev("plane", "d1", "duplicate"), 2)?;
            insert(tx, &ev("gitea", "d1", "processed"), 3)?;
            Ok(())
        })
        .unwrap();
        assert_eq!(accepted(db.conn(), "plane", "d1").unwrap(), None);
        let id = db
            .write(|tx| insert(tx, &ev("plane", "d1", "ignored"), 4))
            .unwrap();
        assert_eq!(accepted(db.conn(), "plane", "d1").unwrap(), Some(id));
        assert_eq!(newest(db.conn(), "d1", None).unwrap().unwrap().id, id);
        assert_eq!(
            newest(db.conn(), "d1", Some("gitea"))
                .unwrap()
                .unwrap()
                .source,
            "gitea"
        );
        let all = list(db.conn(), false, 200).unwrap();
        assert_eq!(all.len(), 4);
        assert!(all.windows(2).all(|w| w[0].id > w[1].id), "newest first");
        let rejected = list(db.conn(), true, 200).unwrap();
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].outcome, "rejected");
    }

    #[test]
    fn an_accepted_body_counts_within_its_window_only() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&dir.path().join("orch.db")).unwrap();
        let body = |id, outcome, digest| NewEvent {
            body_sha256: digest,
            ..ev("plane", id, outcome)
        };
        db.write(|tx| {
            insert(tx, &body("a", "rejected", "x"), 100)?;
            insert(tx, &body("b", "duplicate", "x"), 110)?;
            insert(tx, &body("c", "processed", "y"), 120)?;
            insert(tx, &ev("gitea", "d", "processed"), 130)?;
            Ok(())
        })
        .unwrap();
        let c = db.conn();
        assert_eq!(
            accepted_body(c, "plane", "x", 0).unwrap(),
            None,
            "not accepted"
        );
        assert_eq!(
            accepted_body(c, "plane", "d1", 0).unwrap(),
            None,
            "other source"
        );
        assert_eq!(
            accepted_body(c, "plane", "y", 120).unwrap(),
            Some((3, "c".into()))
        );
        assert_eq!(
            accepted_body(c, "plane", "y", 121).unwrap(),
            None,
            "too old"
        );
        db.write(|tx| insert(tx, &body("e", "ignored", "x"), 140))
            .unwrap();
        assert_eq!(
            accepted_body(c, "plane", "x", 0).unwrap(),
            Some((5, "e".into()))
        );
        assert_eq!(
            newest(c, "e", None)
                .unwrap()
                .unwrap()
                .body_sha256
                .as_deref(),
            Some("x")
        );
    }
}
