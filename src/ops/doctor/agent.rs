//! `orch doctor --agent`: run the configured agent once exactly as a developer job runs it (the
//! argv built by `ops::agent::invocation`, the environment scrubbed, `ORCH_SANDBOX=1`, confined
//! by the same sandbox with the agent program shown through), in a scratch git repository with
//! a one-line prompt, and report what came back: how the run was classified, the usage and cost
//! of its result, and whether the agent created a file (orch's prompt file lies elsewhere).
//! When it fails, name the fix: a program the sandbox hides (`agent.sandbox_readable`), a login
//! the scrub strips (`agent.env_allow`) or keeps in a hidden home (`agent.sandbox_writable`).
//! Spends a few cents of the agent's account; never touches a repo, the state or the database.
//!
//! Deliberately not here: the tracker or forge.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::domain::agent;
use crate::domain::run::{self, RunClass};
use crate::domain::stage::Role;
use crate::domain::stream::{Facts, Render, one_line};
use crate::ext::env::{self, Scrub};
use crate::ext::proc::{self, Cmd, Ending, Spec};
use crate::ops::confine;

use super::check::{Check, Status};

/// How long the probe may take: one short answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(180);

const PROMPT: &str = "This is a connectivity probe from `orch doctor --agent`. Write the word \
    ok into a file named PROBE.txt in the current directory, and reply with the single word ok.";

/// The variables an agent CLI logs in with; the scrub's default deny globs match each.
const CREDENTIALS: [&str; 4] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
];

const NAME: &str = "agent.probe";

pub fn agent_probe(cfg: &Config) -> Check {
    let base = std::env::temp_dir().join(format!("orch-doctor-agent-{}", std::process::id()));
    let check =
        probe(cfg, &base).unwrap_or_else(|e| Check::new(NAME, Status::Fail, format!("{e:#}")));
    let _ = std::fs::remove_dir_all(&base);
    check
}

fn probe(cfg: &Config, base: &Path) -> anyhow::Result<Check> {
    // The scratch repository is the agent's worktree; the prompt file lies beside it, so that
    // only what the agent creates counts as written.
    let dir = base.join("repo");
    let prompts = base.join("prompts");
    std::fs::create_dir_all(&dir)?;
    std::fs::create_dir_all(&prompts)?;
    Cmd::new("git").args(["init", "-q"]).cwd(&dir).checked()?;
    let before = entries(&dir);
    let prompt_file = prompts.join("developer.md");
    std::fs::write(
        &prompt_file,
        crate::ops::agent::builtin_prompt(Role::Developer),
    )?;
    let inv = crate::ops::agent::invocation(cfg, Role::Developer, None, &prompt_file, &dir, None);
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
    let argv: Vec<OsString> = inv.argv.iter().map(OsString::from).collect();
    let mut readable = vec![prompt_file.clone()];
    readable.extend(confine::program_paths(cfg, &argv, &child_env));
    let mut spec = Spec::new(argv.clone(), &dir, child_env.clone(), PROBE_TIMEOUT);
    spec.stdin = Some(PROMPT.as_bytes().to_vec());
    spec.inactivity_timeout = Some(Duration::from_secs(cfg.agent.inactivity_timeout_s));
    spec.end_marker = Some(Box::new(agent::is_result_line));
    confine::confine_in(cfg, None, true, &readable, "the agent probe", &mut spec)?;
    let confined = matches!(confine::mode(cfg), confine::Mode::Bwrap(_));
    let out = proc::run_supervised(spec, |_| {});
    let mut facts = Facts::of(&out.stdout_tail);
    if facts.result.is_none() {
        facts.result = out.result_line.as_deref().and_then(agent::parse_result);
    }
    let end = crate::ops::agent::run_end(&out.ending, cfg.agent.inactivity_timeout_s);
    let class = run::classify(&end, &facts, &out.stderr_tail);
    let shown = inv.argv.join(" ");
    let place = if confined {
        "inside the sandbox"
    } else {
        "unconfined (no sandbox)"
    };
    let created: Vec<String> = entries(&dir)
        .into_iter()
        .filter(|e| !before.contains(e))
        .collect();
    let r = facts.result.clone().unwrap_or_default();
    Ok(match &class {
        RunClass::Succeeded if facts.result.is_none() => Check::new(
            NAME,
            Status::Fail,
            format!(
                "`{shown}` ended ({}) {place} without a `result` event on stdout; it must print \
                 Claude-style JSON (`--output-format stream-json` or `json`)",
                out.ending.describe()
            ),
        ),
        RunClass::Succeeded => {
            let usage = format!(
                "tokens in / out {} / {}, cache r / w {} / {}, ${:.4}",
                r.input_tokens.unwrap_or(0),
                r.output_tokens.unwrap_or(0),
                r.cache_read_tokens.unwrap_or(0),
                r.cache_write_tokens.unwrap_or(0),
                r.cost_usd.unwrap_or(0.0)
            );
            if created.is_empty() {
                Check::new(
                    NAME,
                    Status::Warn,
                    format!(
                        "`{shown}` answered {place} ({usage}) but created no file: the role may \
                         lack the Write tool (`agent.roles.<role>.tools`, `--allowedTools`)"
                    ),
                )
            } else {
                Check::new(
                    NAME,
                    Status::Ok,
                    format!(
                        "`{shown}` answered {place} in {:.0?} ({usage}) and created {}",
                        out.duration,
                        created.join(", ")
                    ),
                )
            }
        }
        RunClass::Environment { message } if facts.events == 0 => {
            let fix = hidden_program_fix(cfg, &argv, &child_env, &out.stderr_tail, confined);
            Check::new(
                NAME,
                Status::Fail,
                format!("`{shown}` could not start {place}: {message}{fix}"),
            )
        }
        RunClass::Environment { message } => {
            let fix = login_fix(cfg, &child_env);
            Check::new(
                NAME,
                Status::Fail,
                format!("`{shown}` ran {place} but cannot log in: {message}{fix}"),
            )
        }
        RunClass::Limit { message, .. } => Check::new(
            NAME,
            Status::Warn,
            format!("`{shown}` answered {place} with a usage limit: {message}"),
        ),
        RunClass::Outage { message } => Check::new(
            NAME,
            Status::Fail,
            format!("`{shown}` could not reach its API {place}: {message}"),
        ),
        RunClass::Failed { message } => {
            let mut render = Render::default();
            let tail: Vec<String> = out
                .stdout_tail
                .lines()
                .chain(out.stderr_tail.lines())
                .flat_map(|l| render.line(l))
                .collect();
            let tail = tail[tail.len().saturating_sub(3)..].join(" / ");
            let hint = if facts.result.is_none() {
                "; it must print Claude-style JSON events (`--output-format stream-json`)"
            } else {
                ""
            };
            Check::new(
                NAME,
                Status::Fail,
                format!(
                    "`{shown}` failed {place}: {message}{hint}{}",
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!("; last output: {tail}")
                    }
                ),
            )
        }
    })
}

