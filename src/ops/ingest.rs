//! Webhook ingest (design §8): one delivery from the tracker (Plane) or the forge (Gitea) is
//! size-checked and signature-checked on its raw bytes, deduplicated against earlier *accepted*
//! deliveries of the same source, parsed, routed to one use-case (task add, approve,
//! confirm-deploy, cancel, advance, merge-lease release), and stored in the inbox with its
//! outcome. `orch ingest` and `orch serve` both call [`ingest`]; `orch ingest --replay` calls
//! [`replay`].
//!
//! The decisions (signature, delivery id, payload validation, which gesture) are
//! `domain::webhook`'s; this module gathers the config, environment, tasks and git heads they
//! need and applies them. It never prints, and it never fails on a bad delivery: a bad delivery
//! is an inbox row with outcome `rejected` and an HTTP status. It does not guard against two
//! concurrent deliveries of the same id acting twice; the use-cases it calls are idempotent
//! under their stage compare-and-swap, so the second one finds the work done and is ignored.

use anyhow::{Context, Result, anyhow};
use serde_json::Value;
use tracing::{info, warn};

use crate::config::{CiMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db::{self, events::NewEvent, tasks::TaskRow};
use crate::domain::history::Actor;
use crate::domain::ids::{TaskRef, WorkItem, printable};
use crate::domain::stage::{JobStatus, Stage};
use crate::domain::webhook::{
    self, GiteaEvent, MAX_BODY, MAX_REJECTED_BODY, PlaneAction, PlaneIssue, Rejection, RepoEntry,
    Secret, Verified,
};
use crate::error::{Code, code_of, usage};
use crate::ext::failpoint;
use crate::ops::advance;
use crate::ops::{gather, task};

pub use crate::domain::webhook::{Outcome, Source};

/// What became of one delivery.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// The inbox row written for it.
    pub event_id: i64,
    pub source: Source,
    pub event: String,
    pub delivery_id: String,
    pub outcome: Outcome,
    pub reason: String,
    pub work_item: Option<String>,
    /// What `orch serve` answers: 200 accepted (processed, duplicate, ignored), 401 bad or
    /// missing signature, 400 malformed body, 413 too large, 500 an internal error while
    /// acting (stored as `rejected`, so a redelivery or a replay acts again).
    pub http_status: u16,
    /// The inbox row a replay re-drove.
    pub replay_of: Option<i64>,
}

impl Ingested {
    /// The exit code of `orch ingest`: 0 accepted, 2 rejected, 1 an internal error.
    pub fn code(&self) -> Code {
        match (self.outcome, self.http_status) {
            (_, 500..) => Code::Runtime,
            (Outcome::Rejected, _) => Code::Usage,
            (Outcome::Processed | Outcome::Duplicate | Outcome::Ignored, _) => Code::Ok,
        }
    }
}

/// The routing result before it is stored.
struct Routed {
    outcome: Outcome,
    reason: String,
    work_item: Option<String>,
    http_status: u16,
    /// The event name read from the body, when the header did not give one.
    event: Option<String>,
}

impl Routed {
    fn new(outcome: Outcome, reason: impl Into<String>, work_item: Option<String>) -> Routed {
        Routed {
            outcome,
            reason: reason.into(),
            work_item,
            http_status: 200,
            event: None,
        }
    }

    fn ignored(reason: impl Into<String>, work_item: Option<String>) -> Routed {
        Routed::new(Outcome::Ignored, reason, work_item)
    }

    fn processed(reason: impl Into<String>, work_item: Option<String>) -> Routed {
        Routed::new(Outcome::Processed, reason, work_item)
    }

    fn rejected(r: Rejection) -> Routed {
        Routed {
            http_status: r.http_status,
            ..Routed::new(Outcome::Rejected, r.reason, None)
        }
    }

    fn event(mut self, e: &str) -> Routed {
        self.event = Some(webhook::clean_event_name(e));
        self
    }
}

/// One delivery as it will be stored.
struct Delivery<'a> {
    source: Source,
    delivery_id: String,
    event: Option<String>,
    headers_json: String,
    body: &'a [u8],
    body_size: usize,
    replay_of: Option<i64>,
}

