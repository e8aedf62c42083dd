//! The last mile in git (design §7): rebasing a task branch onto fresh main in its worktree
//! (aborted on a conflict, naming the paths), pushing the rebased branch with a lease on its
//! old head, the lines a range adds (for the secret scan), ancestry and trees (for the proof),
//! and the one push that ever writes a main branch: `push_main`, a fast-forward only.
//!
//! Nothing here forces a main branch: `push_main` is a plain push, which the remote refuses
//! unless it fast-forwards. Every command goes through `git_in` (its config checks and
//! overrides).

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::{Git, Rebased, RepoLock, RepoRef, check_branch, check_repo, rev_arg};

fn check_sha(sha: &str) -> Result<()> {
    if sha.len() < 7 || sha.len() > 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("invalid commit id {sha:?}");
    }
    Ok(())
}

impl Git {
    /// The commit `rev` names in `dir` (a worktree or the clone). `HEAD` and branch names are
    /// read on disk where that is certain (`rev_parse_commit`).
    pub fn rev_parse(&self, dir: &Path, rev: &str) -> Result<String> {
        let arg = rev_arg(rev).or_else(|_| check_sha(rev).map(|_| rev.to_string()))?;
        if arg == "HEAD" || arg.starts_with("refs/") {
            return self
                .rev_parse_commit(dir, &arg)?
                .with_context(|| format!("resolving {rev} in {}: no such commit", dir.display()));
        }
        let out = self
            .git_in(dir)?
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{arg}^{{commit}}"))
            .checked()
            .with_context(|| format!("resolving {rev} in {}", dir.display()))?;
        Ok(out.stdout_text().trim().to_string())
    }

    /// The tree of commit `sha`.
    pub fn tree_of(&self, dir: &Path, sha: &str) -> Result<String> {
        check_sha(sha)?;
        let out = self
            .git_in(dir)?
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{sha}^{{tree}}"))
            .checked()
            .with_context(|| format!("reading the tree of {sha}"))?;
        Ok(out.stdout_text().trim().to_string())
    }

    /// Whether commit `a` is an ancestor of (or equal to) `b`; both are shas or `origin/<b>`.
    pub fn in_history(&self, dir: &Path, a: &str, b: &str) -> Result<bool> {
        let arg = |r: &str| rev_arg(r).or_else(|_| check_sha(r).map(|_| r.to_string()));
        self.is_ancestor(dir, &arg(a)?, &arg(b)?)
            .context("asking git for ancestry")
    }

    /// The paths that differ between two commits.
    pub fn changed_paths(&self, dir: &Path, from: &str, to: &str) -> Result<Vec<String>> {
        check_sha(from)?;
        check_sha(to)?;
        let out = self
            .git_in(dir)?
            .args([
                "diff",
                "--no-ext-diff",
                "--no-textconv",
                "--name-only",
                "-z",
            ])
            .arg(from)
            .arg(to)
            .arg("--")
            .checked()?;
        Ok(out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect())
    }

