//! Delivering the outbox (design §9): every due row is claimed by a fenced update, checked against
//! the sandbox guard, performed through its client (Plane, Gitea, git, Telegram), and marked
//! `done` with its result, or backed off `min(30 s · 2^(n−1), 1 h)` with the error, or `failed`
//! after 20 attempts (or at once when the service refused the request itself).
//!
//! Best effort by design: a drain never fails because a service is down, it stops trying a
//! service that did not answer for the rest of the pass, and it keeps within a time budget so
//! `orch tick` stays fast. Rows of one tracker issue go out in order. Deciding *what* to send is
//! `ops::notify`'s job; this module only delivers.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use tracing::{info, warn};

use crate::config::ServiceCfg;
use crate::ctx::Ctx;
use crate::db::{self, outbox::CachedState, outbox::OutboxRow};
use crate::domain::sandbox::{self, Service, Target, Verdict};
use crate::ext::gitea::{Deleted, ForgeRepo, Gitea, MergeAnswer};
use crate::ext::http::{CallError, Http};
use crate::ext::plane::{Plane, Posted};
use crate::ext::telegram::Telegram;
use crate::ext::{failpoint, sys};
use crate::ops::notify::{self, ChatPayload, CommentPayload, DeleteBranchPayload, StatePayload};

/// After this many attempts a row is `failed`.
pub const MAX_ATTEMPTS: u32 = 20;
/// Rows one `orch tick` delivers at most.
pub const TICK_LIMIT: usize = 200;
/// A claimed row is not due again for this long (longer than any one delivery takes).
const LEASE_S: i64 = 300;
/// Per request.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// A drain stops claiming rows after this long.
const TICK_BUDGET: Duration = Duration::from_secs(30);
const AFTER_COMMAND_BUDGET: Duration = Duration::from_secs(10);
/// How long a tracker project's state list is trusted.
const STATES_TTL_S: i64 = 600;

#[derive(Debug, Default, Clone, Serialize)]
pub struct DrainReport {
    pub sent: u32,
    pub retried: u32,
    pub failed: u32,
    /// Refused by the sandbox guard (left pending).
    pub refused: u32,
    /// Not tried: their service did not answer earlier in this pass.
    pub skipped: u32,
}

/// The backoff after failed attempt `n` (1-based): `min(30 s · 2^(n−1), 1 h)`.
pub fn backoff_s(attempt: u32) -> i64 {
    let exp = attempt.saturating_sub(1).min(20);
    (30i64 << exp).min(3600)
}

/// The attempts a row gets and the pause after failed attempt `attempt`: the general policy,
/// except the merge of a pull request, which a job is waiting on: `merge.max_retries` tries
/// (from its payload) `min(2^n, 60)` seconds apart (design §7.2).
fn retry_policy(row: &OutboxRow, attempt: u32) -> (u32, i64) {
    if row.kind == notify::FORGE_MERGE_PR {
        let max = serde_json::from_str::<notify::MergePrPayload>(&row.payload)
            .map(|p| p.max_retries)
            .unwrap_or(5);
        return (max + 1, (1i64 << attempt.min(6)).min(60));
    }
    (MAX_ATTEMPTS, backoff_s(attempt))
}

/// Whether this process runs sandboxed (`ORCH_SANDBOX` in its environment).
pub fn sandboxed() -> bool {
    sandbox::sandboxed(std::env::var("ORCH_SANDBOX").ok().as_deref())
}

/// Deliver up to `limit` due rows (step 6 of `orch tick`).
pub fn drain(ctx: &Ctx, limit: usize) -> Result<DrainReport> {
    drain_within(ctx, limit, TICK_BUDGET)
}

/// Right after a command that may have queued rows: deliver them at once, best effort, never
/// failing the command.
pub fn drain_after_command(ctx: &Ctx) {
    match drain_within(ctx, 50, AFTER_COMMAND_BUDGET) {
        Ok(r) if r.sent + r.retried + r.failed > 0 => {
            info!(
                "outbox: sent {}, retrying {}, failed {}",
                r.sent, r.retried, r.failed
            );
        }
        Ok(_) => {}
        Err(e) => warn!("outbox: {e:#}"),
    }
}