/// Verify, deduplicate, route and store one delivery. `headers` are as received (names in any
/// case); `body` is the raw bytes (a caller that stopped reading past [`MAX_BODY`] passes what
/// it read, which is enough to reject it as too large).
pub fn ingest(
    ctx: &Ctx,
    source: Source,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Ingested> {
    let d = Delivery {
        source,
        delivery_id: webhook::delivery_id(source, headers, body),
        event: webhook::event_header(source, headers),
        headers_json: headers_json(ctx, headers),
        body,
        body_size: body.len(),
        replay_of: None,
    };
    let (secret, allow_unsigned) = secret_of(ctx, source);
    let routed = match webhook::check_delivery(source, &secret, allow_unsigned, headers, body) {
        Err(r) => Routed::rejected(r),
        Ok(v) => route_verified(ctx, &d, v, true),
    };
    failpoint::hit("ingest.after-route");
    store(ctx, d, routed)
}

/// `orch ingest --replay <delivery-id>`: re-drive the newest stored delivery with this id (of
/// `source` when given) through routing, and store the result as a new row. An accepted or
/// duplicate one was verified when it came in and is routed again without deduplication (that
/// is the point of a replay); a rejected one is verified again with the current secret first.
pub fn replay(ctx: &Ctx, delivery_id: &str, source: Option<Source>) -> Result<Ingested> {
    if !webhook::valid_delivery_id(delivery_id) {
        return Err(usage(format!(
            "invalid delivery id `{}`: expected at most 128 characters of `A-Za-z0-9._:-`",
            printable(delivery_id)
        )));
    }
    let row = db::events::newest(ctx.db.conn(), delivery_id, source.map(Source::as_str))?
        .ok_or_else(|| {
            usage(format!(
                "no stored delivery `{delivery_id}`{}; `orch events` lists the inbox",
                source
                    .map(|s| format!(" from `{}`", s.as_str()))
                    .unwrap_or_default()
            ))
        })?;
    let source = Source::parse(&row.source)
        .ok_or_else(|| anyhow!("event {} has an unknown source `{}`", row.id, row.source))?;
    let outcome = Outcome::parse(&row.outcome)
        .ok_or_else(|| anyhow!("event {} has an unknown outcome `{}`", row.id, row.outcome))?;
    let headers = headers_from_json(&row.headers)
        .with_context(|| format!("reading the stored headers of event {}", row.id))?;
    let d = Delivery {
        source,
        delivery_id: row.delivery_id.clone(),
        event: (!row.event.is_empty()).then(|| row.event.clone()),
        headers_json: row.headers.clone(),
        body: &row.body,
        body_size: usize::try_from(row.body_size).unwrap_or(usize::MAX),
        replay_of: Some(row.id),
    };
    let routed = match outcome {
        Outcome::Rejected if d.body_size > d.body.len() => Routed::rejected(Rejection {
            reason: format!(
                "the stored body was cut at {} of {} bytes, so it cannot be verified again",
                d.body.len(),
                d.body_size
            ),
            http_status: if d.body_size > MAX_BODY { 413 } else { 400 },
        }),
        Outcome::Rejected => {
            let (secret, allow_unsigned) = secret_of(ctx, source);
            match webhook::check_delivery(source, &secret, allow_unsigned, &headers, d.body) {
                Err(r) => Routed::rejected(r),
                Ok(v) => route_verified(ctx, &d, v, true),
            }
        }
        Outcome::Processed | Outcome::Ignored | Outcome::Duplicate => {
            route_verified(ctx, &d, Verified::Signed, false)
        }
    };
    let routed = Routed {
        reason: format!("replay of event {}: {}", row.id, routed.reason),
        ..routed
    };
    store(ctx, d, routed)
}

/// Parse and route a delivery whose signature passed. Errors inside a use-case become a
/// `rejected` row with status 500 (usage errors, which are races with another actor or
/// inputs the use-case refused, become `ignored`).
fn route_verified(ctx: &Ctx, d: &Delivery<'_>, verified: Verified, dedup: bool) -> Routed {
    let routed = match route(ctx, d, dedup) {
        Ok(r) => r,
        Err(e) if code_of(&e) == Code::Usage => Routed::ignored(format!("{e:#}"), None),
        Err(e) => {
            warn!(
                source = d.source.as_str(),
                delivery = %d.delivery_id,
                "acting on a delivery failed: {e:#}"
            );
            Routed {
                http_status: 500,
                ..Routed::new(Outcome::Rejected, format!("internal error: {e:#}"), None)
            }
        }
    };
    match (verified, routed.outcome) {
        (Verified::Unsigned, Outcome::Processed | Outcome::Ignored) => Routed {
            reason: format!(
                "{}; accepted unsigned (`{}.allow_unsigned: true`)",
                routed.reason,
                d.source.config_block()
            ),
            ..routed
        },
        _ => routed,
    }
}

fn route(ctx: &Ctx, d: &Delivery<'_>, dedup: bool) -> Result<Routed> {
    if dedup
        && let Some(first) = db::events::accepted(ctx.db.conn(), d.source.as_str(), &d.delivery_id)?
    {
        return Ok(Routed::new(
            Outcome::Duplicate,
            format!(
                "delivery `{}` was already accepted (event {first})",
                d.delivery_id
            ),
            None,
        ));
    }
    let value = match webhook::parse_json(d.body) {
        Ok(v) => v,
        Err(reason) => {
            return Ok(Routed::rejected(Rejection {
                reason,
                http_status: 400,
            }));
        }
    };
    match d.source {
        Source::Plane => route_plane(ctx, &value, d.event.as_deref()),
        Source::Gitea => route_gitea(ctx, &value, d.event.as_deref()),
    }
}

fn repo_entries(ctx: &Ctx) -> Vec<RepoEntry<'_>> {
    ctx.config
        .repos
        .iter()
        .map(|r| RepoEntry {
            name: &r.name,
            remote: &r.remote,
            prefix: &r.prefix,
            plane_project: r.plane_project.as_deref(),
        })
        .collect()
}

