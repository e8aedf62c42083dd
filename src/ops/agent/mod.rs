//! The agent run of a job (design §4.4): the argv (`invocation`), the role prompt file and the
//! scrubbed environment; the agent in its own process group under the wall-clock and inactivity
//! timeouts and the `result` line; then the `agent_runs` row and what the run was
//! (`domain::run::classify` over the stream of this attempt). Anything but a success is settled
//! by `fault` (a usage limit, a provider outage, an environment defect, a failure); a success
//! has the role's write scope checked, is committed and pushed as the role, gets the CI command
//! where the repo has one, and ends in the advance as the role.

use std::ffi::OsString;
use std::io::{BufRead, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use tracing::{info, warn};

use crate::config::{CiMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::agent;
use crate::domain::history::{Actor, Outcome};
use crate::domain::run::RunClass;
use crate::domain::stage::{JobStatus, Role};
use crate::domain::stream::{self, Facts};
use crate::domain::time::Ts;
use crate::ext::failpoint;
use crate::ext::proc::{self, Ending, RunOutcome, Spec};
use crate::ops::advance;
use crate::ops::attempt::{AttemptOutcome, JobReport, retry_or_fail, still_ours, tail_lines};
use crate::ops::confine;
use crate::ops::worktree::{self, Identity};

mod fault;
mod invocation;

pub use fault::{clock, run_end};
pub use invocation::{Invocation, builtin_prompt, invocation};

/// Launch the agent of `job` in `worktree` and finish its run.
pub fn run(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
) -> Result<JobReport> {
    let launched = launch_agent(ctx, job, attempt, task, repo, worktree)?;
    finish_agent_run(ctx, job, attempt, task, repo, worktree, launched)
}

/// What `launch_agent` hands to `finish_agent_run`.
struct Launched {
    outcome: RunOutcome,
    model: Option<String>,
    effort: Option<String>,
    started_at: Ts,
    /// The agent's log, and where this attempt's stream begins in it.
    log: PathBuf,
    offset: u64,
    /// HEAD of the worktree before the agent ran: what the write scope is checked against.
    start: Option<String>,
}

/// Build the argv, environment and timeouts, and run the agent.
fn launch_agent(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
) -> Result<Launched> {
    let role = job.role;
    let cfg = &ctx.config.agent;
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
    let inv = invocation(
        &ctx.config,
        role,
        Some(repo),
        &prompt_file,
        worktree,
        session.as_deref(),
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
    let role_cfg = cfg.roles.get(role.as_str());
    let timeout = role_cfg
        .and_then(|r| r.timeout_s)
        .unwrap_or_else(|| invocation::default_timeout(role));
    let log = ctx
        .config
        .state_dir
        .join("logs")
        .join(format!("job-{}.agent.log", job.id.0));
    let git = ctx.git();
    let start = git.rev_parse(worktree, "HEAD").ok();
    let mut stdin = job.prompt.clone();
    if role == Role::Reviewer {
        stdin.push_str(&protected_section(ctx, repo, task, worktree));
    }
    let offset = open_attempt(&log, job, attempt)?;
    let started_at = crate::ctx::now();
    info!(argv = ?inv.argv, "launching the agent");
    let mut spec = Spec {
        argv: inv.argv.into_iter().map(OsString::from).collect(),
        cwd: worktree.to_path_buf(),
        env: child_env,
        stdin: Some(stdin.into_bytes()),
        log: Some(log.clone()),
        wall_timeout: Duration::from_secs(timeout),
        inactivity_timeout: Some(Duration::from_secs(cfg.inactivity_timeout_s)),
        grace: Duration::from_secs(5),
        end_marker: Some(Box::new(agent::is_result_line)),
        linger_grace: Duration::from_secs(3),
    };
    // The agent program itself shows through wherever it is installed (under the service
    // user's home, which may be the hidden state directory, or under /tmp).
    let mut readable = vec![prompt_file.clone()];
    readable.extend(confine::program_paths(&ctx.config, &spec.argv, &spec.env));
    confine::confine(
        ctx,
        repo,
        true,
        &readable,
        &format!("the {role} agent of `{}`", task.work_item),
        &mut spec,
    )?;
    let outcome = proc::run_supervised(
        spec,
        worktree::record_group(ctx, job.id, attempt, "job.agent-running"),
    );
    Ok(Launched {
        outcome,
        model: inv.model,
        effort: inv.effort,
        started_at,
        log,
        offset,
        start,
    })
}

/// Mark the start of attempt `attempt` in the agent's log (a JSON line of orch's own, so the log
/// stays one JSON object per line) and return where its stream begins.
fn open_attempt(log: &Path, job: &JobRow, attempt: u32) -> Result<u64> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating `{}`", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening `{}`", log.display()))?;
    let offset = f.seek(std::io::SeekFrom::End(0))?;
    writeln!(
        f,
        "{}",
        stream::attempt_marker(job.id.0, attempt, crate::ctx::now())
    )
    .with_context(|| format!("writing `{}`", log.display()))?;
    Ok(offset)
}

