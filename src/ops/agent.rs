//! The agent run of a job (design §4.4): model and effort, the argv, the role prompt file and the
//! scrubbed environment; the agent in its own process group under the wall-clock and inactivity
//! timeouts and the `result` line; then the `agent_runs` row and the outcome — a usage limit
//! (the breaker, no attempt spent), a failure (retry or fail), or success: commit and push as the
//! role, the CI command where the repo has one, and the advance as the role.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{Context, Result};
use tracing::{info, warn};

use crate::config::{CiMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::agent::{self, AgentResult};
use crate::domain::history::Actor;
use crate::domain::stage::{JobStatus, Role};
use crate::ext::failpoint;
use crate::ext::proc::{self, Ending, RunOutcome, Spec};
use crate::ops::advance;
use crate::ops::attempt::{AttemptOutcome, JobReport, retry_or_fail, still_ours, tail_lines};
use crate::ops::confine;
use crate::ops::worktree::{self, Identity};

/// Launch the agent of `job` in `worktree` and finish its run.
pub fn run(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
) -> Result<JobReport> {
    let outcome = launch_agent(ctx, job, attempt, task, repo, worktree)?;
    finish_agent_run(ctx, job, attempt, task, repo, worktree, outcome)
}

/// The compiled-in role prompts (design §2: `commands/<role>.md`).
pub fn builtin_prompt(role: Role) -> &'static str {
    match role {
        Role::Analyst => include_str!("../../commands/analyst.md"),
        Role::Architect => include_str!("../../commands/architect.md"),
        Role::Developer => include_str!("../../commands/developer.md"),
        Role::Reviewer => include_str!("../../commands/reviewer.md"),
        Role::Tester => include_str!("../../commands/tester.md"),
        Role::Deployer => include_str!("../../commands/deployer.md"),
        // Deterministic roles: `ops::job` runs them itself and never reaches an agent.
        Role::Releaser | Role::Monitor => "",
    }
}

fn default_timeout(role: Role) -> u64 {
    match role {
        Role::Developer => 3600,
        Role::Reviewer => 3000,
        Role::Analyst
        | Role::Architect
        | Role::Tester
        | Role::Deployer
        | Role::Releaser
        | Role::Monitor => 1800,
    }
}

