//! `orch run-tests` and `orch run-staging` (design §6): run the repo's test or staging contract in
//! the task worktree, classify the outcome honestly (`domain::runner`), and apply it — a report
//! committed as the runner and an advance as `tester`/`deployer`, a hold for a broken
//! environment, a deferral (with a budget counted in the database) for an infrastructure hiccup.
//! No LLM is consulted. The supervisor calls the same use-case for `tester`/`deployer` jobs of
//! repos with a contract.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use tracing::{info, warn};

use crate::config::RepoCfg;
use crate::ctx::Ctx;
use crate::db::{self, tasks::TaskRow};
use crate::domain::history::{Actor, Outcome};
use crate::domain::ids::{JobId, TaskRef};
use crate::domain::runner::{
    self, Class, Decision, Exit, Kind, ReportFacts, STAGING_MARKERS, STAGING_RETRY_MARKER,
    SmokeLine, TESTS_RETRY_MARKER,
};
use crate::domain::stage::{Role, Stage};
use crate::domain::time::rfc3339;
use crate::error::{Code, usage};
use crate::ext::failpoint;
use crate::ext::http::{GetResult, Http};
use crate::ext::proc::{self, Ending, Spec};
use crate::ops::apply::{enqueue, record_here};
use crate::ops::confine;
use crate::ops::worktree::{self, Identity};

/// What a runner did, for the command's output and exit code.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub schema_version: u32,
    pub work_item: String,
    pub runner: &'static str,
    /// `advanced`, `rolled-back`, `blocked`, `held`, `deferred`, `checked`, … (design §12 words).
    pub outcome: Outcome,
    pub class: &'static str,
    pub verdict: Option<&'static str>,
    pub reason: String,
    pub exit_code: Option<i32>,
    pub duration_s: f64,
    pub report: Option<String>,
    pub enqueued_job: Option<i64>,
    #[serde(skip)]
    pub code: Code,
}

/// Who is running it: an operator by hand, or the supervisor of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Operator,
    /// The supervisor of this job attempt (the suite is recorded as the job's process group).
    Supervisor {
        job: JobId,
        attempt: u32,
    },
}

struct Contract {
    kind: Kind,
    argv: Vec<String>,
    timeout_s: u64,
    /// Run under the agent sandbox (the contract's `sandbox` key).
    sandbox: bool,
    markers: Vec<String>,
    via_ssh: bool,
    delay_s: u64,
    max_retries: u32,
    stage: Stage,
    role: Role,
    file: &'static str,
    marker: &'static str,
    /// The runner's name, which is also its git identity (`<name>@orch.invalid`).
    identity: &'static str,
}

fn contract(kind: Kind, repo: &RepoCfg) -> Result<Contract> {
    match kind {
        Kind::Tests => {
            let t = repo.tests.as_ref().ok_or_else(|| {
                usage(format!(
                    "repo `{}` has no test contract (`tests.argv` in the config)",
                    repo.name
                ))
            })?;
            Ok(Contract {
                kind,
                argv: t.argv.clone(),
                timeout_s: t.timeout_s,
                sandbox: t.sandbox,
                markers: t.env_markers.clone(),
                via_ssh: false,
                delay_s: t.infra_retry_delay_s,
                max_retries: t.infra_max_retries,
                stage: Stage::Testing,
                role: Role::Tester,
                file: "13-test-report.md",
                marker: TESTS_RETRY_MARKER,
                identity: "test-runner",
            })
        }
        Kind::Staging => {
            let s = repo.staging.as_ref().ok_or_else(|| {
                usage(format!(
                    "repo `{}` has no staging contract (`staging.argv` in the config)",
                    repo.name
                ))
            })?;
            let argv = match &s.ssh {
                Some(ssh) => runner::ssh_wrap(&ssh.user, &ssh.host, &s.argv),
                None => s.argv.clone(),
            };
            let mut markers: Vec<String> = STAGING_MARKERS.iter().map(|m| m.to_string()).collect();
            markers.extend(s.env_markers.iter().cloned());
            Ok(Contract {
                kind,
                argv,
                timeout_s: s.timeout_s,
                sandbox: s.sandbox,
                markers,
                via_ssh: s.ssh.is_some(),
                delay_s: s.infra_retry_delay_s,
                max_retries: s.infra_max_retries,
                stage: Stage::DeployStaging,
                role: Role::Deployer,
                file: "15-staging-log.md",
                marker: STAGING_RETRY_MARKER,
                identity: "staging-runner",
            })
        }
    }
}

