//! Gathers the facts an exit gate reads (design §3.2): fetch `main` and the task's branch into
//! the repo clone and fast-forward a clean task worktree (under the repo's `flock`: they change
//! the clone), then, with the lock released, pick where to look (worktree → `origin/<task
//! branch>` → `origin/<main>`, a ref pinned to its commit) and read the artifacts the current
//! stage needs. The supervisor and the runners, which have just pushed the branch from the
//! worktree they read, skip the fetch (`open_pushed`). Deciding is `domain::gate`'s job.

use anyhow::{Context, Result};

use crate::config::{CiMode, RepoCfg};
use crate::ctx::Ctx;
use crate::db;
use crate::db::tasks::TaskRow;
use crate::domain::gate::{
    ABSENT, Artifact, CiGate, CiState, GateFacts, ReleaseFacts, StepFact, missing_analysis_files,
};
use crate::domain::release::Step;
use crate::domain::stage::{ADR_DIR, GateKind, Stage};
use crate::ext::git::{Git, RepoLock, RepoRef, Source};

/// The git side of one evaluation. Its source is a worktree or a commit (a ref is pinned when
/// the view is opened), so the markers recorded for the next stage come from the same state
/// the gate saw, without holding the repo lock while the gate reads and decides.
pub struct GitView {
    git: Git,
    repo: RepoCfg,
    pub source: Source,
    work_item: String,
}

impl GitView {
    fn repo(&self) -> RepoRef<'_> {
        self.repo.git_ref()
    }

    pub fn artifact_path(&self, file: &str) -> String {
        format!("docs/work-items/{}/{file}", self.work_item)
    }

    /// An artifact as the gate sees it: its bytes and blob id, absent, or refused (not a
    /// regular file, over 1 MiB) with the reason.
    pub fn read(&self, file: &str) -> Result<Artifact> {
        match self
            .git
            .read_file(&self.repo(), &self.source, &self.artifact_path(file))
        {
            Ok(blob) => Ok(Artifact {
                file: file.to_string(),
                blob_id: blob.as_ref().map(|b| b.id.clone()),
                bytes: blob.map(|b| b.bytes),
                refused: None,
            }),
            Err(e) => match refused(&e) {
                Some(why) => Ok(Artifact {
                    file: file.to_string(),
                    blob_id: None,
                    bytes: None,
                    refused: Some(why),
                }),
                None => Err(e),
            },
        }
    }

    /// The blob id of an artifact: `None` when absent, `REFUSED` when it is not a file the
    /// gate reads.
    fn blob_id(&self, file: &str) -> Result<Option<String>> {
        match self
            .git
            .blob_id(&self.repo(), &self.source, &self.artifact_path(file))
        {
            Ok(id) => Ok(id),
            Err(e) if refused(&e).is_some() => Ok(Some(REFUSED.to_string())),
            Err(e) => Err(e),
        }
    }

    /// Whether an analysis file is there to be read (a refused one is not).
    fn exists(&self, file: &str) -> Result<bool> {
        Ok(self.blob_id(file)?.is_some_and(|id| id != REFUSED))
    }

    /// What to record when the task enters `stage`: the verdict artifact's blob id (or
    /// `absent`), the branch head for `development`, nothing for other stages.
    pub fn entry_marker(&self, stage: Stage) -> Result<Option<String>> {
        if let Some(file) = stage.spec().verdict_file {
            return Ok(Some(
                self.blob_id(file)?.unwrap_or_else(|| ABSENT.to_string()),
            ));
        }
        if stage == Stage::Development {
            return Ok(Some(
                self.git
                    .head(&self.repo(), &self.source)?
                    .unwrap_or_else(|| ABSENT.to_string()),
            ));
        }
        Ok(None)
    }

    pub fn list_dir(&self, dir: &str) -> Result<Vec<String>> {
        self.git
            .list_dir(&self.repo(), &self.source, &self.artifact_path(dir))
    }

    pub fn head(&self) -> Result<Option<String>> {
        self.git.head(&self.repo(), &self.source)
    }
}

/// The entry marker of an artifact that exists but is not read (never a blob id).
const REFUSED: &str = "refused";

