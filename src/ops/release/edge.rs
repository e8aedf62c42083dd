//! The `deploy-staging → deploy` sub-gates (design §7.1), in order, each once per visit: the
//! secret scan, the merge gate (merge lease, rebase onto fresh main, push with a lease, re-test)
//! and coverage. A failed step is recorded (and the merge lease given back) and the job's
//! advance rolls the task back with the step's findings in the developer's prompt.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use tracing::info;

use super::work::{Ending, Rel, first_line, stamp, worktree_of};
use crate::db;
use crate::domain::release::{self, Step, StepStatus};
use crate::domain::runner::Class;
use crate::ext::failpoint;
use crate::ext::git::Rebased;
use crate::ext::proc::{self, Ending as ProcEnding, Spec};
use crate::ext::sys;
use crate::ops::{confine, runner, worktree};

/// The job prompt marker of a releaser re-queued after an infrastructure hiccup of its re-test.
pub const RETEST_RETRY_MARKER: &str = "orch: merge re-test retry";

pub(super) fn run(rel: &Rel<'_>) -> Result<Ending> {
    let wt = worktree_of(rel)?;
    if rel.repo.security_enabled() && rel.step(Step::Security)?.is_none() {
        let pass = security(rel, &wt)?;
        failpoint::hit("release.after-security");
        if !pass {
            return Ok(done("security scan failed"));
        }
    }
    if rel.repo.merge.is_some() && rel.step(Step::MergeGate)?.is_none() {
        match merge_gate(rel, &wt)? {
            Gate::Passed => {}
            Gate::Failed(why) => return Ok(done(&why)),
            Gate::Wait(e) => return Ok(e),
        }
    }
    if rel.repo.coverage.is_some() && rel.step(Step::Coverage)?.is_none() && !coverage(rel, &wt)? {
        return Ok(done("coverage failed"));
    }
    Ok(done("release steps of deploy-staging recorded"))
}

fn done(detail: &str) -> Ending {
    Ending::Done {
        detail: detail.to_string(),
        advance: true,
    }
}

// ---- 1. the secret scan ----

fn security(rel: &Rel<'_>, wt: &Path) -> Result<bool> {
    let ctx = rel.ctx;
    let git = ctx.git();
    let main = format!("origin/{}", rel.repo.main);
    let head = git.rev_parse(wt, "HEAD")?;
    let range = format!("{main}..{}", &head[..head.len().min(12)]);
    let cfg = rel.repo.security.as_ref();
    let argv: Vec<String> = match cfg.map(|s| s.argv.clone()).filter(|a| !a.is_empty()) {
        Some(a) => a,
        None if confine_free_gitleaks().is_some() => vec![
            "gitleaks".into(),
            "detect".into(),
            "--no-banner".into(),
            "--redact".into(),
            "--source".into(),
            ".".into(),
            "--log-opts={range}".into(),
        ],
        None => Vec::new(),
    };
    let (pass, scanner, findings, output) = if argv.is_empty() {
        let diff = git.added_diff(wt, &main, &head)?;
        let findings = release::scan(&release::added_lines(&diff));
        (
            findings.is_empty(),
            "builtin".to_string(),
            findings,
            String::new(),
        )
    } else {
        let argv: Vec<OsString> = argv
            .iter()
            .map(|a| OsString::from(a.replace("{range}", &format!("{main}..{head}"))))
            .collect();
        let timeout = cfg.map(|s| s.timeout_s).unwrap_or(600);
        let env = worktree::child_env(ctx, rel.task, &[]);
        let mut spec = Spec::new(argv, wt, env, Duration::from_secs(timeout));
        spec.log = Some(
            ctx.config
                .state_dir
                .join("logs")
                .join(format!("security-{}.log", rel.task.base_work_item)),
        );
        confine::confine(ctx, rel.repo, true, &[], "the secret scanner", &mut spec)?;
        let out = proc::run_supervised(
            spec,
            worktree::record_group(ctx, rel.job.id, rel.attempt, "release.scanner-running"),
        );
        let ok = matches!(out.ending, ProcEnding::Exited(0));
        let tail = crate::ops::attempt::tail_lines(&out.combined_tail, 40);
        (ok, "command".to_string(), Vec::new(), tail)
    };
    let head_r = rel.head();
    let text = stamp(
        |h| release::security_report(h, pass, &scanner, &range, &findings, &output),
        &head_r,
    );
    rel.publish(wt, Step::Security, &text)?;
    let detail = if pass {
        format!("PASS ({scanner}, {range})")
    } else if findings.is_empty() {
        format!("FAIL ({scanner}, {range}):\n{output}")
    } else {
        let lines: Vec<String> = findings
            .iter()
            .map(|f| {
                format!(
                    "{}:{}: {} (remove it and rotate it)",
                    f.file, f.line, f.rule
                )
            })
            .collect();
        format!(
            "FAIL: {} secret(s) added in {range}:\n{}",
            findings.len(),
            lines.join("\n")
        )
    };
    let status = if pass {
        StepStatus::Pass
    } else {
        StepStatus::Fail
    };
    rel.ctx
        .db
        .write(|tx| rel.record(tx, Step::Security, status, Some(&head), None, &detail))?;
    info!(work_item = %rel.task.work_item, "security scan: {}", first_line(&detail));
    Ok(pass)
}