    /// `git diff -U0` of `base..head` in `dir`: the input of the secret scan.
    pub fn added_diff(&self, dir: &Path, base: &str, head: &str) -> Result<String> {
        let arg = |r: &str| rev_arg(r).or_else(|_| check_sha(r).map(|_| r.to_string()));
        let out = self
            .git_in(dir)?
            .args([
                "diff",
                "-U0",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                "--no-renames",
            ])
            .arg(format!("{}..{}", arg(base)?, arg(head)?))
            .arg("--")
            .checked()
            .context("reading the lines the branch adds")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every path a worktree changed since commit `since`: in the commits on top of it and in
    /// its uncommitted state (tracked or not, ignored files aside; both sides of a rename).
    pub fn changes_since(&self, worktree: &Path, since: &str) -> Result<Vec<String>> {
        check_sha(since)?;
        let head = self.rev_parse(worktree, "HEAD")?;
        let mut paths = if head == since {
            Vec::new()
        } else {
            self.changed_paths(worktree, since, &head)?
        };
        let out = self
            .git_in(worktree)?
            .args([
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--no-renames",
            ])
            .checked()
            .with_context(|| format!("listing the changes in {}", worktree.display()))?;
        // `XY path\0` per entry (no renames, so one path each).
        for entry in out.stdout.split(|b| *b == 0).filter(|e| e.len() > 3) {
            paths.push(String::from_utf8_lossy(&entry[3..]).into_owned());
        }
        paths.sort();
        paths.dedup();
        Ok(paths)
    }

    /// Put the worktree back as it was at commit `to`: the commits on top of it dropped, every
    /// uncommitted change and untracked file removed (ignored files are kept).
    pub fn discard_since(&self, worktree: &Path, to: &str) -> Result<()> {
        check_sha(to)?;
        let ctx = || format!("discarding the changes in {}", worktree.display());
        self.git_in(worktree)?
            .args(["reset", "--hard", "--quiet", to])
            .checked()
            .with_context(ctx)?;
        self.git_in(worktree)?
            .args(["clean", "-fdq"])
            .checked()
            .with_context(ctx)?;
        Ok(())
    }

    /// What the commits of the branch checked out in `worktree` since `base` (`origin/main`)
    /// changed, commit by commit: `(author name, paths)`, newest first (merges left out).
    pub fn branch_changes(
        &self,
        worktree: &Path,
        base: &str,
    ) -> Result<Vec<(String, Vec<String>)>> {
        let out = self
            .git_in(worktree)?
            .args([
                "log",
                "--no-merges",
                "--no-renames",
                "--format=%x00%an",
                "--name-only",
                "-z",
            ])
            .arg(format!("{}..HEAD", rev_arg(base)?))
            .arg("--")
            .checked()
            .with_context(|| {
                format!("listing what the branch changes in {}", worktree.display())
            })?;
        // Each commit: NUL, the author, NUL, then a newline and its paths, each ended by a NUL:
        // split on NUL, an empty field comes before every author.
        let text = String::from_utf8_lossy(&out.stdout);
        let mut commits: Vec<(String, Vec<String>)> = Vec::new();
        let mut author_next = false;
        for field in text.split('\0') {
            if field.is_empty() {
                author_next = true;
            } else if author_next {
                commits.push((field.to_string(), Vec::new()));
                author_next = false;
            } else if let Some((_, paths)) = commits.last_mut() {
                paths.push(field.trim_start_matches('\n').to_string());
            }
        }
        Ok(commits)
    }

    /// Whether the worktree has uncommitted changes (tracked or not).
    pub fn is_dirty(&self, worktree: &Path) -> Result<bool> {
        let out = self
            .git_in(worktree)?
            .args(["status", "--porcelain", "--untracked-files=all"])
            .checked()?;
        Ok(!out.stdout.is_empty())
    }

    /// Rebase the branch checked out in `worktree` onto `onto` (`origin/<main>`), as `name
    /// <email>` for the rewritten commits. A conflict aborts the rebase and names the paths.
    pub fn rebase_onto(
        &self,
        worktree: &Path,
        onto: &str,
        name: &str,
        email: &str,
    ) -> Result<Rebased> {
        let onto = rev_arg(onto)?;
        if self.is_dirty(worktree)? {
            bail!(
                "the worktree {} has uncommitted changes; refusing to rebase it",
                worktree.display()
            );
        }
        if self.in_history(worktree, &onto, "HEAD").unwrap_or(false) {
            return Ok(Rebased::UpToDate {
                head: self.rev_parse(worktree, "HEAD")?,
            });
        }
        let cmd = self
            .git_in(worktree)?
            .arg("-c")
            .arg(format!("user.name={name}"))
            .arg("-c")
            .arg(format!("user.email={email}"))
            .args(["rebase", "--no-autostash", "--no-rerere-autoupdate"])
            .arg(&onto)
            .env("GIT_EDITOR", "true")
            .env("GIT_SEQUENCE_EDITOR", "true");
        let out = cmd.output()?;
        if out.success() {
            return Ok(Rebased::Rebased {
                head: self.rev_parse(worktree, "HEAD")?,
            });
        }
        let conflicts = self
            .git_in(worktree)?
            .args(["diff", "--name-only", "--diff-filter=U", "-z"])
            .output()?;
        let paths: Vec<String> = conflicts
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        let abort = self
            .git_in(worktree)?
            .args(["rebase", "--abort"])
            .output()?;
        if paths.is_empty() {
            // Not a conflict: an error of git's own.
            return Err(cmd.failure(&out)).context("rebasing the task branch");
        }
        if !abort.success() {
            bail!(
                "the rebase stopped on conflicts and `git rebase --abort` failed in {}",
                worktree.display()
            );
        }
        Ok(Rebased::Conflict { paths })
    }

    /// Push the rebased branch from `worktree`, replacing the remote branch only while it
    /// still points at `old` (`--force-with-lease`). Never a main branch.
    pub fn push_rebased(
        &self,
        repo: &RepoRef<'_>,
        worktree: &Path,
        branch: &str,
        old: &str,
    ) -> Result<()> {
        check_repo(repo)?;
        check_branch(branch)?;
        check_sha(old)?;
        if branch == "main" || branch == "master" || branch == repo.main {
            bail!(
                "refusing to force-push {branch} of repo {}: only work branches are rebased",
                repo.name
            );
        }
        self.git_in(worktree)?
            .args(["push", "--no-verify", "--quiet"])
            .arg(format!("--force-with-lease=refs/heads/{branch}:{old}"))
            .arg("origin")
            .arg(format!("HEAD:refs/heads/{branch}"))
            .checked()
            .with_context(|| format!("pushing the rebased {branch} of repo {}", repo.name))?;
        Ok(())
    }

    /// A commit of `tree` with `parents`, as `name <email>` (a merge or a squash made without
    /// a checkout), in the clone.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_tree(
        &self,
        lock: &RepoLock,
        repo: &RepoRef<'_>,
        tree: &str,
        parents: &[&str],
        message: &str,
        name: &str,
        email: &str,
    ) -> Result<String> {
        self.check(lock, repo)?;
        check_sha(tree)?;
        let clone = self.require_clone(repo)?;
        let mut cmd = self
            .git_in(&clone)?
            .env("GIT_AUTHOR_NAME", name)
            .env("GIT_AUTHOR_EMAIL", email)
            .env("GIT_COMMITTER_NAME", name)
            .env("GIT_COMMITTER_EMAIL", email)
            .args(["commit-tree", "--no-gpg-sign", tree]);
        for p in parents {
            check_sha(p)?;
            cmd = cmd.args(["-p", p]);
        }
        let out = cmd
            .stdin(message.as_bytes().to_vec())
            .checked()
            .context("writing the merge commit")?;
        Ok(out.stdout_text().trim().to_string())
    }

    /// The only write to a main branch: push `sha` to `refs/heads/<main>` of origin. A plain
    /// push, never forced, so the remote accepts it only as a fast-forward of the main it has.
    /// `Ok(false)`: refused (main moved meanwhile).
    pub fn push_main(&self, lock: &RepoLock, repo: &RepoRef<'_>, sha: &str) -> Result<bool> {
        self.check(lock, repo)?;
        check_sha(sha)?;
        let clone = self.require_clone(repo)?;
        let cmd = self
            .git_in(&clone)?
            .args(["push", "--no-verify", "--porcelain", "origin"])
            .arg(format!("{sha}:refs/heads/{}", repo.main));
        let out = cmd.output()?;
        if out.success() {
            return Ok(true);
        }
        let said = format!(
            "{}{}",
            out.stdout_text(),
            String::from_utf8_lossy(&out.stderr)
        );
        if said.contains("[rejected]")
            || said.contains("non-fast-forward")
            || said.contains("fetch first")
        {
            return Ok(false);
        }
        Err(cmd.failure(&out))
            .with_context(|| format!("pushing {} of repo {}", repo.main, repo.name))
    }
}