fn exit_of(e: &Ending) -> Exit {
    match e {
        Ending::Exited(c) => Exit::Code(*c),
        Ending::Signalled(s) => Exit::Signal(*s),
        Ending::TimedOut | Ending::Inactive => Exit::TimedOut,
        Ending::SpawnFailed(kind, msg) => Exit::SpawnError {
            not_found_or_denied: matches!(
                kind,
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ),
            message: msg.clone(),
        },
        Ending::MarkedDone { code } => code.map(Exit::Code).unwrap_or(Exit::Signal(9)),
    }
}

/// Read-only smoke GETs (design §6.1): each retried up to 3 times 1 s apart on a connection
/// failure; a wrong status or a missing substring fails at once.
fn smoke(repo: &RepoCfg) -> (Vec<SmokeLine>, Option<String>) {
    let Some(t) = &repo.tests else {
        return (Vec::new(), None);
    };
    let http = Http::new(Duration::from_secs(10));
    let mut lines = Vec::new();
    let mut failure = None;
    for s in &t.smoke {
        let mut tries = 0;
        let line = loop {
            tries += 1;
            match http.get(&s.url) {
                GetResult::Answer { status, body } => {
                    let ok_status = status == s.status;
                    let missing = s.contains.as_ref().filter(|c| !body.contains(c.as_str()));
                    break match (ok_status, missing) {
                        (true, None) => SmokeLine {
                            url: s.url.clone(),
                            ok: true,
                            detail: format!("status {status}"),
                        },
                        (false, _) => SmokeLine {
                            url: s.url.clone(),
                            ok: false,
                            detail: format!("status {status}, expected {}", s.status),
                        },
                        (true, Some(c)) => SmokeLine {
                            url: s.url.clone(),
                            ok: false,
                            detail: format!("status {status} but the body lacks {c:?}"),
                        },
                    };
                }
                GetResult::Unreachable(e) if tries < 3 => {
                    info!("smoke {}: {e}; retrying", s.url);
                    std::thread::sleep(Duration::from_secs(1));
                }
                GetResult::Unreachable(e) | GetResult::Invalid(e) => {
                    break SmokeLine {
                        url: s.url.clone(),
                        ok: false,
                        detail: format!("no answer after {tries} tries: {e}"),
                    };
                }
            }
        };
        if !line.ok && failure.is_none() {
            failure = Some(format!("{} {}", line.url, line.detail));
        }
        lines.push(line);
    }
    (lines, failure)
}

