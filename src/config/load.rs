//! Finding and loading `orch.yaml`: `--config`, `$ORCH_CONFIG`, `./orch.yaml`,
//! `/etc/orch/orch.yaml`; `ORCH_*` overrides (`ORCH_LAUNCH_ON_FINISH` among them); relative paths resolved against the file; then
//! `validate`. Errors name the key and the file.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;

use super::types::*;
use super::validate::validate;
use crate::error::usage;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: Option<PathBuf>,
    repos_dir: Option<PathBuf>,
    max_concurrency: Option<u32>,
    max_developer_retries: Option<u32>,
    #[serde(default)]
    agent: AgentCfg,
    #[serde(default)]
    repos: Vec<RepoCfg>,
    tracker: Option<ServiceCfg>,
    forge: Option<ServiceCfg>,
    chat: Option<ServiceCfg>,
    #[serde(default)]
    sandbox: SandboxCfg,
    #[serde(default)]
    scheduler: SchedulerCfg,
    #[serde(default)]
    git: GitCfg,
}

/// Which file to read: `--config`, `$ORCH_CONFIG`, `./orch.yaml`, `/etc/orch/orch.yaml`.
pub fn locate(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("ORCH_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    ["orch.yaml", "/etc/orch/orch.yaml"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// `locate`, or the usage error every command but `init` and `demo` gives without a config: a
/// command never runs on defaults it guessed (it would create `/var/lib/orch/orch.db`).
pub fn require(flag: Option<&Path>) -> Result<PathBuf> {
    locate(flag).ok_or_else(|| {
        usage(
            "no config found (looked at --config, $ORCH_CONFIG, ./orch.yaml, \
             /etc/orch/orch.yaml); run `orch init`",
        )
    })
}

/// Load and validate. `state_dir_flag` (from `--state-dir`) wins over `ORCH_STATE_DIR`, which
/// wins over the file.
pub fn load(path: &Path, state_dir_flag: Option<PathBuf>) -> Result<Config> {
    let text = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => usage(format!(
            "config `{}` does not exist; `orch init` writes a starter config",
            path.display()
        )),
        std::io::ErrorKind::PermissionDenied => usage(format!(
            "cannot read config `{}`: permission denied; run as a user that may read it \
             (the service runs as `orch`: `sudo -u orch orch …`)",
            path.display()
        )),
        _ => usage(format!("cannot read config `{}`: {e}", path.display())),
    })?;
    if is_blank_yaml(&text) {
        return Err(usage(format!(
            "config `{}` is empty; `orch init` writes a starter config",
            path.display()
        )));
    }
    let raw: RawConfig = serde_yaml::from_slice(&text).map_err(|e| {
        usage(format!(
            "invalid config `{}`: {}",
            path.display(),
            first_line(&e.to_string())
        ))
    })?;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    finish(raw, Some(abs), state_dir_flag)
}

/// Nothing but blank lines and comments: a file that says nothing is no config.
fn is_blank_yaml(text: &[u8]) -> bool {
    String::from_utf8_lossy(text)
        .lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#') || l == "---")
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

fn env_override<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse::<T>()
            .map(Some)
            .map_err(|_| usage(format!("invalid environment variable `{name}`: `{v}`"))),
        _ => Ok(None),
    }
}

fn finish(
    raw: RawConfig,
    file: Option<PathBuf>,
    state_dir_flag: Option<PathBuf>,
) -> Result<Config> {
    let base = file
        .as_ref()
        .and_then(|f| f.parent())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")));
    let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
    let env_path = |n: &str| {
        std::env::var_os(n)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };

    // Paths from the command line or the environment are relative to the current directory;
    // paths in the file are relative to the file.
    let cwd_abs = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    let state_dir = state_dir_flag
        .or_else(|| env_path("ORCH_STATE_DIR"))
        .map(cwd_abs)
        .or_else(|| raw.state_dir.map(resolve))
        .unwrap_or_else(|| PathBuf::from("/var/lib/orch"));
    let repos_dir = env_path("ORCH_REPOS_DIR")
        .map(cwd_abs)
        .or_else(|| raw.repos_dir.map(resolve))
        .unwrap_or_else(|| state_dir.join("repos"));
    let max_concurrency = env_override("ORCH_MAX_CONCURRENCY")?
        .or(raw.max_concurrency)
        .unwrap_or(2);
    let max_developer_retries = env_override("ORCH_MAX_DEVELOPER_RETRIES")?
        .or(raw.max_developer_retries)
        .unwrap_or(3);
    let mut agent = raw.agent;
    if let Some(p) = agent.prompts_dir.take() {
        agent.prompts_dir = Some(resolve(p));
    }
    if let Some(mode) = env_override::<SandboxMode>("ORCH_AGENT_SANDBOX")? {
        agent.sandbox = Some(mode);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let expand = |p: PathBuf| -> Result<PathBuf> {
        match p.strip_prefix("~") {
            Ok(rest) => match &home {
                Some(h) => Ok(h.join(rest)),
                None => Err(usage(format!(
                    "`{}` starts with `~` but HOME is not set",
                    p.display()
                ))),
            },
            Err(_) => Ok(resolve(p)),
        }
    };
    agent.sandbox_writable = std::mem::take(&mut agent.sandbox_writable)
        .into_iter()
        .map(expand)
        .collect::<Result<_>>()?;
    agent.sandbox_readable = std::mem::take(&mut agent.sandbox_readable)
        .into_iter()
        .map(expand)
        .collect::<Result<_>>()?;
    agent.sandbox_hidden = std::mem::take(&mut agent.sandbox_hidden)
        .into_iter()
        .map(expand)
        .collect::<Result<_>>()?;
    let mut scheduler = raw.scheduler;
    if let Some(on) = env_override::<bool>("ORCH_LAUNCH_ON_FINISH")? {
        scheduler.launch_on_finish = on;
    }
    let mut services = [raw.tracker, raw.forge, raw.chat];
    for s in services.iter_mut().flatten() {
        s.token_file = s.token_file.take().map(&resolve);
        s.webhook_secret_file = s.webhook_secret_file.take().map(&resolve);
    }
    let [tracker, forge, chat] = services;
    let mut git = raw.git;
    git.global_config = Some(
        git.global_config
            .take()
            .map(&resolve)
            .unwrap_or_else(|| state_dir.join("gitconfig")),
    );

    // A remote that is a local path is made absolute too, so clones and worktrees (whose cwd
    // differs) reach it; URLs (`scheme://…`, `user@host:path`) are left alone.
    let mut repos = raw.repos;
    for r in &mut repos {
        if is_local_path(&r.remote) && !Path::new(&r.remote).is_absolute() {
            r.remote = resolve(PathBuf::from(&r.remote)).display().to_string();
        }
    }

    let cfg = Config {
        file,
        state_dir,
        repos_dir,
        max_concurrency,
        max_developer_retries,
        agent,
        repos,
        tracker,
        forge,
        chat,
        sandbox: raw.sandbox,
        scheduler,
        git,
    };
    validate(&cfg)?;
    Ok(cfg)
}

/// A git remote that names a local path rather than a URL.
pub(super) fn is_local_path(remote: &str) -> bool {
    if remote.contains("://") {
        return false;
    }
    // scp-like `host:path` has a colon before any slash.
    match (remote.find(':'), remote.find('/')) {
        (Some(c), Some(s)) => c > s,
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// The commented starter config written by `orch init`.
pub const STARTER: &str = include_str!("../starter.yaml");
