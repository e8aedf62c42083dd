//! How an agent job's command line is built: the compiled-in role prompts, the per-role
//! wall-clock defaults, and `invocation`, which resolves model and effort, picks the role's
//! tools and disallowed tools and fills the argv template. A job and `doctor --agent` build
//! their command lines here, so the probe runs exactly what a job runs.

use std::path::Path;

use tracing::warn;

use crate::config::{Config, RepoCfg};
use crate::domain::agent;
use crate::domain::stage::Role;

/// The compiled-in role prompts (design §2: `commands/<role>.md`).
pub fn builtin_prompt(role: Role) -> &'static str {
    match role {
        Role::Analyst => include_str!("../../../commands/analyst.md"),
        Role::Architect => include_str!("../../../commands/architect.md"),
        Role::Developer => include_str!("../../../commands/developer.md"),
        Role::Reviewer => include_str!("../../../commands/reviewer.md"),
        Role::Tester => include_str!("../../../commands/tester.md"),
        Role::Deployer => include_str!("../../../commands/deployer.md"),
        // Deterministic roles: `ops::job` runs them itself and never reaches an agent.
        Role::Releaser | Role::Monitor => "",
    }
}

pub(super) fn default_timeout(role: Role) -> u64 {
    match role {
        Role::Developer => 3600,
        Role::Reviewer => 3000,
        Role::Analyst
        | Role::Architect
        | Role::Tester
        | Role::Deployer
        | Role::Releaser
        | Role::Monitor => 1800,
    }
}

/// The command line of one agent run, with what it was resolved from.
pub struct Invocation {
    pub argv: Vec<String>,
    pub model: Option<String>,
    pub effort: Option<String>,
}

/// The argv of `role`'s agent (of `repo`, when a job's): model and effort resolved over the
/// repo's override, `ORCH_AGENT_{MODEL,EFFORT}_<ROLE>` and `agent.roles`, the role's tools and
/// disallowed tools, the placeholders filled in. Invalid values are dropped with a warning.
pub fn invocation(
    config: &Config,
    role: Role,
    repo: Option<&RepoCfg>,
    prompt_file: &Path,
    worktree: &Path,
    session: Option<&str>,
) -> Invocation {
    let cfg = &config.agent;
    let role_cfg = cfg.roles.get(role.as_str());
    let repo_cfg = repo.and_then(|r| r.agent.get(role.as_str()));
    let upper = role.as_str().to_uppercase();
    let env_model = std::env::var(format!("ORCH_AGENT_MODEL_{upper}")).ok();
    let env_effort = std::env::var(format!("ORCH_AGENT_EFFORT_{upper}")).ok();
    let repo_label = repo.map_or_else(String::new, |r| format!("repos[{}].agent.{role}", r.name));
    let (model, w1) = agent::resolve(
        "model",
        &[
            (
                repo_label.as_str(),
                repo_cfg.and_then(|r| r.model.as_deref()),
            ),
            ("ORCH_AGENT_MODEL_<ROLE>", env_model.as_deref()),
            ("agent.roles", role_cfg.and_then(|r| r.model.as_deref())),
        ],
        agent::valid_model,
    );
    let (effort, w2) = agent::resolve(
        "effort",
        &[
            (
                repo_label.as_str(),
                repo_cfg.and_then(|r| r.effort.as_deref()),
            ),
            ("ORCH_AGENT_EFFORT_<ROLE>", env_effort.as_deref()),
            ("agent.roles", role_cfg.and_then(|r| r.effort.as_deref())),
        ],
        agent::valid_effort,
    );
    for w in w1.iter().chain(&w2) {
        warn!("{w}");
    }
    let pick = |of: fn(&crate::config::RoleCfg) -> Option<String>, default: &str| {
        repo_cfg
            .and_then(of)
            .or_else(|| role_cfg.and_then(of))
            .unwrap_or_else(|| default.to_string())
    };
    let tools = pick(|r| r.tools.clone(), agent::default_tools(role));
    let disallowed = pick(
        |r| r.disallowed_tools.clone(),
        agent::default_disallowed_tools(role),
    );
    let (wt, pf) = (
        worktree.display().to_string(),
        prompt_file.display().to_string(),
    );
    let argv = agent::expand_argv(
        &cfg.argv,
        &[
            ("model", model.as_deref()),
            ("effort", effort.as_deref()),
            ("prompt_file", Some(&pf)),
            ("role", Some(role.as_str())),
            ("worktree", Some(&wt)),
            ("session_id", session),
            ("tools", Some(&tools)),
            (
                "disallowed_tools",
                Some(disallowed.as_str()).filter(|d| !d.trim().is_empty()),
            ),
        ],
    );
    Invocation {
        argv,
        model,
        effort,
    }
}
