//! Typed git operations over one local clone per repository, with one
//! worktree per work item.
//!
//! Layout under `repos_dir`:
//! - `<name>/`          the clone (`--no-checkout`: its own working tree stays
//!   empty; all work happens in worktrees),
//! - `<name>.lock`      flock serialising everything that changes the clone,
//! - `_wt/<name>/<wi>/` the worktree of work item `<wi>`,
//! - `_tmp/`            scratch space for clones in progress.
//!
//! Leading `_` is never a valid repo name, so these cannot collide.
//!
//! Responsible for: cloning, fetching, creating/removing/fast-forwarding
//! worktrees, reading files and commit facts from a worktree or a
//! remote-tracking ref, committing and pushing work branches. Every git
//! command runs through [`crate::ext::proc`] as an argv (never a shell
//! string), with `-C <dir>`, no terminal prompts, the C locale, hooks and
//! commit signing disabled, and the caller's `GIT_DIR`-style variables and
//! identity variables removed (so a parent git process or environment can
//! neither redirect us at another repository nor change who commits).
//!
//! Deliberately not here: deciding what to do (that is the pipeline's job),
//! credentials (the user's global config, credential helpers and ssh setup
//! are kept, so private remotes work), timeouts (proc's later extension),
//! and anything forceful: no force-push, no deleting directories git does
//! not recognise as our worktrees, never touching a dirty worktree.
//!
//! Concurrency: methods that change the clone or its worktree registry take
//! a [`RepoLock`] as proof that the caller holds the repo's lock. Reads
//! (`read_file`, `list_dir`, `head`, `has_code_change`, `blob_id`) and the
//! worktree-local `commit_all`/`push_branch` take none: git's object and ref
//! reads are safe alongside a fetch.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::domain::names::{
    valid_branch_name, valid_path_component, valid_ref_name, valid_repo_name,
};
use crate::ext::lock::FileLock;
use crate::ext::proc::Cmd;

/// Config forced on every git command. Hooks are off because the clone and
/// worktrees contain agent-written content and the user's global hooks are
/// not ours to run; signing is off because no key is available unattended.
const FORCED_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "commit.gpgSign=false",
    "color.ui=never",
];

/// Inherited variables that would make git operate on another repository,
/// index or namespace than `-C <dir>` says, reinterpret our pathspecs, or
/// override the identity passed with `-c user.*`.
const SCRUBBED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
    "GIT_LITERAL_PATHSPECS",
    "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
];

/// A repository as configured: `name` already validated against
/// `^[a-z0-9][a-z0-9._-]{0,63}$`, `main` a valid branch name. Both are
/// checked again here (cheaply) because they become paths and arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepoRef<'a> {
    pub name: &'a str,
    pub remote: &'a str,
    pub main: &'a str,
}

/// Where to read a work item's files from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A worktree on disk: its files as they are now, committed or not.
    Worktree(PathBuf),
    /// A ref or commit in the clone, e.g. `"origin/feature/X-1-foo"`.
    /// `origin/<b>` always means `refs/remotes/origin/<b>` (a tag or local
    /// branch spelled the same cannot shadow it).
    Ref(String),
}

/// File content plus its git blob id (in the repo's object format).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blob {
    pub bytes: Vec<u8>,
    pub id: String,
}

/// Git operations over clones under one `repos_dir`.
#[derive(Debug, Clone)]
pub struct Git {
    repos_dir: PathBuf,
}

/// Proof that the holder has the exclusive lock of one repo's clone.
/// Only [`Git::lock`] makes one; it is released on drop.
#[derive(Debug)]
pub struct RepoLock {
    _file: FileLock,
    repos_dir: PathBuf,
    name: String,
}

