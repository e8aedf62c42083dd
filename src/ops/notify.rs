//! What to send on which event (design §9): the tracker mirror of every transition of a linked
//! task (a Plane state and a comment), chat alerts, and the remote branch delete of a cancel.
//! Each is an outbox row inserted with the caller's transaction, so the effect commits or rolls
//! back with the state change that causes it; `ops::outbox` delivers it later.
//!
//! Deliberately not here: any network I/O (the outbox drains), deciding transitions, and
//! reading tokens (payloads never hold one). Without a tracker, forge or chat block in the
//! config the corresponding effects are not queued at all and alerts only go to the log.

use anyhow::Result;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::config::{RepoCfg, ServiceCfg};
use crate::ctx::Ctx;
use crate::db;
use crate::db::tasks::TaskRow;
use crate::domain::gate;
use crate::domain::history::{Actor, Outcome};
use crate::domain::sandbox::{Service, Target};
use crate::domain::stage::Stage;
use crate::ext::telegram::{escape_html, valid_chat_id};

/// Outbox kinds this module queues (and `ops::outbox` performs).
pub const PLANE_STATE: &str = "plane.state";
pub const PLANE_COMMENT: &str = "plane.comment";
pub const CHAT_MESSAGE: &str = "chat.message";
pub const FORGE_DELETE_BRANCH: &str = "forge.delete_branch";
pub const GIT_DELETE_BRANCH: &str = "git.delete_branch";
pub const FORGE_OPEN_PR: &str = "forge.open_pr";
pub const FORGE_MERGE_PR: &str = "forge.merge_pr";

/// One history row as `advance::record` wrote it (`id` is its row id).
#[derive(Debug, Clone, Copy)]
pub struct Hop<'a> {
    pub id: i64,
    pub from: Stage,
    pub to: Stage,
    pub actor: Actor,
    pub outcome: Outcome,
    pub reason: &'a str,
    /// The person behind an operator's hop.
    pub by: Option<&'a str>,
}

/// The tracker state a hop mirrors: a name, other names that mean the same, and the state
/// group to fall back to when the project has none of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mirror {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub group: &'static str,
}

const fn m(name: &'static str, group: &'static str) -> Mirror {
    Mirror {
        name,
        aliases: &[],
        group,
    }
}

/// The tracker state of a stage. `awaiting_confirm`: a `deploy` that waits for the human's
/// confirmation. That wait shows as `Awaiting Deploy`, never `Confirm Deploy`: *Confirm
/// Deploy* is the human's gesture that the webhook turns into a confirmation, so orch setting
/// it would confirm its own deploy.
pub fn stage_state(stage: Stage, awaiting_confirm: bool) -> Option<Mirror> {
    Some(match stage {
        // `To Analyse` is the human's gesture that creates the task; orch never sets it.
        Stage::Created => return None,
        Stage::Analysis => m("Analysis", "started"),
        Stage::Architecture => m("Architecture", "started"),
        Stage::Development => m("Development", "started"),
        Stage::Review => Mirror {
            name: "Code-Review",
            aliases: &["Code Review"],
            group: "started",
        },
        Stage::Testing => m("Testing", "started"),
        Stage::DeployStaging => m("Awaiting Deploy", "started"),
        Stage::Deploy if awaiting_confirm => m("Awaiting Deploy", "started"),
        Stage::Deploy => m("Deploying", "started"),
        Stage::Done => m("Done", "completed"),
        Stage::Cancelled => Mirror {
            name: "Cancelled",
            aliases: &["STOP"],
            group: "cancelled",
        },
    })
}

/// What a history row changes in the tracker: a state to mirror (if any) and whether it is
/// worth a comment. Routine rows (`deferred`, `stage-cas-lost`, `not-satisfied`, `checked`)
/// send nothing.
pub fn mirror_of(hop: &Hop<'_>, awaiting_confirm: bool) -> (Option<Mirror>, bool) {
    let moved = hop.from != hop.to;
    let state = match hop.outcome {
        Outcome::Blocked => Some(m("Blocked", "started")),
        Outcome::Held => Some(m("Needs Input", "started")),
        _ if moved => stage_state(hop.to, awaiting_confirm),
        Outcome::Resumed | Outcome::Override => stage_state(hop.to, awaiting_confirm),
        Outcome::Approved if hop.to == Stage::Deploy => stage_state(Stage::Deploy, false),
        _ => None,
    };
    let comment = moved
        || matches!(
            hop.outcome,
            Outcome::Blocked
                | Outcome::Held
                | Outcome::Approved
                | Outcome::Paused
                | Outcome::Resumed
                | Outcome::Override
                | Outcome::Cancelled
        );
    (state, comment)
}

