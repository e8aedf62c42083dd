//! The clone and its worktrees: `ensure_clone` (a first clone is made in `_tmp/` and renamed
//! into place, so the final path never holds a half clone; what a crashed attempt left in `_tmp/`
//! is removed, which is safe under the lock), `fetch`, `worktree_add`, `worktree_remove` and
//! `ff_worktree_if_clean`. Everything here changes the clone or its worktree registry, so every
//! method takes the [`RepoLock`]; each does as little as it can while holding it: an existing
//! clone whose origin is as configured costs no git process, a fetch asks for exactly `main`
//! and the work branches the caller names (so its cost does not grow with the remote's
//! branches), and a worktree is checked on disk, not with git.
//!
//! Never forceful: a directory git does not recognise as our worktree is an error, not deleted
//! (only an empty one is removed), and a worktree with any change is never fast-forwarded.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::local::{self, Lookup};
use super::{Git, RepoLock, RepoRef, check_branch, check_wi, exists, local_dirs, remote_ref};

/// The fetch refspec a clone is configured with: what `git push` uses to update the
/// remote-tracking ref of a branch it pushed, and what `worktree add --track` reads.
const FETCH_REFSPEC: &str = "+refs/heads/*:refs/remotes/origin/*";

impl Git {
    /// Make sure `<repos_dir>/<name>` is a clone of `repo.remote` with the
    /// standard fetch refspec. A new clone is made in `_tmp/` and renamed
    /// into place, so the final path never holds a half clone. Idempotent;
    /// on an existing clone it (re)sets the origin URL and refspec, so a
    /// changed remote in the config takes effect.
    pub fn ensure_clone(&self, lock: &RepoLock, repo: &RepoRef<'_>) -> Result<()> {
        self.check(lock, repo)?;
        let dir = self.clone_dir(repo.name);
        if exists(&dir)? {
            // Every job comes here: a clone already set up as configured needs no git process.
            if let Some(d) = local_dirs(&dir)?
                && d.gitdir == dir.join(".git")
                && d.common == d.gitdir
                && let Some((url, fetch)) = local::origin(&d.common)?
                && url == [repo.remote]
                && fetch == [FETCH_REFSPEC]
            {
                return Ok(());
            }
            if !self.is_clone(&dir)? {
                bail!(
                    "{} exists but is not a git clone; move it away so it can be cloned afresh",
                    dir.display()
                );
            }
        } else {
            let tmp_root = self.repos_dir.join("_tmp");
            fs::create_dir_all(&tmp_root)
                .with_context(|| format!("creating {}", tmp_root.display()))?;
            let tmp = tmp_root.join(format!("{}.clone", repo.name));
            // Left by a crashed earlier attempt; we hold the lock, so it is
            // nobody's work in progress.
            if exists(&tmp)? {
                fs::remove_dir_all(&tmp)
                    .with_context(|| format!("removing stale {}", tmp.display()))?;
            }
            self.git_in(&self.repos_dir)?
                // The remote's default branch only, and no tags: every path fetches `main`
                // and its own branch next, and nothing reads the rest.
                .args([
                    "clone",
                    "--no-checkout",
                    "--single-branch",
                    "--no-tags",
                    "--",
                ])
                .arg(repo.remote)
                .arg(&tmp)
                .checked()
                .with_context(|| format!("cloning {} for repo {}", repo.remote, repo.name))?;
            fs::rename(&tmp, &dir).with_context(|| {
                format!("moving {} into place at {}", tmp.display(), dir.display())
            })?;
        }
        self.git_in(&dir)?
            .args(["config", "remote.origin.url"])
            .arg(repo.remote)
            .checked()
            .with_context(|| format!("setting origin URL of repo {}", repo.name))?;
        self.git_in(&dir)?
            .args([
                "config",
                "--replace-all",
                "remote.origin.fetch",
                FETCH_REFSPEC,
            ])
            .checked()
            .with_context(|| format!("setting fetch refspec of repo {}", repo.name))?;
        Ok(())
    }