impl RepoLock {
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Git {
    /// `repos_dir` is made absolute (against the current directory) so paths
    /// git records in worktrees stay valid whatever our cwd later is.
    pub fn new(repos_dir: impl Into<PathBuf>) -> Git {
        let dir = repos_dir.into();
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Git { repos_dir: dir }
    }

    pub fn repos_dir(&self) -> &Path {
        &self.repos_dir
    }

    /// `<repos_dir>/<name>`. Pure path arithmetic: does not validate.
    pub fn clone_dir(&self, name: &str) -> PathBuf {
        self.repos_dir.join(name)
    }

    /// `<repos_dir>/_wt/<name>/<wi>`. Pure path arithmetic: does not validate.
    pub fn worktree_dir(&self, name: &str, wi: &str) -> PathBuf {
        self.repos_dir.join("_wt").join(name).join(wi)
    }

    /// Block until this process holds `<repos_dir>/<name>.lock`.
    pub fn lock(&self, name: &str) -> Result<RepoLock> {
        check_repo_name(name)?;
        fs::create_dir_all(&self.repos_dir)
            .with_context(|| format!("creating {}", self.repos_dir.display()))?;
        let path = self.repos_dir.join(format!("{name}.lock"));
        let file = FileLock::acquire(&path).with_context(|| format!("locking repo {name}"))?;
        Ok(RepoLock {
            _file: file,
            repos_dir: self.repos_dir.clone(),
            name: name.to_owned(),
        })
    }

    /// Like `lock`, but `None` at once when another process holds it (for the tick, which
    /// must never wait behind a supervisor's clone or fetch).
    pub fn try_lock(&self, name: &str) -> Result<Option<RepoLock>> {
        check_repo_name(name)?;
        fs::create_dir_all(&self.repos_dir)
            .with_context(|| format!("creating {}", self.repos_dir.display()))?;
        let path = self.repos_dir.join(format!("{name}.lock"));
        let file = FileLock::try_acquire(&path).with_context(|| format!("locking repo {name}"))?;
        Ok(file.map(|f| RepoLock {
            _file: f,
            repos_dir: self.repos_dir.clone(),
            name: name.to_owned(),
        }))
    }

    /// Make sure `<repos_dir>/<name>` is a clone of `repo.remote` with the
    /// standard fetch refspec. A new clone is made in `_tmp/` and renamed
    /// into place, so the final path never holds a half clone. Idempotent;
    /// on an existing clone it (re)sets the origin URL and refspec, so a
    /// changed remote in the config takes effect.
    pub fn ensure_clone(&self, lock: &RepoLock, repo: &RepoRef<'_>) -> Result<()> {
        self.check(lock, repo)?;
        let dir = self.clone_dir(repo.name);
        if exists(&dir)? {
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
            git_in(&self.repos_dir)
                .args(["clone", "--no-checkout", "--"])
                .arg(repo.remote)
                .arg(&tmp)
                .checked()
                .with_context(|| format!("cloning {} for repo {}", repo.remote, repo.name))?;
            fs::rename(&tmp, &dir).with_context(|| {
                format!("moving {} into place at {}", tmp.display(), dir.display())
            })?;
        }
        git_in(&dir)
            .args(["config", "remote.origin.url"])
            .arg(repo.remote)
            .checked()
            .with_context(|| format!("setting origin URL of repo {}", repo.name))?;
        git_in(&dir)
            .args([
                "config",
                "--replace-all",
                "remote.origin.fetch",
                "+refs/heads/*:refs/remotes/origin/*",
            ])
            .checked()
            .with_context(|| format!("setting fetch refspec of repo {}", repo.name))?;
        Ok(())
    }

    /// `git fetch --prune origin` in the clone.
    pub fn fetch(&self, lock: &RepoLock, repo: &RepoRef<'_>) -> Result<()> {
        self.check(lock, repo)?;
        let clone = self.require_clone(repo)?;
        fetch_in(&clone).with_context(|| format!("fetching repo {}", repo.name))
    }

    /// The worktree of `wi` on `branch`, created if needed; returns its path.
    ///
    /// An existing valid worktree is returned as is (even if on another
    /// branch: logged). Otherwise the clone is fetched, then the worktree is
    /// created on `branch`: reset to `origin/<branch>` and tracking it if the
    /// remote has it, else cut from fresh `origin/<main>` without upstream (so
    /// a stray plain `git push` cannot target main). A non-empty directory
    /// that is not our worktree is an error, never deleted.
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

        if exists(&dir)? {
            if self.is_worktree_of(&clone, &dir)? {
                let current = current_branch(&dir).with_context(ctx)?;
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

        // Registrations whose directories vanished would make `worktree add`
        // refuse the path.
        git_in(&clone)
            .args(["worktree", "prune"])
            .checked()
            .with_context(ctx)?;
        fetch_in(&clone).with_context(ctx)?;

        let remote_branch = remote_ref(branch);
        let (start, track) = if rev_parse_commit(&clone, &remote_branch)?.is_some() {
            (remote_branch, "--track")
        } else {
            let main = remote_ref(repo.main);
            if rev_parse_commit(&clone, &main)?.is_none() {
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
        git_in(&clone)
            .args(["worktree", "add", track, "-B", branch, "--"])
            .arg(&dir)
            .arg(&start)
            .checked()
            .with_context(ctx)?;
        Ok(dir)
    }

    /// Remove the worktree of `wi` (discarding uncommitted changes in it),
    /// then prune stale registrations. Absent is fine. A non-empty directory
    /// that is not our worktree is an error, never deleted.
    pub fn worktree_remove(&self, lock: &RepoLock, repo: &RepoRef<'_>, wi: &str) -> Result<()> {
        self.check(lock, repo)?;
        check_wi(wi)?;
        let clone = self.clone_dir(repo.name);
        let dir = self.worktree_dir(repo.name, wi);
        let ctx = || format!("removing worktree of {wi} in repo {}", repo.name);
        let have_clone = exists(&clone)?;
        if exists(&dir)? {
            if have_clone && self.is_worktree_of(&clone, &dir)? {
                git_in(&clone)
                    .args(["worktree", "remove", "--force", "--"])
                    .arg(&dir)
                    .checked()
                    .with_context(ctx)?;
            } else {
                remove_if_empty_dir(&dir).with_context(ctx)?;
            }
        }
        if have_clone {
            git_in(&clone)
                .args(["worktree", "prune"])
                .checked()
                .with_context(ctx)?;
        }
        Ok(())
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
        if current_branch(&dir).with_context(ctx)?.as_deref() != Some(branch) {
            tracing::debug!(worktree = %dir.display(), branch, "not on the branch; not fast-forwarding");
            return Ok(false);
        }
        let status = git_in(&dir)
            .args(["status", "--porcelain", "--untracked-files=normal"])
            .checked()
            .with_context(ctx)?;
        if !status.stdout.is_empty() {
            tracing::debug!(worktree = %dir.display(), "dirty; not fast-forwarding");
            return Ok(false);
        }
        let Some(target) = rev_parse_commit(&dir, &remote_ref(branch)).with_context(ctx)? else {
            return Ok(false);
        };
        let Some(head) = rev_parse_commit(&dir, "HEAD").with_context(ctx)? else {
            return Ok(false);
        };
        if head == target || !is_ancestor(&dir, &head, &target).with_context(ctx)? {
            return Ok(false);
        }
        // Merge the sha we checked, not the ref, which a fetch may move.
        git_in(&dir)
            .args(["merge", "--ff-only", "--no-edit"])
            .arg(&target)
            .checked()
            .with_context(ctx)?;
        Ok(true)
    }

    /// Where the current state of `wi` lives: its worktree if there is one,
    /// else `origin/<branch>` if the remote has it (as of the last fetch),
    /// else `origin/<main>`.
    pub fn lookup_source(
        &self,
        lock: &RepoLock,
        repo: &RepoRef<'_>,
        wi: &str,
        branch: &str,
    ) -> Result<Source> {
        self.check(lock, repo)?;
        check_wi(wi)?;
        check_branch(branch)?;
        let clone = self.require_clone(repo)?;
        let dir = self.worktree_dir(repo.name, wi);
        if exists(&dir)? && self.is_worktree_of(&clone, &dir)? {
            return Ok(Source::Worktree(dir));
        }
        if rev_parse_commit(&clone, &remote_ref(branch))?.is_some() {
            return Ok(Source::Ref(format!("origin/{branch}")));
        }
        Ok(Source::Ref(format!("origin/{}", repo.main)))
    }

    /// The file at `relpath` in `source`, `None` if there is none.
    ///
    /// Reads as git would store it: a symlink yields its target path (it is
    /// never followed, so a worktree cannot make us read outside itself), and
    /// a path under a symlinked directory does not exist. The worktree's blob
    /// id is of the raw bytes (`hash-object --no-filters`), so with clean
    /// filters (LFS, autocrlf) it can differ from the committed blob's id.
    /// A directory at `relpath` is an error. `relpath` must be relative,
    /// `/`-separated, without `.`, `..`, `.git` or empty components.
    pub fn read_file(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        relpath: &str,
    ) -> Result<Option<Blob>> {
        check_repo(repo)?;
        let parts = rel_parts(relpath, false)?;
        let ctx = || {
            format!(
                "reading {relpath} from {} in repo {}",
                show(source),
                repo.name
            )
        };
        match source {
            Source::Worktree(root) => {
                let Some(bytes) = read_worktree_file(root, &parts).with_context(ctx)? else {
                    return Ok(None);
                };
                let id = hash_blob(root, &bytes).with_context(ctx)?;
                Ok(Some(Blob { bytes, id }))
            }
            Source::Ref(r) => {
                let clone = self.require_clone(repo)?;
                let rev = rev_arg(r)?;
                let spec = format!("{rev}:{}", parts.join("/"));
                match cat_file(&clone, &spec, true).with_context(ctx)? {
                    None => {
                        require_rev(&clone, &rev).with_context(ctx)?;
                        Ok(None)
                    }
                    Some(obj) if obj.kind == "blob" => Ok(Some(Blob {
                        bytes: obj.content,
                        id: obj.id,
                    })),
                    Some(obj) => bail!("{}: it is a {}, not a file", ctx(), obj.kind),
                }
            }
        }
    }

    /// The blob id [`Git::read_file`] would return, without transferring the
    /// content for a ref (a worktree file still has to be read to be hashed).
    pub fn blob_id(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        relpath: &str,
    ) -> Result<Option<String>> {
        match source {
            Source::Worktree(_) => Ok(self.read_file(repo, source, relpath)?.map(|b| b.id)),
            Source::Ref(r) => {
                check_repo(repo)?;
                let parts = rel_parts(relpath, false)?;
                let ctx = || {
                    format!(
                        "looking up {relpath} in {} in repo {}",
                        show(source),
                        repo.name
                    )
                };
                let clone = self.require_clone(repo)?;
                let rev = rev_arg(r)?;
                let spec = format!("{rev}:{}", parts.join("/"));
                match cat_file(&clone, &spec, false).with_context(ctx)? {
                    None => {
                        require_rev(&clone, &rev).with_context(ctx)?;
                        Ok(None)
                    }
                    Some(obj) if obj.kind == "blob" => Ok(Some(obj.id)),
                    Some(obj) => bail!("{}: it is a {}, not a file", ctx(), obj.kind),
                }
            }
        }
    }

    /// Sorted names of the files (regular files and symlinks, not
    /// subdirectories) directly in `reldir` (`""` is the top). A missing
    /// directory gives an empty list; a file at `reldir` is an error. In a
    /// worktree this includes untracked and ignored files, never `.git`.
    /// Names that are not UTF-8 are skipped (logged).
    pub fn list_dir(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        reldir: &str,
    ) -> Result<Vec<String>> {
        check_repo(repo)?;
        let parts = rel_parts(reldir, true)?;
        let ctx = || {
            format!(
                "listing {reldir:?} in {} in repo {}",
                show(source),
                repo.name
            )
        };
        let mut names = match source {
            Source::Worktree(root) => list_worktree_dir(root, &parts).with_context(ctx)?,
            Source::Ref(r) => {
                let clone = self.require_clone(repo)?;
                let rev = rev_arg(r)?;
                let spec = format!("{rev}:{}", parts.join("/"));
                match cat_file(&clone, &spec, false).with_context(ctx)? {
                    None => {
                        require_rev(&clone, &rev).with_context(ctx)?;
                        Vec::new()
                    }
                    Some(obj) if obj.kind == "tree" => {
                        list_tree(&clone, &obj.id).with_context(ctx)?
                    }
                    Some(obj) => bail!("{}: it is a {}, not a directory", ctx(), obj.kind),
                }
            }
        };
        names.sort();
        Ok(names)
    }

    /// The commit `source` is at: the worktree's HEAD or the ref's commit;
    /// `None` if the ref does not exist or the worktree has no commit.
    pub fn head(&self, repo: &RepoRef<'_>, source: &Source) -> Result<Option<String>> {
        check_repo(repo)?;
        let ctx = || format!("resolving {} in repo {}", show(source), repo.name);
        match source {
            Source::Worktree(root) => rev_parse_commit(root, "HEAD").with_context(ctx),
            Source::Ref(r) => {
                let clone = self.require_clone(repo)?;
                rev_parse_commit(&clone, &rev_arg(r)?).with_context(ctx)
            }
        }
    }

    /// Whether `source` has a commit of its own that changes code: a
    /// non-merge commit reachable from its head, not reachable from
    /// `main_ref`, not reachable from `since` (when `since` still names a
    /// commit that is an ancestor of the head; otherwise `since` is ignored),
    /// which changes at least one path outside `exclude_prefix` (a directory,
    /// e.g. `"docs/work-items/"`; `""` excludes nothing). Uncommitted changes
    /// do not count. Merge commits are skipped: merging main into a branch
    /// must not count as the agent changing code.
    pub fn has_code_change(
        &self,
        repo: &RepoRef<'_>,
        source: &Source,
        main_ref: &str,
        since: Option<&str>,
        exclude_prefix: &str,
    ) -> Result<bool> {
        check_repo(repo)?;
        let exclude = rel_parts(exclude_prefix, true)?.join("/");
        let ctx = || {
            format!(
                "checking {} for code changes since {} in repo {}",
                show(source),
                since.unwrap_or(main_ref),
                repo.name
            )
        };
        let dir = match source {
            Source::Worktree(root) => root.clone(),
            Source::Ref(_) => self.require_clone(repo)?,
        };
        let Some(head) = self.head(repo, source)? else {
            bail!("{}: {} has no commit", ctx(), show(source));
        };
        let main_rev = rev_arg(main_ref)?;
        let Some(main) = rev_parse_commit(&dir, &main_rev).with_context(ctx)? else {
            bail!("{}: {main_ref} does not exist", ctx());
        };
        let mut since_commit = None;
        if let Some(s) = since {
            match rev_parse_commit(&dir, &rev_arg(s)?).with_context(ctx)? {
                Some(c) if is_ancestor(&dir, &c, &head).with_context(ctx)? => {
                    since_commit = Some(c)
                }
                _ => tracing::debug!(
                    since = s,
                    "stage-entry commit gone or not an ancestor; ignoring it"
                ),
            }
        }

        let mut cmd = git_in(&dir)
            .args(["rev-list", "--no-merges", "--full-history", "--max-count=1"])
            .arg(&head)
            .arg(format!("^{main}"));
        if let Some(c) = &since_commit {
            cmd = cmd.arg(format!("^{c}"));
        }
        cmd = cmd.args(["--", ":(top)"]);
        if !exclude.is_empty() {
            cmd = cmd.arg(format!(":(top,exclude,literal){exclude}"));
        }
        let out = cmd.checked().with_context(ctx)?;
        Ok(!out.stdout_text().trim().is_empty())
    }

    /// Whether the remote has `refs/heads/<branch>` right now (asks the
    /// remote over the network, unlike the ref lookups above).
    pub fn branch_exists_remote(&self, repo: &RepoRef<'_>, branch: &str) -> Result<bool> {
        check_repo(repo)?;
        check_branch(branch)?;
        let clone = self.require_clone(repo)?;
        let want = format!("refs/heads/{branch}");
        let cmd = git_in(&clone)
            .args(["ls-remote", "--exit-code", "origin"])
            .arg(&want);
        let out = cmd.output()?;
        match out.code {
            // ls-remote matches patterns against ref name tails; insist on
            // the exact name.
            Some(0) => Ok(out
                .stdout_text()
                .lines()
                .any(|l| l.split('\t').nth(1) == Some(want.as_str()))),
            Some(2) => Ok(false),
            _ => Err(cmd.failure(&out))
                .with_context(|| format!("asking origin of repo {} for {branch}", repo.name)),
        }
    }

    /// Stage everything in `worktree` (`git add -A`) and commit it as
    /// `name <email>` if anything is staged. Returns the new commit's sha,
    /// or `None` when there was nothing to commit. The message goes through
    /// stdin, so any text is safe.
    pub fn commit_all(
        &self,
        worktree: &Path,
        message: &str,
        name: &str,
        email: &str,
    ) -> Result<Option<String>> {
        commit_in(worktree, None, message, name, email)
    }

    /// Commit only `paths` (relative to the worktree) as `name <email>`, leaving anything else
    /// in the worktree as it is. `None` when those paths had no change.
    pub fn commit_paths(
        &self,
        worktree: &Path,
        paths: &[&str],
        message: &str,
        name: &str,
        email: &str,
    ) -> Result<Option<String>> {
        for p in paths {
            rel_parts(p, false)?;
        }
        commit_in(worktree, Some(paths), message, name, email)
    }

    /// `git push origin HEAD:refs/heads/<branch>` from `worktree`. Refuses
    /// `main`, `master` and the repo's main branch. Never forces: a
    /// non-fast-forward push is an error.
    pub fn push_branch(&self, repo: &RepoRef<'_>, worktree: &Path, branch: &str) -> Result<()> {
        check_repo(repo)?;
        check_branch(branch)?;
        if branch == "main" || branch == "master" || branch == repo.main {
            bail!(
                "refusing to push to {branch} of repo {}: work is only pushed to work branches",
                repo.name
            );
        }
        git_in(worktree)
            .args(["push", "--no-verify", "--quiet", "origin"])
            .arg(format!("HEAD:refs/heads/{branch}"))
            .checked()
            .with_context(|| format!("pushing {branch} of repo {}", repo.name))?;
        Ok(())
    }

    /// `git push origin --delete refs/heads/<branch>` from the clone (a cancelled task's
    /// feature branch). Refuses `main`, `master` and the repo's main branch. `false` when the
    /// remote has no such branch, so a repeated delete is not an error.
    pub fn delete_remote_branch(
        &self,
        lock: &RepoLock,
        repo: &RepoRef<'_>,
        branch: &str,
    ) -> Result<bool> {
        self.check(lock, repo)?;
        check_branch(branch)?;
        if branch == "main" || branch == "master" || branch == repo.main {
            bail!(
                "refusing to delete {branch} of repo {}: only work branches are deleted",
                repo.name
            );
        }
        if !self.branch_exists_remote(repo, branch)? {
            return Ok(false);
        }
        let clone = self.require_clone(repo)?;
        git_in(&clone)
            .args(["push", "--no-verify", "--quiet", "origin", "--delete"])
            .arg(format!("refs/heads/{branch}"))
            .checked()
            .with_context(|| format!("deleting {branch} of repo {} on its remote", repo.name))?;
        Ok(true)
    }

    fn check(&self, lock: &RepoLock, repo: &RepoRef<'_>) -> Result<()> {
        check_repo(repo)?;
        if lock.name != repo.name || lock.repos_dir != self.repos_dir {
            bail!(
                "holding the lock of repo {} in {}, not of repo {} in {}",
                lock.name,
                lock.repos_dir.display(),
                repo.name,
                self.repos_dir.display()
            );
        }
        Ok(())
    }

    fn require_clone(&self, repo: &RepoRef<'_>) -> Result<PathBuf> {
        let dir = self.clone_dir(repo.name);
        if !exists(&dir)? {
            bail!(
                "repo {} has no clone at {} (ensure_clone first)",
                repo.name,
                dir.display()
            );
        }
        Ok(dir)
    }

    fn is_clone(&self, dir: &Path) -> Result<bool> {
        Ok(match repo_paths(dir)? {
            Some((top, _)) => top == canonical(dir)?,
            None => false,
        })
    }

    /// `dir` is the top of a linked worktree of `clone` (not of some
    /// enclosing repository git found by walking up).
    fn is_worktree_of(&self, clone: &Path, dir: &Path) -> Result<bool> {
        if !exists(&dir.join(".git"))? {
            return Ok(false);
        }
        Ok(match repo_paths(dir)? {
            Some((top, common)) => {
                top == canonical(dir)? && common == canonical(&clone.join(".git"))?
            }
            None => false,
        })
    }
}

/// Stage `paths` (everything when `None`) and commit them as `name <email>` if anything is
/// staged; the message goes through stdin, so any text is safe.
fn commit_in(
    worktree: &Path,
    paths: Option<&[&str]>,
    message: &str,
    name: &str,
    email: &str,
) -> Result<Option<String>> {
    let ctx = || format!("committing in {}", worktree.display());
    let only: &[&str] = paths.unwrap_or(&[]);
    let add = match paths {
        Some(_) => git_in(worktree).args(["add", "--"]).args(only),
        None => git_in(worktree).args(["add", "-A"]),
    };
    add.checked().with_context(ctx)?;
    let diff = git_in(worktree)
        .args(["diff", "--cached", "--quiet", "--"])
        .args(only);
    let out = diff.output().with_context(ctx)?;
    match out.code {
        Some(0) => return Ok(None),
        Some(1) => {}
        _ => return Err(diff.failure(&out)).with_context(ctx),
    }
    git_in(worktree)
        .arg("-c")
        .arg(format!("user.name={name}"))
        .arg("-c")
        .arg(format!("user.email={email}"))
        .args([
            "commit",
            "--no-verify",
            "--no-gpg-sign",
            "--quiet",
            "-F",
            "-",
            "--",
        ])
        .args(only)
        .stdin(message.as_bytes())
        .checked()
        .with_context(ctx)?;
    match rev_parse_commit(worktree, "HEAD").with_context(ctx)? {
        Some(sha) => Ok(Some(sha)),
        None => bail!("{}: no HEAD after committing", ctx()),
    }
}

/// A git command run in `dir` with our fixed environment and config.
fn git_in(dir: &Path) -> Cmd {
    let mut cmd = Cmd::new("git").arg("-C").arg(dir);
    for kv in FORCED_CONFIG {
        cmd = cmd.args(["-c", kv]);
    }
    for key in SCRUBBED_ENV {
        cmd = cmd.env_remove(key);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        // Reads like `status` must not take index.lock next to an agent
        // working in the same worktree.
        .env("GIT_OPTIONAL_LOCKS", "0")
}

fn fetch_in(clone: &Path) -> Result<()> {
    git_in(clone)
        .args(["fetch", "--prune", "--quiet", "origin"])
        .checked()?;
    Ok(())
}

fn remote_ref(branch: &str) -> String {
    format!("refs/remotes/origin/{branch}")
}

/// `origin/<b>` → `refs/remotes/origin/<b>`; other valid names unchanged.
/// Rejects anything that could be read as an option or as rev syntax.
fn rev_arg(rev: &str) -> Result<String> {
    if rev.starts_with('-') || !valid_ref_name(rev) {
        bail!("invalid git ref {rev:?}");
    }
    Ok(match rev.strip_prefix("origin/") {
        Some(rest) => remote_ref(rest),
        None => rev.to_owned(),
    })
}

fn show(source: &Source) -> String {
    match source {
        Source::Worktree(p) => format!("worktree {}", p.display()),
        Source::Ref(r) => r.clone(),
    }
}

/// The commit `rev` names in the repo at `dir`, `None` if it names none.
fn rev_parse_commit(dir: &Path, rev: &str) -> Result<Option<String>> {
    let cmd = git_in(dir)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"));
    let out = cmd.output()?;
    match out.code {
        Some(0) => Ok(Some(out.stdout_text().trim().to_owned())),
        Some(1) => Ok(None),
        _ => Err(cmd.failure(&out)),
    }
}

fn require_rev(dir: &Path, rev: &str) -> Result<()> {
    if rev_parse_commit(dir, rev)?.is_none() {
        bail!("{rev} does not exist in {}", dir.display());
    }
    Ok(())
}

fn is_ancestor(dir: &Path, ancestor: &str, descendant: &str) -> Result<bool> {
    let cmd = git_in(dir)
        .args(["merge-base", "--is-ancestor"])
        .arg(ancestor)
        .arg(descendant);
    let out = cmd.output()?;
    match out.code {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(cmd.failure(&out)),
    }
}

/// The branch checked out in `dir`, `None` when HEAD is detached.
fn current_branch(dir: &Path) -> Result<Option<String>> {
    let cmd = git_in(dir).args(["symbolic-ref", "--quiet", "HEAD"]);
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
fn repo_paths(dir: &Path) -> Result<Option<(PathBuf, PathBuf)>> {
    let out = git_in(dir)
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

fn canonical(path: &Path) -> Result<PathBuf> {
    fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))
}

fn exists(path: &Path) -> Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("inspecting {}", path.display())),
    }
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

/// Split a caller-built relative path into components, rejecting anything
/// that could step outside the tree or be read as rev syntax.
fn rel_parts(rel: &str, allow_empty: bool) -> Result<Vec<&str>> {
    if rel.is_empty() {
        if allow_empty {
            return Ok(Vec::new());
        }
        bail!("empty path");
    }
    if rel.starts_with('/') {
        bail!("path {rel:?} is absolute; expected a path relative to the repo");
    }
    let trimmed = rel.strip_suffix('/').unwrap_or(rel);
    let parts: Vec<&str> = trimmed.split('/').collect();
    for part in &parts {
        if part.is_empty() || *part == "." || *part == ".." {
            bail!("path {rel:?} has an empty, `.` or `..` component");
        }
        if part.eq_ignore_ascii_case(".git") {
            bail!("path {rel:?} points into .git");
        }
        if part.chars().any(char::is_control) {
            bail!("path {rel:?} contains a control character");
        }
    }
    Ok(parts)
}

/// Where `parts` leads under `root`, walking without following symlinks;
/// `None` if a component is missing or an intermediate one is not a real
/// directory (git would not have such a path either).
fn walk(root: &Path, parts: &[&str]) -> Result<Option<(PathBuf, Option<fs::Metadata>)>> {
    let root_meta =
        fs::metadata(root).with_context(|| format!("opening worktree {}", root.display()))?;
    if !root_meta.is_dir() {
        bail!("worktree {} is not a directory", root.display());
    }
    let mut path = root.to_path_buf();
    let mut meta: Option<fs::Metadata> = None;
    for part in parts {
        if meta.as_ref().is_some_and(|m| !m.is_dir()) {
            return Ok(None);
        }
        path.push(part);
        meta = match fs::symlink_metadata(&path) {
            Ok(m) => Some(m),
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(None);
            }
            Err(e) => return Err(e).with_context(|| format!("inspecting {}", path.display())),
        };
    }
    Ok(Some((path, meta)))
}

fn read_worktree_file(root: &Path, parts: &[&str]) -> Result<Option<Vec<u8>>> {
    let Some((path, Some(meta))) = walk(root, parts)? else {
        return Ok(None);
    };
    let read = if meta.file_type().is_symlink() {
        fs::read_link(&path).map(|target| target.into_os_string().into_encoded_bytes())
    } else if meta.is_dir() {
        bail!("{} is a directory, not a file", path.display());
    } else {
        fs::read(&path)
    };
    match read {
        Ok(bytes) => Ok(Some(bytes)),
        // Deleted between the look and the read: absent, as it is now.
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn list_worktree_dir(root: &Path, parts: &[&str]) -> Result<Vec<String>> {
    let path = match walk(root, parts)? {
        None => return Ok(Vec::new()),
        Some((path, None)) => path,
        Some((path, Some(meta))) if meta.is_dir() => path,
        Some((path, Some(_))) => bail!("{} is not a directory", path.display()),
    };
    let entries = match fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", path.display()))?;
        let kind = entry
            .file_type()
            .with_context(|| format!("inspecting {}", entry.path().display()))?;
        if kind.is_dir() {
            continue;
        }
        match entry.file_name().into_string() {
            Ok(name) if name == ".git" => {}
            Ok(name) => names.push(name),
            Err(raw) => {
                tracing::warn!(dir = %path.display(), name = ?raw, "skipping non-UTF-8 file name")
            }
        }
    }
    Ok(names)
}

/// Blob id of `bytes` in the object format of the repo at `dir`.
fn hash_blob(dir: &Path, bytes: &[u8]) -> Result<String> {
    let out = git_in(dir)
        .args(["hash-object", "--no-filters", "--stdin"])
        .stdin(bytes)
        .checked()?;
    Ok(out.stdout_text().trim().to_owned())
}

struct Object {
    id: String,
    kind: String,
    content: Vec<u8>,
}

/// Look `spec` (e.g. `refs/remotes/origin/main:docs/x.md`) up with one
/// `git cat-file --batch[-check]`; `None` when it names nothing.
fn cat_file(dir: &Path, spec: &str, with_content: bool) -> Result<Option<Object>> {
    let mode = if with_content {
        "--batch"
    } else {
        "--batch-check"
    };
    let cmd = git_in(dir)
        .args(["cat-file", mode])
        .stdin(format!("{spec}\n"));
    let out = cmd.checked()?;
    let stdout = &out.stdout;
    let header_end = stdout
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(stdout.len());
    let header = String::from_utf8_lossy(&stdout[..header_end]);
    if header.ends_with(" missing") {
        return Ok(None);
    }
    let unexpected = || anyhow::anyhow!("`{}` answered {header:?} for {spec:?}", cmd.display());
    let mut fields = header.split(' ');
    let (Some(id), Some(kind), Some(size), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(unexpected());
    };
    let size: usize = size.parse().map_err(|_| unexpected())?;
    let content = if with_content {
        let start = header_end + 1;
        match stdout.get(start..start.saturating_add(size)) {
            Some(c) => c.to_vec(),
            None => bail!(
                "`{}` returned a truncated object for {spec:?}",
                cmd.display()
            ),
        }
    } else {
        Vec::new()
    };
    Ok(Some(Object {
        id: id.to_owned(),
        kind: kind.to_owned(),
        content,
    }))
}

/// Names of the blobs (files and symlinks) directly in tree `tree`.
fn list_tree(dir: &Path, tree: &str) -> Result<Vec<String>> {
    let out = git_in(dir).args(["ls-tree", "-z"]).arg(tree).checked()?;
    let mut names = Vec::new();
    for record in out.stdout.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        // "<mode> SP <type> SP <id> TAB <name>"
        let Some(tab) = record.iter().position(|&b| b == b'\t') else {
            bail!(
                "unexpected ls-tree record {:?}",
                String::from_utf8_lossy(record)
            );
        };
        let meta = String::from_utf8_lossy(&record[..tab]);
        if meta.split(' ').nth(1) != Some("blob") {
            continue;
        }
        match std::str::from_utf8(&record[tab + 1..]) {
            Ok(name) => names.push(name.to_owned()),
            Err(_) => tracing::warn!(
                tree,
                name = %String::from_utf8_lossy(&record[tab + 1..]),
                "skipping non-UTF-8 file name"
            ),
        }
    }
    Ok(names)
}

fn check_repo_name(name: &str) -> Result<()> {
    if !valid_repo_name(name) {
        bail!("invalid repo name {name:?}");
    }
    Ok(())
}

fn check_repo(repo: &RepoRef<'_>) -> Result<()> {
    check_repo_name(repo.name)?;
    if !valid_branch_name(repo.main) {
        bail!("invalid main branch {:?} for repo {}", repo.main, repo.name);
    }
    if repo.remote.is_empty()
        || repo.remote.starts_with('-')
        || repo.remote.chars().any(char::is_control)
    {
        bail!("invalid remote {:?} for repo {}", repo.remote, repo.name);
    }
    Ok(())
}

fn check_branch(branch: &str) -> Result<()> {
    if !valid_branch_name(branch) {
        bail!("invalid branch name {branch:?}");
    }
    Ok(())
}

/// A work item id becomes one path component.
fn check_wi(wi: &str) -> Result<()> {
    if !valid_path_component(wi) {
        bail!("invalid work item id {wi:?}");
    }
    Ok(())
}

/// Create a bare repository at `remote` whose `main` holds `files` (one commit as `name
/// <email>`), using `work` as a scratch checkout. Used by `orch demo` to build its world.
pub fn seed_remote(
    remote: &Path,
    work: &Path,
    main: &str,
    files: &[(&str, &[u8])],
    name: &str,
    email: &str,
) -> Result<()> {
    if !valid_ref_name(main) {
        bail!("invalid branch name {main:?}");
    }
    Cmd::new("git")
        .args(["init", "--quiet", "--bare", "--initial-branch", main])
        .arg(remote)
        .checked()
        .context("creating the bare remote")?;
    Cmd::new("git")
        .args(["init", "--quiet", "--initial-branch", main])
        .arg(work)
        .checked()
        .context("creating the seed checkout")?;
    for (rel, bytes) in files {
        let parts = rel_parts(rel, false)?;
        let path = parts.iter().fold(work.to_path_buf(), |p, c| p.join(c));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {rel}"))?;
    }
    Git::new(work).commit_all(work, "initial project", name, email)?;
    git_in(work)
        .arg("push")
        .arg("--quiet")
        .arg(remote)
        .arg(format!("HEAD:refs/heads/{main}"))
        .checked()
        .context("pushing the seed commit")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    const NAME: &str = "demo";
    const ID_NAME: &str = "Orch Test";
    const ID_EMAIL: &str = "orch-test@example.invalid";

    /// Run git with our environment in `dir`; panics on failure (tests only).
    fn run(dir: &Path, args: &[&str]) -> String {
        git_in(dir)
            .args(args)
            .checked()
            .unwrap()
            .stdout_text()
            .trim()
            .to_owned()
    }

    /// A bare remote seeded with one commit on main, a scratch clone of it
    /// (`seed`) for making remote-side changes, and a `Git` over `repos/`.
    struct Fx {
        tmp: TempDir,
        remote: String,
        seed: PathBuf,
        git: Git,
    }

    impl Fx {
        fn new() -> Fx {
            let tmp = tempfile::tempdir().unwrap();
            let remote = tmp.path().join("remote.git");
            let seed = tmp.path().join("seed");
            let remote_s = remote.to_str().unwrap().to_owned();
            run(
                tmp.path(),
                &["init", "--quiet", "--bare", "-b", "main", &remote_s],
            );
            run(
                tmp.path(),
                &["clone", "--quiet", &remote_s, seed.to_str().unwrap()],
            );
            let fx = Fx {
                git: Git::new(tmp.path().join("repos")),
                tmp,
                remote: remote_s,
                seed,
            };
            run(&fx.seed, &["checkout", "--quiet", "-b", "main"]);
            fx.write("README.md", "hello\n");
            fx.write("src/lib.rs", "// lib\n");
            fx.write("docs/work-items/X-0.md", "# X-0\n");
            fx.commit_push("main", "seed");
            fx
        }

        fn repo(&self) -> RepoRef<'_> {
            RepoRef {
                name: NAME,
                remote: &self.remote,
                main: "main",
            }
        }

        fn write(&self, rel: &str, content: &str) {
            write_in(&self.seed, rel, content);
        }

        /// Commit everything in seed and push it to `branch`; returns the sha.
        fn commit_push(&self, branch: &str, msg: &str) -> String {
            let sha = commit_in(&self.seed, msg);
            run(
                &self.seed,
                &[
                    "push",
                    "--quiet",
                    "--force",
                    "origin",
                    &format!("HEAD:refs/heads/{branch}"),
                ],
            );
            sha
        }

        /// Point seed's checkout at `start` on local branch `branch`.
        fn seed_branch(&self, branch: &str, start: &str) {
            run(&self.seed, &["fetch", "--quiet", "origin"]);
            run(&self.seed, &["checkout", "--quiet", "-B", branch, start]);
        }

        fn locked(&self) -> RepoLock {
            let lock = self.git.lock(NAME).unwrap();
            self.git.ensure_clone(&lock, &self.repo()).unwrap();
            lock
        }

        fn clone(&self) -> PathBuf {
            self.git.clone_dir(NAME)
        }
    }

    fn write_in(dir: &Path, rel: &str, content: &str) {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn commit_in(dir: &Path, msg: &str) -> String {
        run(dir, &["add", "-A"]);
        run(
            dir,
            &[
                "-c",
                &format!("user.name={ID_NAME}"),
                "-c",
                &format!("user.email={ID_EMAIL}"),
                "commit",
                "--quiet",
                "-m",
                msg,
            ],
        );
        run(dir, &["rev-parse", "HEAD"])
    }

    fn upstream(wt: &Path) -> Option<String> {
        let out = git_in(wt)
            .args(["rev-parse", "--symbolic-full-name", "@{upstream}"])
            .output()
            .unwrap();
        out.success().then(|| out.stdout_text().trim().to_owned())
    }

    fn origin(branch: &str) -> Source {
        Source::Ref(format!("origin/{branch}"))
    }

    #[test]
    fn ensure_clone_twice_is_idempotent_and_cleans_a_crashed_attempt() {
        let fx = Fx::new();
        // A half clone left by a crash must not get in the way.
        let stale = fx.git.repos_dir().join("_tmp/demo.clone");
        fs::create_dir_all(&stale).unwrap();
        fs::write(stale.join("junk"), "x").unwrap();

        let lock = fx.git.lock(NAME).unwrap();
        fx.git.ensure_clone(&lock, &fx.repo()).unwrap();
        let main = run(&fx.seed, &["rev-parse", "HEAD"]);
        assert_eq!(
            run(&fx.clone(), &["rev-parse", "refs/remotes/origin/main"]),
            main
        );
        fx.git.ensure_clone(&lock, &fx.repo()).unwrap();
        assert_eq!(
            run(&fx.clone(), &["config", "--get-all", "remote.origin.fetch"]),
            "+refs/heads/*:refs/remotes/origin/*"
        );
        assert_eq!(
            run(&fx.clone(), &["config", "remote.origin.url"]),
            fx.remote
        );
        assert!(!stale.exists());
        assert_eq!(
            crate::ext::lock::holder_pid(fx.git.repos_dir().join("demo.lock")),
            Some(std::process::id())
        );
    }

    #[test]
    fn ensure_clone_refuses_a_foreign_directory() {
        let fx = Fx::new();
        let dir = fx.clone();
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("precious"), "x").unwrap();
        let lock = fx.git.lock(NAME).unwrap();
        let err = fx.git.ensure_clone(&lock, &fx.repo()).unwrap_err();
        assert!(format!("{err:#}").contains("not a git clone"), "{err:#}");
        assert!(dir.join("precious").exists());
    }

    #[test]
    fn lock_of_another_repo_is_rejected() {
        let fx = Fx::new();
        let other = fx.git.lock("other").unwrap();
        let err = fx.git.ensure_clone(&other, &fx.repo()).unwrap_err();
        assert!(err.to_string().contains("lock of repo other"), "{err}");
        assert!(fx.git.lock("../evil").is_err());
        assert!(fx.git.lock("a.lock").is_err());
    }

    #[test]
    fn fetch_sees_new_remote_commits() {
        let fx = Fx::new();
        let lock = fx.locked();
        fx.write("src/new.rs", "x\n");
        let sha = fx.commit_push("main", "more");
        fx.git.fetch(&lock, &fx.repo()).unwrap();
        assert_eq!(fx.git.head(&fx.repo(), &origin("main")).unwrap(), Some(sha));
    }

    #[test]
    fn worktree_add_cuts_from_fresh_origin_main_when_branch_is_absent() {
        let fx = Fx::new();
        let lock = fx.locked();
        // Main moves after our clone: the new branch must start from it.
        fx.write("src/later.rs", "x\n");
        let main = fx.commit_push("main", "later");

        let wt = fx
            .git
            .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
            .unwrap();
        assert_eq!(wt, fx.git.worktree_dir(NAME, "X-1"));
        assert_eq!(run(&wt, &["rev-parse", "HEAD"]), main);
        assert_eq!(
            current_branch(&wt).unwrap().as_deref(),
            Some("feature/X-1-foo")
        );
        assert_eq!(
            upstream(&wt),
            None,
            "a branch cut from main must not track main"
        );
        assert!(wt.join("src/later.rs").exists());

        // Again: the same worktree, untouched.
        write_in(&wt, "scratch.txt", "keep me");
        let again = fx
            .git
            .worktree_add(&lock, &fx.repo(), "X-1", "feature/X-1-foo")
            .unwrap();
        assert_eq!(again, wt);
        assert!(wt.join("scratch.txt").exists());
    }

    #[test]
    fn worktree_add_checks_out_the_remote_branch_as_is() {
        let fx = Fx::new();
        let lock = fx.locked();
        fx.seed_branch("feature/X-3", "origin/main");
        fx.write("src/x3.rs", "x3\n");
        let tip = fx.commit_push("feature/X-3", "x3 work");

        let wt = fx
            .git
            .worktree_add(&lock, &fx.repo(), "X-3", "feature/X-3")
            .unwrap();
        assert_eq!(run(&wt, &["rev-parse", "HEAD"]), tip);
        assert_eq!(current_branch(&wt).unwrap().as_deref(), Some("feature/X-3"));
        assert_eq!(
            upstream(&wt).as_deref(),
            Some("refs/remotes/origin/feature/X-3")
        );
    }

    #[test]
    fn worktree_add_refuses_a_foreign_non_empty_directory() {
        let fx = Fx::new();
        let lock = fx.locked();
        let dir = fx.git.worktree_dir(NAME, "X-9");
        write_in(&dir, "precious", "x");
        let err = fx
            .git
            .worktree_add(&lock, &fx.repo(), "X-9", "feature/X-9")
            .unwrap_err();
        assert!(format!("{err:#}").contains("not a worktree"), "{err:#}");
        assert!(dir.join("precious").exists());
        assert!(fx.git.worktree_remove(&lock, &fx.repo(), "X-9").is_err());
        assert!(dir.join("precious").exists());

        // An empty leftover directory is harmless and reused.
        fs::remove_file(dir.join("precious")).unwrap();
        fx.git
            .worktree_add(&lock, &fx.repo(), "X-9", "feature/X-9")
            .unwrap();
        assert!(dir.join("README.md").exists());
    }

    #[test]
    fn worktree_add_rejects_bad_names() {
        let fx = Fx::new();
        let lock = fx.locked();
        for (wi, branch) in [
            ("../x", "feature/ok"),
            ("", "feature/ok"),
            ("X-1", "-f"),
            ("X-1", "a..b"),
        ] {
            assert!(
                fx.git.worktree_add(&lock, &fx.repo(), wi, branch).is_err(),
                "{wi} {branch}"
            );
        }
    }

    #[test]
    fn lookup_order_is_worktree_then_remote_branch_then_main() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let branch = "feature/X-4";
        assert_eq!(
            fx.git.lookup_source(&lock, &repo, "X-4", branch).unwrap(),
            origin("main")
        );

        fx.seed_branch(branch, "origin/main");
        fx.write("src/x4.rs", "x\n");
        fx.commit_push(branch, "x4");
        fx.git.fetch(&lock, &repo).unwrap();
        assert_eq!(
            fx.git.lookup_source(&lock, &repo, "X-4", branch).unwrap(),
            origin(branch)
        );

        let wt = fx.git.worktree_add(&lock, &repo, "X-4", branch).unwrap();
        assert_eq!(
            fx.git.lookup_source(&lock, &repo, "X-4", branch).unwrap(),
            Source::Worktree(wt.clone())
        );

        fx.git.worktree_remove(&lock, &repo, "X-4").unwrap();
        assert!(!wt.exists());
        assert_eq!(
            fx.git.lookup_source(&lock, &repo, "X-4", branch).unwrap(),
            origin(branch)
        );
        // Idempotent, and the registration is gone so the path can be reused.
        fx.git.worktree_remove(&lock, &repo, "X-4").unwrap();
        fx.git
            .worktree_remove(&lock, &repo, "never-existed")
            .unwrap();
        assert!(!run(&fx.clone(), &["worktree", "list"]).contains("X-4"));
        fx.git.worktree_add(&lock, &repo, "X-4", branch).unwrap();
    }

