//! `orch outbox [--failed]`: the pending and failed outbound effects (design §9), and the
//! best-effort delivery that follows every command that may have queued some.

use anyhow::Result;
use serde::Serialize;

use crate::cli::{Command, TaskCmd};
use crate::ctx::Ctx;
use crate::error::Code;
use crate::ops::outbox::{self, ItemOut};
use crate::output;

#[derive(Serialize)]
struct OutboxOut {
    schema_version: u32,
    items: Vec<ItemOut>,
}

pub fn run(ctx: &mut Ctx, failed: bool) -> Result<Code> {
    let items = outbox::list(ctx, failed)?;
    if ctx.json {
        output::json(&OutboxOut {
            schema_version: 1,
            items,
        });
        return Ok(Code::Ok);
    }
    let rows = items
        .into_iter()
        .map(|i| {
            vec![
                i.id.to_string(),
                i.kind,
                i.target,
                i.status,
                i.attempts.to_string(),
                i.next_attempt_at,
                i.last_error.unwrap_or_default(),
            ]
        })
        .collect();
    output::table(
        None,
        &[
            "id",
            "kind",
            "target",
            "status",
            "attempts",
            "next attempt",
            "last error",
        ],
        rows,
        if failed {
            "no failed outbound effects"
        } else {
            "nothing pending"
        },
    );
    Ok(Code::Ok)
}

/// Whether `cmd` may queue outbound effects, so its effects are delivered right after it
/// (`orch tick` delivers on its own; read-only commands send nothing).
pub fn delivers_after(cmd: &Command) -> bool {
    match cmd {
        Command::Task(t) => matches!(t, TaskCmd::Add(_)),
        Command::Approve { .. }
        | Command::ConfirmDeploy { .. }
        | Command::Cancel { .. }
        | Command::Advance(_)
        | Command::Pause { .. }
        | Command::Resume { .. }
        | Command::RunTests { .. }
        | Command::RunStaging { .. }
        | Command::Job(_)
        | Command::Lease(_) => true,
        _ => false,
    }
}

/// Deliver what the command just queued; never fails it.
pub fn deliver_after(ctx: &Ctx) {
    outbox::drain_after_command(ctx);
}
