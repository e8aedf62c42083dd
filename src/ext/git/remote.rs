//! What talks to the remote: `push_branch` and `delete_remote_branch` (both refuse `main`,
//! `master` and the repo's main branch, and never force), `branch_exists_remote`, `ls_remote`
//! (a remote's heads without a clone, for `orch doctor`), and `seed_remote`, which builds the
//! demo's bare remote.

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::{
    BranchDelete, Git, RepoLock, RepoRef, check_branch, check_repo, rel_parts, valid_remote,
};
use crate::domain::names::valid_ref_name;
use crate::ext::proc::{Cmd, Output};

impl Git {
    /// Whether the remote has `refs/heads/<branch>` right now (asks the
    /// remote over the network, unlike the ref lookups above).
    pub fn branch_exists_remote(&self, repo: &RepoRef<'_>, branch: &str) -> Result<bool> {
        check_repo(repo)?;
        check_branch(branch)?;
        let clone = self.require_clone(repo)?;
        let want = format!("refs/heads/{branch}");
        let cmd = self
            .git_in(&clone)?
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
        self.git_in(worktree)?
            .args(["push", "--no-verify", "--quiet", "origin"])
            .arg(format!("HEAD:refs/heads/{branch}"))
            .checked()
            .with_context(|| format!("pushing {branch} of repo {}", repo.name))?;
        Ok(())
    }

    /// `git push origin --delete refs/heads/<branch>` from the clone (a cancelled task's
    /// feature branch). Refuses `main`, `master` and the repo's main branch. `false` when the
    /// remote has no such branch, so a repeated delete is not an error.
    /// Delete `branch` on the remote (never a main branch). With `expect`, only while it still
    /// points at that commit (`--force-with-lease`): a branch pushed again since — a task
    /// started anew with the same id — is kept. `Ok(false)`: there was nothing to delete, or
    /// it moved.
    pub fn delete_remote_branch(
        &self,
        lock: &RepoLock,
        repo: &RepoRef<'_>,
        branch: &str,
        expect: Option<&str>,
    ) -> Result<BranchDelete> {
        self.check(lock, repo)?;
        check_branch(branch)?;
        if branch == "main" || branch == "master" || branch == repo.main {
            bail!(
                "refusing to delete {branch} of repo {}: only work branches are deleted",
                repo.name
            );
        }
        if !self.branch_exists_remote(repo, branch)? {
            return Ok(BranchDelete::AlreadyGone);
        }
        let clone = self.require_clone(repo)?;
        let mut cmd = self
            .git_in(&clone)?
            .args(["push", "--no-verify", "--quiet", "--porcelain"]);
        if let Some(sha) = expect {
            if !sha.bytes().all(|b| b.is_ascii_hexdigit()) || sha.len() < 7 {
                bail!("invalid commit id {sha:?}");
            }
            cmd = cmd.arg(format!("--force-with-lease=refs/heads/{branch}:{sha}"));
        }
        let cmd = cmd.arg("origin").arg(format!(":refs/heads/{branch}"));
        let out = cmd.output()?;
        if out.success() {
            return Ok(BranchDelete::Deleted);
        }
        // The lease did not hold: the remote branch moved since `expect` was recorded.
        if expect.is_some() && out.stdout_text().contains("stale info") {
            return Ok(BranchDelete::Moved);
        }
        Err(cmd.failure(&out))
            .with_context(|| format!("deleting {branch} of repo {} on its remote", repo.name))
    }

    /// The commit `branch` points at on the remote now (`git ls-remote`), `None` when the remote
    /// has no such branch.
    pub fn remote_branch_sha(&self, repo: &RepoRef<'_>, branch: &str) -> Result<Option<String>> {
        check_repo(repo)?;
        check_branch(branch)?;
        let want = format!("refs/heads/{branch}");
        let cmd = self
            .git_in(&self.repos_dir)?
            .args(["ls-remote", "--", repo.remote])
            .arg(&want);
        let out = cmd.checked()?;
        Ok(out.stdout_text().lines().find_map(|l| {
            let (sha, name) = l.split_once('\t')?;
            (name == want).then(|| sha.to_string())
        }))
    }

    /// The commit the clone last saw `branch` at on the remote (its remote-tracking ref, also
    /// moved by our own pushes), without asking the remote. `None` when unknown.
    pub fn remote_branch_head(&self, repo: &RepoRef<'_>, branch: &str) -> Result<Option<String>> {
        check_repo(repo)?;
        check_branch(branch)?;
        let clone = self.clone_dir(repo.name);
        if !super::exists(&clone)? {
            return Ok(None);
        }
        self.rev_parse_commit(&clone, &super::remote_ref(branch))
    }
}

/// `ssh://…`, `git+ssh://…` or scp-like `[user@]host:path` (a colon before any slash).
fn is_ssh_remote(remote: &str) -> bool {
    if let Some((scheme, _)) = remote.split_once("://") {
        return matches!(scheme, "ssh" | "git+ssh" | "ssh+git");
    }
    match (remote.find(':'), remote.find('/')) {
        (Some(c), Some(s)) => c < s,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl Git {
    /// Create a bare repository at `remote` whose `main` holds `files` (one commit as `name
    /// <email>`), using `work` as a scratch checkout. Used by `orch demo` to build its world.
    pub fn seed_remote(
        &self,
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
        self.git_in(work)?
            .arg("push")
            .arg("--quiet")
            .arg(remote)
            .arg(format!("HEAD:refs/heads/{main}"))
            .checked()
            .context("pushing the seed commit")?;
        Ok(())
    }

    /// `git ls-remote --heads <remote>`, run in `dir`: the branch heads of a remote orch may have
    /// no clone of yet (`orch doctor` asks every configured remote). The command is hardened and
    /// bounded like every other git call here; as a probe it also gives up on an HTTP transfer
    /// slower than 1 KB/s for 10 s, and for an ssh remote `ssh_options` (say `-o
    /// ConnectTimeout=5`) are added to the ssh command. A non-zero exit is an answer, not an
    /// error: the caller reads the status and stderr from the `Output`.
    pub fn ls_remote(&self, dir: &Path, remote: &str, ssh_options: &str) -> Result<Output> {
        if !valid_remote(remote) {
            bail!("invalid remote {remote:?}");
        }
        let mut cmd = self
            .git_in(dir)?
            .args(["ls-remote", "--heads", remote])
            .env("GIT_HTTP_LOW_SPEED_TIME", "10");
        if is_ssh_remote(remote) {
            cmd = cmd.env(
                "GIT_SSH_COMMAND",
                super::ssh_command(&format!("{} {ssh_options}", super::SSH_OPTIONS)),
            );
        }
        cmd.output()
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_remotes_are_told_from_others() {
        for (remote, ssh) in [
            ("git@forge.example:team/shop.git", true),
            ("forge:shop.git", true),
            ("ssh://git@forge.example/team/shop.git", true),
            ("git+ssh://forge/x.git", true),
            ("https://forge.example/team/shop.git", false),
            ("file:///srv/git/shop.git", false),
            ("/srv/git/shop.git", false),
            ("./a:b", false),
        ] {
            assert_eq!(is_ssh_remote(remote), ssh, "{remote}");
        }
    }
}
