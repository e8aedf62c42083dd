//! `orch job run <id>`: the supervisor of one job attempt (design §4.4).

use anyhow::Result;
use serde::Serialize;

use crate::cli::JobCmd;
use crate::ctx::Ctx;
use crate::domain::ids::JobId;
use crate::error::Code;
use crate::ops::attempt::AttemptOutcome;
use crate::output;

#[derive(Serialize)]
struct JobOut<'a> {
    schema_version: u32,
    job_id: i64,
    work_item: &'a str,
    role: &'static str,
    status: &'static str,
    detail: &'a str,
    advance: Option<super::advance::ReportOut<'a>>,
}

pub fn run(ctx: &mut Ctx, cmd: JobCmd) -> Result<Code> {
    match cmd {
        JobCmd::Run { id } => {
            let r = crate::ops::job::run(ctx, JobId(id))?;
            if ctx.json {
                output::json(&JobOut {
                    schema_version: 1,
                    job_id: r.job.0,
                    work_item: &r.work_item,
                    role: r.role.as_str(),
                    status: r.status.as_str(),
                    detail: &r.detail,
                    advance: r.advance.as_ref().map(super::advance::report_out),
                });
            } else {
                output::line(&format!(
                    "job {} ({}, {}): {} — {}",
                    r.job.0, r.work_item, r.role, r.status, r.detail
                ));
            }
            Ok(match r.status {
                AttemptOutcome::Done => Code::Ok,
                AttemptOutcome::Failed => Code::No,
                AttemptOutcome::Queued | AttemptOutcome::Cancelled | AttemptOutcome::Stale => {
                    Code::Busy
                }
            })
        }
    }
}