    #[test]
    fn worktree_remove_discards_a_dirty_worktree() {
        let fx = Fx::new();
        let lock = fx.locked();
        let wt = fx
            .git
            .worktree_add(&lock, &fx.repo(), "X-5", "feature/X-5")
            .unwrap();
        write_in(&wt, "README.md", "changed\n");
        write_in(&wt, "untracked.txt", "u\n");
        fx.git.worktree_remove(&lock, &fx.repo(), "X-5").unwrap();
        assert!(!wt.exists());
    }

    #[test]
    fn a_worktree_whose_directory_vanished_is_recreated() {
        let fx = Fx::new();
        let lock = fx.locked();
        let wt = fx
            .git
            .worktree_add(&lock, &fx.repo(), "X-6", "feature/X-6")
            .unwrap();
        fs::remove_dir_all(&wt).unwrap();
        let again = fx
            .git
            .worktree_add(&lock, &fx.repo(), "X-6", "feature/X-6")
            .unwrap();
        assert!(again.join("README.md").exists());
    }

    #[test]
    fn read_file_gives_the_same_blob_via_worktree_and_ref() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let wt = fx
            .git
            .worktree_add(&lock, &repo, "X-7", "feature/X-7")
            .unwrap();
        let via_wt = Source::Worktree(wt.clone());
        let via_ref = origin("main");

