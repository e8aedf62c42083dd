//! `orch logs`: where a job's logs are, and which job a work item means. The supervisor writes
//! `<state_dir>/logs/job-<id>.log` (every attempt appends), the agent's output goes to
//! `job-<id>.agent.log`. Following a log is the command's loop (`cmd::logs`); this module only
//! answers where and which.

use std::path::PathBuf;

use anyhow::Result;

use crate::config::Config;
use crate::ctx::Ctx;
use crate::db::jobs::JobRow;
use crate::domain::ids::JobId;
use crate::domain::stage::JobStatus;
use crate::error::Code;

/// The log of a job: the supervisor's, or with `agent` the agent's output.
pub fn path(config: &Config, job: JobId, agent: bool) -> PathBuf {
    let name = if agent {
        format!("job-{}.agent.log", job.0)
    } else {
        format!("job-{}.log", job.0)
    };
    config.state_dir.join("logs").join(name)
}

/// The job `target` names: a job id, or a work item's running job, else its newest job.
pub fn job_of(ctx: &Ctx, target: &str) -> Result<JobRow> {
    crate::ops::retry::job_named(ctx, target, |jobs| {
        jobs.iter()
            .filter(|j| j.status == JobStatus::Running)
            .max_by_key(|j| j.id.0)
            .or_else(|| jobs.iter().max_by_key(|j| j.id.0))
    })
}

/// The exit code `orch logs -f` ends with: the job's outcome, or `None` while it may still run
/// (queued again for another attempt counts as still running).
pub fn ending(status: JobStatus) -> Option<Code> {
    match status {
        JobStatus::Queued | JobStatus::Running => None,
        JobStatus::Done => Some(Code::Ok),
        JobStatus::Failed => Some(Code::Runtime),
        JobStatus::Cancelled => Some(Code::No),
    }
}