fn drain_within(ctx: &Ctx, limit: usize, budget: Duration) -> Result<DrainReport> {
    let mut rep = DrainReport::default();
    let started = Instant::now();
    let sandboxed = sandboxed();
    let http = Http::new(HTTP_TIMEOUT);
    let mut down: HashSet<Service> = HashSet::new();
    let mut seen: HashSet<i64> = HashSet::new();
    let mut tried = 0usize;
    free_orphaned_claims(ctx)?;
    // Delivering one row of a sequence makes the next one due, so look again while a pass
    // made progress.
    loop {
        let rows = db::outbox::due(ctx.db.conn(), crate::ctx::now(), limit)?;
        let mut progressed = false;
        for row in rows {
            if tried >= limit || started.elapsed() > budget {
                return Ok(rep);
            }
            if !seen.insert(row.id) {
                continue;
            }
            let Some(target) = Target::parse(&row.target) else {
                if let Some(attempt) = claim(ctx, &row)? {
                    let why = format!("malformed target `{}`", row.target);
                    ctx.db.write(|tx| {
                        db::outbox::fail(tx, row.id, attempt, &why, crate::ctx::now())
                    })?;
                    rep.failed += 1;
                }
                continue;
            };
            if let Verdict::Refused(why) =
                sandbox::check(sandboxed, &ctx.config.sandbox.allowed_projects, &target)
            {
                warn!(
                    target = %target,
                    kind = %row.kind,
                    "SANDBOX REFUSED outbound write #{} (`{}` to `{target}`): {why}; it stays pending for an unsandboxed orch",
                    row.id,
                    row.kind
                );
                ctx.db.write(|tx| {
                    db::outbox::note(tx, row.id, row.attempts, &format!("refused: {why}"))
                })?;
                rep.refused += 1;
                continue;
            }
            // A process that cannot read the service's token (a supervisor: it never holds
            // one) leaves the row to one that can (the tick), without spending an attempt.
            if down.contains(&target.service) || !token_here(ctx, target.service) {
                rep.skipped += 1;
                continue;
            }
            let Some(attempt) = claim(ctx, &row)? else {
                continue;
            };
            tried += 1;
            failpoint::hit("outbox.after-claim");
            let outcome = perform(ctx, &http, &row);
            failpoint::hit("outbox.after-send");
            let now = crate::ctx::now();
            match outcome {
                Ok(result) => {
                    info!(target = %target, "outbox #{} `{}`: {result}", row.id, row.kind);
                    ctx.db
                        .write(|tx| db::outbox::complete(tx, row.id, attempt, &result, now))?;
                    rep.sent += 1;
                    progressed = true;
                }
                Err(CallError::Permanent(e)) => {
                    warn!(target = %target, "outbox #{} `{}` failed: {e}", row.id, row.kind);
                    ctx.db
                        .write(|tx| db::outbox::fail(tx, row.id, attempt, &e, now))?;
                    rep.failed += 1;
                }
                Err(CallError::Transient {
                    message,
                    retry_after_s,
                    unreachable,
                }) => {
                    if unreachable {
                        down.insert(target.service);
                    }
                    let (cap, delay) = retry_policy(&row, attempt);
                    if attempt >= cap {
                        let why = format!("gave up after {attempt} attempts: {message}");
                        warn!(target = %target, "outbox #{} `{}` failed: {why}", row.id, row.kind);
                        ctx.db
                            .write(|tx| db::outbox::fail(tx, row.id, attempt, &why, now))?;
                        rep.failed += 1;
                    } else {
                        let delay = delay.max(retry_after_s.unwrap_or(0).min(3600) as i64);
                        info!(
                            target = %target,
                            "outbox #{} `{}` attempt {attempt} failed, retry in {delay}s: {message}",
                            row.id,
                            row.kind
                        );
                        ctx.db.write(|tx| {
                            db::outbox::retry(tx, row.id, attempt, now + delay, &message)
                        })?;
                        rep.retried += 1;
                    }
                }
            }
        }
        if !progressed || tried >= limit || started.elapsed() > budget {
            return Ok(rep);
        }
    }
}

fn claim(ctx: &Ctx, row: &OutboxRow) -> Result<Option<u32>> {
    let now = crate::ctx::now();
    let me = sys::self_identity()?;
    ctx.db
        .write(|tx| db::outbox::claim(tx, row.id, row.attempts, now, now + LEASE_S, &me))
}

