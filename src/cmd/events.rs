//! `orch events [--rejected]`: the webhook inbox, newest first.

use anyhow::Result;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::domain::time::rfc3339;
use crate::error::Code;
use crate::ops::ingest;
use crate::output;

#[derive(Serialize)]
struct EventsOut {
    schema_version: u32,
    events: Vec<EventOut>,
}

#[derive(Serialize)]
struct EventOut {
    id: i64,
    source: String,
    event: String,
    delivery_id: String,
    received_at: String,
    outcome: String,
    reason: String,
    work_item: Option<String>,
    replay_of: Option<i64>,
}

pub fn run(ctx: &mut Ctx, rejected: bool) -> Result<Code> {
    let events: Vec<EventOut> = ingest::events(ctx, rejected)?
        .into_iter()
        .map(|e| EventOut {
            id: e.id,
            source: e.source,
            event: e.event,
            delivery_id: e.delivery_id,
            received_at: rfc3339(e.received_at),
            outcome: e.outcome,
            reason: e.reason,
            work_item: e.work_item,
            replay_of: e.replay_of,
        })
        .collect();
    if ctx.json {
        output::json(&EventsOut {
            schema_version: 1,
            events,
        });
        return Ok(Code::Ok);
    }
    output::table(
        None,
        &[
            "id",
            "received",
            "source",
            "event",
            "delivery",
            "outcome",
            "work item",
            "reason",
        ],
        events
            .into_iter()
            .map(|e| {
                vec![
                    e.id.to_string(),
                    e.received_at,
                    e.source,
                    e.event,
                    e.delivery_id,
                    e.outcome,
                    e.work_item.unwrap_or_default(),
                    e.reason,
                ]
            })
            .collect(),
        if rejected {
            "no rejected deliveries"
        } else {
            "no deliveries"
        },
    );
    Ok(Code::Ok)
}