    /// Fetch `main` and each of `branches` (work branches) from origin into their
    /// remote-tracking refs, and nothing else: the cost of a fetch must not grow with the
    /// remote's branches (protocol v2 advertises only what the refspecs name). A work branch is
    /// fetched with a pattern (`refs/heads/<branch>*`), so one the remote does not have (a task's
    /// first job) is no error, and `--prune` removes the tracking ref of one the remote deleted.
    /// The pattern may also bring a branch whose name extends the work branch's; it lands in
    /// its own tracking ref, where it does no harm.
    pub fn fetch(&self, lock: &RepoLock, repo: &RepoRef<'_>, branches: &[&str]) -> Result<()> {
        self.check(lock, repo)?;
        for b in branches {
            check_branch(b)?;
        }
        let clone = self.require_clone(repo)?;
        self.fetch_in(&clone, repo.main, branches)
            .with_context(|| format!("fetching repo {}", repo.name))
    }

    /// The worktree of `wi` on `branch`, created if needed; returns its path.
    ///
    /// First `main` and `branch` are fetched (the job's one fetch; see `fetch`). An existing
    /// valid worktree is then returned as is (even if on another branch: logged). Otherwise
    /// the worktree is created on `branch`: reset to `origin/<branch>` and tracking it if the
    /// remote has it, else cut from fresh `origin/<main>` without upstream (so a stray plain
    /// `git push` cannot target main). A non-empty directory that is not our worktree is an
    /// error, never deleted.
    pub fn worktree_add(
        &self,
        lock: &RepoLock,
        repo: &RepoRef<'_>,
        wi: &str,
        branch: &str,
    ) -> Result<PathBuf> {
        self.check(lock, repo)?;
        check_wi(wi)?;
        check_branch(branch)?;
        let clone = self.require_clone(repo)?;
        let dir = self.worktree_dir(repo.name, wi);
        let ctx = || format!("adding worktree for {wi} of repo {}", repo.name);
        self.fetch_in(&clone, repo.main, &[branch])
            .with_context(ctx)?;

        if exists(&dir)? {
            if self.is_worktree_of(&clone, &dir)? {
                let current = self.current_branch(&dir).with_context(ctx)?;
                if current.as_deref() != Some(branch) {
                    tracing::warn!(
                        worktree = %dir.display(),
                        expected = branch,
                        actual = current.as_deref().unwrap_or("(detached)"),
                        "existing worktree is on another branch; using it as is"
                    );
                }
                return Ok(dir);
            }
            remove_if_empty_dir(&dir).with_context(ctx)?;
        }

        let remote_branch = remote_ref(branch);
        let (start, track) = if self.rev_parse_commit(&clone, &remote_branch)?.is_some() {
            (remote_branch, "--track")
        } else {
            let main = remote_ref(repo.main);
            if self.rev_parse_commit(&clone, &main)?.is_none() {
                bail!(
                    "{}: neither origin/{branch} nor origin/{} exists in {}",
                    ctx(),
                    repo.main,
                    clone.display()
                );
            }
            (main, "--no-track")
        };
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        let add = || {
            self.git_in(&clone)?
                .args(["worktree", "add", "--quiet", track, "-B", branch, "--"])
                .arg(&dir)
                .arg(&start)
                .checked()
        };
        if let Err(first) = add() {
            // A registration whose directory vanished makes `worktree add` refuse the path:
            // prune the stale registrations (a walk over every worktree, so not on every add)
            // and try once more.
            tracing::debug!("worktree add failed ({first:#}); pruning and retrying");
            self.git_in(&clone)?
                .args(["worktree", "prune"])
                .checked()
                .with_context(ctx)?;
            add().with_context(ctx)?;
        }
        Ok(dir)
    }