/// Build the argv, environment and timeouts, and run the agent.
fn launch_agent(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
) -> Result<(RunOutcome, Option<String>, Option<String>, i64)> {
    let role = job.role;
    let cfg = &ctx.config.agent;
    let role_cfg = cfg.roles.get(role.as_str());
    let repo_cfg = repo.agent.get(role.as_str());
    let env_model =
        std::env::var(format!("ORCH_AGENT_MODEL_{}", role.as_str().to_uppercase())).ok();
    let env_effort = std::env::var(format!(
        "ORCH_AGENT_EFFORT_{}",
        role.as_str().to_uppercase()
    ))
    .ok();
    let repo_label = format!("repos[{}].agent.{role}", repo.name);
    let (model, w1) = agent::resolve(
        "model",
        &[
            (
                repo_label.as_str(),
                repo_cfg.and_then(|r| r.model.as_deref()),
            ),
            ("ORCH_AGENT_MODEL_<ROLE>", env_model.as_deref()),
            ("agent.roles", role_cfg.and_then(|r| r.model.as_deref())),
        ],
        agent::valid_model,
    );
    let (effort, w2) = agent::resolve(
        "effort",
        &[
            (
                repo_label.as_str(),
                repo_cfg.and_then(|r| r.effort.as_deref()),
            ),
            ("ORCH_AGENT_EFFORT_<ROLE>", env_effort.as_deref()),
            ("agent.roles", role_cfg.and_then(|r| r.effort.as_deref())),
        ],
        agent::valid_effort,
    );
    for w in w1.iter().chain(&w2) {
        warn!("{w}");
    }
    let prompt_text = match &cfg.prompts_dir {
        Some(dir) => {
            let p = dir.join(format!("{role}.md"));
            std::fs::read_to_string(&p).unwrap_or_else(|e| {
                warn!(
                    "cannot read `{}` ({e}); using the built-in {role} prompt",
                    p.display()
                );
                builtin_prompt(role).to_string()
            })
        }
        None => builtin_prompt(role).to_string(),
    };
    let prompts = ctx.config.state_dir.join("prompts");
    crate::ext::sys::private_dir(&prompts, 0o750)?;
    let prompt_file = prompts.join(format!("job-{}-{role}.md", job.id.0));
    std::fs::write(&prompt_file, prompt_text)
        .with_context(|| format!("writing `{}`", prompt_file.display()))?;
    let session = db::jobs::last_session(ctx.db.conn(), job.id)?;
    let wt = worktree.display().to_string();
    let pf = prompt_file.display().to_string();
    let tools = repo_cfg
        .and_then(|r| r.tools.clone())
        .or_else(|| role_cfg.and_then(|r| r.tools.clone()))
        .unwrap_or_else(|| agent::default_tools(role).to_string());
    let argv = agent::expand_argv(
        &cfg.argv,
        &[
            ("model", model.as_deref()),
            ("effort", effort.as_deref()),
            ("prompt_file", Some(&pf)),
            ("role", Some(role.as_str())),
            ("worktree", Some(&wt)),
            ("session_id", session.as_deref()),
            ("tools", Some(&tools)),
        ],
    );
    let wi = &task.base_work_item;
    let artifact_dir = format!("docs/work-items/{wi}");
    let child_env = worktree::child_env(
        ctx,
        task,
        &[
            ("ORCH_ROLE", role.to_string()),
            ("ORCH_STAGE", job.stage.to_string()),
            ("ORCH_JOB_ID", job.id.0.to_string()),
            ("ORCH_ARTIFACT_DIR", artifact_dir),
        ],
    );
    let timeout = role_cfg
        .and_then(|r| r.timeout_s)
        .unwrap_or_else(|| default_timeout(role));
    let log = ctx
        .config
        .state_dir
        .join("logs")
        .join(format!("job-{}.agent.log", job.id.0));
    let started_at = crate::ctx::now();
    info!(argv = ?argv, "launching the agent");
    let mut spec = Spec {
        argv: argv.into_iter().map(OsString::from).collect(),
        cwd: worktree.to_path_buf(),
        env: child_env,
        stdin: Some(job.prompt.clone().into_bytes()),
        log: Some(log),
        wall_timeout: Duration::from_secs(timeout),
        inactivity_timeout: Some(Duration::from_secs(cfg.inactivity_timeout_s)),
        grace: Duration::from_secs(5),
        end_marker: Some(Box::new(agent::is_result_line)),
        linger_grace: Duration::from_secs(3),
    };
    confine::confine(
        ctx,
        repo,
        true,
        std::slice::from_ref(&prompt_file),
        &format!("the {role} agent of `{}`", task.work_item),
        &mut spec,
    )?;
    let outcome = proc::run_supervised(
        spec,
        worktree::record_group(ctx, job.id, attempt, "job.agent-running"),
    );
    Ok((outcome, model, effort, started_at))
}

