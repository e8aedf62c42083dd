//! `orch report overrides`: the audit trail of operator overrides.

use anyhow::Result;
use serde::Serialize;

use crate::cli::ReportCmd;
use crate::ctx::Ctx;
use crate::db;
use crate::domain::time::rfc3339;
use crate::error::Code;
use crate::output;

#[derive(Serialize)]
struct OverrideOut {
    work_item: String,
    from: String,
    to: String,
    reason: String,
    overridden_verdict: Option<String>,
    artifact_sha256: Option<String>,
    at: String,
}

#[derive(Serialize)]
struct Overrides {
    schema_version: u32,
    overrides: Vec<OverrideOut>,
}

pub fn run(ctx: &mut Ctx, cmd: ReportCmd) -> Result<Code> {
    match cmd {
        ReportCmd::Overrides => {
            let list: Vec<OverrideOut> = db::transitions::overrides(ctx.db.conn())?
                .into_iter()
                .map(|t| OverrideOut {
                    work_item: t.work_item,
                    from: t.from.to_string(),
                    to: t.to.to_string(),
                    reason: t.reason,
                    overridden_verdict: t.overridden_verdict,
                    artifact_sha256: t.artifact_sha256,
                    at: rfc3339(t.at),
                })
                .collect();
            if ctx.json {
                output::json(&Overrides {
                    schema_version: 1,
                    overrides: list,
                });
            } else {
                let rows = list
                    .into_iter()
                    .map(|o| {
                        vec![
                            o.at,
                            o.work_item,
                            format!("{} → {}", o.from, o.to),
                            o.reason,
                            o.overridden_verdict.unwrap_or_default(),
                            o.artifact_sha256
                                .map(|s| s[..12.min(s.len())].to_string())
                                .unwrap_or_else(|| "-".into()),
                        ]
                    })
                    .collect();
                output::table(
                    None,
                    &[
                        "at",
                        "work item",
                        "move",
                        "reason",
                        "overridden verdict",
                        "artifact sha256",
                    ],
                    rows,
                    "no overrides",
                );
            }
            Ok(Code::Ok)
        }
    }
}
