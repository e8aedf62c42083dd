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
    /// One entry per action taken (or, with `--plan`, that would be taken), with its reason.
    pub actions: Vec<Action>,
    pub errors: Vec<String>,
}

/// One action of a pass: what kind (the first word of its line: `launch`, `reap`, `reclaim`,
/// `reconcile`, `cancel`, `poll`, `remove`, `alert`, `deliver`…), the task, role and job it
/// concerns when it concerns one, and the line an operator reads.
#[derive(Debug, Default, Serialize)]
pub struct Action {
    pub kind: String,
    pub work_item: Option<String>,
    pub role: Option<String>,
    pub job_id: Option<i64>,
    pub text: String,
}

impl Action {
    pub fn new(text: String) -> Action {
        Action {
            kind: text.split_whitespace().next().unwrap_or("").to_string(),
            text,
            ..Action::default()
        }
    }

    pub fn task(mut self, work_item: &str) -> Action {
        self.work_item = Some(work_item.to_string());
        self
    }

    pub fn job(mut self, job: i64, role: impl ToString) -> Action {
        self.job_id = Some(job);
        self.role = Some(role.to_string());
        self
    }
}

impl TickReport {
    /// Whether the pass did anything an operator would want in the journal.
    pub fn idle(&self) -> bool {
        self.actions.is_empty() && self.errors.is_empty() && self.skipped.is_none()
    }

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
        self.rep.actions.push(Action::new(line));
    }

    /// Record an action with its task, role and job.
    pub fn act_with(&mut self, action: Action) {
        self.rep.actions.push(action);
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