/// Rows whose drainer died mid-send are due again at once (not after the claim's lease). The
/// send may have happened: every kind is idempotent on the receiving side (a state already set,
/// a comment's external id, a branch already gone) except a chat message, which may then
/// arrive twice.
fn free_orphaned_claims(ctx: &Ctx) -> Result<()> {
    let now = crate::ctx::now();
    for (id, attempts, owner) in db::outbox::claimed(ctx.db.conn(), now)? {
        if !sys::is_live(&owner).is_alive() {
            ctx.db
                .write(|tx| db::outbox::unclaim(tx, id, attempts, now))?;
        }
    }
    Ok(())
}

fn payload<T: serde::de::DeserializeOwned>(row: &OutboxRow) -> Result<T, CallError> {
    serde_json::from_str(&row.payload)
        .map_err(|e| CallError::Permanent(format!("malformed `{}` payload: {e}", row.kind)))
}

/// A configuration problem an operator can fix: retried, not failed at once.
fn config_error(message: String) -> CallError {
    CallError::Transient {
        message,
        retry_after_s: None,
        unreachable: false,
    }
}

/// Whether this process can read the token `service` needs; `true` when the config names none
/// (the attempt then fails with the reason) or the service needs none (`git`).
fn token_here(ctx: &Ctx, service: Service) -> bool {
    let svc = match service {
        Service::Plane => ctx.config.tracker.as_ref(),
        Service::Gitea => ctx.config.forge.as_ref(),
        Service::Telegram => ctx.config.chat.as_ref(),
        Service::Git => None,
    };
    svc.is_none_or(|s| !s.has_token() || crate::ext::secrets::available(s.token_where()))
}

/// The token of `<block>`, read now from its file, a systemd credential or its variable.
fn token(svc: &ServiceCfg, block: &str) -> Result<String, CallError> {
    if !svc.has_token() {
        return Err(config_error(format!(
            "neither `{block}.token_file` nor `{block}.token_env` is set in the config"
        )));
    }
    match crate::ext::secrets::read(svc.token_where()) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err(config_error(format!(
            "the token of `{block}` is not available (`{block}.token_env` names an unset variable)"
        ))),
        Err(e) => Err(config_error(format!("{e:#}"))),
    }
}

/// The Gitea client of the config's `forge` block (its token read now) and the row's target
/// repository, checked as `owner/name`.
fn gitea_for<'a>(
    ctx: &Ctx,
    http: &'a Http,
    target: &str,
) -> Result<(Gitea<'a>, ForgeRepo), CallError> {
    let Some(forge) = ctx.config.gitea() else {
        return Err(config_error(
            "no `forge` block of kind `gitea` in the config".into(),
        ));
    };
    let Some(base) = forge.base_url.as_deref() else {
        return Err(config_error(
            "`forge.base_url` is not set in the config".into(),
        ));
    };
    let token = token(forge, "forge")?;
    let repo = ForgeRepo::parse(target)
        .ok_or_else(|| CallError::Permanent(format!("invalid forge repo `{target}`")))?;
    Ok((Gitea::new(http, base, Some(&token)), repo))
}