/// Run the contract of `kind` for `wi`.
pub fn run(ctx: &Ctx, kind: Kind, wi: &str, no_advance: bool, caller: Caller) -> Result<RunReport> {
    let r = TaskRef::parse(wi).map_err(usage)?;
    let task = ctx.task(&r)?;
    let repo = ctx.repo_of(&task)?.clone();
    let c = contract(kind, &repo)?;
    let runner_name = c.identity;
    if task.stage.is_terminal() {
        return Err(usage(format!(
            "`{}` is already `{}`; there is nothing to run",
            task.work_item, task.stage
        )));
    }
    if !no_advance && task.stage != c.stage {
        return Err(usage(format!(
            "`{}` is in `{}`, not `{}`; `--no-advance` runs a dry check in any stage",
            task.work_item, task.stage, c.stage
        )));
    }
    let worktree = worktree::ensure(ctx, &task, &repo)?;
    let Suite {
        class,
        reason,
        exit_code,
        duration_s,
        command,
        smoke_lines,
        combined_tail,
    } = run_suite(ctx, &task, &repo, &c, &worktree, caller, false)?;
    let out_tail = combined_tail;
    let now = crate::ctx::now();
    let facts = |pass: bool, unfinished: bool| {
        ReportFacts {
            work_item: &task.base_work_item,
            pass,
            unfinished,
            class,
            reason: &reason,
            exit_code,
            duration_s,
            command: &command,
            smoke: &smoke_lines,
            output_tail: &out_tail,
            created_at: &rfc3339(now),
            run_id: &format!("{now}-{}", std::process::id()),
            host: &hostname(),
        }
        .render(kind)
    };
    let mut rep = RunReport {
        schema_version: 1,
        work_item: task.work_item.clone(),
        runner: runner_name,
        outcome: Outcome::Checked,
        class: class.as_str(),
        verdict: None,
        reason: reason.clone(),
        exit_code,
        duration_s,
        report: None,
        enqueued_job: None,
        code: Code::Ok,
    };

    if no_advance {
        // The dry check: a report under the state dir, one `checked` row, nothing else.
        let pass = class == Class::CodePass;
        let dir = ctx.config.state_dir.join("runs").join(&task.base_work_item);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(c.file);
        std::fs::write(&path, facts(pass, false))
            .with_context(|| format!("writing `{}`", path.display()))?;
        ctx.write(|ctx, tx| {
            record_here(
                ctx,
                tx,
                &task,
                actor(caller),
                Outcome::Checked,
                &format!("{runner_name} dry check: {} ({reason})", class.as_str()),
            )
        })?;
        rep.outcome = Outcome::Checked;
        rep.verdict = verdict_word(kind, class);
        rep.report = Some(path.display().to_string());
        rep.code = match class {
            Class::CodePass => Code::Ok,
            Class::CodeFail => Code::No,
            Class::TransientInfra => Code::Busy,
            Class::PermanentEnv => Code::Held,
        };
        return Ok(rep);
    }

    let used = infra_retries_used(ctx, &task, c.marker)?;
    match runner::decide(kind, class, used, c.max_retries) {
        Decision::Report { pass } => apply_report(
            ctx,
            &task,
            &repo,
            &c,
            &worktree,
            facts(pass, false),
            pass,
            caller,
            &mut rep,
        )?,
        Decision::ReportUnfinished => {
            let text = format!(
                "the test suite never finished after {used} infrastructure retries; treated as a code defect"
            );
            crate::ops::notify::alert(ctx, ctx.db.conn(), Some(&task), &text);
            apply_report(
                ctx,
                &task,
                &repo,
                &c,
                &worktree,
                facts(false, true),
                false,
                caller,
                &mut rep,
            )?
        }
        Decision::Hold => {
            let why = match class {
                Class::TransientInfra => format!(
                    "{runner_name}: {} (transient, {used} retries spent): the infrastructure needs a human",
                    class.as_str()
                ),
                _ => format!(
                    "{runner_name}: {}: {reason} — environment, not a code defect",
                    class.as_str()
                ),
            };
            ctx.write(|ctx, tx| {
                db::tasks::set_held(tx, task.id, Some(&why), ctx.now)?;
                db::misc::journal(tx, Some(task.id), "held", &why, ctx.now)?;
                record_here(ctx, tx, &task, actor(caller), Outcome::Held, &why)?;
                let text = format!("{} held: {why}", task.work_item);
                crate::ops::notify::alert(ctx, tx, Some(&task), &text);
                Ok(())
            })?;
            rep.outcome = Outcome::Held;
            rep.reason = why;
            rep.code = Code::Held;
        }
        Decision::Defer => {
            let delay = c.delay_s as i64;
            let why = format!(
                "{runner_name}: {} ({reason}); retry {}/{} in {delay}s",
                class.as_str(),
                used + 1,
                c.max_retries
            );
            let job = ctx.write(|ctx, tx| {
                db::jobs::supersede_queued(tx, task.id, task.stage, ctx.now)?;
                let j = enqueue(ctx, tx, &task, c.role, task.stage, None)?;
                db::jobs::mark_retry(tx, j, c.marker, ctx.now + delay)?;
                db::misc::journal(tx, Some(task.id), "deferred", &why, ctx.now)?;
                record_here(ctx, tx, &task, actor(caller), Outcome::Deferred, &why)?;
                Ok(j)
            })?;
            rep.outcome = Outcome::Deferred;
            rep.reason = why;
            rep.enqueued_job = Some(job.0);
            rep.code = Code::Busy;
        }
    }
    Ok(rep)
}

/// What one run of a contract's suite said.
pub(crate) struct Suite {
    pub class: Class,
    pub reason: String,
    pub exit_code: Option<i32>,
    pub duration_s: f64,
    pub command: String,
    pub smoke_lines: Vec<SmokeLine>,
    pub combined_tail: String,
}

