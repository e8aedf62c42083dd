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
//! are kept, so private remotes work), timeouts (proc's later extension;
//! only `ls_remote`, a probe of a remote that may not answer, bounds itself
//! with git's and ssh's own knobs), and anything forceful: no force-push, no
//! deleting directories git does not recognise as our worktrees, never
//! touching a dirty worktree.
//!
//! Concurrency: methods that change the clone or its worktree registry (clone, fetch, worktree
//! add/remove, the fast-forward) take a [`RepoLock`] as proof that the caller holds the repo's
//! lock, and do only that under it. Reads (`lookup_source`, `read_file`, `list_dir`, `head`,
//! `has_code_change`, `blob_id`) and the worktree-local `commit_all`/`push_branch` take none:
//! git's object and ref reads are safe alongside a fetch, and a worktree is read on disk.
//!
//! Files: this one holds the types, the repo lock, the hardened command builder (`git_in`, with
//! `FORCED_CONFIG` and `SCRUBBED_ENV`) and the argument checks every call makes before a value
//! becomes a path or an argument; `local.rs` what is read on disk without running git (refs,
//! `HEAD`, worktree checks, blob ids); `clone.rs` the clone and its worktrees, `read.rs` files
//! and commit facts, `write.rs` commits, `remote.rs` pushes, deletes and questions to the
//! remote (`ls_remote` among them).

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::domain::names::{
    valid_branch_name, valid_path_component, valid_ref_name, valid_repo_name,
};
use crate::ext::lock::FileLock;
use crate::ext::proc::Cmd;

mod clone;
mod local;
mod merge;
mod read;

mod remote;
mod write;

/// Config forced on every git command (design §9.3). Hooks are off because the clone and
/// worktrees contain agent-written content and the user's global hooks are not ours to run;
/// signing is off because no key is available unattended. The rest overrides every
/// single-valued key with which a repository's config could make git run a program or send a
/// transfer elsewhere; the keys a repository names itself (drivers, helpers, includes) are
/// refused by [`check_config`] instead.
const FORCED_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.askPass=",
    "core.alternateRefsCommand=",
    "credential.helper=",
    "remote.origin.uploadpack=git-upload-pack",
    "remote.origin.receivepack=git-receive-pack",
    "protocol.ext.allow=never",
    "diff.external=",
    "submodule.recurse=false",
    "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no",
    "gc.autoDetach=false",
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
    // Config from the environment: orch's git reads only its own (design §9.3).
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_SYSTEM",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_PROXY_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
];

/// The largest artifact a gate reads (design §3.2); past it the file is refused.
pub const MAX_FILE: usize = 1 << 20;

/// A file the gate will not read: not a regular file, or too large. Its text completes
/// "`<file>` …" in a "not satisfied" reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// What `rebase_onto` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rebased {
    /// The branch already contained `onto`.
    UpToDate {
        head: String,
    },
    Rebased {
        head: String,
    },
    /// The rebase stopped on conflicts and was aborted; the worktree is as it was.
    Conflict {
        paths: Vec<String>,
    },
}

