//! The metrics of `orch serve`: tasks per non-terminal stage with the age of the longest-waiting
//! one, job counts, the running agents and the cost, read in one transaction through
//! `db::metrics`. `GET /metrics` renders them in the Prometheus text format (what a scraper
//! expects at that path), `GET /metrics.json` as one JSON document. It changes nothing and
//! keeps no counters of its own (every number is a gauge read from the state).

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

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `m` in the Prometheus text exposition format (version 0.0.4): `# HELP` and `# TYPE` once
/// per metric, then its samples.
pub fn prometheus(m: &Metrics) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut metric = |name: &str, help: &str, samples: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {value}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        }
    };
    metric(
        "orch_tasks",
        "Active tasks per stage.",
        m.stages
            .iter()
            .map(|(s, v)| (format!("stage=\"{s}\""), v.count.to_string()))
            .collect(),
    );
    metric(
        "orch_stage_oldest_age_seconds",
        "How long the longest-waiting task of each non-empty stage has been in it.",
        m.stages
            .iter()
            .filter_map(|(s, v)| {
                v.oldest_age_s
                    .map(|a| (format!("stage=\"{s}\""), a.to_string()))
            })
            .collect(),
    );
    metric(
        "orch_jobs",
        "Live jobs by status.",
        vec![
            ("status=\"queued\"".into(), m.queue.queued.to_string()),
            ("status=\"running\"".into(), m.queue.running.to_string()),
        ],
    );
    metric(
        "orch_jobs_finished_24h",
        "Jobs finished in the last 24 hours by status.",
        vec![
            ("status=\"done\"".into(), m.queue.done_24h.to_string()),
            ("status=\"failed\"".into(), m.queue.failed_24h.to_string()),
        ],
    );
    metric(
        "orch_agent_runtime_seconds",
        "Running jobs and how long each has run.",
        m.agents
            .iter()
            .map(|a| {
                (
                    format!(
                        "job_id=\"{}\",work_item=\"{}\",role=\"{}\",pid=\"{}\"",
                        a.job_id,
                        label(&a.work_item),
                        a.role,
                        a.pid.map(|p| p.to_string()).unwrap_or_default()
                    ),
                    a.runtime_s.to_string(),
                )
            })
            .collect(),
    );
    metric(
        "orch_agent_cost_usd",
        "What the agents cost, in US dollars: in all, and in the last 24 hours.",
        vec![
            ("window=\"all\"".into(), m.cost.total_usd.to_string()),
            ("window=\"24h\"".into(), m.cost.last_24h_usd.to_string()),
        ],
    );
    metric(
        "orch_agent_tokens",
        "Tokens the agents used in all.",
        vec![
            ("direction=\"in\"".into(), m.cost.tokens_in.to_string()),
            ("direction=\"out\"".into(), m.cost.tokens_out.to_string()),
        ],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_format_has_help_type_and_escaped_labels() {
        let mut stages = BTreeMap::new();
        stages.insert(
            "analysis",
            StageMetric {
                count: 2,
                oldest_age_s: Some(30),
            },
        );
        stages.insert(
            "review",
            StageMetric {
                count: 0,
                oldest_age_s: None,
            },
        );
        let m = Metrics {
            schema_version: 1,
            generated_at: "x".into(),
            stages,
            queue: QueueMetric {
                queued: 1,
                running: 1,
                done_24h: 3,
                failed_24h: 0,
            },
            agents: vec![AgentMetric {
                job_id: 7,
                work_item: "A\"B".into(),
                role: "developer",
                pid: Some(42),
                supervisor_pid: Some(41),
                runtime_s: 5,
            }],
            cost: CostMetric {
                total_usd: 1.5,
                last_24h_usd: 0.25,
                tokens_in: 10,
                tokens_out: 2,
            },
        };
        let t = prometheus(&m);
        assert!(t.contains("# TYPE orch_tasks gauge\n"), "{t}");
        assert!(t.contains("orch_tasks{stage=\"analysis\"} 2\n"), "{t}");
        assert!(t.contains("orch_tasks{stage=\"review\"} 0\n"), "{t}");
        assert!(
            !t.contains("orch_stage_oldest_age_seconds{stage=\"review\"}"),
            "{t}"
        );
        assert!(
            t.contains("work_item=\"A\\\"B\",role=\"developer\",pid=\"42\"} 5\n"),
            "{t}"
        );
        assert!(
            t.contains("orch_agent_cost_usd{window=\"all\"} 1.5\n"),
            "{t}"
        );
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let (_, v) = l.rsplit_once(' ').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }
}
