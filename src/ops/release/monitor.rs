//! The post-deploy watch of a `done` task (design §7.4): every `interval_s` for `window_s`, a
//! GET of each configured URL (its status, and a substring when asked); `fail_threshold` failed
//! rounds in a row, or a share of failed rounds above `error_ratio`, is DEGRADED: the repo is
//! frozen (later tasks wait) and an alert goes out. The log is
//! `<state_dir>/artifacts/<WI>/16-post-deploy-log.md` (the task branch is merged and its
//! worktree gone by then).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::work::{Ending, Rel, stamp};
use crate::db;
use crate::domain::history::{Actor, Outcome};
use crate::domain::release::{self, Health};
use crate::ext::http::{GetResult, Http};
use crate::ops::apply::record_here;

pub(super) fn run(rel: &Rel<'_>) -> Result<Ending> {
    let ctx = rel.ctx;
    let Some(p) = &rel.repo.post_deploy else {
        return Ok(Ending::Done {
            detail: "no post-deploy watch configured".into(),
            advance: false,
        });
    };
    let http = Http::new(Duration::from_secs(10));
    let started = Instant::now();
    let window = Duration::from_secs(p.window_s);
    let mut rounds = Vec::new();
    let mut lines = Vec::new();
    loop {
        let mut ok_all = true;
        for u in &p.urls {
            let (ok, what) = match http.get(&u.url) {
                GetResult::Answer { status, body } => {
                    let body_ok = u
                        .contains
                        .as_ref()
                        .is_none_or(|c| body.contains(c.as_str()));
                    (
                        status == u.status && body_ok,
                        if status != u.status {
                            format!("status {status}, expected {}", u.status)
                        } else if !body_ok {
                            "the body lacks the expected text".to_string()
                        } else {
                            format!("status {status}")
                        },
                    )
                }
                GetResult::Unreachable(e) | GetResult::Invalid(e) => {
                    (false, format!("no answer: {e}"))
                }
            };
            ok_all &= ok;
            lines.push(format!(
                "{:>5.1}s {} {}: {what}",
                started.elapsed().as_secs_f64(),
                if ok { "ok  " } else { "FAIL" },
                u.url
            ));
        }
        rounds.push(ok_all);
        let verdict = release::judge_health(&rounds, p.fail_threshold, p.error_ratio);
        let early = matches!(&verdict, Health::Degraded(w) if w.contains("in a row"));
        if early || started.elapsed() + Duration::from_secs(p.interval_s) > window {
            break;
        }
        std::thread::sleep(Duration::from_secs(p.interval_s));
    }
    let health = release::judge_health(&rounds, p.fail_threshold, p.error_ratio);
    let text = stamp(
        |h| release::post_deploy_log(h, &health, &lines),
        &rel.head(),
    );
    let dir = ctx
        .config
        .state_dir
        .join("artifacts")
        .join(&rel.task.base_work_item);
    crate::ext::sys::private_dir(&dir, 0o750)?;
    let path = dir.join("16-post-deploy-log.md");
    std::fs::write(&path, text).with_context(|| format!("writing `{}`", path.display()))?;
    let detail = match &health {
        Health::Healthy(w) => format!("post-deploy HEALTHY: {w}"),
        Health::Degraded(w) => format!("post-deploy DEGRADED: {w}"),
    };
    ctx.write(|ctx, tx| {
        record_here(
            ctx,
            tx,
            rel.task,
            Actor::Supervisor,
            Outcome::Checked,
            &detail,
        )?;
        if let Health::Degraded(w) = &health {
            let reason = format!(
                "post-deploy of {} DEGRADED: {w} (see {})",
                rel.task.work_item,
                path.display()
            );
            if db::misc::freeze(tx, &rel.repo.name, &reason, "post-deploy-monitor", ctx.now)? {
                db::misc::journal(tx, Some(rel.task.id), "frozen", &reason, ctx.now)?;
            }
            let text = format!("repo `{}` frozen: {reason}", rel.repo.name);
            crate::ops::notify::alert(ctx, tx, Some(rel.task), &text);
        }
        Ok(())
    })?;
    Ok(Ending::Done {
        detail,
        advance: false,
    })
}
