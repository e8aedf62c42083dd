//! The types of `orch.yaml` with their defaults, and the accessors every use-case shares
//! (`Config::{plane, gitea, telegram, secret_env_names}`, `RepoCfg::{contracts, git_ref,
//! forge}`). Parsing and validating are `load`'s and `validate`'s.
//!
//! Long file: the whole schema of `orch.yaml` is here, every key beside its type and its
//! default, so that what a key means and what it defaults to read in one place.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::domain::gate::Contracts;
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
    /// How many times one job is re-queued without spending an attempt when the agent's
    /// provider is overloaded, failing or unreachable (529, 5xx, connection errors, no answer);
    /// past that, an outage spends attempts like any failure.
    #[serde(default = "default_outage_retries")]
    pub outage_retries: u32,
    /// This many agent runs in a row (across jobs) ending in a provider outage open the
    /// dispatch breaker for `outage_breaker_s`; an agent that cannot work on this host at all
    /// (no valid login, a program that cannot start) opens it at once. 0: never.
    #[serde(default = "default_outage_breaker_after")]
    pub outage_breaker_after: u32,
    #[serde(default = "default_outage_breaker_s")]
    pub outage_breaker_s: u64,
    /// The most a task's agents may cost, in US dollars: a task whose next agent job would
    /// take its spending past this is held with the reason instead of launched. `None`: no
    /// budget.
    #[serde(default)]
    pub budget_usd: Option<f64>,
    /// Variables kept in a child's environment although a deny glob matches them (the agent
    /// CLI's own credentials, e.g. `ANTHROPIC_API_KEY`). A `*_env` secret of the config is
    /// never kept, listed here or not.
    #[serde(default)]
    pub env_allow: Vec<String>,
    /// How agents, suites and CI commands are confined (design §9.2); `None`: `bwrap` when it is
    /// installed, else `none` with a warning at every launch.
    #[serde(default)]
    pub sandbox: Option<SandboxMode>,
    /// Extra paths a confined child may write (the agent CLI's config dir, a cache). `~/` is the
    /// home directory. A missing path is skipped.
    #[serde(default)]
    pub sandbox_writable: Vec<PathBuf>,
    /// Extra paths a confined child may read although they sit in a hidden place (a toolchain
    /// under the state directory, the home directory of the service user).
    #[serde(default)]
    pub sandbox_readable: Vec<PathBuf>,
    /// Extra directories hidden from a confined child (`~/.ssh`, `~/.aws`), beside the state
    /// directory, `repos_dir` and the credentials directory, which always are.
    #[serde(default)]
    pub sandbox_hidden: Vec<PathBuf>,
}

/// `agent.sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// bubblewrap: a read-only system, the worktree writable, secrets and state hidden.
    Bwrap,
    /// No confinement: the child runs as orch's user with orch's view of the files.
    None,
}

