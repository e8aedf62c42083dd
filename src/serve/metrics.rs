//! The `GET /metrics` document of `orch serve`: tasks per non-terminal stage with the age of the
//! longest-waiting one, job counts, the running agents and the cost, read in one transaction
//! through `db::metrics`. It changes nothing and keeps no counters of its own.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::db;
use crate::domain::stage::Stage;
use crate::domain::time::rfc3339;

/// The `GET /metrics` document.
#[derive(Debug, Serialize)]
pub struct Metrics {
    pub schema_version: u32,
    pub generated_at: String,
    /// Every non-terminal stage, with the age of the longest-waiting task in it.
    pub stages: BTreeMap<&'static str, StageMetric>,
    pub queue: QueueMetric,
    pub agents: Vec<AgentMetric>,
    pub cost: CostMetric,
}

#[derive(Debug, Serialize)]
pub struct StageMetric {
    pub count: u64,
    /// `null` when the stage is empty.
    pub oldest_age_s: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct QueueMetric {
    pub queued: u64,
    pub running: u64,
    pub done_24h: u64,
    pub failed_24h: u64,
}

#[derive(Debug, Serialize)]
pub struct AgentMetric {
    pub job_id: i64,
    pub work_item: String,
    pub role: &'static str,
    /// The agent's process group leader, or the supervisor's pid before the agent started.
    pub pid: Option<i64>,
    pub supervisor_pid: Option<i64>,
    pub runtime_s: i64,
}

#[derive(Debug, Serialize)]
pub struct CostMetric {
    pub total_usd: f64,
    pub last_24h_usd: f64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// Build the `/metrics` document in one read transaction.
pub fn metrics(ctx: &Ctx) -> Result<Metrics> {
    let now = ctx.now;
    let since = now - 86_400;
    ctx.db.read(|c| {
        let mut stages: BTreeMap<&'static str, StageMetric> = Stage::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|s| {
                (
                    s.as_str(),
                    StageMetric {
                        count: 0,
                        oldest_age_s: None,
                    },
                )
            })
            .collect();
        for s in db::metrics::stages(c)? {
            stages.insert(
                s.stage.as_str(),
                StageMetric {
                    count: s.count,
                    oldest_age_s: Some((now - s.oldest_entered_at).max(0)),
                },
            );
        }
        let jobs = db::metrics::job_counts(c, since)?;
        let agents = db::metrics::running(c)?
            .into_iter()
            .map(|a| AgentMetric {
                job_id: a.job_id,
                work_item: a.work_item,
                role: a.role.as_str(),
                pid: a.agent_pid.or(a.supervisor_pid),
                supervisor_pid: a.supervisor_pid,
                runtime_s: a.started_at.map(|t| (now - t).max(0)).unwrap_or(0),
            })
            .collect();
        let cost = db::metrics::cost(c, since)?;
        Ok(Metrics {
            schema_version: 1,
            generated_at: rfc3339(now),
            stages,
            queue: QueueMetric {
                queued: jobs.queued,
                running: jobs.running,
                done_24h: jobs.done_since,
                failed_24h: jobs.failed_since,
            },
            agents,
            cost: CostMetric {
                total_usd: cost.total_usd,
                last_24h_usd: cost.since_usd,
                tokens_in: cost.tokens_in,
                tokens_out: cost.tokens_out,
            },
        })
    })
}