/// The names in `dir`, `.git` left out.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != ".git")
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Why a program that runs outside the sandbox does not start inside it, and the fix.
fn hidden_program_fix(
    cfg: &Config,
    argv: &[OsString],
    env: &[(OsString, OsString)],
    stderr: &str,
    confined: bool,
) -> String {
    if !confined {
        return "; check `agent.argv[0]` and the PATH the jobs get".into();
    }
    let mut version = Spec::new(
        [argv[0].clone(), OsString::from("--version")],
        std::env::temp_dir(),
        env.to_vec(),
        Duration::from_secs(30),
    );
    version.inactivity_timeout = Some(Duration::from_secs(30));
    let outside = proc::run_supervised(version, |_| {});
    if !matches!(outside.ending, Ending::Exited(0)) {
        return "; it does not start outside the sandbox either: check `agent.argv[0]` and the \
                PATH the jobs get"
            .into();
    }
    let hidden = confine::hidden_places(cfg);
    let named: Option<(PathBuf, PathBuf)> = stderr
        .split(|c: char| c.is_whitespace() || matches!(c, ':' | '\'' | '"' | '`'))
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .find_map(|p| {
            let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
            hidden
                .iter()
                .find(|h| real.starts_with(h))
                .map(|h| (p.clone(), h.clone()))
        });
    match named {
        Some((p, h)) => format!(
            "; it starts outside the sandbox, but `{}` lies under `{}`, which the sandbox \
             hides: install the agent elsewhere, or add the directory it needs to \
             `agent.sandbox_readable`",
            one_line(&p.display().to_string(), 200),
            h.display()
        ),
        None => "; it starts outside the sandbox, so something it needs is hidden inside it: add \
                 the directory of the agent's installation (and of its interpreter) to \
                 `agent.sandbox_readable`"
            .into(),
    }
}

/// Why the agent has no login inside a job, and the fix; the values are never shown.
fn login_fix(cfg: &Config, child_env: &[(OsString, OsString)]) -> String {
    let kept = |k: &str| child_env.iter().any(|(n, _)| n == k);
    let stripped: Vec<&str> = CREDENTIALS
        .iter()
        .copied()
        .filter(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()) && !kept(k))
        .collect();
    if !stripped.is_empty() {
        let list = stripped
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return format!(
            "; the environment scrub removed {list} from the agent's environment (it matches \
             `agent.env_deny`): add {} to `agent.env_allow`",
            if stripped.len() == 1 { "it" } else { "them" }
        );
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Some(h) = home.and_then(|h| std::fs::canonicalize(h).ok())
        && confine::hidden_places(cfg).iter().any(|p| h.starts_with(p))
        && matches!(confine::mode(cfg), confine::Mode::Bwrap(_))
    {
        return format!(
            "; the home directory `{}` is hidden from the sandbox, and with it a login kept in \
             `~/.claude`: add `~/.claude` and `~/.claude.json` to `agent.sandbox_writable`, or \
             log in with a variable listed in `agent.env_allow`",
            h.display()
        );
    }
    "; log the agent CLI in for the user orch runs as, or pass its key through \
     `agent.env_allow`"
        .into()
}
