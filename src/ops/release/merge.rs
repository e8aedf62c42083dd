//! The merge of `deploy → done` (design §7.2) and its proof. What is merged is the branch head,
//! which may differ from the head the merge gate validated only by orch's own reports under
//! `docs/work-items/<WI>/`; anything else moved the branch after validation and a human looks.
//!
//! - `git`: orch pushes to `<main>` itself, never forced: the head (rebase style), a merge
//!   commit or a squash commit on top of main, each a fast-forward of the main the merge gate
//!   rebased onto. A main that moved since is not overwritten.
//! - `gitea`: an outbound write, so an outbox row (the tick holds the forge token, never a
//!   supervisor): the pull request (found, or opened) is merged with the head it must be of,
//!   retried by the outbox with capped backoff on 405/408/409/422/5xx and timeouts while Gitea
//!   calls it mergeable; 403/404 and a real conflict fail it at once. This job watches the row.
//!
//! Then the proof, after a fresh fetch: the validated commit is in main (or, squashed, main's
//! commit has the validated tree). Proven: the step is recorded with the coverage ratchet in
//! the same transaction, the advance reaches `done`, the worktree goes. Not proven: held, with
//! an alert ("deployed but not merged"), never `done`. A re-drive finds the commit in main and
//! merges nothing twice.

use anyhow::Result;
use tracing::info;

use super::work::{Ending, Rel};
use crate::config::{MergeMode, MergeStyle};
use crate::db;
use crate::domain::release::{self, Proof, Step, StepStatus};
use crate::ext::failpoint;

pub(super) fn run(rel: &Rel<'_>) -> Result<Ending> {
    let ctx = rel.ctx;
    let Some(mcfg) = rel.repo.merge.clone() else {
        return Ok(Ending::Done {
            detail: "no merge configured".into(),
            advance: true,
        });
    };
    if let Some(row) = rel.step(Step::Merge)? {
        return Ok(match row.status {
            StepStatus::Pass => Ending::Done {
                detail: format!("merged: {}", row.detail),
                advance: true,
            },
            _ => Ending::Held(format!("deployed but not merged: {}", row.detail)),
        });
    }
    let c = ctx.db.conn();
    let Some(validated) =
        db::release::last_pass(c, rel.task.id, Step::MergeGate)?.and_then(|r| r.sha)
    else {
        return Ok(Ending::Held(
            "deployed but not merged: no head was validated by the merge gate".into(),
        ));
    };
    let git = ctx.git();
    let r = rel.repo.git_ref();
    let lock = git.lock(&rel.repo.name)?;
    git.fetch(&lock, &r, &[rel.task.branch.as_str()])?;
    let clone = git.clone_dir(&rel.repo.name);
    let main_ref = format!("origin/{}", rel.repo.main);
    let branch_ref = format!("origin/{}", rel.task.branch);
    let head = git.rev_parse(&clone, &branch_ref)?;
    // Only orch's reports may have been added since the merge gate validated the head.
    let docs = format!("docs/work-items/{}/", rel.task.base_work_item);
    let moved: Vec<String> = git
        .changed_paths(&clone, &validated, &head)?
        .into_iter()
        .filter(|p| !p.starts_with(&docs))
        .collect();
    if !git.in_history(&clone, &validated, &head)? || !moved.is_empty() {
        return unproven(
            rel,
            &validated,
            &format!(
                "the branch moved after the merge gate validated {}: {}",
                short(&validated),
                if moved.is_empty() {
                    "the validated commit is no longer in it".to_string()
                } else {
                    moved.join(", ")
                }
            ),
        );
    }
    let squash = mcfg.style == MergeStyle::Squash;
    let mut merged_commit: Option<String> = None;
    if !git.in_history(&clone, &validated, &main_ref)? {
        failpoint::hit("release.before-merge");
        match mcfg.mode {
            MergeMode::Git => {
                let main = git.rev_parse(&clone, &main_ref)?;
                if !git.in_history(&clone, &main, &head)? {
                    return unproven(
                        rel,
                        &validated,
                        &format!(
                            "main moved to {} since the merge gate; not overwriting it",
                            short(&main)
                        ),
                    );
                }
                let tree = git.tree_of(&clone, &head)?;
                let msg = format!(
                    "{}: {} (merged by orch)\n\nValidated head: {validated}\n",
                    rel.task.base_work_item, rel.task.title
                );
                let id = super::work::identity();
                let new = match mcfg.style {
                    MergeStyle::Rebase => head.clone(),
                    MergeStyle::Merge => git.commit_tree(
                        &lock,
                        &r,
                        &tree,
                        &[&main, &head],
                        &msg,
                        &id.name,
                        &id.email,
                    )?,
                    MergeStyle::Squash => {
                        git.commit_tree(&lock, &r, &tree, &[&main], &msg, &id.name, &id.email)?
                    }
                };
                if !git.push_main(&lock, &r, &new)? {
                    return unproven(
                        rel,
                        &validated,
                        "origin refused the fast-forward of main (it moved meanwhile)",
                    );
                }
                merged_commit = Some(new);
            }
            MergeMode::Gitea => match forge_merge(rel, &mcfg, &head)? {
                Forge::Merged(sha) => merged_commit = sha,
                Forge::Wait(e) => return Ok(e),
                Forge::Refused(why) => return unproven(rel, &validated, &why),
            },
        }
        failpoint::hit("release.after-merge");
    }
    // The proof, after a fresh fetch.
    git.fetch(&lock, &r, &[rel.task.branch.as_str()])?;
    let main = git.rev_parse(&clone, &main_ref)?;
    let validated_in_main = git.in_history(&clone, &validated, &main_ref)?;
    let tree_matches = match (&merged_commit, squash) {
        (Some(m), true) => Some(
            git.in_history(&clone, m, &main_ref).unwrap_or(false)
                && git.tree_of(&clone, m)? == git.tree_of(&clone, &head)?,
        ),
        _ => None,
    };
    drop(lock);
    match release::prove(squash, validated_in_main, tree_matches, &validated, &main) {
        Proof::NotProven(why) => unproven(rel, &validated, &why),
        Proof::Proven(why) => {
            let coverage = db::release::last_pass(ctx.db.conn(), rel.task.id, Step::Coverage)?
                .and_then(|r| r.value);
            ctx.db.write(|tx| {
                rel.record(
                    tx,
                    Step::Merge,
                    StepStatus::Pass,
                    Some(&validated),
                    None,
                    &why,
                )?;
                if let Some(p) = coverage
                    && db::release::ratchet_coverage(tx, &rel.repo.name, p, crate::ctx::now())?
                {
                    db::misc::journal(
                        tx,
                        Some(rel.task.id),
                        "coverage-baseline",
                        &format!("{}: baseline raised to {p:.2}%", rel.repo.name),
                        crate::ctx::now(),
                    )?;
                }
                Ok(())
            })?;
            failpoint::hit("release.after-proof");
            info!(work_item = %rel.task.work_item, "merged: {why}");
            Ok(Ending::Done {
                detail: format!("merged into {}: {why}", rel.repo.main),
                advance: true,
            })
        }
    }
}

