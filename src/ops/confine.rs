//! Confining what runs in a task's worktree (design §9.2): the agent, and the test suite, the
//! staging suite and the CI command unless their contract says `sandbox: false`.
//!
//! [`mode`] decides from `agent.sandbox` (or `ORCH_AGENT_SANDBOX`): `bwrap` when configured or,
//! by default, when bubblewrap is installed; otherwise no confinement, with a warning at every
//! launch when that was not the operator's choice. [`confine`] turns a run's [`Spec`] into the
//! bubblewrap command of `domain::confine` with this host's paths: the state directory,
//! `repos_dir`, the systemd credentials directory, the config file and every secret file
//! hidden; the worktree and its clone's git dir writable; `agent.sandbox_readable` and
//! `agent.sandbox_writable` shown through.

use std::path::{Path, PathBuf};

use anyhow::Result;
use tracing::warn;

use crate::config::{Config, RepoCfg, SandboxMode};
use crate::ctx::Ctx;
use crate::domain::confine::{self, Jail};
use crate::ext::proc::Spec;

/// The environment file of the shipped systemd units: hidden too, should a child run as root.
pub const UNITS_SECRETS_FILE: &str = "/etc/orch/secrets.env";

/// How children are confined on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Bwrap(PathBuf),
    /// Unconfined: `agent.sandbox: none` (chosen), or bubblewrap is not installed (`chosen` is
    /// false: warned at every launch), or configured but missing (`missing`).
    Off {
        chosen: bool,
        missing: bool,
    },
}

/// The mode `config` asks for, resolved on this host.
pub fn mode(config: &Config) -> Mode {
    match config.agent.sandbox {
        Some(SandboxMode::None) => Mode::Off {
            chosen: true,
            missing: false,
        },
        Some(SandboxMode::Bwrap) => match find_bwrap() {
            Some(p) => Mode::Bwrap(p),
            None => Mode::Off {
                chosen: false,
                missing: true,
            },
        },
        None => match find_bwrap() {
            Some(p) => Mode::Bwrap(p),
            None => Mode::Off {
                chosen: false,
                missing: false,
            },
        },
    }
}

/// `bwrap` on `PATH`, as an executable file.
pub fn find_bwrap() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Confine `spec` (run in `worktree`, a worktree of `repo`) when the sandbox is on and
/// `enabled` (the contract's `sandbox` key); `readable` are extra paths the run must read (the
/// agent's prompt file). `what` names the run in the warning.
///
/// `agent.sandbox: bwrap` with bubblewrap missing is an error, never a silent unconfined run.
pub fn confine(
    ctx: &Ctx,
    repo: &RepoCfg,
    enabled: bool,
    readable: &[PathBuf],
    what: &str,
    spec: &mut Spec,
) -> Result<()> {
    if !enabled {
        return Ok(());
    }
    let bwrap = match mode(&ctx.config) {
        Mode::Bwrap(p) => p,
        Mode::Off { chosen: true, .. } => return Ok(()),
        Mode::Off { missing: true, .. } => anyhow::bail!(
            "agent.sandbox is `bwrap` but `bwrap` is not on PATH; install bubblewrap \
             (`apt-get install bubblewrap`) or set `agent.sandbox: none`"
        ),
        Mode::Off { .. } => {
            warn!(
                "{what} runs without a sandbox: bubblewrap (`bwrap`) is not installed, so it can \
                 read orch's state and every file orch's user can; install bubblewrap or set \
                 `agent.sandbox: none` to make this the intended setup"
            );
            return Ok(());
        }
    };
    let jail = jail(ctx, repo, &spec.cwd, readable);
    spec.argv = confine::argv(&bwrap, &jail, &spec.argv);
    // The state directory (where a systemd unit points TMPDIR) is hidden; /tmp is private.
    spec.env.retain(|(k, _)| k != "TMPDIR");
    spec.env.push(("TMPDIR".into(), "/tmp".into()));
    Ok(())
}

/// The paths of one run of `repo` in `worktree`.
fn jail(ctx: &Ctx, repo: &RepoCfg, worktree: &Path, readable: &[PathBuf]) -> Jail {
    let c = &ctx.config;
    let real = |p: &Path| std::fs::canonicalize(p).ok();
    let mut hide_dirs: Vec<PathBuf> = [&c.state_dir, &c.repos_dir]
        .into_iter()
        .filter_map(|p| real(p))
        .collect();
    hide_dirs.extend(crate::ext::secrets::credentials_dir().and_then(|d| real(&d)));
    hide_dirs.extend(c.agent.sandbox_hidden.iter().filter_map(|p| real(p)));
    let mut hide_files: Vec<PathBuf> = c.secret_files();
    hide_files.extend(c.file.clone());
    hide_files.push(UNITS_SECRETS_FILE.into());
    if let Some(g) = &c.git.global_config {
        // Credentials for private remotes may live there.
        hide_files.push(g.clone());
    }
    let hide_files = hide_files
        .iter()
        .filter_map(|p| real(p))
        .filter(|p| p.is_file())
        .collect();
    let mut shown: Vec<PathBuf> = readable.iter().filter_map(|p| real(p)).collect();
    shown.extend(c.agent.sandbox_readable.iter().filter_map(|p| real(p)));
    let worktree = real(worktree).unwrap_or_else(|| worktree.to_path_buf());
    // The worktree's `.git` file and what it points at stay as orch made them.
    let dot_git = worktree.join(".git");
    let mut pinned = vec![dot_git.clone()];
    if let Some(admin) = std::fs::read_to_string(&dot_git)
        .ok()
        .and_then(|t| t.trim_end().strip_prefix("gitdir: ").map(PathBuf::from))
        .map(|a| worktree.join(a))
        .and_then(|a| real(&a))
    {
        pinned.extend(["commondir", "gitdir", "config.worktree"].map(|f| admin.join(f)));
    }
    Jail {
        worktree,
        pinned,
        git_dir: real(&ctx.git().clone_dir(&repo.name).join(".git")),
        hide_dirs,
        hide_files,
        readable: shown,
        writable: c
            .agent
            .sandbox_writable
            .iter()
            .filter_map(|p| real(p))
            .collect(),
        drop_caps: nix::unistd::geteuid().is_root(),
    }
}

/// What `orch doctor` says of the sandbox.
pub fn describe(config: &Config) -> (bool, String) {
    match mode(config) {
        Mode::Bwrap(p) => (
            true,
            format!(
                "agents, suites and CI commands run under bubblewrap ({})",
                p.display()
            ),
        ),
        Mode::Off { chosen: true, .. } => (
            false,
            "agent.sandbox is `none`: agents run unconfined and can read orch's state, its \
             config and every secret file orch's user can"
                .into(),
        ),
        Mode::Off { missing: true, .. } => (
            false,
            "agent.sandbox is `bwrap` but `bwrap` is not on PATH: every job will fail to start; \
             install bubblewrap"
                .into(),
        ),
        Mode::Off { .. } => (
            false,
            "bubblewrap (`bwrap`) is not installed: agents run unconfined and can read orch's \
             state, its config and every secret file orch's user can; install bubblewrap"
                .into(),
        ),
    }
}
