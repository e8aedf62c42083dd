//! Confining what runs in a task's worktree (design §9.2): the agent, and the test suite, the
//! staging suite and the CI command unless their contract says `sandbox: false`.
//!
//! [`mode`] decides from `agent.sandbox` (or `ORCH_AGENT_SANDBOX`): `bwrap` when configured or,
//! by default, when bubblewrap is installed; otherwise no confinement, with a warning at every
//! launch when that was not the operator's choice. [`confine`] turns a run's [`Spec`] into the
//! bubblewrap command of `domain::confine` with this host's paths: the state directory,
//! `repos_dir`, the systemd credentials directory, the config file and every secret file
//! hidden; the worktree and its clone's git dir writable; `agent.sandbox_readable` and
//! `agent.sandbox_writable` shown through. [`program_paths`] names what an agent's own program
//! needs shown (its directory, or the file alone where the directory holds hidden places), so
//! a CLI installed under the service user's home or under `/tmp` still starts.

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
    let git_dir = std::fs::canonicalize(ctx.git().clone_dir(&repo.name).join(".git")).ok();
    confine_in(&ctx.config, git_dir, enabled, readable, what, spec)
}

/// [`confine`] of a run in a directory that is no task worktree (the doctor's probe): no
/// clone's git dir is shown.
pub fn confine_in(
    config: &Config,
    git_dir: Option<PathBuf>,
    enabled: bool,
    readable: &[PathBuf],
    what: &str,
    spec: &mut Spec,
) -> Result<()> {
    if !enabled {
        return Ok(());
    }
    let bwrap = match mode(config) {
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
    let jail = jail(config, git_dir, &spec.cwd, readable);
    spec.argv = confine::argv(&bwrap, &jail, &spec.argv);
    // The state directory (where a systemd unit points TMPDIR) is hidden; /tmp is private.
    spec.env.retain(|(k, _)| k != "TMPDIR");
    spec.env.push(("TMPDIR".into(), "/tmp".into()));
    Ok(())
}

/// Every place a confined child does not see (canonical): the hidden directories, the hidden
/// files and the private `/tmp`.
pub fn hidden_places(config: &Config) -> Vec<PathBuf> {
    let (dirs, files) = hidden(config);
    let mut all = dirs;
    all.extend(files);
    all.extend(std::fs::canonicalize("/tmp").ok());
    all
}

/// What must show through for `argv[0]` to start inside the sandbox: the program found on the
/// child's `PATH` (or named by its path) and, when it is a symbolic link, what it points to;
/// each as its directory, or as the file alone when that directory is, or holds, a hidden place
/// (binding it would show what is hidden). Nothing when the program is not found: the run then
/// fails as it would unconfined.
pub fn program_paths(
    config: &Config,
    argv: &[std::ffi::OsString],
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Vec<PathBuf> {
    let Some(program) = argv.first().map(Path::new) else {
        return Vec::new();
    };
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone());
    let Some(found) = resolve_program(program, path_var.as_deref()) else {
        return Vec::new();
    };
    let hidden = hidden_places(config);
    let mut out = Vec::new();
    let mut show = |file: &Path| {
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
        match dir {
            Some(d) if !hidden.iter().any(|h| h.starts_with(d)) => out.push(d.to_path_buf()),
            _ => out.push(file.to_path_buf()),
        }
    };
    show(&found);
    if let Ok(real) = std::fs::canonicalize(&found)
        && real != found
    {
        show(&real);
    }
    out
}

/// `program` as the C library's `execvp` finds it: a path as it is (relative to the current
/// directory), a bare name in each directory of `PATH` in turn.
pub fn resolve_program(program: &Path, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 || program.is_absolute() {
        let p = std::path::absolute(program).ok()?;
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| executable(p))
}

/// The hidden directories and files of `config` on this host, canonical and existing.
fn hidden(config: &Config) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let c = config;
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
    (hide_dirs, hide_files)
}

/// The paths of one run in `worktree` (with its clone's git dir, when a task's).
fn jail(config: &Config, git_dir: Option<PathBuf>, worktree: &Path, readable: &[PathBuf]) -> Jail {
    let c = config;
    let real = |p: &Path| std::fs::canonicalize(p).ok();
    let (hide_dirs, hide_files) = hidden(c);
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
        git_dir,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::fs::PermissionsExt;

    fn exe(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn config(dir: &Path) -> Config {
        let p = dir.join("orch.yaml");
        std::fs::write(&p, "max_concurrency: 1\n").unwrap();
        crate::config::load(&p, Some(dir.join("state"))).unwrap()
    }

    #[test]
    fn the_agent_program_shows_through_without_what_is_hidden_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let cfg = config(&root);
        std::fs::create_dir_all(&cfg.state_dir).unwrap();
        let state = std::fs::canonicalize(&cfg.state_dir).unwrap();
        // Under the state directory (the service user's home): its own directory is shown.
        let local = state.join(".local/bin/claude");
        exe(&local);
        let env = |path: &Path| vec![(OsString::from("PATH"), path.as_os_str().to_owned())];
        let argv = [OsString::from("claude")];
        assert_eq!(
            program_paths(&cfg, &argv, &env(local.parent().unwrap())),
            [local.parent().unwrap()]
        );
        // Right in the state directory: the file alone, never the directory.
        let bare = state.join("claude");
        exe(&bare);
        assert_eq!(program_paths(&cfg, &argv, &env(&state)), [bare]);
        // A link is followed: its directory and its target's are both needed.
        let real = root.join("opt/claude-2.1/claude.exe");
        exe(&real);
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(&real, bin.join("claude")).unwrap();
        assert_eq!(
            program_paths(&cfg, &argv, &env(&bin)),
            [bin.clone(), real.parent().unwrap().to_path_buf()]
        );
        // A path in argv is taken as it is; a program that is nowhere adds nothing.
        assert_eq!(
            program_paths(&cfg, &[real.clone().into_os_string()], &[]),
            [real.parent().unwrap()]
        );
        assert!(program_paths(&cfg, &[OsString::from("no-such-agent")], &env(&bin)).is_empty());
        // The private /tmp is a hidden place too: a program right in it is shown alone.
        assert!(
            hidden_places(&cfg).contains(&std::fs::canonicalize("/tmp").unwrap()),
            "{:?}",
            hidden_places(&cfg)
        );
    }
}
