//! Commits in a worktree: `commit_all` (everything an agent left, for the supervisor) and
//! `commit_paths` (only the given paths, for a runner's report), both through `commit_in`. They
//! run in the task's worktree and take no repo lock. The author is passed with `-c user.*` (the
//! identity variables are scrubbed) and the message through stdin, so any text is safe.

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::{Git, rel_parts};

impl Git {
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
        self.commit_in(worktree, None, message, name, email)
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
        self.commit_in(worktree, Some(paths), message, name, email)
    }
}

impl Git {
    /// Stage `paths` (everything when `None`) and commit them as `name <email>` if anything is
    /// staged; the message goes through stdin, so any text is safe.
    fn commit_in(
        &self,
        worktree: &Path,
        paths: Option<&[&str]>,
        message: &str,
        name: &str,
        email: &str,
    ) -> Result<Option<String>> {
        let ctx = || format!("committing in {}", worktree.display());
        let only: &[&str] = paths.unwrap_or(&[]);
        let add = match paths {
            Some(_) => self.git_in(worktree)?.args(["add", "--"]).args(only),
            None => self.git_in(worktree)?.args(["add", "-A"]),
        };
        // Another job's commit may run git's auto maintenance in the shared clone meanwhile:
        // its `prune-packed` removes the empty `objects/xx/` directory this add was about to
        // write into, and git gives up with "unable to create temporary file". The object
        // store is fine; the add is tried again.
        let mut tries = 0;
        loop {
            let out = add.output().with_context(ctx)?;
            if out.success() {
                break;
            }
            tries += 1;
            let raced =
                String::from_utf8_lossy(&out.stderr).contains("unable to create temporary file");
            if !raced || tries >= 3 {
                return Err(add.failure(&out)).with_context(ctx);
            }
            std::thread::sleep(std::time::Duration::from_millis(20 * tries));
        }
        // Straight to the commit (one process less on every job): git refuses an empty one
        // with exit 1, and only then is the index asked whether anything was staged.
        let commit = self
            .git_in(worktree)?
            // The commit's own `maintenance run --auto` packs the clone's loose objects every
            // hundred or so (git's `loose-objects` task), besides git's gc at its thresholds:
            // every push from the shared clone walks the tips the remote advertises that the
            // clone has (one per task branch), and loose ones cost a file each to read.
            .args([
                "-c",
                "maintenance.loose-objects.enabled=true",
                "-c",
                "maintenance.loose-objects.auto=100",
            ])
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
            .stdin(message.as_bytes());
        let out = commit.output().with_context(ctx)?;
        if !out.success() {
            if out.code == Some(1) && !self.staged(worktree, only).with_context(ctx)? {
                return Ok(None);
            }
            return Err(commit.failure(&out)).with_context(ctx);
        }
        match self.rev_parse_commit(worktree, "HEAD").with_context(ctx)? {
            Some(sha) => Ok(Some(sha)),
            None => bail!("{}: no HEAD after committing", ctx()),
        }
    }

    /// Whether the index of `worktree` differs from `HEAD` in `only` (everywhere when empty).
    fn staged(&self, worktree: &Path, only: &[&str]) -> Result<bool> {
        // `diff --quiet` answers "no difference" with 0.
        Ok(!self
            .git_in(worktree)?
            .args(["diff", "--cached", "--quiet", "--"])
            .args(only)
            .yes_no()?)
    }
}