fn perform(ctx: &Ctx, http: &Http, row: &OutboxRow) -> Result<String, CallError> {
    match row.kind.as_str() {
        notify::PLANE_STATE => plane_state(ctx, http, &payload(row)?),
        notify::PLANE_COMMENT => {
            let p: CommentPayload = payload(row)?;
            let (plane, _) = plane(ctx, http)?;
            match plane.comment(&p.project, &p.issue, &p.html, &row.idem_key)? {
                Posted::Created(id) => Ok(format!("comment {id} posted")),
                Posted::AlreadyThere(id) => Ok(format!("comment {id} was already posted")),
            }
        }
        notify::CHAT_MESSAGE => {
            let p: ChatPayload = payload(row)?;
            let Some(chat) = ctx.config.telegram() else {
                return Err(config_error(
                    "no `chat` block of kind `telegram` in the config".into(),
                ));
            };
            let token = token(chat, "chat")?;
            let tg = Telegram::new(http, chat.base_url.as_deref(), &token);
            let id = tg.send_message(&p.chat_id, &p.html)?;
            Ok(format!("message {id} sent"))
        }
        notify::FORGE_DELETE_BRANCH => {
            let p: DeleteBranchPayload = payload(row)?;
            if let Some(kept) = branch_in_use(ctx, &p)? {
                return Ok(kept);
            }
            let (gitea, repo) = gitea_for(ctx, http, &p.repo)?;
            match gitea.delete_branch(&repo, &p.branch, &p.main, p.sha.as_deref())? {
                Deleted::Deleted => Ok(format!("deleted branch `{}`", p.branch)),
                Deleted::AlreadyGone => Ok(format!("branch `{}` was already gone", p.branch)),
                Deleted::Moved(head) => Ok(format!(
                    "branch `{}` moved to {head} since the cancel; kept",
                    p.branch
                )),
            }
        }
        notify::GIT_DELETE_BRANCH => git_delete(ctx, &payload(row)?),
        notify::FORGE_MERGE_PR => {
            let p: notify::MergePrPayload = payload(row)?;
            let (gitea, repo) = gitea_for(ctx, http, &p.repo)?;
            merge_pr(&gitea, &repo, &p)
        }
        notify::FORGE_OPEN_PR => {
            let p: notify::OpenPrPayload = payload(row)?;
            let (gitea, repo) = gitea_for(ctx, http, &p.repo)?;
            let pr = gitea.find_or_create_pr(&repo, &p.branch, &p.base, &p.title, &p.body)?;
            Ok(if pr.created {
                format!("pull request #{} opened", pr.number)
            } else {
                format!("pull request #{} was already open", pr.number)
            })
        }
        other => Err(CallError::Permanent(format!(
            "unknown outbox kind `{other}`"
        ))),
    }
}

/// Merge the pull request of a task's branch (opened now if there is none), with the head it
/// must be of. Already merged is success; not mergeable (a conflict), 403 and 404 fail the row
/// for good; 405/408/409/422/5xx and timeouts are retried. The result ends with the merge
/// commit when Gitea names one.
fn merge_pr(
    gitea: &Gitea<'_>,
    repo: &ForgeRepo,
    p: &notify::MergePrPayload,
) -> Result<String, CallError> {
    let number = match gitea.find_pr_any(repo, &p.branch, &p.base)? {
        Some(n) => n,
        None => {
            gitea
                .find_or_create_pr(
                    repo,
                    &p.branch,
                    &p.base,
                    &p.title,
                    &format!("Opened by orch for {}.", p.work_item),
                )?
                .number
        }
    };
    let merged = |s: &crate::ext::gitea::PullState| {
        format!(
            "pull request #{number} merged as {}",
            s.merge_commit_sha.as_deref().unwrap_or("unknown")
        )
    };
    let state = gitea.pull(repo, number)?;
    if state.merged {
        return Ok(merged(&state));
    }
    if !state.mergeable {
        return Err(CallError::Permanent(format!(
            "pull request #{number} is not mergeable (a conflict with `{}`)",
            p.base
        )));
    }
    match gitea.merge_pull(repo, number, &p.style, &p.head)? {
        MergeAnswer::Merged => {
            let state = gitea.pull(repo, number)?;
            Ok(merged(&state))
        }
        MergeAnswer::Retry(why) => Err(CallError::Transient {
            message: why,
            retry_after_s: None,
            unreachable: false,
        }),
        MergeAnswer::Refused(why) => Err(CallError::Permanent(why)),
    }
}

/// The Plane client from the `tracker` block, and the block.
fn plane<'h>(ctx: &'h Ctx, http: &'h Http) -> Result<(Plane<'h>, &'h ServiceCfg), CallError> {
    let Some(t) = ctx.config.plane() else {
        return Err(config_error(
            "no `tracker` block of kind `plane` in the config".into(),
        ));
    };
    let (Some(base), Some(ws)) = (t.base_url.as_deref(), t.workspace.as_deref()) else {
        return Err(config_error(
            "`tracker.base_url` and `tracker.workspace` must be set in the config".into(),
        ));
    };
    let token = token(t, "tracker")?;
    Ok((Plane::new(http, base, ws, &token)?, t))
}