/// What `delete_remote_branch` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BranchDelete {
    Deleted,
    AlreadyGone,
    /// The branch no longer pointed at the expected commit: kept.
    Moved,
}

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
    /// Every git command is killed, with its process group, after this long.
    timeout: Duration,
    /// How long `lock` waits for a repo's lock before it gives up (busy, exit 4).
    lock_timeout: Duration,
    /// `GIT_CONFIG_GLOBAL` of every command: orch's own (`/dev/null` when unset).
    global_config: Option<PathBuf>,
    /// `credential.helper` values set after the forced reset.
    credential_helpers: Vec<String>,
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
        Git {
            repos_dir: dir,
            timeout: DEFAULT_TIMEOUT,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            global_config: None,
            credential_helpers: Vec::new(),
        }
    }

    /// The same, reading `global` as its only global config and asking `helpers` for
    /// credentials (the config's `git.global_config` and `git.credential_helpers`).
    pub fn with_config(mut self, global: Option<PathBuf>, helpers: Vec<String>) -> Git {
        self.global_config = global;
        self.credential_helpers = helpers;
        self
    }

    /// The same, with the bounds of the config's `git` block.
    pub fn with_limits(mut self, timeout: Duration, lock_timeout: Duration) -> Git {
        self.timeout = timeout;
        self.lock_timeout = lock_timeout;
        self
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

    /// Wait until this process holds `<repos_dir>/<name>.lock`, at most the lock timeout: past
    /// it the repo is busy, an error with exit code 4 that names the holder (try later).
    pub fn lock(&self, name: &str) -> Result<RepoLock> {
        check_repo_name(name)?;
        fs::create_dir_all(&self.repos_dir)
            .with_context(|| format!("creating {}", self.repos_dir.display()))?;
        let path = self.repos_dir.join(format!("{name}.lock"));
        let file = FileLock::acquire_within(&path, self.lock_timeout)
            .with_context(|| format!("locking repo {name}"))?
            .ok_or_else(|| {
                let holder = crate::ext::lock::holder_pid(&path)
                    .map(|p| format!(" (held by pid {p})"))
                    .unwrap_or_default();
                crate::error::exit(
                    crate::error::Code::Busy,
                    format!(
                        "repo `{name}` is busy{holder}: its lock was not free within {}s; try later",
                        self.lock_timeout.as_secs()
                    ),
                )
            })?;
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
}

impl Git {
    /// A git command run in `dir` with our fixed environment and config, under the deadline;
    /// refused when the config of the repository at `dir` could make git run a program.
    fn git_in(&self, dir: &Path) -> Result<Cmd> {
        check_config(dir)?;
        let mut cmd = Cmd::new("git").arg("-C").arg(dir);
        for kv in FORCED_CONFIG {
            cmd = cmd.args(["-c", kv]);
        }
        for h in &self.credential_helpers {
            cmd = cmd.arg("-c").arg(format!("credential.helper={h}"));
        }
        let ssh = ssh_command(SSH_OPTIONS);
        cmd = cmd.arg("-c").arg(format!("core.sshCommand={ssh}"));
        for key in SCRUBBED_ENV {
            cmd = cmd.env_remove(key);
        }
        let global = self
            .global_config
            .as_deref()
            .unwrap_or(Path::new("/dev/null"));
        // Git never looks for a repository above `dir`: a worktree whose `.git` was removed is
        // an error, not the repository of whatever directory holds it.
        let ceiling = dir.parent().unwrap_or(Path::new("/"));
        Ok(cmd
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", global)
            .env("GIT_CEILING_DIRECTORIES", ceiling)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            // Reads like `status` must not take index.lock next to an agent
            // working in the same worktree.
            .env("GIT_OPTIONAL_LOCKS", "0")
            // A transfer that trickles is abandoned long before the deadline: slower than
            // 1 KB/s for 30 s (http), no answer to keep-alives for a minute or no connection
            // within 30 s (ssh, which must never ask for a password either).
            .env("GIT_HTTP_LOW_SPEED_LIMIT", "1000")
            .env("GIT_HTTP_LOW_SPEED_TIME", "30")
            .env("GIT_SSH_COMMAND", ssh)
            .timeout(self.timeout))
    }
}

/// The dirs of the repository at `dir` for a read done here without git (`local`), after the
/// same refusal a git command gets (`check_config`): a repository whose config would make git
/// run a program is refused by every read, so the refusal surfaces at once whoever reads.
fn local_dirs(dir: &Path) -> Result<Option<local::Dirs>> {
    check_config(dir)?;
    local::dirs_of(dir)
}

/// Refuse a repository whose config (`config`, `config.worktree` of the common and of the
/// worktree's git dir, found the way git finds them from `dir`) sets a key that makes git run a
/// program (design §9.3, `domain::gitconfig`). A directory that is not a repository (where a
/// clone starts) has no config to check.
fn check_config(dir: &Path) -> Result<()> {
    let Some(local::Dirs { gitdir, common }) = local::dirs_of(dir)? else {
        return Ok(());
    };
    let main_config = common.join("config");
    let mut files = vec![main_config.clone()];
    // Git reads `config.worktree` only when the main config turns the extension on.
    let worktree_config = local::read_optional(&main_config)?
        .and_then(|t| crate::domain::gitconfig::keys(&t).ok())
        .is_some_and(|keys| {
            keys.iter()
                .any(|k| k.section == "extensions" && k.name == "worktreeconfig")
        });
    if worktree_config {
        files.push(common.join("config.worktree"));
        if gitdir != common {
            files.push(gitdir.join("config.worktree"));
        }
    }
    for f in files {
        let Some(text) = local::read_optional(&f)? else {
            continue;
        };
        let denied = crate::domain::gitconfig::denied(&text).map_err(|e| {
            anyhow::anyhow!(
                "refusing to run git in `{}`: its config `{}` cannot be read safely ({e})",
                dir.display(),
                f.display()
            )
        })?;
        if !denied.is_empty() {
            bail!(
                "refusing to run git in `{}`: its config `{}` sets {} (a key that makes git run \
                 a program or send a transfer elsewhere; design §9.3). Remove it with `git \
                 config --file {} --unset <key>` once you have checked who wrote it",
                dir.display(),
                f.display(),
                denied
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                f.display()
            );
        }
    }
    Ok(())
}

/// Default of `git.timeout_s`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of `git.lock_timeout_s`.
const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(600);

/// The ssh options every git transfer runs with.
const SSH_OPTIONS: &str =
    "-o BatchMode=yes -o ConnectTimeout=30 -o ServerAliveInterval=15 -o ServerAliveCountMax=4";

/// The operator's own ssh command (`GIT_SSH_COMMAND`: a key, a jump host) or `ssh`, with
/// `options` after it.
fn ssh_command(options: &str) -> String {
    let base = std::env::var("GIT_SSH_COMMAND")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "ssh".into());
    format!("{base} {options}")
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

fn exists(path: &Path) -> Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("inspecting {}", path.display())),
    }
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
    if !valid_remote(repo.remote) {
        bail!("invalid remote {:?} for repo {}", repo.remote, repo.name);
    }
    Ok(())
}

/// A remote becomes one argument of git: never empty, never read as an option, one line.
fn valid_remote(remote: &str) -> bool {
    !remote.is_empty() && !remote.starts_with('-') && !remote.chars().any(char::is_control)
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

#[cfg(test)]
mod tests;
