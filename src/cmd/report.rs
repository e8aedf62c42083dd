//! `orch report overrides` (the audit trail of operator overrides, with who made each) and
//! `orch report cost` (what the agents cost per task).

use anyhow::Result;
use serde::Serialize;

use crate::cli::ReportCmd;
use crate::ctx::Ctx;
use crate::db;
use crate::domain::time::{human_duration, rfc3339};
use crate::error::{Code, usage};
use crate::output;

#[derive(Serialize)]
struct OverrideOut {
    work_item: String,
    from: String,
    to: String,
    reason: String,
    overridden_verdict: Option<String>,
    artifact_sha256: Option<String>,
    /// The person who made the override (rows from before it was recorded have none).
    by: Option<String>,
    at: String,
}

#[derive(Serialize)]
struct Overrides {
    schema_version: u32,
    overrides: Vec<OverrideOut>,
}

#[derive(Serialize)]
struct CostRow {
    work_item: String,
    repo: String,
    stage: String,
    runs: u64,
    cost_usd: f64,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    wall_s: u64,
}

#[derive(Serialize)]
struct CostReport {
    schema_version: u32,
    since: Option<String>,
    repo: Option<String>,
    total: CostRow,
    tasks: Vec<CostRow>,
}

fn cost_row(work_item: String, repo: String, stage: String, s: &db::usage::Spent) -> CostRow {
    CostRow {
        work_item,
        repo,
        stage,
        runs: s.runs,
        cost_usd: s.cost_usd,
        input_tokens: s.input_tokens,
        output_tokens: s.output_tokens,
        cache_read_tokens: s.cache_read_tokens,
        cache_write_tokens: s.cache_write_tokens,
        wall_s: s.wall_ms / 1000,
    }
}

/// `orch report cost [--since WHEN] [--repo R]`: spending per task, the most expensive first.
fn cost(ctx: &Ctx, since: Option<&str>, repo: Option<&str>) -> Result<Code> {
    if let Some(r) = repo
        && ctx.config.repo(r).is_none()
    {
        return Err(usage(format!(
            "unknown repo `{}`",
            crate::domain::ids::printable(r)
        )));
    }
    let from = match since {
        Some(s) => crate::domain::time::parse_since(s, ctx.now).map_err(usage)?,
        None => 0,
    };
    let rows = db::usage::report(ctx.db.conn(), from, repo)?;
    let mut total = db::usage::Spent::default();
    for r in &rows {
        total.runs += r.spent.runs;
        total.cost_usd += r.spent.cost_usd;
        total.input_tokens += r.spent.input_tokens;
        total.output_tokens += r.spent.output_tokens;
        total.cache_read_tokens += r.spent.cache_read_tokens;
        total.cache_write_tokens += r.spent.cache_write_tokens;
        total.wall_ms += r.spent.wall_ms;
    }
    let tasks: Vec<CostRow> = rows
        .iter()
        .map(|r| {
            cost_row(
                r.work_item.clone(),
                r.repo.clone(),
                r.stage.to_string(),
                &r.spent,
            )
        })
        .collect();
    if ctx.json {
        output::json(&CostReport {
            schema_version: 1,
            since: since.map(|_| rfc3339(from)),
            repo: repo.map(String::from),
            total: cost_row("total".into(), String::new(), String::new(), &total),
            tasks,
        });
        return Ok(Code::Ok);
    }
    let line = |c: &CostRow| {
        vec![
            c.work_item.clone(),
            c.repo.clone(),
            c.stage.clone(),
            c.runs.to_string(),
            format!("${:.2}", c.cost_usd),
            format!("{} / {}", c.input_tokens, c.output_tokens),
            format!("{} / {}", c.cache_read_tokens, c.cache_write_tokens),
            human_duration(c.wall_s as i64),
        ]
    };
    let mut table: Vec<Vec<String>> = tasks.iter().map(line).collect();
    if !table.is_empty() {
        table.push(line(&cost_row(
            "total".into(),
            String::new(),
            String::new(),
            &total,
        )));
    }
    output::table(
        since
            .map(|_| format!("agent runs since {}", rfc3339(from)))
            .as_deref(),
        &[
            "work item",
            "repo",
            "stage",
            "runs",
            "cost",
            "tokens in / out",
            "cache r / w",
            "wall",
        ],
        table,
        "no agent runs",
    );
    Ok(Code::Ok)
}

pub fn run(ctx: &mut Ctx, cmd: ReportCmd) -> Result<Code> {
    match cmd {
        ReportCmd::Cost { since, repo } => cost(ctx, since.as_deref(), repo.as_deref()),
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
                    by: t.by,
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
                            o.by.unwrap_or_else(|| "operator".into()),
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
                        "by",
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
