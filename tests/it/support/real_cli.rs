//! A scheduler world whose agents are the real Claude Code CLI, talking to the scripted
//! Messages API of [`super::fake_claude`] on loopback. `.ci/run` installs the pinned CLI with
//! `scripts/install-claude-cli.sh` (into `target/claude-cli`, or where `ORCH_TEST_CLAUDE_CLI`
//! points); without it these tests say so and pass, except under `CI=true`, where a missing CLI
//! is a failure.
//!
//! The CLI runs as orch runs it in production: found on `PATH` by orch's default argv (unless a
//! test sets `agent.argv`), with its credentials let through `agent.env_allow`. What keeps it
//! on loopback and quick is its own environment: `ANTHROPIC_BASE_URL` (the fake),
//! `CLAUDE_CODE_MAX_RETRIES=0` (an error answer ends the run at once instead of after ten
//! backed-off retries), `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` (no update checks or
//! telemetry lookups) and a `HOME` of the world's own.

use std::path::{Path, PathBuf};

use super::fake_claude::FakeClaude;
use super::sched::{Cfg, Sched};

/// The pinned CLI, if installed; panics under `CI=true` when it is not.
pub fn claude_cli(test: &str) -> Option<PathBuf> {
    let p = std::env::var_os("ORCH_TEST_CLAUDE_CLI")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/claude-cli/node_modules/.bin/claude")
        });
    if p.exists() {
        return Some(p);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "{test}: the Claude Code CLI is missing at `{}` under CI=true; .ci/run installs it \
             with scripts/install-claude-cli.sh",
            p.display()
        );
    }
    eprintln!(
        "SKIPPED {test}: the Claude Code CLI is not installed at `{}`; run \
         scripts/install-claude-cli.sh",
        p.display()
    );
    None
}

/// How the world's CLI logs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Login {
    /// `ANTHROPIC_API_KEY` (an API account).
    ApiKey,
    /// `CLAUDE_CODE_OAUTH_TOKEN` (a claude.ai subscription: limits come with a reset time).
    Subscription,
}

/// The knobs of a real-agent world.
pub struct Opts {
    pub max_concurrency: u32,
    pub sandbox: bool,
    pub inactivity_timeout_s: u64,
    pub max_attempts: u32,
    pub usage_limit_backoff_s: u64,
    /// Extra lines under `agent:` (indented by the caller as two spaces).
    pub agent_extra: String,
    /// Extra lines of the repo entry (indented as four spaces).
    pub repo_extra: String,
    pub login: Login,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            max_concurrency: 2,
            sandbox: true,
            inactivity_timeout_s: 60,
            max_attempts: 3,
            usage_limit_backoff_s: 3600,
            agent_extra: String::new(),
            repo_extra: String::new(),
            login: Login::ApiKey,
        }
    }
}

pub struct Real {
    pub s: Sched,
    pub fake: FakeClaude,
    pub cli: PathBuf,
    pub login: Login,
}

impl std::ops::Deref for Real {
    type Target = Sched;
    fn deref(&self) -> &Sched {
        &self.s
    }
}

impl Real {
    /// `None` when the CLI is missing outside CI (the test then passes, having said so).
    pub fn new(test: &str, o: Opts) -> Option<Real> {
        let cli = claude_cli(test)?;
        if o.sandbox && !crate::sandbox::bwrap_or_skip(test) {
            return None;
        }
        let s = Sched::new(Cfg::default());
        let fake = FakeClaude::start();
        let yaml = format!(
            "state_dir: {state:?}\n\
             max_concurrency: {mc}\n\
             agent:\n  inactivity_timeout_s: {inact}\n  max_attempts: {ma}\n  \
             usage_limit_backoff_s: {ulb}\n  env_allow: [ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN]\n{agent}\
             scheduler:\n  reconcile_grace_s: 1\n  retry_backoff_s: 1\n\
             repos:\n  - name: shop\n    remote: {remote:?}\n    prefix: SHOP\n    \
             default_labels: [auto-approve]\n{repo}",
            state = s.state_dir().display().to_string(),
            mc = o.max_concurrency,
            inact = o.inactivity_timeout_s,
            ma = o.max_attempts,
            ulb = o.usage_limit_backoff_s,
            agent = o.agent_extra,
            remote = s.remote.display().to_string(),
            repo = o.repo_extra,
        );
        std::fs::write(&s.config, yaml).unwrap();
        std::fs::create_dir_all(s.dir.path().join("home")).unwrap();
        s.w.sandbox
            .store(o.sandbox, std::sync::atomic::Ordering::Relaxed);
        // Finishing supervisors launch the next stage's job, as in production.
        s.w.launch.store(true, std::sync::atomic::Ordering::Relaxed);
        Some(Real {
            s,
            fake,
            cli,
            login: o.login,
        })
    }

    /// The directory of the `claude` program, first on the ticks' `PATH`.
    pub fn cli_dir(&self) -> PathBuf {
        self.cli.parent().unwrap().to_path_buf()
    }

    /// The environment every orch command of this world gets, so that the agents it starts
    /// find the CLI and reach the fake.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut e = vec![
            ("PATH".to_string(), super::path_with(&self.cli_dir())),
            ("ANTHROPIC_BASE_URL".into(), self.fake.url()),
            ("CLAUDE_CODE_MAX_RETRIES".into(), "0".into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
            (
                "HOME".into(),
                self.s.dir.path().join("home").display().to_string(),
            ),
        ];
        match self.login {
            Login::ApiKey => e.push(("ANTHROPIC_API_KEY".into(), "sk-ant-test-0000".into())),
            Login::Subscription => e.push((
                "CLAUDE_CODE_OAUTH_TOKEN".into(),
                "sk-ant-oat01-test-0000".into(),
            )),
        }
        e
    }

    /// `orch args…` with [`Real::env`].
    pub fn run(&self, args: &[&str]) -> super::Run {
        let mut c = self.s.stub_cmd(args);
        for k in [
            "ANTHROPIC_API_KEY",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "ANTHROPIC_AUTH_TOKEN",
        ] {
            c.env_remove(k);
        }
        c.envs(self.env());
        super::Run::of(&mut c)
    }

    /// `orch task add` as the world's ticks run it (its launch starts the analyst with the
    /// CLI's environment); returns the work item.
    pub fn add(&self, title: &str, extra: &[&str]) -> String {
        let mut args = vec!["task", "add", "--repo", "shop", "--title", title, "--json"];
        args.extend_from_slice(extra);
        let r = self.run(&args);
        assert_eq!(r.code, 0, "task add: {r:?}");
        r.json()["work_item"].as_str().unwrap().to_string()
    }

    /// Tick until `pred` holds (panics with the whole story at the deadline).
    #[track_caller]
    pub fn tick_until(&self, pred: impl FnMut(&Sched) -> bool) -> String {
        let env = self.env();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        super::sched::tick_until(&self.s, &pairs, pred, super::sched::DEADLINE)
    }
}
