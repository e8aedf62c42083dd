//! What every step of one tick shares: the context, whether it only plans, and the report it
//! fills — the action lines and the errors of rows that were skipped.

use anyhow::Result;
use serde::Serialize;
use tracing::warn;

use crate::ctx::Ctx;

/// The report of one pass (`orch tick [--json]`).
#[derive(Debug, Default, Serialize)]
pub struct TickReport {
    pub schema_version: u32,
    pub plan: bool,
    pub skipped: Option<String>,
    pub reaped: u32,
    pub reclaimed: u32,
    pub reconciled: u32,
    pub launched: u32,
    pub running: u32,
    pub max_concurrency: u32,
    pub queued: u32,
    /// Outbound effects delivered by step 6 (the outbox).
    pub sent: u32,
    /// One line per action taken (or, with `--plan`, that would be taken), with its reason.
    pub actions: Vec<String>,
    pub errors: Vec<String>,
}

impl TickReport {
    pub fn summary(&self) -> String {
        format!(
            "tick: reaped {}, reclaimed {}, reconciled {}, launched {}, running {}/{}, queued {}, sent {}",
            self.reaped,
            self.reclaimed,
            self.reconciled,
            self.launched,
            self.running,
            self.max_concurrency,
            self.queued,
            self.sent
        )
    }
}

/// One pass in progress.
pub struct Pass<'a> {
    pub ctx: &'a Ctx,
    pub plan: bool,
    pub rep: TickReport,
}

impl Pass<'_> {
    /// Record an action line (taken, or planned).
    pub fn act(&mut self, line: String) {
        self.rep.actions.push(line);
    }

    /// Keep the error of one step, or of one row of a step, and go on: one bad task never stops
    /// the pass (design §4.3).
    pub fn isolate<T>(&mut self, what: &str, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                warn!("tick {what}: {e:#}");
                self.rep.errors.push(format!("{what}: {e:#}"));
                None
            }
        }
    }
}
