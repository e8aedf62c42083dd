//! `orch.yaml` plus `ORCH_*` overrides, loaded and validated once per command (design §11).
//! Validation checks types and values and names the key and the file; it deliberately does not
//! check that programs, remotes or services exist (that is `orch doctor`'s job).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::domain::gate::Contracts;
use crate::domain::ids::valid_prefix;
use crate::domain::names::{valid_branch_name, valid_repo_name};
use crate::error::usage;
use crate::ext::git::RepoRef;
use crate::ext::gitea::ForgeRepo;

/// Where the config came from and what it says, with defaults applied and paths made absolute.
#[derive(Debug, Clone)]
pub struct Config {
    pub file: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub repos_dir: PathBuf,
    pub max_concurrency: u32,
    pub max_developer_retries: u32,
    pub agent: AgentCfg,
    pub repos: Vec<RepoCfg>,
    pub tracker: Option<ServiceCfg>,
    pub forge: Option<ServiceCfg>,
    pub chat: Option<ServiceCfg>,
    pub sandbox: SandboxCfg,
    pub scheduler: SchedulerCfg,
    pub git: GitCfg,
}

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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentCfg {
    #[serde(default = "default_agent_argv")]
    pub argv: Vec<String>,
    #[serde(default)]
    pub roles: BTreeMap<String, RoleCfg>,
    pub prompts_dir: Option<PathBuf>,
    #[serde(default = "default_env_deny")]
    pub env_deny: Vec<String>,
    #[serde(default = "default_inactivity")]
    pub inactivity_timeout_s: u64,
    #[serde(default = "default_usage_backoff")]
    pub usage_limit_backoff_s: u64,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
}

