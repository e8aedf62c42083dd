//! How an agent run that did not succeed settles its job (design §4.4), by its class
//! (`domain::run::classify`): a usage limit opens the breaker until its reset and re-queues the
//! job with the attempt given back; a provider outage re-queues it with the attempt given back
//! up to `agent.outage_retries` and opens the breaker after `agent.outage_breaker_after` in a
//! row; an agent that cannot work here opens the breaker at once; a failure spends the attempt
//! with the CLI's own message. One alert per breaker episode. Every write is fenced on the
//! attempt.

use anyhow::Result;
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::agent;
use crate::domain::run::{RunClass, RunEnd};
use crate::domain::stream::Render;
use crate::domain::time::Ts;
use crate::ext::proc::{Ending, RunOutcome};
use crate::ops::attempt::{AttemptOutcome, JobReport, retry_or_fail};

/// One attempt being settled.
struct Attempt<'a> {
    ctx: &'a Ctx,
    job: &'a JobRow,
    attempt: u32,
    task: &'a TaskRow,
    now: Ts,
}

impl Attempt<'_> {
    fn report(&self, status: AttemptOutcome, detail: String) -> JobReport {
        JobReport {
            job: self.job.id,
            work_item: self.task.work_item.clone(),
            role: self.job.role,
            status,
            detail,
            advance: None,
        }
    }

    /// Open the breaker until `until` with `why` (one alert unless it was open already) and,
    /// with `requeue`, give the job its attempt back and delay it to `requeue`'s time.
    fn open_breaker(
        &self,
        until: Ts,
        why: &str,
        alert: &str,
        requeue: Option<(Ts, &str)>,
    ) -> Result<bool> {
        let (ctx, now) = (self.ctx, self.now);
        ctx.db.write(|tx| {
            let was_open = db::misc::breaker(tx)?.is_some_and(|(t, _)| t > now);
            db::misc::open_breaker(tx, until, why)?;
            if !was_open {
                crate::ops::notify::alert(ctx, tx, Some(self.task), alert);
            }
            match requeue {
                Some((at, detail)) => {
                    db::jobs::requeue(tx, self.job.id, self.attempt, at, detail, true)
                }
                None => Ok(true),
            }
        })
    }

    /// The limit's account is the provider's: the breaker until its reset, the attempt back.
    fn limit(&self, resets_at: Option<Ts>, kind: Option<&str>, message: &str) -> Result<JobReport> {
        let now = self.now;
        let backoff = now + self.ctx.config.agent.usage_limit_backoff_s as i64;
        // A reset time from the stream, if it is a sane one (the future, within a month).
        let until = resets_at
            .filter(|t| *t > now && *t <= now + 31 * 86_400)
            .unwrap_or(backoff);
        let window = kind
            .map(|k| format!("{} limit", k.replace('_', "-")))
            .unwrap_or_else(|| "rate limit".into());
        let why = format!(
            "agent provider rate-limited until {} ({window}; hit by the {} of `{}`)",
            clock(until, now),
            self.job.role,
            self.task.work_item
        );
        let detail = format!("{why}: {message}");
        let alert = format!(
            "{why}; dispatch suspended until {}",
            crate::domain::time::rfc3339(until)
        );
        let requeued = self.open_breaker(until, &why, &alert, Some((until, &detail)))?;
        Ok(self.report(
            AttemptOutcome::unless_stale(requeued, AttemptOutcome::Queued),
            detail,
        ))
    }

    /// An outage is the provider's: the attempt back up to the cap; a streak of them opens the
    /// breaker.
    fn outage(&self, code: Option<i64>, message: &str) -> Result<JobReport> {
        let (ctx, now) = (self.ctx, self.now);
        let cfg = &ctx.config.agent;
        let n = db::jobs::outages_of(ctx.db.conn(), self.job.id)?;
        let after = cfg.outage_breaker_after;
        let streak = after > 0
            && db::jobs::last_faults(ctx.db.conn(), after)?
                .iter()
                .filter(|f| f.as_deref() == Some("outage"))
                .count()
                == after as usize;
        if streak {
            let until = now + cfg.outage_breaker_s as i64;
            let why = format!(
                "agent provider unavailable: {after} runs in a row failed ({message}); dispatch \
                 suspended until {}",
                clock(until, now)
            );
            self.open_breaker(until, &why, &why, None)?;
        }
        if n <= cfg.outage_retries {
            let delay = agent::backoff_s(
                ctx.config.scheduler.retry_backoff_s,
                n.max(1),
                (now as u64) ^ (self.job.id.0 as u64).wrapping_mul(2654435761),
            );
            let detail = format!(
                "provider outage {n}/{} (no attempt spent): {message}",
                cfg.outage_retries
            );
            info!("{detail}; again in {delay}s");
            let requeued = ctx.db.write(|tx| {
                db::jobs::requeue(tx, self.job.id, self.attempt, now + delay, &detail, true)
            })?;
            return Ok(self.report(
                AttemptOutcome::unless_stale(requeued, AttemptOutcome::Queued),
                detail,
            ));
        }
        let detail = format!(
            "provider outage past agent.outage_retries ({}): {message}",
            cfg.outage_retries
        );
        self.spend(code, &detail, &detail)
    }

    /// An agent that cannot work here fails every job alike: the breaker, the attempt back.
    fn environment(&self, message: &str) -> Result<JobReport> {
        let until = self.now + self.ctx.config.agent.outage_breaker_s as i64;
        let why = format!(
            "the {} agent cannot run here: {message}; `orch doctor --agent` names the fix",
            self.job.role
        );
        let requeued = self.open_breaker(until, &why, &why, Some((until, &why)))?;
        Ok(self.report(
            AttemptOutcome::unless_stale(requeued, AttemptOutcome::Queued),
            why,
        ))
    }

    /// The run's own failure: the exit recorded, the attempt spent.
    fn spend(&self, code: Option<i64>, ended: &str, detail: &str) -> Result<JobReport> {
        self.ctx
            .db
            .write(|tx| db::jobs::set_exit(tx, self.job.id, self.attempt, code, Some(ended)))?;
        let status = retry_or_fail(self.ctx, self.job, self.attempt, self.task, detail)?;
        Ok(self.report(status, detail.to_string()))
    }
}