#[allow(clippy::too_many_arguments)]
fn finish_agent_run(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
    (outcome, model, effort, started_at): (RunOutcome, Option<String>, Option<String>, i64),
) -> Result<JobReport> {
    let now = crate::ctx::now();
    let result: Option<AgentResult> = outcome
        .result_line
        .as_deref()
        .and_then(agent::parse_result)
        .or_else(|| {
            outcome
                .stdout_tail
                .lines()
                .rev()
                .find_map(agent::parse_result)
        });
    let code = match &outcome.ending {
        Ending::Exited(c) => Some(*c as i64),
        Ending::MarkedDone { code } => code.map(|c| c as i64),
        Ending::Signalled(_) | Ending::TimedOut | Ending::Inactive | Ending::SpawnFailed(..) => {
            None
        }
    };
    let r = result.clone().unwrap_or_default();
    if let Some(bad) = &r.rejected_session_id {
        warn!(
            "dropping the agent's session id `{bad}`: not 1 to 128 characters of \
             `A-Za-z0-9_-`; it is neither stored nor resumed"
        );
    }
    ctx.db.write(|tx| {
        db::jobs::insert_agent_run(
            tx,
            &db::jobs::AgentRun {
                job_id: job.id,
                task_id: task.id,
                role: job.role,
                model: model.as_deref(),
                effort: effort.as_deref(),
                started_at,
                finished_at: now,
                duration_ms: outcome.duration.as_millis() as i64,
                exit_code: code,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                cache_read_tokens: r.cache_read_tokens,
                cache_write_tokens: r.cache_write_tokens,
                cost_usd: r.cost_usd,
                session_id: r.session_id.as_deref(),
            },
        )
    })?;
    let report = |status: AttemptOutcome, detail: String, adv: Option<advance::Report>| JobReport {
        job: job.id,
        work_item: task.work_item.clone(),
        role: job.role,
        status,
        detail,
        advance: adv,
    };

    let ok = matches!(
        outcome.ending,
        Ending::Exited(0)
            | Ending::MarkedDone {
                code: Some(0) | None
            }
    ) && !result.as_ref().is_some_and(|r| r.is_error)
        && (result.is_some() || matches!(outcome.ending, Ending::Exited(0)));
    // Only a run that did not succeed can be a usage-limit answer, and only its structured
    // result says so: what the agent printed is data, and must not stop all dispatch.
    if !ok && agent::is_usage_limit(result.as_ref()) {
        let until = now + ctx.config.agent.usage_limit_backoff_s as i64;
        let why = format!("usage limit reached ({})", job.role);
        ctx.db.write(|tx| {
            db::misc::open_breaker(tx, until, &why)?;
            let text = format!(
                "{why}; dispatch suspended until {}",
                crate::domain::time::rfc3339(until)
            );
            crate::ops::notify::alert(ctx, tx, Some(task), &text);
            db::jobs::requeue(tx, job.id, attempt, until, &why, true)
        })?;
        return Ok(report(AttemptOutcome::Queued, why, None));
    }

    let ended = describe(&outcome.ending);
    if !ok {
        ctx.db
            .write(|tx| db::jobs::set_exit(tx, job.id, attempt, code, Some(ended.as_str())))?;
        let detail = format!(
            "agent {ended}; output tail:\n{}",
            tail_lines(&outcome.combined_tail, 20)
        );
        let status = retry_or_fail(ctx, job, attempt, task, &detail)?;
        return Ok(report(status, detail, None));
    }

    // Success: commit what the agent changed as the role, push the feature branch. A
    // supervisor whose attempt was taken over (reaped, cancelled) must not push over the new
    // owner: the fence is checked before each side effect.
    failpoint::hit("job.agent-exited");
    let stale = || {
        report(
            AttemptOutcome::Stale,
            "another attempt owns this job now; outcome dropped".into(),
            None,
        )
    };
    if !still_ours(ctx, job.id, attempt)? {
        return Ok(stale());
    }
    let msg = format!(
        "{}: {} (job {}, attempt {attempt})",
        task.base_work_item, job.role, job.id.0
    );
    let sha = worktree::commit(ctx, worktree, None, &msg, &Identity::of_role(job.role))?;
    failpoint::hit("job.after-commit");
    if !still_ours(ctx, job.id, attempt)? {
        return Ok(stale());
    }
    worktree::push(ctx, repo, task, worktree)?;
    info!(commit = ?sha, "pushed {}", task.branch);
    failpoint::hit("job.after-push");

    if job.role == Role::Developer && repo.ci.mode == CiMode::Command {
        run_ci_command(ctx, job, attempt, task, repo, worktree)?;
    }

    // Exit 0 is recorded only once the work is pushed and the CI command has answered: a
    // reaper that finds this supervisor dead with exit 0 may then finish the job without
    // losing anything; before that, it runs the job again.
    ctx.db
        .write(|tx| db::jobs::set_exit(tx, job.id, attempt, code.or(Some(0)), None))?;
    failpoint::hit("job.after-exit");

    if !ctx.db.write(|tx| {
        db::jobs::finish(
            tx,
            job.id,
            attempt,
            JobStatus::Done,
            None,
            crate::ctx::now(),
        )
    })? {
        return Ok(stale());
    }
    failpoint::hit("job.after-finish");
    let rep = worktree::advance_as(ctx, task, job.stage, job.role, Actor::Supervisor, None);
    let rep = match rep {
        Ok(r) => r,
        Err(e) => {
            // The reconciler will retry the advance; the job itself is done.
            warn!("advance after the job failed: {e:#}");
            return Ok(report(
                AttemptOutcome::Done,
                format!("advance failed: {e:#}"),
                None,
            ));
        }
    };
    // Done, but the stage's work is missing or invalid: the role gets one more run, then the
    // task is held (it must never sit with no job and no alert).
    if let Some(problem) = &rep.work_missing {
        let fresh = db::tasks::get(ctx.db.conn(), task.id)?;
        if fresh.stage == job.stage {
            let what = crate::ops::apply::missing_work(
                &ctx.reopen()?,
                &fresh,
                job.role,
                Actor::Supervisor,
                problem,
            )?;
            warn!(
                "the {} left its work missing ({problem}): {what:?}",
                job.role
            );
        }
    }
    Ok(report(AttemptOutcome::Done, rep.reason.clone(), Some(rep)))
}