// ---- Plane ----

fn route_plane(ctx: &Ctx, v: &Value, header_event: Option<&str>) -> Result<Routed> {
    let issue = match webhook::plane_issue(v, header_event) {
        Ok(i) => i,
        Err(why) => return Ok(Routed::ignored(why, None)),
    };
    let routed = plane_issue(ctx, &issue)?;
    Ok(routed.event(&issue.event))
}

fn plane_issue(ctx: &Ctx, issue: &PlaneIssue) -> Result<Routed> {
    let (idx, wi) = match webhook::plane_target(issue, &repo_entries(ctx)) {
        Ok(t) => t,
        Err(why) => return Ok(Routed::ignored(why, None)),
    };
    let some_wi = Some(wi.to_string());
    let Some(state_name) = issue.state.as_deref() else {
        return Ok(Routed::ignored(
            "the payload names no state (neither `data.state.name` nor `data.state_detail.name`)",
            some_wi,
        ));
    };
    let state = webhook::plane_state(state_name);
    let existing = db::tasks::find(ctx.db.conn(), &TaskRef::WorkItem(wi.clone()))?;
    let action = webhook::plane_action(&state, &wi, existing.as_ref().map(|t| t.stage));
    let gesture = match action {
        PlaneAction::Ignore(why) => return Ok(Routed::ignored(why, some_wi)),
        PlaneAction::Start => return start(ctx, &ctx.config.repos[idx], &wi, issue),
        PlaneAction::Approve => task::approve(ctx, wi.as_str(), Actor::Webhook)?,
        PlaneAction::ConfirmDeploy => task::confirm_deploy(ctx, wi.as_str(), Actor::Webhook)?,
        PlaneAction::Cancel => task::cancel(
            ctx,
            wi.as_str(),
            Some("STOP in the tracker"),
            Actor::Webhook,
        )?,
    };
    Ok(Routed::processed(gesture.message, some_wi))
}