    /// Remove the worktree of `wi` (discarding uncommitted changes in it). Absent is fine. A
    /// non-empty directory that is not our worktree is an error, never deleted.
    ///
    /// Done on disk, as `git worktree remove --force` does it, without a git process (this runs
    /// under the repo lock at the end of most jobs): the worktree directory first, then its
    /// admin dir in the clone. A crash between the two leaves a registration whose directory is
    /// gone, which `worktree_add` prunes when it meets it. A locked worktree (`git worktree
    /// lock`, someone's deliberate act) is left to git, which refuses it.
    pub fn worktree_remove(&self, lock: &RepoLock, repo: &RepoRef<'_>, wi: &str) -> Result<()> {
        self.check(lock, repo)?;
        check_wi(wi)?;
        let clone = self.clone_dir(repo.name);
        let dir = self.worktree_dir(repo.name, wi);
        let ctx = || format!("removing worktree of {wi} in repo {}", repo.name);
        if !exists(&dir)? {
            return Ok(());
        }
        let admin = if exists(&clone)? {
            self.worktree_admin(&clone, &dir)?
        } else {
            None
        };
        let Some(admin) = admin else {
            return remove_if_empty_dir(&dir).with_context(ctx);
        };
        if exists(&admin.join("locked"))? {
            self.git_in(&clone)?
                .args(["worktree", "remove", "--force", "--"])
                .arg(&dir)
                .checked()
                .with_context(ctx)?;
            return Ok(());
        }
        fs::remove_dir_all(&dir)
            .with_context(|| format!("deleting {}", dir.display()))
            .with_context(ctx)?;
        fs::remove_dir_all(&admin)
            .with_context(|| format!("deleting {}", admin.display()))
            .with_context(ctx)
    }

    /// Fast-forward the worktree of `wi` to `origin/<branch>` when that is
    /// safe: the worktree exists, is on `branch`, has no changes (untracked
    /// files count), and its HEAD is strictly behind `origin/<branch>`.
    /// Otherwise nothing happens. Returns whether HEAD moved. Uses the
    /// remote-tracking ref as of the last fetch.
    pub fn ff_worktree_if_clean(
        &self,
        lock: &RepoLock,
        repo: &RepoRef<'_>,
        wi: &str,
        branch: &str,
    ) -> Result<bool> {
        self.check(lock, repo)?;
        check_wi(wi)?;
        check_branch(branch)?;
        let clone = self.clone_dir(repo.name);
        let dir = self.worktree_dir(repo.name, wi);
        let ctx = || format!("fast-forwarding worktree of {wi} in repo {}", repo.name);
        if !exists(&clone)? || !exists(&dir)? || !self.is_worktree_of(&clone, &dir)? {
            return Ok(false);
        }
        if self.current_branch(&dir).with_context(ctx)?.as_deref() != Some(branch) {
            tracing::debug!(worktree = %dir.display(), branch, "not on the branch; not fast-forwarding");
            return Ok(false);
        }
        let status = self
            .git_in(&dir)?
            .args(["status", "--porcelain", "--untracked-files=normal"])
            .checked()
            .with_context(ctx)?;
        if !status.stdout.is_empty() {
            tracing::debug!(worktree = %dir.display(), "dirty; not fast-forwarding");
            return Ok(false);
        }
        let Some(target) = self
            .rev_parse_commit(&dir, &remote_ref(branch))
            .with_context(ctx)?
        else {
            return Ok(false);
        };
        let Some(head) = self.rev_parse_commit(&dir, "HEAD").with_context(ctx)? else {
            return Ok(false);
        };
        if head == target || !self.is_ancestor(&dir, &head, &target).with_context(ctx)? {
            return Ok(false);
        }
        // Merge the sha we checked, not the ref, which a fetch may move.
        self.git_in(&dir)?
            .args(["merge", "--ff-only", "--no-edit"])
            .arg(&target)
            .checked()
            .with_context(ctx)?;
        Ok(true)
    }

    fn is_clone(&self, dir: &Path) -> Result<bool> {
        Ok(match self.repo_paths(dir)? {
            Some((top, _)) => top == canonical(dir)?,
            None => false,
        })
    }

    /// `dir` is the top of a linked worktree of `clone` (not of some
    /// enclosing repository git found by walking up).
    /// Read on disk (`local::linked_worktree_admin`), without git.
    pub(super) fn is_worktree_of(&self, clone: &Path, dir: &Path) -> Result<bool> {
        Ok(self.worktree_admin(clone, dir)?.is_some())
    }