/// `ci.mode: command` (design §3.4): run the check in the worktree and record it as the CI status
/// of the branch head, where the development gate reads it.
fn run_ci_command(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
) -> Result<()> {
    let git = ctx.git();
    let head = git
        .head(
            &repo.git_ref(),
            &crate::ext::git::Source::Worktree(worktree.to_path_buf()),
        )?
        .context("the worktree has no HEAD")?;
    let env = worktree::child_env(ctx, task, &[]);
    let mut spec = Spec {
        argv: repo.ci.argv.iter().map(OsString::from).collect(),
        cwd: worktree.to_path_buf(),
        env,
        stdin: None,
        log: Some(
            ctx.config
                .state_dir
                .join("logs")
                .join(format!("ci-{}.log", task.base_work_item)),
        ),
        wall_timeout: Duration::from_secs(repo.ci.timeout_s.unwrap_or(900)),
        inactivity_timeout: None,
        grace: Duration::from_secs(5),
        end_marker: None,
        linger_grace: Duration::from_secs(1),
    };
    confine::confine(
        ctx,
        repo,
        repo.ci.sandbox,
        &[],
        &format!("the CI command of `{}`", task.work_item),
        &mut spec,
    )?;
    let out = proc::run_supervised(
        spec,
        worktree::record_group(ctx, job.id, attempt, "ci.running"),
    );
    failpoint::hit("ci.after-exit");
    let (state, detail) = match out.ending {
        Ending::Exited(0) => ("success", String::new()),
        ref other => (
            "failure",
            format!(
                "`{}` {}:\n{}",
                repo.ci.argv.join(" "),
                describe(other),
                tail_lines(&out.combined_tail, 40)
            ),
        ),
    };
    ctx.db.write(|tx| {
        db::misc::set_ci_status(
            tx,
            &repo.name,
            &head,
            "orch/command",
            state,
            &detail,
            crate::ctx::now(),
        )
    })
}

fn describe(e: &Ending) -> String {
    e.describe()
}