/// The tracker block when orch can write to it: Plane (the only tracker orch speaks) with a
/// base URL, a workspace and a token. A block with only a webhook secret is inbound
/// only, and nothing is queued for it.
fn plane_cfg(ctx: &Ctx) -> Option<&ServiceCfg> {
    ctx.config
        .plane()
        .filter(|t| t.base_url.is_some() && t.workspace.is_some() && t.has_token())
}

/// Queue the tracker mirror of one history row of `task` (design §9): a state and a comment, for
/// tasks linked to a tracker issue of a repo with a `plane_project`. Called by
/// `advance::record` (and the override) inside their write transaction.
pub fn on_transition(ctx: &Ctx, tx: &Connection, task: &TaskRow, hop: &Hop<'_>) -> Result<()> {
    open_pr_early(ctx, tx, task, hop)?;
    if plane_cfg(ctx).is_none() {
        return Ok(());
    }
    let Some(repo) = ctx.config.repo(&task.repo) else {
        return Ok(());
    };
    let Some(project) = repo.plane_project.as_deref() else {
        return Ok(());
    };
    let Some(issue) = db::tasks::tracker_ref(tx, task.id)? else {
        return Ok(());
    };
    let (state, comment) = mirror_of(hop, awaiting_confirm(repo, task, hop.to));
    if state.is_none() && !comment {
        return Ok(());
    }
    let target = Target::new(Service::Plane, project).to_string();
    let seq = format!("{target}:{issue}");
    if let Some(s) = state {
        let payload = StatePayload {
            project: project.to_string(),
            issue: issue.clone(),
            state: s.name.to_string(),
            aliases: s.aliases.iter().map(|a| a.to_string()).collect(),
            group: s.group.to_string(),
            work_item: task.work_item.clone(),
        };
        db::outbox::insert_ordered(
            tx,
            PLANE_STATE,
            &target,
            Some(&seq),
            &serde_json::to_string(&payload)?,
            &format!("t{}:plane-state", hop.id),
            ctx.now,
        )?;
    }
    if comment {
        let numbers = match hop.from.spec().role {
            Some(role) => db::outbox::last_run(tx, task.id, role.as_str(), task.stage_entered_at)?,
            None => None,
        };
        let payload = CommentPayload {
            project: project.to_string(),
            issue,
            html: comment_html(task, hop, numbers.as_ref()),
            work_item: task.work_item.clone(),
        };
        db::outbox::insert_ordered(
            tx,
            PLANE_COMMENT,
            &target,
            Some(&seq),
            &serde_json::to_string(&payload)?,
            &format!("t{}:plane-comment", hop.id),
            ctx.now,
        )?;
    }
    Ok(())
}

/// Link `task` to its tracker issue and mirror its newest history row (for a task just created
/// from the tracker: its `created → analysis`), as if the link had existed when that row was
/// written. Idempotent: linking again queues nothing new.
pub fn link_tracker(ctx: &Ctx, tx: &Connection, task: &TaskRow, issue: &str) -> Result<()> {
    db::tasks::set_tracker_ref(tx, task.id, Some(issue), ctx.now)?;
    let Some(last) = db::transitions::of_task(tx, task.id)?.pop() else {
        return Ok(());
    };
    let hop = Hop {
        id: last.id,
        from: last.from,
        to: last.to,
        actor: last.actor,
        outcome: last.outcome,
        reason: &last.reason,
        by: last.by.as_deref(),
    };
    on_transition(ctx, tx, task, &hop)
}

/// Whether `task` entering (or sitting in) `stage` waits for a human's deploy confirmation.
fn awaiting_confirm(repo: &RepoCfg, task: &TaskRow, stage: Stage) -> bool {
    stage == Stage::Deploy
        && gate::not_applicable(Stage::Deploy, repo.contracts()).is_none()
        && repo.require_confirm()
        && !task.has_label("auto-deploy")
        && task.deploy_confirmed_at.is_none()
}