/// *To Analyse*: create the task with the tracker's id and start it.
fn start(ctx: &Ctx, repo: &RepoCfg, wi: &WorkItem, issue: &PlaneIssue) -> Result<Routed> {
    let some_wi = Some(wi.to_string());
    let Some(title) = issue.name.as_deref().and_then(webhook::title_from_name) else {
        return Ok(Routed::ignored(
            format!("the issue of `{wi}` has no name to use as the task title"),
            some_wi,
        ));
    };
    let description = issue.description.as_deref().map(str::trim).unwrap_or("");
    let added = task::add(
        ctx,
        &task::AddRequest {
            repo: &repo.name,
            title: &title,
            work_item: Some(wi.as_str()),
            description,
            bug: false,
            labels: &issue.labels,
            depends_on: &[],
            actor: Actor::Webhook,
        },
    )?;
    if let Some(id) = &issue.issue_id {
        let task = db::tasks::find(ctx.db.conn(), &TaskRef::WorkItem(wi.clone()))?
            .ok_or_else(|| anyhow!("task `{wi}` vanished right after it was added"))?;
        // Linking also mirrors the task's first hop to the tracker.
        ctx.db
            .write(|tx| crate::ops::notify::link_tracker(ctx, tx, &task, id))?;
    }
    Ok(Routed::processed(
        format!(
            "started `{}` in repo `{}` (stage analysis, analyst job {} queued)",
            added.work_item, repo.name, added.job.0
        ),
        some_wi,
    ))
}

// ---- Gitea ----

fn route_gitea(ctx: &Ctx, v: &Value, header_event: Option<&str>) -> Result<Routed> {
    let ev = match webhook::gitea_event(v, header_event) {
        Ok(e) => e,
        Err(why) => return Ok(Routed::ignored(why, None)),
    };
    match ev {
        GiteaEvent::Status {
            repo,
            sha,
            state,
            context,
            description,
        } => {
            let idx = match webhook::gitea_target(&repo, &repo_entries(ctx)) {
                Ok(i) => i,
                Err(why) => return Ok(Routed::ignored(why, None).event("status")),
            };
            let repo = &ctx.config.repos[idx];
            Ok(status(ctx, repo, &sha, state, &context, &description)?.event("status"))
        }
        GiteaEvent::PullRequestMerged {
            repo,
            head_ref,
            base_ref,
            merge_commit_sha,
        } => {
            let idx = match webhook::gitea_target(&repo, &repo_entries(ctx)) {
                Ok(i) => i,
                Err(why) => return Ok(Routed::ignored(why, None).event("pull_request")),
            };
            let repo = &ctx.config.repos[idx];
            Ok(
                merged(ctx, repo, &head_ref, &base_ref, merge_commit_sha.as_deref())?
                    .event("pull_request"),
            )
        }
    }
}