/// The reason, when `e` is a refusal to read an artifact (`ext::git::Refused`).
fn refused(e: &anyhow::Error) -> Option<String> {
    e.chain()
        .find_map(|c| c.downcast_ref::<crate::ext::git::Refused>())
        .map(|r| r.0.clone())
}

/// Lock, fetch `main` and the task's branch, fast-forward, unlock; then pick the source for
/// `task`.
pub fn open(ctx: &Ctx, task: &TaskRow, repo: &RepoCfg) -> Result<GitView> {
    let git = ctx.git();
    let lock = git.lock(&repo.name)?;
    refresh(task, repo, &git, lock)?;
    view(task, repo, git)
}

/// Like `open`, but `None` at once when the repo lock is busy (the tick skips the task for this
/// pass instead of waiting behind a supervisor's git work).
pub fn try_open(ctx: &Ctx, task: &TaskRow, repo: &RepoCfg) -> Result<Option<GitView>> {
    let git = ctx.git();
    let Some(lock) = git.try_lock(&repo.name)? else {
        return Ok(None);
    };
    refresh(task, repo, &git, lock)?;
    view(task, repo, git).map(Some)
}

/// The view of a caller that has just pushed the task branch from the task's worktree (the
/// supervisor after its agent, a runner after its report): what the gate reads is that
/// worktree, the branch on the remote is its head, and `main` was fetched before the work
/// started. So no fetch, no fast-forward, no repo lock. Without a clone (it cannot be gone,
/// but if it were) this is `open`.
pub fn open_pushed(ctx: &Ctx, task: &TaskRow, repo: &RepoCfg) -> Result<GitView> {
    let git = ctx.git();
    if !git.clone_dir(&repo.name).join(".git").exists() {
        return open(ctx, task, repo);
    }
    view(task, repo, git)
}

/// Under the lock, then releasing it: the clone, the fetch of `main` and the task's branch,
/// the fast-forward of a clean worktree.
fn refresh(task: &TaskRow, repo: &RepoCfg, git: &Git, lock: RepoLock) -> Result<()> {
    let r = repo.git_ref();
    git.ensure_clone(&lock, &r)
        .with_context(|| format!("cloning repo `{}` from `{}`", repo.name, repo.remote))?;
    git.fetch(&lock, &r, &[task.branch.as_str()])
        .with_context(|| format!("fetching repo `{}`", repo.name))?;
    git.ff_worktree_if_clean(&lock, &r, &task.base_work_item, &task.branch)?;
    drop(lock);
    Ok(())
}

/// The source of `task` (a ref pinned to its commit), read without the lock.
fn view(task: &TaskRow, repo: &RepoCfg, git: Git) -> Result<GitView> {
    let r = repo.git_ref();
    let source = git.lookup_source(&r, &task.base_work_item, &task.branch)?;
    let source = git.pin(&r, source)?;
    Ok(GitView {
        repo: repo.clone(),
        git,
        source,
        work_item: task.base_work_item.clone(),
    })
}

/// Like `open`, but never touches the network, never creates a clone and takes no lock: `None`
/// when the repo has not been cloned yet. For read-only views (`orch task show`).
pub fn open_local(ctx: &Ctx, task: &TaskRow, repo: &RepoCfg) -> Result<Option<GitView>> {
    let git = ctx.git();
    if !git.clone_dir(&repo.name).join(".git").exists() {
        return Ok(None);
    }
    view(task, repo, git).map(Some)
}