fn short(s: &str) -> &str {
    &s[..s.len().min(12)]
}

/// Record the merge as not proven and hold the task.
fn unproven(rel: &Rel<'_>, validated: &str, why: &str) -> Result<Ending> {
    rel.ctx.db.write(|tx| {
        rel.record(
            tx,
            Step::Merge,
            StepStatus::Unproven,
            Some(validated),
            None,
            why,
        )
    })?;
    Ok(Ending::Held(format!("deployed but not merged: {why}")))
}

/// Where the forge's merge stands.
enum Forge {
    /// Gitea says merged (with the commit it made, when it said).
    Merged(Option<String>),
    /// Not yet: asked through the outbox, which delivers and retries it.
    Wait(Ending),
    Refused(String),
}

/// How often the merge job looks again at the outbox row it queued.
const FORGE_POLL_S: i64 = 5;

/// `merge.mode: gitea`: the merge is an outbound write, so it goes through the outbox (the
/// tick holds the forge token; a supervisor never does): one row per visit, delivered and
/// retried with capped backoff by the outbox (transient answers, 409/422 while mergeable),
/// failed at once on 403/404 or a conflict. This job asks once and then watches the row.
fn forge_merge(rel: &Rel<'_>, mcfg: &crate::config::MergeCfg, head: &str) -> Result<Forge> {
    let ctx = rel.ctx;
    let key = format!("task{}:merge:{}", rel.task.id.0, rel.visit);
    let Some(row) = db::outbox::by_key(ctx.db.conn(), &key)? else {
        let Some(fr) = rel.repo.forge() else {
            return Ok(Forge::Refused(format!(
                "cannot tell the forge repository of `{}`",
                rel.repo.name
            )));
        };
        let payload = crate::ops::notify::MergePrPayload {
            repo: fr.full(),
            branch: rel.task.branch.clone(),
            base: rel.repo.main.clone(),
            style: mcfg.style.as_str().to_string(),
            head: head.to_string(),
            title: format!("{}: {}", rel.task.base_work_item, rel.task.title),
            work_item: rel.task.work_item.clone(),
            max_retries: mcfg.max_retries,
        };
        ctx.db.write(|tx| {
            db::outbox::insert(
                tx,
                crate::ops::notify::FORGE_MERGE_PR,
                &crate::domain::sandbox::Target::new(
                    crate::domain::sandbox::Service::Gitea,
                    fr.full(),
                )
                .to_string(),
                &serde_json::to_string(&payload)?,
                &key,
                crate::ctx::now(),
            )?;
            db::jobs::set_note(tx, rel.job.id, "merge asked of the forge (outbox)")
        })?;
        failpoint::hit("release.before-forge-merge");
        return Ok(Forge::Wait(Ending::Requeue {
            delay_s: FORGE_POLL_S,
            why: "merge asked of the forge through the outbox".into(),
        }));
    };
    Ok(match row.status.as_str() {
        "done" => Forge::Merged(
            row.result
                .as_deref()
                .and_then(|r| r.rsplit(' ').next())
                .filter(|s| s.len() >= 7 && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(str::to_string),
        ),
        "failed" => Forge::Refused(format!(
            "the forge would not merge: {}",
            row.last_error.as_deref().unwrap_or("no reason given")
        )),
        _ => Forge::Wait(Ending::Requeue {
            delay_s: FORGE_POLL_S,
            why: format!(
                "merge retry {}/{}: {}",
                row.attempts,
                mcfg.max_retries,
                row.last_error
                    .as_deref()
                    .unwrap_or("waiting for the outbox")
            ),
        }),
    })
}