/// A commit status: record it; when it decides and it is the head of a `development` task of a
/// `ci.mode: status` repo, run that task's gate (success advances, failure rolls back).
fn status(
    ctx: &Ctx,
    repo: &RepoCfg,
    sha: &str,
    state: webhook::CommitState,
    context: &str,
    description: &str,
) -> Result<Routed> {
    ctx.db.write(|tx| {
        db::misc::set_ci_status(
            tx,
            &repo.name,
            sha,
            context,
            state.as_str(),
            description,
            ctx.now,
        )
    })?;
    let short = &sha[..12];
    let recorded = format!(
        "recorded `{context}` = {} for {short} in `{}`",
        state.as_str(),
        repo.name
    );
    if !state.decisive() {
        return Ok(Routed::processed(recorded, None));
    }
    if repo.ci.mode != CiMode::Status {
        return Ok(Routed::processed(
            format!(
                "{recorded}; no gate runs: repo `{}` does not have `ci.mode: status`",
                repo.name
            ),
            None,
        ));
    }
    let candidates: Vec<TaskRow> = db::tasks::active(ctx.db.conn())?
        .into_iter()
        .filter(|t| t.repo == repo.name && t.stage == Stage::Development)
        .collect();
    let mut notes = Vec::new();
    let mut acted = None;
    for t in candidates {
        // The gate reads the same head (the task's worktree, else its remote branch); the view
        // holds the repo lock, so it is dropped before `advance` takes it again.
        let head = {
            let view = gather::open(ctx, &t, repo)?;
            view.head()?
        };
        if head.as_deref() != Some(sha) {
            continue;
        }
        if t.paused_at.is_some() {
            notes.push(format!(
                "`{}` is paused; its gate runs after `orch resume {}`",
                t.work_item, t.work_item
            ));
            continue;
        }
        // A job of the stage is queued or running: its own advance decides when it ends (a
        // status arriving while the developer still works must not move the task under it).
        if db::jobs::of_task(ctx.db.conn(), t.id)?
            .iter()
            .any(|j| matches!(j.status, JobStatus::Queued | JobStatus::Running))
        {
            notes.push(format!(
                "`{}` has a job in progress; its gate runs when the job ends",
                t.work_item
            ));
            continue;
        }
        let rep = advance::advance(
            ctx,
            &advance::Request {
                task: TaskRef::parse(&t.work_item).map_err(usage)?,
                expect_stage: Some(Stage::Development),
                as_role: None,
                to: None,
                dry_run: false,
                actor: Actor::Webhook,
                note: Some(format!("ci status `{context}` {}", state.as_str())),
            },
        )?;
        notes.push(format!(
            "`{}`: {} ({} → {}): {}",
            rep.work_item,
            rep.outcome.as_str(),
            rep.from,
            rep.to,
            rep.reason
        ));
        acted = Some(t.base_work_item.clone());
    }
    let reason = if notes.is_empty() {
        format!("{recorded}; no `development` task has this head")
    } else {
        format!("{recorded}; {}", notes.join("; "))
    };
    Ok(Routed::processed(reason, acted))
}

/// A merged pull request: release the repo's merge lease when it is held for that branch, then
/// re-check `deploy → done` for the task that held it.
fn merged(
    ctx: &Ctx,
    repo: &RepoCfg,
    head_ref: &str,
    base_ref: &str,
    merge_sha: Option<&str>,
) -> Result<Routed> {
    let what = format!(
        "pull request `{}` → `{base_ref}` merged{}",
        printable(head_ref),
        merge_sha
            .map(|s| format!(" as {}", &s[..12]))
            .unwrap_or_default()
    );
    if base_ref != repo.main {
        return Ok(Routed::ignored(
            format!("{what}; not into `{}`, nothing to release", repo.main),
            None,
        ));
    }
    let Some(lease) = db::leases::merge_get(ctx.db.conn(), &repo.name)? else {
        return Ok(Routed::ignored(
            format!("{what}; no merge lease of `{}` is held", repo.name),
            None,
        ));
    };
    let holder = match lease.task_id {
        Some(id) => Some(db::tasks::get(ctx.db.conn(), id)?),
        None => None,
    };
    if let Some(t) = &holder
        && t.branch != head_ref
    {
        return Ok(Routed::ignored(
            format!(
                "{what}; the merge lease of `{}` is held by `{}` for branch `{}`, not this one",
                repo.name, t.work_item, t.branch
            ),
            Some(t.base_work_item.clone()),
        ));
    }
    let detail = format!("{}: merge lease released: {what}", repo.name);
    let released = ctx.db.write(|tx| {
        let released = db::leases::merge_delete(tx, &repo.name)?;
        if released {
            db::misc::journal(
                tx,
                holder.as_ref().map(|t| t.id),
                "merge-lease-released",
                &detail,
                ctx.now,
            )?;
        }
        Ok(released)
    })?;
    if !released {
        return Ok(Routed::ignored(
            format!(
                "{what}; the merge lease of `{}` was released meanwhile",
                repo.name
            ),
            None,
        ));
    }
    info!(repo = %repo.name, "{detail}");
    let mut reason = format!("{what}; released the merge lease of `{}`", repo.name);
    if let Some(t) = holder.as_ref().filter(|t| t.stage == Stage::Deploy) {
        let rep = advance::advance(
            ctx,
            &advance::Request {
                task: TaskRef::parse(&t.work_item).map_err(usage)?,
                expect_stage: Some(Stage::Deploy),
                as_role: None,
                to: None,
                dry_run: false,
                actor: Actor::Webhook,
                note: Some("pull request merged".into()),
            },
        )?;
        reason.push_str(&format!(
            "; `{}`: {} ({} → {}): {}",
            rep.work_item,
            rep.outcome.as_str(),
            rep.from,
            rep.to,
            rep.reason
        ));
    }
    Ok(Routed::processed(reason, holder.map(|t| t.base_work_item)))
}