impl std::str::FromStr for SandboxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bwrap" => Ok(SandboxMode::Bwrap),
            "none" => Ok(SandboxMode::None),
            _ => Err(format!("`{s}` is not `bwrap` or `none`")),
        }
    }
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
            outage_retries: default_outage_retries(),
            outage_breaker_after: default_outage_breaker_after(),
            outage_breaker_s: default_outage_breaker_s(),
            budget_usd: None,
            env_allow: Vec::new(),
            sandbox: None,
            sandbox_writable: Vec::new(),
            sandbox_readable: Vec::new(),
            sandbox_hidden: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleCfg {
    pub model: Option<String>,
    pub effort: Option<String>,
    pub timeout_s: Option<u64>,
    /// The tools the role's agent may use without asking (`{tools}` in `agent.argv`, handed
    /// to `--allowedTools`); default per role: `domain::agent::default_tools`.
    pub tools: Option<String>,
    /// The tools the role's agent is not offered at all (`{disallowed_tools}`, handed to
    /// `--disallowedTools`); default: `domain::agent::default_disallowed_tools`. An empty
    /// string drops the flag.
    pub disallowed_tools: Option<String>,
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
    /// The secret scan of the `deploy-staging → deploy` edge (design §7.1); on by default
    /// where `merge` is configured.
    pub security: Option<SecurityCfg>,
    /// The merge gate and the merge with its proof (design §7.1, §7.2).
    pub merge: Option<MergeCfg>,
    /// The coverage sub-gate and its ratchet (design §7.1); needs `merge`.
    pub coverage: Option<CoverageCfg>,
    /// The post-deploy watch (design §7.4).
    pub post_deploy: Option<PostDeployCfg>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityCfg {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The scanner; exit 0 is PASS. `{range}` becomes `origin/<main>..HEAD`. Default: gitleaks
    /// when installed, else orch's built-in scan of added lines.
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default = "default_security_timeout")]
    pub timeout_s: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MergeMode {
    /// orch fast-forwards `origin/<main>` itself (a push with a lease on main's old sha).
    #[default]
    Git,
    /// A pull request merged through the Gitea API.
    Gitea,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MergeStyle {
    Merge,
    #[default]
    Rebase,
    Squash,
}

impl MergeStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            MergeStyle::Merge => "merge",
            MergeStyle::Rebase => "rebase",
            MergeStyle::Squash => "squash",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeCfg {
    #[serde(default)]
    pub mode: MergeMode,
    #[serde(default)]
    pub style: MergeStyle,
    /// A busy merge lease defers the job this long (no rollback).
    #[serde(default = "default_merge_defer")]
    pub defer_s: u64,
    /// Gitea merge retries (transient answers, 409/422 while mergeable) before the task is held.
    #[serde(default = "default_merge_retries")]
    pub max_retries: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoverageCfg {
    /// Prints the coverage percentage (the last `NN.N%` of its output, or a bare number on the
    /// last line).
    pub argv: Vec<String>,
    pub floor: Option<f64>,
    #[serde(default = "yes")]
    pub ratchet: bool,
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
    #[serde(default = "default_tests_timeout")]
    pub timeout_s: u64,
    #[serde(default = "yes")]
    pub sandbox: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostDeployCfg {
    pub urls: Vec<SmokeCfg>,
    #[serde(default = "default_probe_interval")]
    pub interval_s: u64,
    #[serde(default = "default_probe_window")]
    pub window_s: u64,
    /// This many failed rounds in a row: DEGRADED.
    #[serde(default = "default_fail_threshold")]
    pub fail_threshold: u32,
    /// More than this share of failed probes over the window: DEGRADED.
    #[serde(default = "default_error_ratio")]
    pub error_ratio: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CiMode {
    #[default]
    None,
    Status,
    Command,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CiCfg {
    #[serde(default)]
    pub mode: CiMode,
    #[serde(default)]
    pub argv: Vec<String>,
    pub timeout_s: Option<u64>,
    /// Run the command in the agent sandbox (design §9.2); `false` runs it unconfined.
    #[serde(default = "yes")]
    pub sandbox: bool,
}

impl Default for CiCfg {
    fn default() -> Self {
        CiCfg {
            mode: CiMode::None,
            argv: Vec::new(),
            timeout_s: None,
            sandbox: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestsCfg {
    pub argv: Vec<String>,
    #[serde(default = "yes")]
    pub sandbox: bool,
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
    #[serde(default = "yes")]
    pub sandbox: bool,
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
    /// A file holding the token (read at the moment of use; wins over `token_env`).
    pub token_file: Option<PathBuf>,
    pub webhook_secret_env: Option<String>,
    /// A file holding the webhook secret (wins over `webhook_secret_env`).
    pub webhook_secret_file: Option<PathBuf>,
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
    /// A running job whose supervisor has not recorded itself this long after its claim was
    /// never started (a launch cut short): the reaper gives it its attempt back.
    #[serde(default = "default_launch_grace")]
    pub launch_grace_s: u64,
    /// A supervisor whose job ended, a gesture and an ingest that changed state run a launch
    /// pass themselves (`ops::launch`), so the next job starts at once instead of at the next
    /// tick. `false`: only ticks launch.
    #[serde(default = "yes")]
    pub launch_on_finish: bool,
    /// How a gesture reaches the scheduler: `direct` (it runs the launch pass itself),
    /// `systemd` (it touches `<state_dir>/wake`, which `orch-wake.path` turns into a tick, and
    /// waits for its job), `auto` (systemd where systemd runs and `orch-wake.path` is installed,
    /// and `orch serve` runs as a service; else direct).
    #[serde(default)]
    pub wake: WakeMode,
}

/// `scheduler.wake`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeMode {
    #[default]
    Auto,
    Direct,
    Systemd,
}

impl Default for SchedulerCfg {
    fn default() -> Self {
        SchedulerCfg {
            reaper_max_running_s: default_reaper_max(),
            reconcile_grace_s: default_grace(),
            retry_backoff_s: default_retry_backoff(),
            stage_alert_after_s: default_stage_alert(),
            launch_grace_s: default_launch_grace(),
            launch_on_finish: true,
            wake: WakeMode::Auto,
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
    /// The only global git config orch's git commands read (`GIT_CONFIG_GLOBAL`; design §9.3):
    /// the place for credential settings of private remotes. Default `<state_dir>/gitconfig`.
    pub global_config: Option<PathBuf>,
    /// Credential helpers orch's git commands use (every helper set elsewhere is cleared).
    #[serde(default)]
    pub credential_helpers: Vec<String>,
}

impl Default for GitCfg {
    fn default() -> Self {
        GitCfg {
            timeout_s: default_git_timeout(),
            lock_timeout_s: default_lock_timeout(),
            global_config: None,
            credential_helpers: Vec::new(),
        }
    }
}

pub(super) fn default_security_timeout() -> u64 {
    600
}
pub(super) fn default_merge_defer() -> u64 {
    60
}
pub(super) fn default_merge_retries() -> u32 {
    5
}
pub(super) fn default_epsilon() -> f64 {
    0.1
}
pub(super) fn default_probe_interval() -> u64 {
    30
}
pub(super) fn default_probe_window() -> u64 {
    600
}
pub(super) fn default_fail_threshold() -> u32 {
    3
}
pub(super) fn default_error_ratio() -> f64 {
    0.5
}
pub(super) fn default_launch_grace() -> u64 {
    60
}
pub(super) fn default_stage_alert() -> u64 {
    24 * 3600
}
pub(super) fn default_git_timeout() -> u64 {
    300
}
pub(super) fn default_lock_timeout() -> u64 {
    600
}

/// The Claude Code command line that keeps each role to its tools: `dontAsk` refuses whatever
/// `--allowedTools` does not name (`acceptEdits` auto-approved `rm`, `mv`, `sed -i` and shell
/// redirections inside the worktree whatever the list said), `--setting-sources user` keeps the
/// repository's own `.claude/settings*.json` (and their hooks, which `--print` runs on every
/// tool call) out, and `--disallowedTools` takes the tools a role must not have off the list
/// the model is offered.
pub(super) fn default_agent_argv() -> Vec<String> {
    [
        "claude",
        "--print",
        "--verbose",
        "--output-format",
        "stream-json",
        "--model",
        "{model}",
        "--effort",
        "{effort}",
        "--system-prompt-file",
        "{prompt_file}",
        "--permission-mode",
        "dontAsk",
        "--setting-sources",
        "user",
        "--allowedTools",
        "{tools}",
        "--disallowedTools",
        "{disallowed_tools}",
    ]
    .map(String::from)
    .to_vec()
}
pub(super) fn default_env_deny() -> Vec<String> {
    ["*_TOKEN", "*_SECRET", "*_PASSWORD", "*_API_KEY"]
        .map(String::from)
        .to_vec()
}
pub(super) fn default_inactivity() -> u64 {
    900
}
pub(super) fn default_usage_backoff() -> u64 {
    3600
}
pub(super) fn default_max_attempts() -> u32 {
    3
}
pub(super) fn default_outage_retries() -> u32 {
    5
}
pub(super) fn default_outage_breaker_after() -> u32 {
    3
}
pub(super) fn default_outage_breaker_s() -> u64 {
    600
}
pub(super) fn default_main() -> String {
    "main".into()
}
pub(super) fn yes() -> bool {
    true
}
pub(super) fn default_tests_timeout() -> u64 {
    900
}
pub(super) fn default_staging_timeout() -> u64 {
    600
}
pub(super) fn default_infra_delay() -> u64 {
    30
}
pub(super) fn default_infra_retries() -> u32 {
    2
}
pub(super) fn default_status() -> u16 {
    200
}
pub(super) fn default_reaper_max() -> u64 {
    4 * 3600
}
pub(super) fn default_grace() -> u64 {
    120
}
pub(super) fn default_retry_backoff() -> u64 {
    60
}

impl Config {
    pub fn repo(&self, name: &str) -> Option<&RepoCfg> {
        self.repos.iter().find(|r| r.name == name)
    }

    pub fn db_path(&self) -> PathBuf {
        self.state_dir.join("orch.db")
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

    /// Every variable named by a `*_env` key of the config (design §9): the secrets no child (and
    /// no supervisor) may inherit.
    pub fn secret_env_names(&self) -> Vec<String> {
        [&self.tracker, &self.forge, &self.chat]
            .into_iter()
            .flatten()
            .flat_map(|s| [s.token_env.clone(), s.webhook_secret_env.clone()])
            .flatten()
            .collect()
    }
}

impl ServiceCfg {
    /// Where this service's API token is read from (design §9.1).
    pub fn token_where(&self) -> crate::ext::secrets::Where<'_> {
        crate::ext::secrets::Where {
            file: self.token_file.as_deref(),
            env: self.token_env.as_deref(),
        }
    }

    /// Where this service's webhook secret is read from.
    pub fn webhook_secret_where(&self) -> crate::ext::secrets::Where<'_> {
        crate::ext::secrets::Where {
            file: self.webhook_secret_file.as_deref(),
            env: self.webhook_secret_env.as_deref(),
        }
    }

    /// Whether a token is configured (a file or a variable), whether or not it can be read now.
    pub fn has_token(&self) -> bool {
        self.token_file.is_some() || self.token_env.is_some()
    }

    /// Whether a webhook secret is configured.
    pub fn has_webhook_secret(&self) -> bool {
        self.webhook_secret_file.is_some() || self.webhook_secret_env.is_some()
    }
}

impl Config {
    /// Every file named by a `*_file` key of the config: hidden from confined children.
    pub fn secret_files(&self) -> Vec<PathBuf> {
        [&self.tracker, &self.forge, &self.chat]
            .into_iter()
            .flatten()
            .flat_map(|s| [s.token_file.clone(), s.webhook_secret_file.clone()])
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
            merge: self.merge.is_some(),
            edge: self.security_enabled() || self.merge.is_some(),
        }
    }

    /// Whether the secret scan runs on the `deploy-staging → deploy` edge: the `security`
    /// block says so, and without one it runs wherever `merge` is configured.
    pub fn security_enabled(&self) -> bool {
        match &self.security {
            Some(s) => s.enabled,
            None => self.merge.is_some(),
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