/// The facts the gate of the task's current stage reads.
pub fn facts(ctx: &Ctx, task: &TaskRow, repo: &RepoCfg, view: &GitView) -> Result<GateFacts> {
    let mut f = GateFacts {
        work_item: task.base_work_item.clone(),
        entry_marker: task.entry_marker.clone(),
        not_applicable: crate::domain::gate::not_applicable(task.stage, repo.contracts()),
        ..GateFacts::default()
    };
    if f.not_applicable.is_some() {
        return Ok(f);
    }
    let contracts = repo.contracts();
    f.own_work_na = match task.stage {
        Stage::DeployStaging if !contracts.staging => Some("staging N/A"),
        Stage::Deploy if !contracts.deploy => Some("deploy N/A"),
        _ => None,
    };
    f.release = release_facts(ctx, task, repo)?;
    if f.own_work_na.is_some() {
        return Ok(f);
    }
    match task.stage.spec().gate {
        GateKind::Start | GateKind::Terminal => {}
        GateKind::AnalysisApproved => {
            let mut present = std::collections::HashSet::new();
            for file in crate::domain::stage::ANALYSIS_FILES {
                if view.exists(file)? {
                    present.insert(file);
                }
            }
            f.analysis_missing = missing_analysis_files(|file| present.contains(file));
            f.approved = task.approved_at.is_some() || task.has_label("auto-approve");
        }
        GateKind::ArchitectureDone => {
            let names =
                view.git
                    .list_dir(&view.repo(), &view.source, &view.artifact_path(ADR_DIR))?;
            f.adr_count = names.iter().filter(|n| n.ends_with(".md")).count();
        }
        GateKind::CiGreen => {
            // Every mode needs code written during this visit (design §3.4); a CI status speaks
            // only for such a head.
            let since = task.entry_marker.as_deref().filter(|m| *m != ABSENT);
            f.code_change = view.git.has_code_change(
                &view.repo(),
                &view.source,
                &format!("origin/{}", repo.main),
                since,
                "docs/work-items/",
            )?;
            match repo.ci.mode {
                CiMode::None => f.ci_gate = Some(CiGate::CodeChange),
                // `command` results are recorded into `ci_status` by the supervisor, so both
                // modes read the same table.
                CiMode::Status | CiMode::Command => {
                    f.ci_gate = Some(CiGate::Status);
                    if f.code_change {
                        f.ci_state = match view.head()? {
                            None => None,
                            Some(sha) => {
                                ci_state(&db::misc::ci_status(ctx.db.conn(), &repo.name, &sha)?)
                            }
                        };
                    }
                }
            }
        }
        GateKind::ReviewerVerdict
        | GateKind::TestsPassed
        | GateKind::StagingStatus
        | GateKind::DeployStatus => {
            if let Some(file) = task.stage.spec().verdict_file {
                f.verdict = Some(view.read(file)?);
            }
        }
    }
    Ok(f)
}

/// The release steps of this visit (design §7), for the stages and steps the repo configures.
pub fn release_facts(ctx: &Ctx, task: &TaskRow, repo: &RepoCfg) -> Result<Option<ReleaseFacts>> {
    let contracts = repo.contracts();
    let applies = match task.stage {
        Stage::DeployStaging => contracts.edge,
        Stage::Deploy => contracts.merge,
        _ => false,
    };
    if !applies {
        return Ok(None);
    }
    let c = ctx.db.conn();
    let rows = match db::release::visit_of(c, task.id, task.stage)? {
        Some(v) => db::release::steps(c, task.id, v)?,
        None => Vec::new(),
    };
    let find = |step: Step| {
        rows.iter()
            .rev()
            .find(|r| r.step == step)
            .map(|r| StepFact {
                status: r.status,
                detail: r.detail.clone(),
            })
    };
    let on = |yes: bool, step: Step| yes.then(|| find(step));
    Ok(Some(match task.stage {
        Stage::DeployStaging => ReleaseFacts {
            security: on(repo.security_enabled(), Step::Security),
            merge_gate: on(repo.merge.is_some(), Step::MergeGate),
            coverage: on(repo.coverage.is_some(), Step::Coverage),
            merge: None,
        },
        _ => ReleaseFacts {
            merge: on(true, Step::Merge),
            ..ReleaseFacts::default()
        },
    }))
}

/// The combined status of a commit: any failure → failure; all success → success; else pending.
fn ci_state(rows: &[(String, String, String)]) -> Option<CiState> {
    if rows.is_empty() {
        return None;
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|(_, state, _)| matches!(state.as_str(), "failure" | "error"))
        .map(|(ctx, state, detail)| format!("{ctx}: {state} {detail}").trim_end().to_string())
        .collect();
    if !failed.is_empty() {
        return Some(CiState::Failure(failed.join("; ")));
    }
    if rows.iter().all(|(_, state, _)| state == "success") {
        Some(CiState::Success)
    } else {
        Some(CiState::Pending)
    }
}