/// Settle attempt `attempt` of `job` after a run of class `class` (anything but a success).
#[allow(clippy::too_many_arguments)]
pub(super) fn settle(
    ctx: &Ctx,
    job: &JobRow,
    attempt: u32,
    task: &TaskRow,
    outcome: &RunOutcome,
    code: Option<i64>,
    class: &RunClass,
    now: Ts,
) -> Result<JobReport> {
    let tail = rendered_tail(outcome, 15);
    if !tail.is_empty() {
        warn!("the agent's last output:\n{tail}");
    }
    let a = Attempt {
        ctx,
        job,
        attempt,
        task,
        now,
    };
    match class {
        RunClass::Succeeded => anyhow::bail!("a successful run has nothing to settle"),
        RunClass::Limit {
            resets_at,
            kind,
            message,
        } => a.limit(*resets_at, kind.as_deref(), message),
        RunClass::Outage { message } => a.outage(code, message),
        RunClass::Environment { message } => a.environment(message),
        RunClass::Failed { message } => {
            let ended = outcome.ending.describe();
            a.spend(code, &ended, &format!("agent {ended}: {message}"))
        }
    }
}

pub fn run_end(e: &Ending, inactivity_s: u64) -> RunEnd {
    match e {
        Ending::Exited(c) => RunEnd::Exited(*c),
        Ending::Signalled(s) => RunEnd::Signalled(*s),
        Ending::TimedOut => RunEnd::WallTimeout,
        Ending::Inactive => RunEnd::Inactive {
            after_s: inactivity_s,
        },
        Ending::SpawnFailed(_, m) => RunEnd::SpawnFailed(m.clone()),
        Ending::MarkedDone { code } => RunEnd::MarkedDone(*code),
    }
}

/// "22:49 UTC", with the date when it is not today.
pub fn clock(ts: Ts, now: Ts) -> String {
    let t = crate::domain::time::rfc3339(ts);
    let hm = &t[11..16];
    if ts.div_euclid(86_400) == now.div_euclid(86_400) {
        format!("{hm} UTC")
    } else {
        format!("{} {hm} UTC", &t[..10])
    }
}

/// The rendered end of this attempt's stream (for the supervisor's log).
fn rendered_tail(out: &RunOutcome, n: usize) -> String {
    let mut r = Render::default();
    let lines: Vec<String> = out
        .stdout_tail
        .lines()
        .chain(out.stderr_tail.lines())
        .flat_map(|l| r.line(l))
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