/// `gitleaks` on PATH (the default scanner when installed).
fn confine_free_gitleaks() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("gitleaks"))
        .find(|p| p.is_file())
}

// ---- 2. the merge gate ----

enum Gate {
    Passed,
    Failed(String),
    Wait(Ending),
}

fn merge_gate(rel: &Rel<'_>, wt: &Path) -> Result<Gate> {
    let ctx = rel.ctx;
    let Some(mcfg) = &rel.repo.merge else {
        return Ok(Gate::Passed);
    };
    if let Some(busy) = take_merge_lease(rel)? {
        return Ok(Gate::Wait(Ending::Requeue {
            delay_s: mcfg.defer_s as i64,
            why: busy,
        }));
    }
    failpoint::hit("release.merge-lease-taken");
    let git = ctx.git();
    let r = rel.repo.git_ref();
    {
        let lock = git.lock(&rel.repo.name)?;
        git.fetch(&lock, &r, &[rel.task.branch.as_str()])?;
    }
    let main = format!("origin/{}", rel.repo.main);
    let base = git.rev_parse(wt, &main)?;
    // What the remote branch is, as just fetched: the lease of the push below.
    let remote_head = git
        .rev_parse(wt, &format!("origin/{}", rel.task.branch))
        .ok();
    let id = super::work::identity();
    let rebased = git.rebase_onto(wt, &main, &id.name, &id.email)?;
    let head = match rebased {
        Rebased::Conflict { paths } => {
            let detail = format!(
                "rebasing `{}` onto {main} ({}) conflicts in: {}\nRebase the branch onto {main} and resolve these paths.",
                rel.task.branch,
                &base[..12.min(base.len())],
                paths.join(", ")
            );
            return fail(rel, wt, &base, "the rebase onto main conflicts", &detail)
                .map(Gate::Failed);
        }
        Rebased::UpToDate { head } => head,
        Rebased::Rebased { head } => {
            failpoint::hit("release.after-rebase");
            head
        }
    };
    // The remote branch becomes the rebased head, replaced only while it is what was fetched
    // (a re-drive after a crash finds the worktree rebased and the remote not yet).
    if remote_head.as_deref() != Some(head.as_str()) {
        match &remote_head {
            Some(old) => git.push_rebased(&r, wt, &rel.task.branch, old)?,
            None => crate::ops::worktree::push(ctx, rel.repo, rel.task, wt)?,
        }
        failpoint::hit("release.after-rebased-push");
    }
    // The re-test, on exactly the head that will be merged.
    if let Some(suite) = runner::retest(ctx, rel.task, rel.repo, wt, rel.job.id, rel.attempt)? {
        failpoint::hit("release.after-retest");
        match suite.class {
            Class::CodePass => {}
            Class::CodeFail => {
                let detail = format!(
                    "the test suite is red on the rebased head {} ({}):\n{}",
                    &head[..12.min(head.len())],
                    suite.reason,
                    crate::ops::attempt::tail_lines(&suite.combined_tail, 60)
                );
                return fail(
                    rel,
                    wt,
                    &base,
                    "the re-test on the rebased head is red",
                    &detail,
                )
                .map(Gate::Failed);
            }
            Class::TransientInfra => {
                let t = rel.repo.tests.as_ref();
                let used = retries_used(rel)?;
                let max = t.map(|t| t.infra_max_retries).unwrap_or(0);
                if used >= max {
                    return Ok(Gate::Wait(Ending::Held(format!(
                        "the merge gate's re-test hit the infrastructure {used} times ({}): it needs a human",
                        suite.reason
                    ))));
                }
                let delay = t.map(|t| t.infra_retry_delay_s).unwrap_or(30) as i64;
                rel.ctx.db.write(|tx| {
                    db::jobs::mark_retry(tx, rel.job.id, RETEST_RETRY_MARKER, rel.ctx.now)
                })?;
                return Ok(Gate::Wait(Ending::Requeue {
                    delay_s: delay,
                    why: format!(
                        "merge gate re-test: {} ({}); retry {}/{max} in {delay}s",
                        suite.class.as_str(),
                        suite.reason,
                        used + 1
                    ),
                }));
            }
            Class::PermanentEnv => {
                return Ok(Gate::Wait(Ending::Held(format!(
                    "the merge gate's re-test cannot run here ({}): environment, not a code defect",
                    suite.reason
                ))));
            }
        }
    }
    let what = format!(
        "Rebased onto {main} at {}; pushed; re-tested green on {}.",
        &base[..12.min(base.len())],
        &head[..12.min(head.len())]
    );
    let text = stamp(
        |h| release::merge_gate_report(h, true, &base, Some(&head), &what, ""),
        &rel.head(),
    );
    rel.publish(wt, Step::MergeGate, &text)?;
    let detail = format!(
        "PASS: {} rebased on main at {}, re-tested green",
        &head[..12.min(head.len())],
        &base[..12.min(base.len())]
    );
    ctx.db.write(|tx| {
        rel.record(
            tx,
            Step::MergeGate,
            StepStatus::Pass,
            Some(&head),
            None,
            &detail,
        )
    })?;
    Ok(Gate::Passed)
}