/// Run the suite of contract `c` in `worktree` (confined unless the contract says otherwise),
/// as the job's process group under a supervisor, and classify its outcome.
fn run_suite(
    ctx: &Ctx,
    task: &TaskRow,
    repo: &RepoCfg,
    c: &Contract,
    worktree: &std::path::Path,
    caller: Caller,
    retest: bool,
) -> Result<Suite> {
    let runner_name = c.identity;
    let kind = c.kind;
    let started = std::time::Instant::now();
    let log = ctx.config.state_dir.join("logs").join(format!(
        "{runner_name}-{}-{}.log",
        task.base_work_item, ctx.now
    ));
    let child_env = worktree::child_env(ctx, task, &[("ORCH_STAGE", task.stage.to_string())]);
    let command = c
        .argv
        .iter()
        .map(|a| runner::sh_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    info!(work_item = %task.work_item, command = %command, "running the {runner_name}");
    // Under a supervisor the suite is the job's process group, so the reaper and `orch cancel`
    // stop it when the supervisor is gone.
    let on_start: Box<dyn FnOnce(&proc::Started)> = match (caller, retest) {
        (Caller::Supervisor { job, attempt }, false) => Box::new(worktree::record_group(
            ctx,
            job,
            attempt,
            "runner.suite-running",
        )),
        (Caller::Supervisor { job, attempt }, true) => Box::new(worktree::record_group(
            ctx,
            job,
            attempt,
            "release.retest-running",
        )),
        (Caller::Operator, _) => {
            Box::new(|_: &proc::Started| failpoint::hit("runner.suite-running"))
        }
    };
    let mut spec = Spec {
        argv: c.argv.iter().map(OsString::from).collect(),
        cwd: worktree.to_path_buf(),
        env: child_env,
        stdin: None,
        log: Some(log),
        wall_timeout: Duration::from_secs(c.timeout_s),
        inactivity_timeout: None,
        grace: Duration::from_secs(10),
        end_marker: None,
        linger_grace: Duration::from_secs(1),
    };
    confine::confine(
        ctx,
        repo,
        c.sandbox,
        &[],
        &format!("the {runner_name} of `{}`", task.work_item),
        &mut spec,
    )?;
    let out = proc::run_supervised(spec, on_start);
    let exit = exit_of(&out.ending);
    let (smoke_lines, smoke_failure) = match (kind, &exit) {
        (Kind::Tests, Exit::Code(0)) => smoke(repo),
        _ => (Vec::new(), None),
    };
    let (class, reason) = match kind {
        Kind::Tests => runner::classify_tests(
            &exit,
            &out.stderr_tail,
            &c.markers,
            smoke_failure.as_deref(),
        ),
        Kind::Staging => runner::classify_staging(&exit, &out.stderr_tail, &c.markers, c.via_ssh),
    };
    let duration_s = started.elapsed().as_secs_f64();
    let exit_code = match exit {
        Exit::Code(c) => Some(c),
        Exit::Signal(_) | Exit::TimedOut | Exit::SpawnError { .. } => None,
    };
    // One structured line per decision (design §6, item 6).
    info!(
        work_item = %task.work_item,
        runner = runner_name,
        outcome = class.as_str(),
        exit_code = ?exit_code,
        duration_ms = (duration_s * 1000.0) as u64,
        "runner decision: {reason}"
    );
    Ok(Suite {
        class,
        reason,
        exit_code,
        duration_s,
        command,
        smoke_lines,
        combined_tail: out.combined_tail,
    })
}

/// The merge gate's re-test (design §7.1): the repo's test contract on the rebased head, in
/// the job's worktree, as the job's process group. No report, no advance: the caller decides.
pub(crate) fn retest(
    ctx: &Ctx,
    task: &TaskRow,
    repo: &RepoCfg,
    worktree: &std::path::Path,
    job: JobId,
    attempt: u32,
) -> Result<Option<Suite>> {
    let Ok(c) = contract(Kind::Tests, repo) else {
        return Ok(None);
    };
    run_suite(
        ctx,
        task,
        repo,
        &c,
        worktree,
        Caller::Supervisor { job, attempt },
        true,
    )
    .map(Some)
}

impl ReportFacts<'_> {
    fn render(&self, kind: Kind) -> String {
        match kind {
            Kind::Tests => runner::test_report(self),
            Kind::Staging => runner::staging_log(self),
        }
    }
}