/// The body of a tracker comment: the hop, who did it, why, and the numbers of the agent run
/// that ended the stage when there is one. Every piece of outside text is escaped.
pub fn comment_html(task: &TaskRow, hop: &Hop<'_>, run: Option<&db::outbox::RunNumbers>) -> String {
    let e = escape_html;
    let mut html = if hop.from == hop.to {
        format!(
            "<p><strong>orch</strong> · <code>{}</code> in <code>{}</code>: {}</p>",
            e(&task.work_item),
            hop.to,
            hop.outcome
        )
    } else {
        format!(
            "<p><strong>orch</strong> · <code>{}</code>: <code>{}</code> → <code>{}</code> ({})</p>",
            e(&task.work_item),
            hop.from,
            hop.to,
            hop.outcome
        )
    };
    let mut who = Vec::new();
    if let Some(role) = hop.from.spec().role {
        who.push(format!("role: {role}"));
    }
    match hop.by {
        Some(person) => who.push(format!("by: {} ({})", hop.actor, e(person))),
        None => who.push(format!("by: {}", hop.actor)),
    }
    html.push_str(&format!("<p>{}</p>", who.join(" · ")));
    if !hop.reason.trim().is_empty() {
        let reason: String = hop.reason.chars().take(2000).collect();
        html.push_str(&format!("<p>reason: {}</p>", e(&reason)));
    }
    if let Some(r) = run {
        let mut parts = Vec::new();
        if let Some(ms) = r.duration_ms {
            parts.push(format!("duration {}", duration(ms)));
        }
        match (r.input_tokens, r.output_tokens) {
            (Some(i), Some(o)) => parts.push(format!("tokens {i} in / {o} out")),
            (Some(i), None) => parts.push(format!("tokens {i} in")),
            (None, Some(o)) => parts.push(format!("tokens {o} out")),
            (None, None) => {}
        }
        if let Some(c) = r.cost_usd {
            parts.push(format!("cost ${c:.4}"));
        }
        if !parts.is_empty() {
            html.push_str(&format!("<p>{}</p>", parts.join(" · ")));
        }
    }
    html
}

fn duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Payload of `plane.state`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatePayload {
    pub project: String,
    pub issue: String,
    pub state: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub group: String,
    #[serde(default)]
    pub work_item: String,
}

/// Payload of `plane.comment`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommentPayload {
    pub project: String,
    pub issue: String,
    pub html: String,
    #[serde(default)]
    pub work_item: String,
}

/// Payload of `chat.message`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChatPayload {
    pub chat_id: String,
    pub html: String,
    #[serde(default)]
    pub work_item: String,
}

/// Payload of `forge.delete_branch` (`repo` is `owner/name`) and `git.delete_branch` (`repo`
/// is the configured repo name).
/// The merge of a task's pull request (design §7.2), queued by its merge job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergePrPayload {
    pub repo: String,
    pub branch: String,
    pub base: String,
    /// `merge`, `rebase` or `squash`.
    pub style: String,
    /// The head the merge must be of (Gitea's `head_commit_id`).
    pub head: String,
    pub title: String,
    pub work_item: String,
    /// Transient failures tolerated before the row fails (`merge.max_retries`).
    #[serde(default = "default_merge_retries")]
    pub max_retries: u32,
}

fn default_merge_retries() -> u32 {
    5
}

/// A pull request to open (or find) on the forge: the code of a task in review.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpenPrPayload {
    pub repo: String,
    pub branch: String,
    pub base: String,
    pub title: String,
    pub body: String,
}

