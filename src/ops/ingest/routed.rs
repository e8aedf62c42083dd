//! What routing one delivery came to, before it is stored: the outcome, the reason, the work
//! item it acted on, the HTTP status `orch serve` answers. Shared by both sources' routes.

use crate::ctx::Ctx;
use crate::domain::webhook::{self, Outcome, Rejection, RepoEntry};

/// The routing result before it is stored.
pub(super) struct Routed {
    pub(super) outcome: Outcome,
    pub(super) reason: String,
    pub(super) work_item: Option<String>,
    pub(super) http_status: u16,
    /// The event name read from the body, when the header did not give one.
    pub(super) event: Option<String>,
}

impl Routed {
    pub(super) fn new(
        outcome: Outcome,
        reason: impl Into<String>,
        work_item: Option<String>,
    ) -> Routed {
        Routed {
            outcome,
            reason: reason.into(),
            work_item,
            http_status: 200,
            event: None,
        }
    }

    pub(super) fn ignored(reason: impl Into<String>, work_item: Option<String>) -> Routed {
        Routed::new(Outcome::Ignored, reason, work_item)
    }

    pub(super) fn processed(reason: impl Into<String>, work_item: Option<String>) -> Routed {
        Routed::new(Outcome::Processed, reason, work_item)
    }

    pub(super) fn rejected(r: Rejection) -> Routed {
        Routed {
            http_status: r.http_status,
            ..Routed::new(Outcome::Rejected, r.reason, None)
        }
    }

    pub(super) fn event(mut self, e: &str) -> Routed {
        self.event = Some(webhook::clean_event_name(e));
        self
    }
}

pub(super) fn repo_entries(ctx: &Ctx) -> Vec<RepoEntry<'_>> {
    ctx.config
        .repos
        .iter()
        .map(|r| RepoEntry {
            name: &r.name,
            remote: &r.remote,
            prefix: &r.prefix,
            plane_project: r.plane_project.as_deref(),
            forge: r.forge().map(|f| f.full()),
        })
        .collect()
}