/// The facts of this attempt's stream, read from its log.
fn read_facts(log: &Path, offset: u64) -> Facts {
    let mut facts = Facts::default();
    let Ok(mut f) = std::fs::File::open(log) else {
        return facts;
    };
    if f.seek(std::io::SeekFrom::Start(offset)).is_err() {
        return facts;
    }
    let mut r = std::io::BufReader::new(f);
    let mut buf = Vec::new();
    while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
        facts.feed(&String::from_utf8_lossy(&buf));
        buf.clear();
    }
    facts
}

/// The reviewer is told which protected paths the branch changes: the agents' settings and the
/// CI configuration whoever changed them, and other stages' artifacts the developer changed. A
/// developer may change them, never unseen.
fn protected_section(ctx: &Ctx, repo: &RepoCfg, task: &TaskRow, worktree: &Path) -> String {
    let commits = match ctx
        .git()
        .branch_changes(worktree, &format!("origin/{}", repo.main))
    {
        Ok(c) => c,
        Err(e) => {
            warn!("cannot list what the branch changes: {e:#}");
            return String::new();
        }
    };
    let developer = Identity::of_role(Role::Developer).name;
    let mut found = std::collections::BTreeMap::new();
    for (author, paths) in &commits {
        for p in paths {
            match agent::protected(p, &task.base_work_item) {
                Some(agent::STAGE_ARTIFACT) if *author != developer => {}
                Some(why) => {
                    found.insert(p.clone(), why);
                }
                None => {}
            }
        }
    }
    if found.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = found
        .iter()
        .map(|(p, why)| format!("- `{}` ({why})", crate::domain::ids::printable(p)))
        .collect();
    format!(
        "\n## Protected paths this branch changes\n\nThe developer changed these paths, which \
         configure the agents or the CI, or hold another stage's artifacts. Review each change: \
         one that weakens a check, a permission or an agent's instructions is a P0 finding.\n\n{}\n",
        lines.join("\n")
    )
}

fn finish_agent_run(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
    l: Launched,
) -> Result<JobReport> {
    let now = crate::ctx::now();
    let outcome = &l.outcome;
    let mut facts = read_facts(&l.log, l.offset);
    if facts.result.is_none() {
        // The log could not be read back (a full disk): the supervisor's own capture.
        facts.result = outcome
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
    }
    let end = run_end(&outcome.ending, ctx.config.agent.inactivity_timeout_s);
    let class = crate::domain::run::classify(&end, &facts, &outcome.stderr_tail);
    let code = match &outcome.ending {
        Ending::Exited(c) => Some(*c as i64),
        Ending::MarkedDone { code } => code.map(|c| c as i64),
        Ending::Signalled(_) | Ending::TimedOut | Ending::Inactive | Ending::SpawnFailed(..) => {
            None
        }
    };
    let r = facts.result.clone().unwrap_or_default();
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
                model: l.model.as_deref(),
                effort: l.effort.as_deref(),
                started_at: l.started_at,
                finished_at: now,
                duration_ms: outcome.duration.as_millis() as i64,
                exit_code: code,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                cache_read_tokens: r.cache_read_tokens,
                cache_write_tokens: r.cache_write_tokens,
                cost_usd: r.cost_usd,
                session_id: r.session_id.as_deref(),
                fault: class.fault(),
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
    if class != RunClass::Succeeded {
        return fault::settle(ctx, job, attempt, task, outcome, code, &class, now);
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
    let git = ctx.git();
    let changed = match &l.start {
        Some(start) => git.changes_since(worktree, start)?,
        None => Vec::new(),
    };
    let outside = agent::out_of_scope(job.role, &task.base_work_item, &changed);
    if let (false, Some(start)) = (outside.is_empty(), &l.start) {
        git.discard_since(worktree, start)?;
        let shown: Vec<String> = outside
            .iter()
            .take(20)
            .map(|p| format!("`{}`", crate::domain::ids::printable(p)))
            .collect();
        let allowed: Vec<String> = agent::write_scope(job.role)
            .unwrap_or(&[])
            .iter()
            .map(|a| format!("docs/work-items/{}/{a}", task.base_work_item))
            .collect();
        let detail = format!(
            "the {} changed paths outside its write scope ({}): {}{}; nothing was committed and \
             the worktree was put back",
            job.role,
            allowed.join(", "),
            shown.join(", "),
            if outside.len() > 20 { ", …" } else { "" }
        );
        warn!("{detail}");
        ctx.db
            .write(|tx| db::jobs::set_exit(tx, job.id, attempt, code, Some("write scope")))?;
        let status = retry_or_fail(ctx, job, attempt, task, &detail)?;
        return Ok(report(status, detail, None));
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
    // Only the developer may change a protected path (the other roles' scope is narrower).
    let protected: Vec<String> = changed
        .iter()
        .filter(|_| job.role == Role::Developer)
        .filter_map(|p| agent::protected(p, &task.base_work_item).map(|why| (p, why)))
        .map(|(p, why)| format!("`{}` ({why})", crate::domain::ids::printable(p)))
        .collect();
    if !protected.is_empty() {
        let reason = format!(
            "the {} changed protected paths, shown to the reviewer: {}",
            job.role,
            protected.join(", ")
        );
        warn!("{reason}");
        if let Err(e) =
            crate::ops::apply::record_alone(ctx, task, Actor::Supervisor, Outcome::Checked, &reason)
        {
            warn!("could not record the protected change: {e:#}");
        }
    }

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
                other.describe(),
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