/// The state chosen for a mirror: exact name, then an alias, then the project's base state of
/// the group. Names compare without case, spaces or punctuation (`Code Review` = `Code-Review`).
pub fn pick_state<'s>(
    states: &'s [CachedState],
    name: &str,
    aliases: &[String],
    group: &str,
) -> Option<(&'s CachedState, bool)> {
    let norm = |s: &str| {
        s.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    for want in std::iter::once(name).chain(aliases.iter().map(String::as_str)) {
        if let Some(s) = states.iter().find(|s| norm(&s.name) == norm(want)) {
            return Some((s, false));
        }
    }
    let in_group = || states.iter().filter(|s| s.group == group);
    in_group()
        .find(|s| s.default)
        .or_else(|| in_group().next())
        .map(|s| (s, true))
}

fn states(
    ctx: &Ctx,
    plane: &Plane<'_>,
    project: &str,
    refresh: bool,
) -> Result<Vec<CachedState>, CallError> {
    let now = crate::ctx::now();
    let cached = db::outbox::tracker_states(ctx.db.conn(), project)
        .map_err(|e| config_error(format!("reading the state cache: {e:#}")))?;
    if let Some((at, states)) = &cached
        && !refresh
        && now - at < STATES_TTL_S
    {
        return Ok(states.clone());
    }
    let fresh: Vec<CachedState> = plane
        .states(project)?
        .into_iter()
        .map(|s| CachedState {
            id: s.id,
            name: s.name,
            group: s.group,
            default: s.default,
        })
        .collect();
    if let Err(e) = ctx
        .db
        .write(|tx| db::outbox::set_tracker_states(tx, project, &fresh, now))
    {
        warn!("could not cache the states of plane project `{project}`: {e:#}");
    }
    Ok(fresh)
}

fn plane_state(ctx: &Ctx, http: &Http, p: &StatePayload) -> Result<String, CallError> {
    let (plane, _) = plane(ctx, http)?;
    let mut list = states(ctx, &plane, &p.project, false)?;
    let mut chosen = pick_state(&list, &p.state, &p.aliases, &p.group).map(|(s, f)| (s.clone(), f));
    if chosen.is_none() {
        // The cache may predate a state someone just added.
        list = states(ctx, &plane, &p.project, true)?;
        chosen = pick_state(&list, &p.state, &p.aliases, &p.group).map(|(s, f)| (s.clone(), f));
    }
    let Some((want, fallback)) = chosen else {
        return Err(CallError::Permanent(format!(
            "plane project `{}` has no state `{}` and no `{}` state to fall back to",
            p.project, p.state, p.group
        )));
    };
    let current = plane.issue_state(&p.project, &p.issue)?;
    if current.as_deref() == Some(want.id.as_str()) {
        return Ok(format!("already in `{}`", want.name));
    }
    if let Some(cur) = &current {
        let mut known = list.iter().find(|s| &s.id == cur).cloned();
        if known.is_none() {
            list = states(ctx, &plane, &p.project, true)?;
            known = list.iter().find(|s| &s.id == cur).cloned();
        }
        if let Some(k) = known
            && k.group == "completed"
            && want.group != "completed"
        {
            return Ok(format!(
                "left in `{}`: a done issue is never moved backwards (wanted `{}`)",
                k.name, p.state
            ));
        }
    }
    plane.set_state(&p.project, &p.issue, &want.id)?;
    Ok(if fallback {
        format!(
            "state set to `{}` (the project has no `{}`)",
            want.name, p.state
        )
    } else {
        format!("state set to `{}`", want.name)
    })
}

/// A task started again (same work item, same title) works on the branch a cancel queued for
/// deletion: the delete is moot, whatever the branch points at now.
fn branch_in_use(ctx: &Ctx, p: &DeleteBranchPayload) -> Result<Option<String>, CallError> {
    let owner = db::tasks::active_on_branch(ctx.db.conn(), &p.branch)
        .map_err(|e| config_error(format!("reading the tasks: {e:#}")))?;
    Ok(owner.map(|wi| format!("branch `{}` kept: `{wi}` works on it again", p.branch)))
}

fn git_delete(ctx: &Ctx, p: &DeleteBranchPayload) -> Result<String, CallError> {
    use crate::ext::git::BranchDelete;
    if let Some(kept) = branch_in_use(ctx, p)? {
        return Ok(kept);
    }
    let Some(repo) = ctx.config.repo(&p.repo) else {
        return Err(CallError::Permanent(format!(
            "repo `{}` is not in the config",
            p.repo
        )));
    };
    let git = ctx.git();
    let r = repo.git_ref();
    let transient = |e: anyhow::Error| config_error(format!("{e:#}"));
    // Never wait behind a supervisor's git work: try again next pass.
    let Some(lock) = git.try_lock(&repo.name).map_err(transient)? else {
        return Err(config_error(format!("repo `{}` is busy", repo.name)));
    };
    git.ensure_clone(&lock, &r).map_err(transient)?;
    if p.branch == "main" || p.branch == "master" || p.branch == repo.main {
        return Err(CallError::Permanent(format!(
            "refusing to delete branch `{}` of repo `{}`: it is a main branch",
            p.branch, repo.name
        )));
    }
    match git.delete_remote_branch(&lock, &r, &p.branch, p.sha.as_deref()) {
        Ok(BranchDelete::Deleted) => Ok(format!("deleted branch `{}`", p.branch)),
        Ok(BranchDelete::AlreadyGone) => Ok(format!("branch `{}` was already gone", p.branch)),
        Ok(BranchDelete::Moved) => Ok(format!(
            "branch `{}` moved since the cancel; kept",
            p.branch
        )),
        Err(e) => Err(transient(e)),
    }
}

/// One row as `orch outbox` shows it.
#[derive(Debug, Serialize)]
pub struct ItemOut {
    pub id: i64,
    pub kind: String,
    pub target: String,
    pub status: String,
    pub attempts: u32,
    pub next_attempt_at: String,
    pub last_error: Option<String>,
    pub created_at: String,
}

/// `orch outbox [--failed]`: pending and failed rows (failed only), oldest first.
pub fn list(ctx: &Ctx, failed_only: bool) -> Result<Vec<ItemOut>> {
    use crate::domain::time::rfc3339;
    Ok(db::outbox::list(ctx.db.conn(), failed_only)?
        .into_iter()
        .map(|r| ItemOut {
            id: r.id,
            kind: r.kind,
            target: r.target,
            status: r.status,
            attempts: r.attempts,
            next_attempt_at: rfc3339(r.next_attempt_at),
            last_error: r.last_error,
            created_at: rfc3339(r.created_at),
        })
        .collect())
}

/// How many rows are due now (for `orch tick --plan`).
pub fn due_count(ctx: &Ctx) -> Result<usize> {
    Ok(db::outbox::due(ctx.db.conn(), crate::ctx::now(), TICK_LIMIT)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_30s_and_caps_at_an_hour() {
        let got: Vec<i64> = (1..=9).map(backoff_s).collect();
        assert_eq!(got, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(backoff_s(0), 30);
        assert_eq!(backoff_s(u32::MAX), 3600);
    }

    fn st(id: &str, name: &str, group: &str, default: bool) -> CachedState {
        CachedState {
            id: id.into(),
            name: name.into(),
            group: group.into(),
            default,
        }
    }

    #[test]
    fn states_are_picked_by_name_then_alias_then_group() {
        let states = [
            st("1", "Backlog", "backlog", true),
            st("2", "In Progress", "started", false),
            st("3", "Code Review", "started", false),
            st("4", "Doing", "started", true),
            st("5", "STOP", "cancelled", false),
            st("6", "Done", "completed", false),
        ];
        let pick = |name: &str, aliases: &[&str], group: &str| {
            let aliases: Vec<String> = aliases.iter().map(|a| a.to_string()).collect();
            pick_state(&states, name, &aliases, group).map(|(s, f)| (s.id.clone(), f))
        };
        assert_eq!(
            pick("Code-Review", &[], "started"),
            Some(("3".into(), false))
        );
        assert_eq!(pick("done", &[], "completed"), Some(("6".into(), false)));
        assert_eq!(
            pick("Cancelled", &["STOP"], "cancelled"),
            Some(("5".into(), false))
        );
        // No such name: the group's default state, else its first.
        assert_eq!(pick("Testing", &[], "started"), Some(("4".into(), true)));
        assert_eq!(pick("Blocked", &[], "unstarted"), None);
    }
}