    /// The admin dir in `clone` of the worktree at `dir`, `None` when `dir` is not one of its
    /// worktrees; after the config refusal every read gets (`local_dirs`).
    fn worktree_admin(&self, clone: &Path, dir: &Path) -> Result<Option<PathBuf>> {
        if local_dirs(dir)?.is_none() {
            return Ok(None);
        }
        local::linked_worktree_admin(&clone.join(".git"), dir)
    }
}

fn canonical(path: &Path) -> Result<PathBuf> {
    fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))
}

fn remove_if_empty_dir(dir: &Path) -> Result<()> {
    let empty = fs::symlink_metadata(dir)
        .map(|m| m.is_dir())
        .unwrap_or(false)
        && fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_none();
    if !empty {
        bail!(
            "{} exists but is not a worktree of this repo; not deleting it (move it away)",
            dir.display()
        );
    }
    fs::remove_dir(dir).with_context(|| format!("removing empty {}", dir.display()))
}

impl Git {
    /// `git fetch --prune --no-tags origin <main> <branch>*…`: see `fetch` (tags would make the
    /// remote advertise every tag it has). No FETCH_HEAD is written and
    /// no maintenance runs (a `gc --auto` would hold the repo lock for seconds; the commits in
    /// the worktrees run it, outside the lock). The negotiation starts only from the tracking
    /// refs of what is fetched, never from every ref of the clone.
    fn fetch_in(&self, clone: &Path, main: &str, branches: &[&str]) -> Result<()> {
        // The connectivity check of a fetch (`rev-list --not --all`, also run when nothing
        // new arrives) starts from every ref of the clone: one per task branch and its
        // remote-tracking ref, each tip a commit to parse. Hidden from it, every ref but
        // `origin/<main>`: the check then walks only what the fetched tips add on top of
        // main, whatever the number of branches. Hiding makes it stricter, never looser.
        let mut cmd = self
            .git_in(clone)?
            .args(["-c", "fetch.hideRefs=refs/", "-c"])
            .arg(format!("fetch.hideRefs=!{}", remote_ref(main)))
            .args([
                "fetch",
                "--prune",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-auto-maintenance",
            ]);
        let dirs = local::dirs_of(clone)?;
        for name in std::iter::once(main).chain(branches.iter().copied()) {
            let tip = remote_ref(name);
            if let Some(d) = &dirs
                && let Lookup::Found(_) = local::resolve(d, &tip)?
            {
                cmd = cmd.arg(format!("--negotiation-tip={tip}"));
            }
        }
        cmd = cmd
            .arg("origin")
            .arg(format!("+refs/heads/{main}:{}", remote_ref(main)));
        for b in branches {
            cmd = cmd.arg(format!("+refs/heads/{b}*:{}*", remote_ref(b)));
        }
        cmd.checked()?;
        Ok(())
    }

    /// The branch checked out in `dir`, `None` when HEAD is detached.
    pub(super) fn current_branch(&self, dir: &Path) -> Result<Option<String>> {
        if let Some(d) = local_dirs(dir)?
            && let Lookup::Found(b) = local::head_branch(&d)?
        {
            return Ok(b);
        }
        let cmd = self.git_in(dir)?.args(["symbolic-ref", "--quiet", "HEAD"]);
        let out = cmd.output()?;
        match out.code {
            Some(0) => Ok(out
                .stdout_text()
                .trim()
                .strip_prefix("refs/heads/")
                .map(str::to_owned)),
            Some(1) => Ok(None),
            _ => Err(cmd.failure(&out)),
        }
    }

    /// (toplevel, common git dir) of the repository git finds at `dir`, both
    /// canonical; `None` if git finds none.
    fn repo_paths(&self, dir: &Path) -> Result<Option<(PathBuf, PathBuf)>> {
        let out = self
            .git_in(dir)?
            .args([
                "rev-parse",
                "--path-format=absolute",
                "--show-toplevel",
                "--git-common-dir",
            ])
            .output()?;
        if !out.success() {
            return Ok(None);
        }
        let text = out.stdout_text();
        let mut lines = text.lines();
        match (lines.next(), lines.next()) {
            (Some(top), Some(common)) => Ok(Some((
                canonical(Path::new(top))?,
                canonical(Path::new(common))?,
            ))),
            _ => Ok(None),
        }
    }
}