// ---- secrets, headers, storage ----

/// The source's webhook secret and `allow_unsigned`, from its config block and the environment.
fn secret_of(ctx: &Ctx, source: Source) -> (Secret, bool) {
    let block = match source {
        Source::Plane => ctx.config.tracker.as_ref(),
        Source::Gitea => ctx.config.forge.as_ref(),
    };
    let Some(b) = block else {
        return (Secret::NotConfigured, false);
    };
    let secret = match &b.webhook_secret_env {
        None => Secret::NotConfigured,
        Some(var) => match std::env::var_os(var) {
            Some(v) if !v.is_empty() => Secret::Set(v.into_encoded_bytes()),
            _ => Secret::Unset { var: var.clone() },
        },
    };
    (secret, b.allow_unsigned)
}

/// The values of every configured token and webhook secret, so none is stored in the inbox.
fn configured_secrets(ctx: &Ctx) -> Vec<String> {
    [&ctx.config.tracker, &ctx.config.forge, &ctx.config.chat]
        .into_iter()
        .flatten()
        .flat_map(|s| [&s.token_env, &s.webhook_secret_env])
        .flatten()
        .filter_map(|var| std::env::var(var).ok())
        .filter(|v| !v.is_empty())
        .collect()
}

fn headers_json(ctx: &Ctx, headers: &[(String, String)]) -> String {
    let mut map = serde_json::Map::new();
    for (name, value) in webhook::redact_headers(headers, &configured_secrets(ctx)) {
        match map.get_mut(&name) {
            Some(Value::String(v)) => {
                v.push_str(", ");
                v.push_str(&value);
            }
            _ => {
                map.insert(name, Value::String(value));
            }
        }
    }
    Value::Object(map).to_string()
}

fn headers_from_json(s: &str) -> Result<Vec<(String, String)>> {
    let v: Value = serde_json::from_str(s)?;
    let map = v
        .as_object()
        .ok_or_else(|| anyhow!("the stored headers are not a JSON object"))?;
    Ok(map
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect())
}

fn store(ctx: &Ctx, d: Delivery<'_>, r: Routed) -> Result<Ingested> {
    let body = match r.outcome {
        Outcome::Rejected => &d.body[..d.body.len().min(MAX_REJECTED_BODY)],
        Outcome::Processed | Outcome::Duplicate | Outcome::Ignored => d.body,
    };
    let event = d.event.or(r.event).unwrap_or_default();
    let reason = if r.reason.is_empty() {
        r.outcome.as_str().to_string()
    } else {
        r.reason
    };
    let event_id = ctx.db.write(|tx| {
        db::events::insert(
            tx,
            &NewEvent {
                source: d.source.as_str(),
                event: &event,
                delivery_id: &d.delivery_id,
                headers: &d.headers_json,
                body,
                body_size: d.body_size,
                outcome: r.outcome.as_str(),
                reason: &reason,
                work_item: r.work_item.as_deref(),
                replay_of: d.replay_of,
            },
            ctx.now,
        )
    })?;
    info!(
        source = d.source.as_str(),
        delivery = %d.delivery_id,
        event_id,
        outcome = r.outcome.as_str(),
        "{reason}"
    );
    Ok(Ingested {
        event_id,
        source: d.source,
        event,
        delivery_id: d.delivery_id,
        outcome: r.outcome,
        reason,
        work_item: r.work_item,
        http_status: r.http_status,
        replay_of: d.replay_of,
    })
}

/// `orch events`: the newest 200 deliveries (only rejected ones with `rejected_only`).
pub fn events(ctx: &Ctx, rejected_only: bool) -> Result<Vec<db::events::EventSummary>> {
    db::events::list(ctx.db.conn(), rejected_only, 200)
}