fn verdict_word(kind: Kind, class: Class) -> Option<&'static str> {
    match (kind, class) {
        (Kind::Tests, Class::CodePass) => Some("PASS"),
        (Kind::Tests, Class::CodeFail) => Some("FAIL"),
        (Kind::Staging, Class::CodePass) => Some("SUCCESS"),
        (Kind::Staging, Class::CodeFail) => Some("FAILED"),
        (_, Class::TransientInfra | Class::PermanentEnv) => None,
    }
}

fn actor(caller: Caller) -> Actor {
    match caller {
        Caller::Operator => Actor::Operator,
        Caller::Supervisor { .. } => Actor::Supervisor,
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The infra retries spent since the task last entered the stage: jobs carrying the marker,
/// counted from the database so the budget survives restarts.
fn infra_retries_used(ctx: &Ctx, task: &TaskRow, marker: &str) -> Result<u32> {
    Ok(db::jobs::of_task(ctx.db.conn(), task.id)?
        .iter()
        .filter(|j| {
            j.stage == task.stage
                && j.created_at >= task.stage_entered_at
                && j.prompt.contains(marker)
        })
        .count() as u32)
}

/// Write the report into the worktree, commit it as the runner, push (best effort), clear a
/// hold, and advance as the stage's role.
#[allow(clippy::too_many_arguments)]
fn apply_report(
    ctx: &Ctx,
    task: &TaskRow,
    repo: &RepoCfg,
    c: &Contract,
    worktree: &std::path::Path,
    text: String,
    pass: bool,
    caller: Caller,
    rep: &mut RunReport,
) -> Result<()> {
    let rel = format!("docs/work-items/{}/{}", task.base_work_item, c.file);
    let path = worktree.join(&rel);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, text).with_context(|| format!("writing `{}`", path.display()))?;
    let msg = format!(
        "{}: {} report ({})",
        task.base_work_item,
        c.identity,
        if pass { "pass" } else { "fail" }
    );
    worktree::commit(
        ctx,
        worktree,
        Some(&[rel.as_str()]),
        &msg,
        &Identity::of_runner(c.identity),
    )?;
    failpoint::hit("runner.after-commit");
    if let Err(e) = worktree::push(ctx, repo, task, worktree) {
        warn!(work_item = %task.work_item, "could not push the report (the gate reads the worktree): {e:#}");
    }
    failpoint::hit("runner.after-push");
    if task.held_at.is_some() {
        ctx.write(|ctx, tx| db::tasks::set_held(tx, task.id, None, ctx.now))?;
    }
    rep.verdict = verdict_word(
        c.kind,
        if pass {
            Class::CodePass
        } else {
            Class::CodeFail
        },
    );
    rep.report = Some(rel);
    let note = format!(
        "{}: {} ({}), exit {}, {:.1}s",
        c.identity,
        rep.class,
        rep.reason,
        rep.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into()),
        rep.duration_s
    );
    let adv = worktree::advance_as(ctx, task, c.stage, c.role, actor(caller), Some(note))?;
    rep.outcome = adv.outcome;
    rep.enqueued_job = adv.enqueued_job.map(|j| j.0);
    // The runner's own finding first (a failed smoke check shows nowhere else), then the gate's.
    rep.reason = format!("{}; {}", rep.reason, adv.reason);
    rep.code = match (pass, adv.outcome) {
        (true, Outcome::Advanced) => Code::Ok,
        (_, o) => o.code(),
    };
    Ok(())
}

/// Whether the supervisor should run a runner instead of an agent for this job (design §4.4
/// step 2).
pub fn intercept(role: Role, stage: Stage, repo: &RepoCfg) -> Option<Kind> {
    if role == Role::Tester && stage == Stage::Testing && repo.tests.is_some() {
        Some(Kind::Tests)
    } else if role == Role::Deployer && stage == Stage::DeployStaging && repo.staging.is_some() {
        Some(Kind::Staging)
    } else {
        None
    }
}
