//! `orch logs`: where a job's logs are, and which job a work item means. The supervisor writes
//! `<state_dir>/logs/job-<id>.log` (every attempt appends), the agent's output goes to
//! `job-<id>.agent.log` (one stream-json event per line, each attempt opened by orch's marker;
//! `domain::stream::Render` makes it readable). Following a log is the command's loop
//! (`cmd::logs`); this module only answers where and which.

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

/// The job `target` names: a job id, or a work item's running job, else its newest job. With
/// `agent`, a work item means the last of its jobs that ran an agent (the one running, else the
/// newest with an agent log): a runner's or the releaser's job has none.
pub fn job_of(ctx: &Ctx, target: &str, agent: bool) -> Result<JobRow> {
    let ran_agent = |j: &JobRow| path(&ctx.config, j.id, true).exists();
    let what = if agent {
        "job that ran an agent"
    } else {
        "job"
    };
    crate::ops::retry::job_named(ctx, target, what, |jobs| {
        let newest =
            |pred: &dyn Fn(&JobRow) -> bool| jobs.iter().filter(|j| pred(j)).max_by_key(|j| j.id.0);
        if agent {
            newest(&|j| j.status == JobStatus::Running && ran_agent(j))
                .or_else(|| newest(&|j| j.status == JobStatus::Running && j.role.is_agent()))
                .or_else(|| newest(&|j| ran_agent(j)))
        } else {
            newest(&|j| j.status == JobStatus::Running).or_else(|| newest(&|_| true))
        }
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
