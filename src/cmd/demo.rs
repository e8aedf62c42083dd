//! `orch demo [--dir DIR] [--keep]`: the newcomer's first command. Builds a throwaway world and
//! drives one task to `done` with real ticks, showing progress on stderr and a summary table.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::Global;
use crate::domain::time::human_duration;
use crate::error::{Code, exit};
use crate::ops::demo;
use crate::output;

pub fn run(g: &Global, dir: Option<&Path>, keep: bool) -> Result<Code> {
    let keep = keep || dir.is_some();
    let dir = match dir {
        Some(d) => std::path::absolute(d)?,
        None => std::env::temp_dir().join(format!(
            "orch-demo-{}-{}",
            std::process::id(),
            crate::ctx::now()
        )),
    };
    let cfg = demo::build_world(&dir)?;
    let bar = if g.quiet || g.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let res = demo::drive(&dir, &cfg, |p| {
        bar.set_message(format!(
            "{}: stage {} · {} elapsed · {} job(s) run · {} tick(s)",
            demo::WORK_ITEM,
            p.stage,
            human_duration(p.elapsed.as_secs() as i64),
            p.jobs_run,
            p.ticks
        ));
    });
    bar.finish_and_clear();
    let res = res?;
    // A failed demo keeps its world: the logs inside it say why.
    let kept = keep || !res.reached_done;
    if !kept {
        let _ = std::fs::remove_dir_all(&res.dir);
    }
    if g.json {
        output::json(&DemoOut {
            schema_version: 1,
            work_item: demo::WORK_ITEM,
            stage: res.stage.as_str(),
            reached_done: res.reached_done,
            elapsed_s: res.elapsed.as_secs_f64(),
            ticks: res.ticks,
            kept,
            dir: kept.then(|| res.dir.display().to_string()),
            config: kept.then(|| cfg.display().to_string()),
            jobs: &res.rows,
        });
        return finish(&res, &dir);
    }
    output::table(
        Some(&format!(
            "{} reached `{}` in {:.1}s ({} ticks)",
            demo::WORK_ITEM,
            res.stage,
            res.elapsed.as_secs_f64(),
            res.ticks
        )),
        &["stage", "role", "job", "duration", "verdict"],
        res.rows
            .iter()
            .map(|r| {
                vec![
                    r.stage.clone(),
                    r.role.clone(),
                    r.status.clone(),
                    r.duration_s.map(|d| format!("{d}s")).unwrap_or_default(),
                    r.verdict.clone(),
                ]
            })
            .collect(),
        "no jobs ran",
    );
    if kept {
        output::line(&format!(
            "the world is in {}: config {}, remote {}; try `orch --config {} task show {}`",
            res.dir.display(),
            cfg.display(),
            res.dir.join("remote.git").display(),
            cfg.display(),
            demo::WORK_ITEM
        ));
    } else {
        output::line("the world was removed (keep it with `--keep` or `--dir DIR`)");
    }
    finish(&res, &dir)
}

/// `--json`: the run as one object (`docs/json.md`).
#[derive(serde::Serialize)]
struct DemoOut<'a> {
    schema_version: u32,
    work_item: &'static str,
    stage: &'static str,
    reached_done: bool,
    elapsed_s: f64,
    ticks: u64,
    kept: bool,
    dir: Option<String>,
    config: Option<String>,
    jobs: &'a [demo::Row],
}

fn finish(res: &demo::DemoResult, dir: &Path) -> Result<Code> {
    if res.reached_done {
        Ok(Code::Ok)
    } else {
        Err(exit(
            Code::Runtime,
            format!(
                "the demo task stopped in `{}` before `done`; see {}",
                res.stage,
                dir.join("state/logs").display()
            ),
        ))
    }
}