/// `merge.mode: gitea`: once development hands the code to review, its pull request is opened
/// (design §7.2), so reviewers on the forge see it early; the merge later finds it.
fn open_pr_early(ctx: &Ctx, tx: &Connection, task: &TaskRow, hop: &Hop<'_>) -> Result<()> {
    if !(hop.from == Stage::Development && hop.to == Stage::Review) {
        return Ok(());
    }
    let Some(repo) = ctx.config.repo(&task.repo) else {
        return Ok(());
    };
    if !repo
        .merge
        .as_ref()
        .is_some_and(|m| m.mode == crate::config::MergeMode::Gitea)
    {
        return Ok(());
    }
    let Some(fr) = repo.forge() else {
        return Ok(());
    };
    let payload = OpenPrPayload {
        repo: fr.full(),
        branch: task.branch.clone(),
        base: repo.main.clone(),
        title: format!("{}: {}", task.base_work_item, task.title),
        body: format!(
            "Opened by orch for {} when its code went to review; orch merges it after the deploy.",
            task.base_work_item
        ),
    };
    db::outbox::insert(
        tx,
        FORGE_OPEN_PR,
        &Target::new(Service::Gitea, fr.full()).to_string(),
        &serde_json::to_string(&payload)?,
        &format!("task{}:open-pr", task.id.0),
        ctx.now,
    )?;
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeleteBranchPayload {
    pub repo: String,
    pub branch: String,
    pub main: String,
    /// The commit the branch pointed at when the task was cancelled: it is deleted only while
    /// it still does, so a task started again with the same id keeps its new branch.
    #[serde(default)]
    pub sha: Option<String>,
    #[serde(default)]
    pub work_item: String,
}

/// The chat block when it is Telegram with a token and a usable chat id.
fn chat_target(ctx: &Ctx) -> Option<&str> {
    let chat = ctx.config.telegram().filter(|c| c.has_token())?;
    chat.chat_id.as_deref().filter(|id| valid_chat_id(id))
}

/// An alert (blocked, held, failed, lease force-released, breaker, …): always logged; with a
/// chat configured, also queued as a message naming the work item. `c` is the caller's write
/// transaction when there is one, else the plain connection. Never fails the caller: a row
/// that cannot be queued is logged.
pub fn alert(ctx: &Ctx, c: &Connection, task: Option<&TaskRow>, text: &str) {
    let wi = task.map(|t| t.work_item.as_str()).unwrap_or("-");
    warn!(work_item = wi, "alert: {text}");
    // A supervisor's log is a job log file: the next tick repeats the alert in the journal.
    if ctx.relay_alerts
        && let Err(e) =
            db::misc::journal(c, task.map(|t| t.id), db::usage::UNRELAYED, text, ctx.now)
    {
        warn!(work_item = wi, "could not journal the alert: {e:#}");
    }
    let Some(chat_id) = chat_target(ctx) else {
        return;
    };
    let html = alert_html(task, text);
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    let key = format!(
        "alert:{}:{}:{}",
        task.map(|t| t.id.0).unwrap_or(0),
        ctx.now,
        &digest[..16]
    );
    let payload = ChatPayload {
        chat_id: chat_id.to_string(),
        html,
        work_item: wi.to_string(),
    };
    let target = Target::new(Service::Telegram, chat_id).to_string();
    let queued = serde_json::to_string(&payload)
        .map_err(anyhow::Error::from)
        .and_then(|p| db::outbox::insert(c, CHAT_MESSAGE, &target, &p, &key, ctx.now));
    if let Err(e) = queued {
        warn!(work_item = wi, "could not queue the chat alert: {e:#}");
    }
}

/// The chat text of an alert: the work item and title first (escaped), then the text.
pub fn alert_html(task: Option<&TaskRow>, text: &str) -> String {
    let text: String = text.chars().take(3000).collect();
    match task {
        Some(t) => format!(
            "⚠️ <b>orch</b> · <b>{}</b> ({}) — {}\n{}",
            escape_html(&t.work_item),
            escape_html(&t.repo),
            escape_html(&t.title),
            escape_html(&text)
        ),
        None => format!("⚠️ <b>orch</b>\n{}", escape_html(&text)),
    }
}

/// Cancel cascade (design §3.6): queue the delete of the task's remote feature branch, through
/// the forge API when a Gitea forge is configured, else with `git push --delete`. Never a main
/// branch. Called inside the cancel's write transaction.
/// `sha`: where the remote branch was when the task was cancelled, when known; the delete
/// then happens only while it still points there. Either way it is skipped when a task works
/// on the branch again by the time it is delivered.
pub fn on_cancel(ctx: &Ctx, tx: &Connection, task: &TaskRow, sha: Option<&str>) -> Result<()> {
    let Some(repo) = ctx.config.repo(&task.repo) else {
        return Ok(());
    };
    let b = task.branch.as_str();
    if b == "main" || b == "master" || b == repo.main || !crate::domain::names::valid_branch_name(b)
    {
        warn!(work_item = %task.work_item, "not deleting branch `{b}`: it is a main branch or not a valid branch name");
        return Ok(());
    }
    // Deleting through the API needs a token; without one, git does it.
    let forge = ctx
        .config
        .gitea()
        .filter(|f| f.has_token())
        .and_then(|_| repo.forge());
    let (kind, target, repo_id) = match forge {
        Some(f) => (
            FORGE_DELETE_BRANCH,
            Target::new(Service::Gitea, f.full()),
            f.full(),
        ),
        None => (
            GIT_DELETE_BRANCH,
            Target::new(Service::Git, repo.name.clone()),
            repo.name.clone(),
        ),
    };
    let payload = DeleteBranchPayload {
        repo: repo_id,
        branch: task.branch.clone(),
        main: repo.main.clone(),
        sha: sha.map(str::to_string),
        work_item: task.work_item.clone(),
    };
    db::outbox::insert(
        tx,
        kind,
        &target.to_string(),
        &serde_json::to_string(&payload)?,
        &format!("task{}:delete-branch", task.id.0),
        ctx.now,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::TaskId;
    use crate::domain::stage::Track;

    fn hop<'a>(from: Stage, to: Stage, outcome: &str) -> Hop<'a> {
        Hop {
            id: 1,
            from,
            to,
            actor: Actor::Supervisor,
            outcome: outcome.parse().unwrap(),
            reason: "r",
            by: None,
        }
    }

    #[test]
    fn each_stage_has_its_tracker_state() {
        use Stage::*;
        let name = |s, w| stage_state(s, w).map(|m| m.name);
        for (stage, want) in [
            (Created, None),
            (Analysis, Some("Analysis")),
            (Architecture, Some("Architecture")),
            (Development, Some("Development")),
            (Review, Some("Code-Review")),
            (Testing, Some("Testing")),
            (DeployStaging, Some("Awaiting Deploy")),
            (Deploy, Some("Deploying")),
            (Done, Some("Done")),
            (Cancelled, Some("Cancelled")),
        ] {
            assert_eq!(name(stage, false), want, "{stage}");
        }
        // Waiting for the human never sets the human's own gesture.
        assert_eq!(name(Deploy, true), Some("Awaiting Deploy"));
        assert_eq!(stage_state(Cancelled, false).unwrap().aliases, ["STOP"]);
        assert_eq!(stage_state(Done, false).unwrap().group, "completed");
    }

    #[test]
    fn which_rows_reach_the_tracker() {
        use Stage::*;
        let cases: [(Hop<'_>, Option<&str>, bool); 12] = [
            (
                hop(Development, Review, "advanced"),
                Some("Code-Review"),
                true,
            ),
            (
                hop(Review, Development, "rolled-back"),
                Some("Development"),
                true,
            ),
            (hop(Testing, Testing, "blocked"), Some("Blocked"), true),
            (hop(Testing, Testing, "held"), Some("Needs Input"), true),
            (hop(Testing, Testing, "resumed"), Some("Testing"), true),
            (hop(Deploy, Deploy, "approved"), Some("Deploying"), true),
            (hop(Analysis, Analysis, "approved"), None, true),
            (hop(Review, Cancelled, "cancelled"), Some("Cancelled"), true),
            (hop(Review, Review, "paused"), None, true),
            (hop(Review, Review, "deferred"), None, false),
            (hop(Review, Review, "stage-cas-lost"), None, false),
            (hop(Analysis, Analysis, "not-satisfied"), None, false),
        ];
        for (h, state, comment) in cases {
            let (s, c) = mirror_of(&h, false);
            assert_eq!((s.map(|m| m.name), c), (state, comment), "{h:?}");
        }
    }

    fn task(title: &str) -> TaskRow {
        TaskRow {
            id: TaskId(3),
            work_item: "SHOP-7".into(),
            base_work_item: "SHOP-7".into(),
            repo: "shop".into(),
            title: title.into(),
            description: String::new(),
            stage: Stage::Development,
            track: Track::Feature,
            branch: "feature/SHOP-7-x".into(),
            labels: vec![],
            dev_retries: 0,
            stage_entered_at: 0,
            entry_marker: None,
            paused_at: None,
            paused_reason: None,
            paused_by: None,
            pause_before: None,
            approved_at: None,
            deploy_confirmed_at: None,
            blocked_at: None,
            blocked_reason: None,
            held_at: None,
            held_reason: None,
            cancel_requested_at: None,
            cancelled_at: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn comments_name_the_hop_the_role_and_the_numbers_and_escape_text() {
        let t = task("x");
        let mut h = hop(Stage::Development, Stage::Review, "advanced");
        h.reason = "ci: <success> & more";
        let run = db::outbox::RunNumbers {
            duration_ms: Some(125_000),
            input_tokens: Some(4200),
            output_tokens: Some(1800),
            cost_usd: Some(0.0614),
        };
        let html = comment_html(&t, &h, Some(&run));
        for want in [
            "<code>development</code> → <code>review</code> (advanced)",
            "role: developer",
            "by: supervisor",
            "reason: ci: &lt;success&gt; &amp; more",
            "duration 2m 05s",
            "tokens 4200 in / 1800 out",
            "cost $0.0614",
        ] {
            assert!(html.contains(want), "{want}: {html}");
        }
        assert!(!comment_html(&t, &h, None).contains("duration"));
    }

    /// A context over a temp state dir whose repo `shop` is Plane project `p1`, with `extra`
    /// top-level YAML.
    fn ctx(dir: &std::path::Path, extra: &str) -> Ctx {
        let cfg = dir.join("orch.yaml");
        std::fs::write(
            &cfg,
            format!(
                "state_dir: state\nrepos:\n  - {{name: shop, remote: /nowhere.git, prefix: SHOP, plane_project: p1}}\n{extra}"
            ),
        )
        .unwrap();
        Ctx::with_config(crate::config::load(&cfg, None).unwrap(), false).unwrap()
    }

    fn created(ctx: &Ctx) -> TaskRow {
        ctx.db
            .write(|tx| {
                let id = db::tasks::insert(
                    tx,
                    &db::tasks::NewTask {
                        work_item: "SHOP-1",
                        repo: "shop",
                        title: "t",
                        description: "",
                        track: Track::Feature,
                        branch: "feature/SHOP-1-t",
                        labels: &[],
                    },
                    ctx.now,
                )?;
                let task = db::tasks::get(tx, id)?;
                crate::ops::apply::record(
                    ctx,
                    tx,
                    &task,
                    Stage::Created,
                    Stage::Analysis,
                    Actor::Webhook,
                    Outcome::Advanced,
                    "pipeline started",
                )?;
                Ok(task)
            })
            .unwrap()
    }

    fn kinds(ctx: &Ctx) -> Vec<String> {
        db::outbox::list(ctx.db.conn(), false)
            .unwrap()
            .into_iter()
            .map(|r| r.kind)
            .collect()
    }

    #[test]
    fn linking_a_new_task_mirrors_its_first_hop_once() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(
            dir.path(),
            "tracker: {kind: plane, base_url: 'http://127.0.0.1:9', workspace: w, token_env: T}",
        );
        let task = created(&ctx);
        assert!(kinds(&ctx).is_empty(), "not linked yet: nothing to mirror");
        for _ in 0..2 {
            ctx.db
                .write(|tx| link_tracker(&ctx, tx, &task, "issue-1"))
                .unwrap();
        }
        assert_eq!(kinds(&ctx), [PLANE_STATE, PLANE_COMMENT]);
        let state: StatePayload =
            serde_json::from_str(&db::outbox::list(ctx.db.conn(), false).unwrap()[0].payload)
                .unwrap();
        assert_eq!(
            (state.issue.as_str(), state.state.as_str()),
            ("issue-1", "Analysis")
        );
    }

    #[test]
    fn a_tracker_block_without_write_access_queues_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path(), "tracker: {kind: plane, webhook_secret_env: S}");
        let task = created(&ctx);
        ctx.db
            .write(|tx| link_tracker(&ctx, tx, &task, "issue-1"))
            .unwrap();
        assert!(kinds(&ctx).is_empty());
    }

    #[test]
    fn alerts_name_the_work_item_and_escape_the_title() {
        let html = alert_html(Some(&task("Fix <b>&</b> bug")), "blocked: x < y");
        assert!(html.contains("<b>SHOP-7</b>"), "{html}");
        assert!(html.contains("Fix &lt;b&gt;&amp;&lt;/b&gt; bug"), "{html}");
        assert!(html.contains("blocked: x &lt; y"), "{html}");
        assert!(!html.contains("<b>&"), "{html}");
    }
}