        let a = fx
            .git
            .read_file(&repo, &via_wt, "README.md")
            .unwrap()
            .unwrap();
        let b = fx
            .git
            .read_file(&repo, &via_ref, "README.md")
            .unwrap()
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.bytes, b"hello\n");
        assert_eq!(
            a.id,
            run(
                &fx.clone(),
                &["rev-parse", "refs/remotes/origin/main:README.md"]
            )
        );
        assert_eq!(
            fx.git.blob_id(&repo, &via_wt, "README.md").unwrap(),
            Some(a.id.clone())
        );
        assert_eq!(
            fx.git.blob_id(&repo, &via_ref, "README.md").unwrap(),
            Some(a.id)
        );

        // Edited in the worktree: a different id until committed.
        write_in(&wt, "README.md", "edited\n");
        let edited = fx
            .git
            .read_file(&repo, &via_wt, "README.md")
            .unwrap()
            .unwrap();
        assert_eq!(edited.bytes, b"edited\n");
        assert_ne!(edited.id, b.id);

        for source in [&via_wt, &via_ref] {
            for absent in [
                "nope.md",
                "nope/x.md",
                "README.md/x",
                "docs/work-items/X-7.md",
            ] {
                assert_eq!(
                    fx.git.read_file(&repo, source, absent).unwrap(),
                    None,
                    "{absent}"
                );
                assert_eq!(
                    fx.git.blob_id(&repo, source, absent).unwrap(),
                    None,
                    "{absent}"
                );
            }
            assert!(
                fx.git.read_file(&repo, source, "src").is_err(),
                "a directory"
            );
            for bad in [
                "",
                "/etc/passwd",
                "../x",
                "a/../b",
                "./README.md",
                ".git/config",
                "a//b",
            ] {
                assert!(fx.git.read_file(&repo, source, bad).is_err(), "{bad:?}");
            }
        }
        // A ref that does not exist is an error, not an absent file.
        assert!(
            fx.git
                .read_file(&repo, &origin("nope"), "README.md")
                .is_err()
        );
        assert!(
            fx.git
                .read_file(&repo, &Source::Ref("-x".into()), "README.md")
                .is_err()
        );
    }

    #[test]
    fn symlinks_are_read_as_git_stores_them_not_followed() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let branch = "feature/X-8";
        let wt = fx.git.worktree_add(&lock, &repo, "X-8", branch).unwrap();
        let outside = fx.tmp.path().join("outside");
        write_in(&outside, "secret.md", "secret\n");
        std::os::unix::fs::symlink(outside.join("secret.md"), wt.join("link.md")).unwrap();
        std::os::unix::fs::symlink(&outside, wt.join("linkdir")).unwrap();
        let via_wt = Source::Worktree(wt.clone());

        let link = fx
            .git
            .read_file(&repo, &via_wt, "link.md")
            .unwrap()
            .unwrap();
        assert_eq!(
            link.bytes,
            outside.join("secret.md").to_str().unwrap().as_bytes()
        );
        assert_eq!(
            fx.git
                .read_file(&repo, &via_wt, "linkdir/secret.md")
                .unwrap(),
            None
        );

        fx.git
            .commit_all(&wt, "links", ID_NAME, ID_EMAIL)
            .unwrap()
            .unwrap();
        fx.git.push_branch(&repo, &wt, branch).unwrap();
        fx.git.fetch(&lock, &repo).unwrap();
        let via_ref = fx
            .git
            .read_file(&repo, &origin(branch), "link.md")
            .unwrap()
            .unwrap();
        assert_eq!(via_ref, link);
        assert_eq!(
            fx.git
                .read_file(&repo, &origin(branch), "linkdir/secret.md")
                .unwrap(),
            None
        );
    }

    #[test]
    fn list_dir_lists_files_directly_in_a_directory() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        fx.write("docs/work-items/X-1.md", "1\n");
        fx.write("docs/work-items/sub/deep.md", "d\n");
        fx.commit_push("main", "items");
        let wt = fx
            .git
            .worktree_add(&lock, &repo, "X-10", "feature/X-10")
            .unwrap();
        for source in [Source::Worktree(wt.clone()), origin("main")] {
            assert_eq!(
                fx.git.list_dir(&repo, &source, "docs/work-items").unwrap(),
                ["X-0.md", "X-1.md"]
            );
            assert_eq!(
                fx.git.list_dir(&repo, &source, "docs/work-items/").unwrap(),
                ["X-0.md", "X-1.md"]
            );
            assert_eq!(fx.git.list_dir(&repo, &source, "").unwrap(), ["README.md"]);
            assert!(fx.git.list_dir(&repo, &source, "nope").unwrap().is_empty());
            assert!(fx.git.list_dir(&repo, &source, "README.md").is_err());
            assert!(fx.git.list_dir(&repo, &source, "../x").is_err());
        }
        // The worktree shows its current files, committed or not.
        write_in(&wt, "docs/work-items/X-10.md", "new\n");
        assert_eq!(
            fx.git
                .list_dir(&repo, &Source::Worktree(wt), "docs/work-items")
                .unwrap(),
            ["X-0.md", "X-1.md", "X-10.md"]
        );
    }

    #[test]
    fn ff_moves_a_clean_worktree_and_leaves_a_dirty_one_alone() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let branch = "feature/X-11";
        fx.seed_branch(branch, "origin/main");
        fx.write("src/a.rs", "a\n");
        fx.commit_push(branch, "a");
        let wt = fx.git.worktree_add(&lock, &repo, "X-11", branch).unwrap();

        // Nothing to do yet.
        assert!(
            !fx.git
                .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
                .unwrap()
        );

        // Clean and behind: moves.
        fx.write("src/b.rs", "b\n");
        let b = fx.commit_push(branch, "b");
        fx.git.fetch(&lock, &repo).unwrap();
        assert!(
            fx.git
                .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
                .unwrap()
        );
        assert_eq!(run(&wt, &["rev-parse", "HEAD"]), b);
        assert!(wt.join("src/b.rs").exists());
        assert!(
            !fx.git
                .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
                .unwrap()
        );

        // Dirty (untracked file) and behind: untouched.
        fx.write("src/c.rs", "c\n");
        fx.commit_push(branch, "c");
        fx.git.fetch(&lock, &repo).unwrap();
        write_in(&wt, "notes.txt", "agent scratch\n");
        assert!(
            !fx.git
                .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
                .unwrap()
        );
        assert_eq!(run(&wt, &["rev-parse", "HEAD"]), b);
        // Dirty (modified tracked file): untouched.
        fs::remove_file(wt.join("notes.txt")).unwrap();
        write_in(&wt, "src/a.rs", "changed\n");
        assert!(
            !fx.git
                .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
                .unwrap()
        );
        assert_eq!(run(&wt, &["rev-parse", "HEAD"]), b);
        assert_eq!(
            fs::read_to_string(wt.join("src/a.rs")).unwrap(),
            "changed\n"
        );

        // Ahead of / diverged from the remote: untouched.
        run(&wt, &["checkout", "--quiet", "--", "src/a.rs"]);
        write_in(&wt, "src/local.rs", "l\n");
        let local = fx
            .git
            .commit_all(&wt, "local", ID_NAME, ID_EMAIL)
            .unwrap()
            .unwrap();
        assert!(
            !fx.git
                .ff_worktree_if_clean(&lock, &repo, "X-11", branch)
                .unwrap()
        );
        assert_eq!(run(&wt, &["rev-parse", "HEAD"]), local);

        // No worktree: nothing to do.
        assert!(
            !fx.git
                .ff_worktree_if_clean(&lock, &repo, "X-404", branch)
                .unwrap()
        );
    }

    #[test]
    fn has_code_change_ignores_docs_only_commits_and_honours_since() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let branch = "feature/X-12";
        let wt = fx.git.worktree_add(&lock, &repo, "X-12", branch).unwrap();
        let src = Source::Worktree(wt.clone());
        let check = |since: Option<&str>| {
            fx.git
                .has_code_change(&repo, &src, "origin/main", since, "docs/work-items/")
                .unwrap()
        };
        assert!(!check(None), "no commits of its own");

        write_in(&wt, "docs/work-items/X-12.md", "plan\n");
        let docs = fx
            .git
            .commit_all(&wt, "plan", ID_NAME, ID_EMAIL)
            .unwrap()
            .unwrap();
        assert!(!check(None), "docs-only commit");
        // Uncommitted code does not count.
        write_in(&wt, "src/lib.rs", "// changed\n");
        assert!(!check(None));

        let code = fx
            .git
            .commit_all(&wt, "code", ID_NAME, ID_EMAIL)
            .unwrap()
            .unwrap();
        assert!(check(None), "src change");
        assert!(check(Some(&docs)), "src change after stage entry");
        assert!(!check(Some(&code)), "since is the head");
        // A since that no longer exists, or is not an ancestor, is ignored.
        assert!(check(Some("0123456789abcdef0123456789abcdef01234567")));
        write_in(&wt, "src/dropped.rs", "d\n");
        let dropped = fx
            .git
            .commit_all(&wt, "dropped", ID_NAME, ID_EMAIL)
            .unwrap()
            .unwrap();
        run(&wt, &["reset", "--quiet", "--hard", "HEAD~1"]);
        assert!(
            check(Some(&dropped)),
            "since is a descendant, not an ancestor"
        );
        let main = run(&wt, &["rev-parse", "refs/remotes/origin/main"]);
        fx.write("src/main-only.rs", "m\n");
        let newer_main = fx.commit_push("main", "main moves");
        fx.git.fetch(&lock, &repo).unwrap();
        assert!(check(Some(&newer_main)));
        // Excluding nothing, the docs commit alone counts too.
        assert!(
            fx.git
                .has_code_change(&repo, &src, "origin/main", Some(&main), "")
                .unwrap()
        );
        assert!(
            !fx.git
                .has_code_change(&repo, &src, "origin/main", Some(&code), "")
                .unwrap()
        );

        // Merging main (which changed code) into the branch is not the
        // branch changing code.
        run(
            &wt,
            &[
                "-c",
                &format!("user.name={ID_NAME}"),
                "-c",
                &format!("user.email={ID_EMAIL}"),
                "merge",
                "--quiet",
                "--no-edit",
                "--no-ff",
                "refs/remotes/origin/main",
            ],
        );
        assert!(!check(Some(&code)), "merge of main");

        // Same answer through the pushed ref.
        fx.git.push_branch(&repo, &wt, branch).unwrap();
        fx.git.fetch(&lock, &repo).unwrap();
        let via_ref = origin(branch);
        assert!(
            fx.git
                .has_code_change(&repo, &via_ref, "origin/main", None, "docs/work-items")
                .unwrap()
        );
        assert!(
            !fx.git
                .has_code_change(
                    &repo,
                    &via_ref,
                    "origin/main",
                    Some(&code),
                    "docs/work-items"
                )
                .unwrap()
        );
        assert!(
            fx.git
                .has_code_change(&repo, &via_ref, "origin/nope", None, "docs/work-items")
                .is_err()
        );
        assert!(
            fx.git
                .has_code_change(&repo, &via_ref, "origin/main", None, "../x")
                .is_err()
        );
    }

    #[test]
    fn commit_all_commits_only_when_something_changed() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let wt = fx
            .git
            .worktree_add(&lock, &repo, "X-13", "feature/X-13")
            .unwrap();
        assert_eq!(
            fx.git
                .commit_all(&wt, "nothing", ID_NAME, ID_EMAIL)
                .unwrap(),
            None
        );

        write_in(&wt, "src/new.rs", "n\n");
        let msg = "-starts with a dash\n\n# not a comment\n`$(echo no shell)`";
        let sha = fx
            .git
            .commit_all(&wt, msg, "Ada L", "ada@example.invalid")
            .unwrap()
            .unwrap();
        assert_eq!(run(&wt, &["rev-parse", "HEAD"]), sha);
        assert_eq!(
            run(&wt, &["log", "-1", "--format=%an <%ae>|%cn <%ce>"]),
            "Ada L <ada@example.invalid>|Ada L <ada@example.invalid>"
        );
        assert_eq!(run(&wt, &["log", "-1", "--format=%B"]), msg);
        assert_eq!(run(&wt, &["status", "--porcelain"]), "");
        assert_eq!(
            fx.git.commit_all(&wt, "again", ID_NAME, ID_EMAIL).unwrap(),
            None
        );
    }

    #[test]
    fn push_refuses_main_and_pushes_work_branches() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let branch = "feature/X-14";
        let wt = fx.git.worktree_add(&lock, &repo, "X-14", branch).unwrap();
        write_in(&wt, "src/x.rs", "x\n");
        let sha = fx
            .git
            .commit_all(&wt, "x", ID_NAME, ID_EMAIL)
            .unwrap()
            .unwrap();

        for refused in ["main", "master"] {
            let err = fx.git.push_branch(&repo, &wt, refused).unwrap_err();
            assert!(err.to_string().contains("refusing"), "{err}");
        }
        let trunk = RepoRef {
            main: "trunk",
            ..repo
        };
        assert!(fx.git.push_branch(&trunk, &wt, "trunk").is_err());
        assert!(fx.git.push_branch(&repo, &wt, "-f").is_err());
        assert!(!fx.git.branch_exists_remote(&repo, branch).unwrap());

        fx.git.push_branch(&repo, &wt, branch).unwrap();
        assert!(fx.git.branch_exists_remote(&repo, branch).unwrap());
        assert!(
            !fx.git.branch_exists_remote(&repo, "X-14").unwrap(),
            "exact name only"
        );
        let remote_tip = run(
            &fx.seed,
            &["ls-remote", "origin", &format!("refs/heads/{branch}")],
        );
        assert!(remote_tip.starts_with(&sha), "{remote_tip}");
        // main on the remote is untouched.
        assert_eq!(
            run(&fx.seed, &["ls-remote", "origin", "refs/heads/main"])
                .split('\t')
                .next(),
            Some(run(&fx.seed, &["rev-parse", "HEAD"]).as_str())
        );
    }

    #[test]
    fn push_failure_names_the_command_and_git_stderr() {
        let fx = Fx::new();
        let lock = fx.locked();
        let repo = fx.repo();
        let branch = "feature/X-15";
        fx.seed_branch(branch, "origin/main");
        fx.write("src/remote.rs", "r\n");
        fx.commit_push(branch, "remote side");
        fx.git.fetch(&lock, &repo).unwrap();
        // A worktree cut from main, diverging from the remote branch.
        let wt = fx
            .git
            .worktree_add(&lock, &repo, "X-15", "other/X-15")
            .unwrap();
        write_in(&wt, "src/local.rs", "l\n");
        fx.git.commit_all(&wt, "local", ID_NAME, ID_EMAIL).unwrap();
        let err = format!("{:#}", fx.git.push_branch(&repo, &wt, branch).unwrap_err());
        assert!(
            err.contains("push --no-verify --quiet origin HEAD:refs/heads/feature/X-15`"),
            "{err}"
        );
        assert!(err.contains("failed (exit 1)"), "{err}");
        assert!(err.contains("rejected"), "{err}");
    }

    #[test]
    fn branch_name_rules_agree_with_git() {
        let names = [
            "main",
            "feature/X-1-foo",
            "a.b",
            "a/b/c",
            "x@y",
            "ümlaut",
            "a-",
            "@a",
            "a.lockx",
            "",
            "a..b",
            "a b",
            "a~b",
            "a^b",
            "a:b",
            "a?b",
            "a*b",
            "a[b",
            "a\\b",
            "a\tb",
            "a\u{7f}b",
            "/a",
            "a/",
            "a//b",
            ".a",
            "a/.b",
            "a.",
            "a.lock",
            "a.lock/b",
            "a@{b",
        ];
        // Same verdict as git itself (our extra rules aside).
        let tmp = tempfile::tempdir().unwrap();
        for name in &names {
            if ["-x", "HEAD", "@"].contains(name) {
                continue;
            }
            let git_says = Cmd::new("git")
                .args(["check-ref-format", &format!("refs/heads/{name}")])
                .cwd(tmp.path())
                .output()
                .unwrap()
                .success();
            assert_eq!(valid_branch_name(name), git_says, "{name:?}");
        }
    }

    #[test]
    fn refs_and_names_are_validated() {
        assert_eq!(rev_arg("origin/main").unwrap(), "refs/remotes/origin/main");
        assert_eq!(rev_arg("refs/tags/v1").unwrap(), "refs/tags/v1");
        assert_eq!(rev_arg("0123abcd").unwrap(), "0123abcd");
        for bad in ["-x", "a:b", "HEAD^", "a..b", "@{-1}", ""] {
            assert!(rev_arg(bad).is_err(), "{bad}");
        }
        assert!(check_wi("X-1").is_ok());
        for bad in ["", ".", "..", "a/b", "-x"] {
            assert!(check_wi(bad).is_err(), "{bad}");
        }
    }
}
