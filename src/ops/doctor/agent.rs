//! `orch doctor --agent`: run the configured agent once, as a developer job would run it (the
//! argv template expanded, the environment scrubbed, `ORCH_SANDBOX=1`), in a scratch git
//! repository with a one-line prompt, and report what came back: the exit, whether its output
//! ended with a structured `result` event, and the usage and cost that event carries. Spends a
//! few cents of the agent's account; never touches a repo, the state or the database.
//!
//! Deliberately not here: the sandbox (the probe checks the agent CLI and its login, and
//! `agent.sandbox` has a check of its own) and the tracker or forge.

use std::ffi::OsString;
use std::time::Duration;

use crate::config::Config;
use crate::domain::agent;
use crate::domain::stage::Role;
use crate::ext::env::{self, Scrub};
use crate::ext::proc::{self, Cmd, Ending, Spec};

use super::check::{Check, Status};

/// How long the probe may take: one short answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(180);

const PROMPT: &str = "This is a connectivity probe from `orch doctor --agent`. Write the word \
    ok into a file named PROBE.txt in the current directory, and reply with the single word ok.";

pub fn agent_probe(cfg: &Config) -> Check {
    let name = "agent.probe";
    let dir = std::env::temp_dir().join(format!("orch-doctor-agent-{}", std::process::id()));
    let check =
        probe(cfg, &dir).unwrap_or_else(|e| Check::new(name, Status::Fail, format!("{e:#}")));
    let _ = std::fs::remove_dir_all(&dir);
    check
}

fn probe(cfg: &Config, dir: &std::path::Path) -> anyhow::Result<Check> {
    let name = "agent.probe";
    std::fs::create_dir_all(dir)?;
    Cmd::new("git").args(["init", "-q"]).cwd(dir).checked()?;
    let prompt_file = dir.join(".orch-probe-prompt.md");
    std::fs::write(
        &prompt_file,
        crate::ops::agent::builtin_prompt(Role::Developer),
    )?;
    let role_cfg = cfg.agent.roles.get(Role::Developer.as_str());
    let tools = role_cfg
        .and_then(|r| r.tools.clone())
        .unwrap_or_else(|| agent::default_tools(Role::Developer).to_string());
    let (pf, wt) = (prompt_file.display().to_string(), dir.display().to_string());
    let argv = agent::expand_argv(
        &cfg.agent.argv,
        &[
            ("model", role_cfg.and_then(|r| r.model.as_deref())),
            ("effort", role_cfg.and_then(|r| r.effort.as_deref())),
            ("prompt_file", Some(&pf)),
            ("role", Some(Role::Developer.as_str())),
            ("worktree", Some(&wt)),
            ("session_id", None),
            ("tools", Some(&tools)),
        ],
    );
    let names = cfg.secret_env_names();
    let scrub = Scrub {
        deny_names: &names,
        deny_globs: &cfg.agent.env_deny,
        allow: &cfg.agent.env_allow,
    };
    let child_env = env::child_env(
        std::env::vars_os(),
        &scrub,
        &[
            ("ORCH_SANDBOX", "1".to_string()),
            ("ORCH_ROLE", Role::Developer.to_string()),
            ("ORCH_WORK_ITEM", "PROBE-1".to_string()),
            ("ORCH_STAGE", "development".to_string()),
            ("ORCH_ARTIFACT_DIR", "docs/work-items/PROBE-1".to_string()),
        ],
    );
    let mut spec = Spec::new(
        argv.iter().map(OsString::from),
        dir,
        child_env,
        PROBE_TIMEOUT,
    );
    spec.stdin = Some(PROMPT.as_bytes().to_vec());
    spec.inactivity_timeout = Some(Duration::from_secs(cfg.agent.inactivity_timeout_s));
    spec.end_marker = Some(Box::new(agent::is_result_line));
    let out = proc::run_supervised(spec, |_| {});
    let result = out
        .result_line
        .as_deref()
        .and_then(agent::parse_result)
        .or_else(|| out.stdout_tail.lines().rev().find_map(agent::parse_result));
    let shown = argv.join(" ");
    let ok_exit = matches!(
        out.ending,
        Ending::Exited(0)
            | Ending::MarkedDone {
                code: Some(0) | None
            }
    );
    let wrote = std::fs::read_dir(dir)?
        .flatten()
        .any(|e| e.file_name() != ".git");
    Ok(match (&result, ok_exit) {
        (Some(r), true) if !r.is_error => {
            let usage = format!(
                "{} tokens in / {} out, ${:.4}",
                r.input_tokens.unwrap_or(0),
                r.output_tokens.unwrap_or(0),
                r.cost_usd.unwrap_or(0.0)
            );
            if wrote {
                Check::new(
                    name,
                    Status::Ok,
                    format!("`{shown}` answered in {:.0?} ({usage})", out.duration),
                )
            } else {
                Check::new(
                    name,
                    Status::Warn,
                    format!(
                        "`{shown}` answered ({usage}) but wrote no file: the role may lack the \
                         Write tool (`agent.roles.<role>.tools`, `--allowedTools`)"
                    ),
                )
            }
        }
        (Some(r), _) => Check::new(
            name,
            Status::Fail,
            format!(
                "`{shown}` answered with an error result: {}",
                crate::domain::ids::printable(&r.text)
            ),
        ),
        (None, _) => Check::new(
            name,
            Status::Fail,
            format!(
                "`{shown}` ended ({:?}) without a `result` event on stdout; it must print \
                 Claude-style JSON (`--output-format stream-json` or `json`); output tail: {}",
                out.ending,
                crate::domain::ids::printable(out.combined_tail.trim())
            ),
        ),
    })
}