impl Default for AgentCfg {
    fn default() -> Self {
        AgentCfg {
            argv: default_agent_argv(),
            roles: BTreeMap::new(),
            prompts_dir: None,
            env_deny: default_env_deny(),
            inactivity_timeout_s: default_inactivity(),
            usage_limit_backoff_s: default_usage_backoff(),
            max_attempts: default_max_attempts(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleCfg {
    pub model: Option<String>,
    pub effort: Option<String>,
    pub timeout_s: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoCfg {
    pub name: String,
    pub remote: String,
    #[serde(default = "default_main")]
    pub main: String,
    pub prefix: String,
    #[serde(default = "yes")]
    pub serial_gate: bool,
    #[serde(default)]
    pub ci: CiCfg,
    pub tests: Option<TestsCfg>,
    pub staging: Option<StagingCfg>,
    pub deploy: Option<DeployCfg>,
    pub plane_project: Option<String>,
    /// `owner/name` of the repo on the forge (default: read from `remote`).
    #[serde(default)]
    pub forge_repo: Option<String>,
    /// Labels every task of this repo carries (for example `auto-approve` in a sandbox repo).
    #[serde(default)]
    pub default_labels: Vec<String>,
    #[serde(default)]
    pub agent: BTreeMap<String, RoleCfg>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CiMode {
    #[default]
    None,
    Status,
    Command,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiCfg {
    #[serde(default)]
    pub mode: CiMode,
    #[serde(default)]
    pub argv: Vec<String>,
    pub timeout_s: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestsCfg {
    pub argv: Vec<String>,
    #[serde(default = "default_tests_timeout")]
    pub timeout_s: u64,
    #[serde(default)]
    pub smoke: Vec<SmokeCfg>,
    #[serde(default)]
    pub env_markers: Vec<String>,
    #[serde(default = "default_infra_delay")]
    pub infra_retry_delay_s: u64,
    #[serde(default = "default_infra_retries")]
    pub infra_max_retries: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmokeCfg {
    pub url: String,
    #[serde(default = "default_status")]
    pub status: u16,
    pub contains: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagingCfg {
    pub argv: Vec<String>,
    #[serde(default = "default_staging_timeout")]
    pub timeout_s: u64,
    pub ssh: Option<SshCfg>,
    #[serde(default)]
    pub env_markers: Vec<String>,
    #[serde(default = "default_infra_delay")]
    pub infra_retry_delay_s: u64,
    #[serde(default = "default_infra_retries")]
    pub infra_max_retries: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshCfg {
    pub user: String,
    pub host: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DeployMode {
    #[default]
    None,
    Agent,
    Hook,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployCfg {
    #[serde(default)]
    pub mode: DeployMode,
    #[serde(default = "yes")]
    pub require_confirm: bool,
    #[serde(default)]
    pub argv: Vec<String>,
    pub timeout_s: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceCfg {
    pub kind: String,
    pub base_url: Option<String>,
    pub workspace: Option<String>,
    pub token_env: Option<String>,
    pub webhook_secret_env: Option<String>,
    #[serde(default)]
    pub allow_unsigned: bool,
    pub chat_id: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxCfg {
    #[serde(default)]
    pub allowed_projects: Vec<String>,
}

/// Timings of the scheduler (design §4.3, §4.4).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerCfg {
    #[serde(default = "default_reaper_max")]
    pub reaper_max_running_s: u64,
    #[serde(default = "default_grace")]
    pub reconcile_grace_s: u64,
    /// Base of the retry backoff of a failed attempt: `min(base · 2^(n−1), 1 h)`.
    #[serde(default = "default_retry_backoff")]
    pub retry_backoff_s: u64,
    /// A task that sits in one stage longer than this (not paused, held or blocked: those
    /// alerted already) raises one alert per visit. 0 turns the alert off.
    #[serde(default = "default_stage_alert")]
    pub stage_alert_after_s: u64,
}

impl Default for SchedulerCfg {
    fn default() -> Self {
        SchedulerCfg {
            reaper_max_running_s: default_reaper_max(),
            reconcile_grace_s: default_grace(),
            retry_backoff_s: default_retry_backoff(),
            stage_alert_after_s: default_stage_alert(),
        }
    }
}

/// Bounds on orch's own git commands (design §3.2): one stalled fetch must not hold a repo's
/// lock, and every supervisor of that repo, for hours.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitCfg {
    /// Every git command is killed (with what it started) after this long.
    #[serde(default = "default_git_timeout")]
    pub timeout_s: u64,
    /// How long to wait for a repo's lock before giving up (the work is deferred, exit 4).
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout_s: u64,
}

impl Default for GitCfg {
    fn default() -> Self {
        GitCfg {
            timeout_s: default_git_timeout(),
            lock_timeout_s: default_lock_timeout(),
        }
    }
}

fn default_stage_alert() -> u64 {
    24 * 3600
}
fn default_git_timeout() -> u64 {
    300
}
fn default_lock_timeout() -> u64 {
    600
}

fn default_agent_argv() -> Vec<String> {
    [
        "claude",
        "--print",
        "--output-format",
        "json",
        "--model",
        "{model}",
        "--system-prompt-file",
        "{prompt_file}",
    ]
    .map(String::from)
    .to_vec()
}
fn default_env_deny() -> Vec<String> {
    ["*_TOKEN", "*_SECRET", "*_PASSWORD", "*_API_KEY"]
        .map(String::from)
        .to_vec()
}
fn default_inactivity() -> u64 {
    900
}
fn default_usage_backoff() -> u64 {
    3600
}
fn default_max_attempts() -> u32 {
    3
}
fn default_main() -> String {
    "main".into()
}
fn yes() -> bool {
    true
}
fn default_tests_timeout() -> u64 {
    900
}
fn default_staging_timeout() -> u64 {
    600
}
fn default_infra_delay() -> u64 {
    30
}
fn default_infra_retries() -> u32 {
    2
}
fn default_status() -> u16 {
    200
}
fn default_reaper_max() -> u64 {
    4 * 3600
}
fn default_grace() -> u64 {
    120
}
fn default_retry_backoff() -> u64 {
    60
}

impl Config {
    pub fn repo(&self, name: &str) -> Option<&RepoCfg> {
        self.repos.iter().find(|r| r.name == name)
    }

    pub fn db_path(&self) -> PathBuf {
        self.state_dir.join("orch.db")
    }

    /// The config with no file at all: used by commands that must work before `orch init`.
    pub fn empty(state_dir: Option<PathBuf>) -> Result<Config> {
        let raw: RawConfig = serde_yaml::from_str("{}").context("building the empty config")?;
        finish(raw, None, state_dir)
    }
}

impl Config {
    /// The `tracker` block when it is Plane (the only tracker orch speaks).
    pub fn plane(&self) -> Option<&ServiceCfg> {
        self.tracker.as_ref().filter(|t| t.kind == "plane")
    }

    /// The `forge` block when it is Gitea with a base URL (a `git` forge has no API).
    pub fn gitea(&self) -> Option<&ServiceCfg> {
        self.forge
            .as_ref()
            .filter(|f| f.kind == "gitea" && f.base_url.is_some())
    }

    /// The `chat` block when it is Telegram.
    pub fn telegram(&self) -> Option<&ServiceCfg> {
        self.chat.as_ref().filter(|c| c.kind == "telegram")
    }

    /// Every variable named by a `*_env` key of the config (design §9): the secrets no child may
    /// inherit.
    pub fn secret_env_names(&self) -> Vec<String> {
        [&self.tracker, &self.forge, &self.chat]
            .into_iter()
            .flatten()
            .flat_map(|s| [s.token_env.clone(), s.webhook_secret_env.clone()])
            .flatten()
            .collect()
    }
}

impl RepoCfg {
    /// The contracts that make a stage applicable to this repo (`domain::gate`).
    pub fn contracts(&self) -> Contracts {
        Contracts {
            staging: self.staging.is_some(),
            deploy: self.deploy_mode() != DeployMode::None,
            merge: false,
        }
    }

    /// What `ext::git` needs to know of this repo.
    pub fn git_ref(&self) -> RepoRef<'_> {
        RepoRef {
            name: &self.name,
            remote: &self.remote,
            main: &self.main,
        }
    }

    /// The forge repository: `forge_repo` when set, else read from the remote URL.
    pub fn forge(&self) -> Option<ForgeRepo> {
        match self.forge_repo.as_deref() {
            Some(s) => ForgeRepo::parse(s),
            None => ForgeRepo::from_remote(&self.remote),
        }
    }

    pub fn deploy_mode(&self) -> DeployMode {
        self.deploy.as_ref().map(|d| d.mode).unwrap_or_default()
    }

    pub fn require_confirm(&self) -> bool {
        self.deploy.as_ref().is_some_and(|d| d.require_confirm)
    }
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
        .find(|p| p.is_file())
}

/// Load and validate. `state_dir_flag` (from `--state-dir`) wins over `ORCH_STATE_DIR`, which
/// wins over the file.
pub fn load(path: &Path, state_dir_flag: Option<PathBuf>) -> Result<Config> {
    let text = std::fs::read(path).map_err(|e| {
        usage(format!(
            "cannot read config `{}`: {e}; `orch init` writes a starter config",
            path.display()
        ))
    })?;
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
        tracker: raw.tracker,
        forge: raw.forge,
        chat: raw.chat,
        sandbox: raw.sandbox,
        scheduler: raw.scheduler,
        git: raw.git,
    };
    validate(&cfg)?;
    Ok(cfg)
}

/// A git remote that names a local path rather than a URL.
fn is_local_path(remote: &str) -> bool {
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

/// Value checks that serde's types cannot express. Every message names the key.
fn validate(cfg: &Config) -> Result<()> {
    let file = cfg
        .file
        .as_ref()
        .map(|f| f.display().to_string())
        .unwrap_or_else(|| "<defaults>".into());
    let bad = |key: String, why: String| usage(format!("invalid config `{file}`: {key}: {why}"));

    if cfg.max_concurrency == 0 {
        return Err(bad("max_concurrency".into(), "must be at least 1".into()));
    }
    if cfg.agent.argv.is_empty() || cfg.agent.argv[0].trim().is_empty() {
        return Err(bad(
            "agent.argv".into(),
            "must name a program to run".into(),
        ));
    }
    // A zero would kill every run at once (or never try it).
    let at_least_one = |key: String, v: u64| {
        if v == 0 {
            Err(bad(key, "must be at least 1".into()))
        } else {
            Ok(())
        }
    };
    at_least_one(
        "agent.inactivity_timeout_s".into(),
        cfg.agent.inactivity_timeout_s,
    )?;
    at_least_one("agent.max_attempts".into(), cfg.agent.max_attempts.into())?;
    at_least_one(
        "scheduler.reaper_max_running_s".into(),
        cfg.scheduler.reaper_max_running_s,
    )?;
    at_least_one("git.timeout_s".into(), cfg.git.timeout_s)?;
    at_least_one("git.lock_timeout_s".into(), cfg.git.lock_timeout_s)?;
    for (role, rc) in cfg.agent.roles.iter() {
        role.parse::<crate::domain::stage::Role>()
            .map_err(|e| bad(format!("agent.roles.{role}"), e.to_string()))?;
        if let Some(t) = rc.timeout_s {
            at_least_one(format!("agent.roles.{role}.timeout_s"), t)?;
        }
    }
    let mut names = HashSet::new();
    let mut prefixes = HashSet::new();
    for (i, r) in cfg.repos.iter().enumerate() {
        let key = |k: &str| format!("repos[{i}].{k}");
        if !valid_repo_name(&r.name) {
            return Err(bad(
                key("name"),
                format!(
                    "`{}` must match ^[a-z0-9][a-z0-9._-]{{0,63}}$",
                    crate::domain::ids::printable(&r.name)
                ),
            ));
        }
        if !names.insert(r.name.clone()) {
            return Err(bad(key("name"), format!("`{}` is used twice", r.name)));
        }
        if !valid_prefix(&r.prefix) {
            return Err(bad(
                key("prefix"),
                format!(
                    "`{}` must be upper-case letters and digits, like `SHOP`",
                    crate::domain::ids::printable(&r.prefix)
                ),
            ));
        }
        if !prefixes.insert(r.prefix.clone()) {
            return Err(bad(key("prefix"), format!("`{}` is used twice", r.prefix)));
        }
        if r.remote.trim().is_empty() || r.remote.starts_with('-') {
            return Err(bad(key("remote"), "must be a git URL or a path".into()));
        }
        if !valid_branch_name(&r.main) {
            return Err(bad(
                key("main"),
                format!("`{}` is not a valid branch name", r.main),
            ));
        }
        if let Some(f) = &r.forge_repo
            && ForgeRepo::parse(f).is_none()
        {
            return Err(bad(key("forge_repo"), "must be `owner/name`".into()));
        }
        if r.ci.mode == CiMode::Command && r.ci.argv.is_empty() {
            return Err(bad(
                key("ci.argv"),
                "is required when ci.mode is `command`".into(),
            ));
        }
        if let Some(t) = &r.tests {
            if t.argv.is_empty() {
                return Err(bad(key("tests.argv"), "must name a program to run".into()));
            }
            if t.timeout_s == 0 {
                return Err(bad(key("tests.timeout_s"), "must be at least 1".into()));
            }
        }
        if let Some(s) = &r.staging {
            if s.argv.is_empty() {
                return Err(bad(
                    key("staging.argv"),
                    "must name a program to run".into(),
                ));
            }
            if s.timeout_s == 0 {
                return Err(bad(key("staging.timeout_s"), "must be at least 1".into()));
            }
        }
        if let Some(d) = &r.deploy
            && d.mode == DeployMode::Hook
            && d.argv.is_empty()
        {
            return Err(bad(
                key("deploy.argv"),
                "is required when deploy.mode is `hook`".into(),
            ));
        }
        for (role, rc) in &r.agent {
            role.parse::<crate::domain::stage::Role>()
                .map_err(|e| bad(key(&format!("agent.{role}")), e.to_string()))?;
            if let Some(t) = rc.timeout_s {
                at_least_one(key(&format!("agent.{role}.timeout_s")), t)?;
            }
        }
        if let Some(t) = r.ci.timeout_s {
            at_least_one(key("ci.timeout_s"), t)?;
        }
        if let Some(t) = r.deploy.as_ref().and_then(|d| d.timeout_s) {
            at_least_one(key("deploy.timeout_s"), t)?;
        }
    }
    for (name, svc, kinds) in [
        ("tracker", &cfg.tracker, &["plane"][..]),
        ("forge", &cfg.forge, &["gitea", "git"][..]),
        ("chat", &cfg.chat, &["telegram"][..]),
    ] {
        if let Some(s) = svc {
            // A typo here would silently turn outbound writes off.
            if !kinds.contains(&s.kind.as_str()) {
                return Err(bad(
                    format!("{name}.kind"),
                    format!("`{}` is not one of: {}", s.kind, kinds.join(", ")),
                ));
            }
            for (k, v) in [
                ("token_env", &s.token_env),
                ("webhook_secret_env", &s.webhook_secret_env),
            ] {
                if let Some(v) = v
                    && (v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
                {
                    return Err(bad(
                        format!("{name}.{k}"),
                        "must name an environment variable (letters, digits, `_`)".into(),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The commented starter config written by `orch init`.
pub const STARTER: &str = include_str!("starter.yaml");

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(s: &str) -> Result<Config> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("orch.yaml");
        std::fs::write(&p, s).unwrap();
        load(&p, Some(dir.path().join("state")))
    }

    #[test]
    fn starter_config_is_valid() {
        let cfg = load_str(STARTER).expect("starter config loads");
        assert_eq!(cfg.max_concurrency, 2);
    }

    #[test]
    fn errors_name_the_key_and_the_file() {
        for (yaml, key) in [
            ("max_concurrency: two\n", "max_concurrency"),
            ("max_concurrency: 0\n", "max_concurrency"),
            (
                "repos:\n - {name: Bad, remote: /x, prefix: A}\n",
                "repos[0].name",
            ),
            (
                "repos:\n - {name: a, remote: /x, prefix: a}\n",
                "repos[0].prefix",
            ),
            (
                "repos:\n - {name: a, remote: /x, prefix: A, ci: {mode: fast}}\n",
                "repos[0].ci.mode",
            ),
            (
                "repos:\n - {name: a, remote: /x, prefix: A, bogus: 1}\n",
                "bogus",
            ),
            (
                "repos:\n - {name: a, remote: /x, prefix: A}\n - {name: a, remote: /y, prefix: B}\n",
                "repos[1].name",
            ),
            // Git refuses a `.lock` component later (clone, lock file), so the config does now.
            (
                "repos:\n - {name: x.lock, remote: /x, prefix: A}\n",
                "repos[0].name",
            ),
            ("agent: {roles: {poet: {model: x}}}\n", "agent.roles.poet"),
            ("tracker: {kind: jira}\n", "tracker.kind"),
        ] {
            let e = load_str(yaml).unwrap_err().to_string();
            assert!(e.contains(key), "{yaml:?}: {e}");
            assert!(e.contains("orch.yaml"), "{yaml:?}: {e}");
        }
    }

    /// A zero timeout used to load and then kill every agent (or CI command) at once.
    #[test]
    fn zero_timeouts_and_attempts_are_refused_naming_the_key() {
        for (yaml, key) in [
            (
                "agent: {inactivity_timeout_s: 0}\n",
                "agent.inactivity_timeout_s",
            ),
            ("agent: {max_attempts: 0}\n", "agent.max_attempts"),
            (
                "agent: {roles: {developer: {timeout_s: 0}}}\n",
                "agent.roles.developer.timeout_s",
            ),
            (
                "repos:\n - {name: a, remote: /x, prefix: A, agent: {reviewer: {timeout_s: 0}}}\n",
                "repos[0].agent.reviewer.timeout_s",
            ),
            (
                "repos:\n - {name: a, remote: /x, prefix: A, ci: {mode: command, argv: [x], timeout_s: 0}}\n",
                "repos[0].ci.timeout_s",
            ),
            (
                "repos:\n - {name: a, remote: /x, prefix: A, deploy: {mode: hook, argv: [x], timeout_s: 0}}\n",
                "repos[0].deploy.timeout_s",
            ),
            (
                "scheduler: {reaper_max_running_s: 0}\n",
                "scheduler.reaper_max_running_s",
            ),
            ("git: {timeout_s: 0}\n", "git.timeout_s"),
            ("git: {lock_timeout_s: 0}\n", "git.lock_timeout_s"),
        ] {
            let e = load_str(yaml).unwrap_err().to_string();
            assert!(e.contains(key), "{yaml:?}: {e}");
            assert!(e.contains("at least 1"), "{yaml:?}: {e}");
        }
    }

    #[test]
    fn local_remotes_are_told_from_urls() {
        for local in [
            "remote.git",
            "../x/remote.git",
            "/srv/git/shop.git",
            "./a:b",
        ] {
            assert!(is_local_path(local), "{local}");
        }
        for url in [
            "git@forge:team/shop.git",
            "https://forge/x.git",
            "file:///srv/x.git",
            "host:x",
        ] {
            assert!(!is_local_path(url), "{url}");
        }
    }

    #[test]
    fn relative_paths_are_resolved_against_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("orch.yaml");
        std::fs::write(
            &p,
            "state_dir: st\nrepos:\n - {name: a, remote: remote.git, prefix: A}\n",
        )
        .unwrap();
        let cfg = load(&p, None).unwrap();
        assert_eq!(cfg.state_dir, dir.path().join("st"));
        assert_eq!(
            cfg.repos[0].remote,
            dir.path().join("remote.git").display().to_string()
        );
        assert_eq!(cfg.repos_dir, dir.path().join("st").join("repos"));
    }
}