/// Record a failed merge gate with its report and give the merge lease back.
fn fail(rel: &Rel<'_>, wt: &Path, base: &str, what: &str, detail: &str) -> Result<String> {
    let text = stamp(
        |h| release::merge_gate_report(h, false, base, None, what, detail),
        &rel.head(),
    );
    rel.publish(wt, Step::MergeGate, &text)?;
    rel.ctx.db.write(|tx| {
        rel.record(tx, Step::MergeGate, StepStatus::Fail, None, None, detail)?;
        db::release::merge_release_of_task(tx, rel.task.id)?;
        Ok(())
    })?;
    Ok(what.to_string())
}

/// How often this job's re-test was deferred already (a marker per deferral in its prompt).
fn retries_used(rel: &Rel<'_>) -> Result<u32> {
    Ok(db::jobs::get(rel.ctx.db.conn(), rel.job.id)?
        .map(|j| j.prompt.matches(RETEST_RETRY_MARKER).count() as u32)
        .unwrap_or(0))
}

/// Take the repo's merge lease for this task: free, already ours, or given up by a holder that
/// left the release stages (and whose process is gone). `Some(why)` when another task holds it.
fn take_merge_lease(rel: &Rel<'_>) -> Result<Option<String>> {
    let ctx = rel.ctx;
    let me = sys::self_identity()?;
    let repo = &rel.repo.name;
    ctx.db.write(|tx| {
        if db::release::merge_insert(tx, repo, rel.task.id, &me, crate::ctx::now())? {
            return Ok(None);
        }
        let Some(row) = db::leases::merge_get(tx, repo)? else {
            return Ok(None);
        };
        if row.task_id == Some(rel.task.id) || !crate::ops::lease::merge_held(tx, &row)? {
            let taken = db::release::merge_take_over(
                tx,
                repo,
                row.task_id,
                &row.owner,
                rel.task.id,
                &me,
                crate::ctx::now(),
            )?;
            return Ok((!taken).then(|| format!("the merge lease of `{repo}` changed hands")));
        }
        let holder = row
            .work_item
            .clone()
            .unwrap_or_else(|| format!("pid {}", row.owner.pid));
        Ok(Some(format!(
            "merge lease of `{repo}` held by {holder} since {}",
            crate::domain::time::rfc3339(row.acquired_at)
        )))
    })
}

// ---- 3. coverage ----

fn coverage(rel: &Rel<'_>, wt: &Path) -> Result<bool> {
    let ctx = rel.ctx;
    let Some(c) = &rel.repo.coverage else {
        return Ok(true);
    };
    let env = worktree::child_env(ctx, rel.task, &[]);
    let mut spec = Spec::new(&c.argv, wt, env, Duration::from_secs(c.timeout_s));
    spec.log = Some(
        ctx.config
            .state_dir
            .join("logs")
            .join(format!("coverage-{}.log", rel.task.base_work_item)),
    );
    confine::confine(
        ctx,
        rel.repo,
        c.sandbox,
        &[],
        "the coverage command",
        &mut spec,
    )?;
    let out = proc::run_supervised(
        spec,
        worktree::record_group(ctx, rel.job.id, rel.attempt, "release.coverage-running"),
    );
    let tail = crate::ops::attempt::tail_lines(&out.combined_tail, 40);
    let percent = match out.ending {
        ProcEnding::Exited(0) => release::parse_percent(&out.combined_tail),
        _ => None,
    };
    let baseline = db::release::coverage_baseline(ctx.db.conn(), &rel.repo.name)?;
    let verdict = match percent {
        Some(p) => release::judge_coverage(p, c.floor, baseline, c.ratchet, c.epsilon),
        None => Err(format!(
            "the coverage command gave no figure ({})",
            out.ending.describe()
        )),
    };
    let text = stamp(
        |h| release::coverage_report(h, percent, &verdict, &tail),
        &rel.head(),
    );
    rel.publish(wt, Step::Coverage, &text)?;
    let (status, detail) = match &verdict {
        Ok(w) => (StepStatus::Pass, w.clone()),
        Err(w) => (StepStatus::Fail, format!("{w}\n{tail}")),
    };
    ctx.db.write(|tx| {
        rel.record(tx, Step::Coverage, status, None, percent, &detail)?;
        if status == StepStatus::Fail {
            db::release::merge_release_of_task(tx, rel.task.id)?;
        }
        Ok(())
    })?;
    Ok(status == StepStatus::Pass)
}
