//! `orch queue [--repo R]`: counts, running and queued jobs with why each waits, active tasks,
//! serial gates, leases and freezes.

use anyhow::Result;

use crate::ctx::Ctx;
use crate::domain::time::human_duration;
use crate::error::{Code, usage};
use crate::ops::queue;
use crate::output;

pub fn run(ctx: &mut Ctx, repo: Option<&str>) -> Result<Code> {
    if let Some(r) = repo
        && ctx.config.repo(r).is_none()
    {
        return Err(usage(format!(
            "unknown repo `{}`",
            crate::domain::ids::printable(r)
        )));
    }
    let s = queue::snapshot(ctx, repo)?;
    if ctx.json {
        output::json(&s);
        return Ok(Code::Ok);
    }
    let c = &s.counts;
    output::line(&format!(
        "queue at {}: running {}/{}, queued {}; last 24h: done {}, failed {}, cancelled {}",
        s.generated_at, c.running, s.max_concurrency, c.queued, c.done, c.failed, c.cancelled
    ));
    if let Some(b) = &s.breaker {
        output::line(&format!("breaker open: {}", b.detail));
    }
    output::table(
        Some("running"),
        &[
            "job",
            "work item",
            "role",
            "repo",
            "pid",
            "agent pid",
            "running for",
            "log",
        ],
        s.running
            .iter()
            .map(|r| {
                vec![
                    r.job_id.to_string(),
                    r.work_item.clone(),
                    r.role.clone(),
                    r.repo.clone(),
                    r.pid.map(|p| p.to_string()).unwrap_or_default(),
                    r.agent_pid.map(|p| p.to_string()).unwrap_or_default(),
                    r.elapsed_s.map(human_duration).unwrap_or_default(),
                    r.log.clone(),
                ]
            })
            .collect(),
        "nothing running",
    );
    output::table(
        Some("queued"),
        &["job", "work item", "role", "repo", "waits for", "detail"],
        s.queued
            .iter()
            .map(|q| {
                let (reason, detail) = match &q.blocked_by {
                    Some(b) => (b.reason.to_string(), b.detail.clone()),
                    None => ("-".into(), "claimable".into()),
                };
                vec![
                    q.job_id.to_string(),
                    q.work_item.clone(),
                    q.role.clone(),
                    q.repo.clone(),
                    reason,
                    detail,
                ]
            })
            .collect(),
        "nothing queued",
    );
    output::table(
        Some("active tasks"),
        &["work item", "repo", "stage", "in stage", "cost", "flags"],
        s.tasks
            .iter()
            .map(|t| {
                vec![
                    t.work_item.clone(),
                    t.repo.clone(),
                    t.stage.clone(),
                    human_duration(t.age_in_stage_s),
                    format!("${:.2}", t.cost_usd),
                    t.flags.join(","),
                ]
            })
            .collect(),
        "no active tasks",
    );
    output::table(
        Some("serial gates"),
        &["repo", "active task", "waiting", "paused", "frozen"],
        s.serial_gate
            .iter()
            .map(|(repo, g)| {
                vec![
                    repo.clone(),
                    g.active_task.clone().unwrap_or_else(|| "-".into()),
                    g.waiting.join(", "),
                    g.paused.join(", "),
                    if g.frozen { "yes".into() } else { "no".into() },
                ]
            })
            .collect(),
        "no serial-gate repos",
    );
    if !s.freezes.is_empty() {
        output::table(
            Some("freezes"),
            &["repo", "by", "since", "reason"],
            s.freezes
                .iter()
                .map(|f| {
                    vec![
                        f.repo.clone(),
                        f.frozen_by.clone(),
                        f.frozen_at.clone(),
                        f.reason.clone(),
                    ]
                })
                .collect(),
            "none",
        );
    }
    let leases: Vec<Vec<String>> = s
        .leases
        .transition
        .iter()
        .map(|l| ("transition", l))
        .chain(s.leases.merge.iter().map(|l| ("merge", l)))
        .map(|(kind, l)| {
            let of = match (kind, &l.work_item) {
                ("merge", Some(wi)) => format!("repo {}, held by {wi}", l.repo),
                (_, Some(wi)) => wi.clone(),
                (_, None) => l.repo.clone(),
            };
            vec![
                kind.to_string(),
                of,
                format!("{} pid {}", l.owner_kind, l.pid),
                l.acquired_at.clone(),
                l.liveness.clone(),
            ]
        })
        .collect();
    if !leases.is_empty() {
        output::table(
            Some("leases"),
            &["lease", "of", "owner", "since", "liveness"],
            leases,
            "none",
        );
    }
    Ok(Code::Ok)
}
