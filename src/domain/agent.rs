//! How an agent run is set up and read back (design §4.4), as pure functions: model and effort
//! resolution with validation, the argv template, each role's tools and write scope, the
//! agent's final `result` JSON (with its session id checked) and the retry backoff. Launching
//! the process is `ext::proc`'s job; reading the stream line by line is `domain::stream`'s, and
//! what a finished run was is `domain::run`'s.
//!
//! What the agent prints is data, never an instruction: a decision reads only the structured
//! fields of the CLI's events (`is_error`, `terminal_reason`, `api_error_status`,
//! `api_error_type`, `api_error`, the `rate_limit_info` of a rejected limit), never words in its
//! text or in the output around it, and a value from it that will reach an argv is validated
//! first.

use crate::domain::stage::Role;
use serde_json::Value;

pub const EFFORTS: [&str; 5] = ["low", "medium", "high", "xhigh", "max"];

/// `^claude-[a-z0-9.-]+$`
pub fn valid_model(s: &str) -> bool {
    s.strip_prefix("claude-").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    })
}

pub fn valid_effort(s: &str) -> bool {
    EFFORTS.contains(&s)
}

/// Pick the first valid value from the levels (highest priority first). Invalid values are
/// dropped with a warning naming their source; garbage never reaches the command line.
pub fn resolve(
    what: &str,
    levels: &[(&str, Option<&str>)],
    valid: fn(&str) -> bool,
) -> (Option<String>, Vec<String>) {
    let mut warnings = Vec::new();
    for (source, value) in levels {
        let Some(v) = value else { continue };
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        if valid(v) {
            return (Some(v.to_string()), warnings);
        }
        warnings.push(format!(
            "ignoring invalid {what} `{}` from {source}",
            crate::domain::ids::printable(v)
        ));
    }
    (None, warnings)
}

/// The tools a role's agent may use without asking (`{tools}`; Claude CLI `--allowedTools`,
/// the names of Claude Code 2.1). Every role reads the repository and writes its artifacts;
/// the roles that build and run code (developer, tester, deployer) also get the shell, the
/// others read-only git commands. With `--permission-mode dontAsk` anything else is refused,
/// and an agent without `Write` exits 0 having changed nothing.
pub fn default_tools(role: Role) -> &'static str {
    match role {
        Role::Analyst | Role::Architect | Role::Reviewer => {
            "Read Glob Grep Write Edit Bash(git log:*) Bash(git diff:*) Bash(git show:*) \
             Bash(git status:*) Bash(ls:*)"
        }
        Role::Developer | Role::Tester | Role::Deployer => "Read Glob Grep Write Edit Bash",
        // Deterministic roles: no agent is ever launched for them (`Role::is_agent`).
        Role::Releaser | Role::Monitor => "",
    }
}

/// The tools a role's agent is not even offered (`{disallowed_tools}`; `--disallowedTools`):
/// `--allowedTools` only pre-approves, and the model would still see sub-agents, the web,
/// schedulers and the rest of the CLI's tools. A name the CLI does not know is ignored by it.
pub fn default_disallowed_tools(role: Role) -> &'static str {
    match role {
        Role::Analyst
        | Role::Architect
        | Role::Reviewer
        | Role::Developer
        | Role::Tester
        | Role::Deployer => {
            "Agent Task WebFetch WebSearch NotebookEdit Skill ToolSearch Workflow CronCreate \
             CronDelete CronList ScheduleWakeup Monitor SendMessage ListAgents TaskStop \
             EnterWorktree ExitWorktree DesignSync ReportFindings RemoteTrigger"
        }
        Role::Releaser | Role::Monitor => "",
    }
}

/// Where a role's agent may write, relative to the worktree: `None` for the developer (code
/// anywhere; see [`protected`]), else the names it may create or change under
/// `docs/work-items/<WI>/` (a trailing `/` is a directory and everything below it, a trailing
/// `*` any name with that prefix). A job whose changes leave its scope commits nothing.
pub fn write_scope(role: Role) -> Option<&'static [&'static str]> {
    match role {
        Role::Developer => None,
        Role::Analyst => Some(&["00-*", "01-*", "02-*", "03-*", "04-*", "05-*"]),
        Role::Architect => Some(&["06-adr/"]),
        Role::Reviewer => Some(&["12-review.md"]),
        Role::Tester => Some(&["13-test-report.md"]),
        Role::Deployer => Some(&["14-deploy-log.md", "15-staging-log.md"]),
        // Deterministic roles commit only the reports they write (`commit_paths`).
        Role::Releaser | Role::Monitor => Some(&[]),
    }
}

/// The paths of `changed` (worktree-relative, `/`-separated) that `role`'s job of `work_item`
/// may not change.
pub fn out_of_scope(role: Role, work_item: &str, changed: &[String]) -> Vec<String> {
    let Some(allowed) = write_scope(role) else {
        return Vec::new();
    };
    let dir = format!("docs/work-items/{work_item}/");
    changed
        .iter()
        .filter(|p| {
            let Some(rest) = p.strip_prefix(&dir) else {
                return true;
            };
            !allowed
                .iter()
                .any(|a| match (a.strip_suffix('/'), a.strip_suffix('*')) {
                    (Some(d), _) => rest.starts_with(&format!("{d}/")),
                    (_, Some(prefix)) => rest.starts_with(prefix) && !rest.contains('/'),
                    _ => rest == *a,
                })
        })
        .cloned()
        .collect()
}

/// The kind [`protected`] names for another stage's artifact.
pub const STAGE_ARTIFACT: &str = "another stage's artifact";

/// Why a path is one that nobody but a human changes without it being shown in review: the
/// agents' own settings (the CLI's project settings and hooks, memory files read into every
/// later prompt, MCP servers), CI configuration, and orch's artifacts of another stage or
/// another work item. `None`: an ordinary path. The developer may change these; the reviewer's
/// prompt then lists them.
pub fn protected(path: &str, work_item: &str) -> Option<&'static str> {
    let file = path.rsplit('/').next().unwrap_or(path);
    if path.starts_with(".claude/")
        || path == ".mcp.json"
        || file == "CLAUDE.md"
        || file == "CLAUDE.local.md"
    {
        return Some("agent settings");
    }
    const CI_DIRS: [&str; 6] = [
        ".github/workflows/",
        ".gitea/workflows/",
        ".forgejo/workflows/",
        ".woodpecker/",
        ".circleci/",
        ".buildkite/",
    ];
    const CI_FILES: [&str; 8] = [
        ".gitlab-ci.yml",
        ".woodpecker.yml",
        ".woodpecker.yaml",
        ".drone.yml",
        ".travis.yml",
        "Jenkinsfile",
        "azure-pipelines.yml",
        "bitbucket-pipelines.yml",
    ];
    if CI_DIRS.iter().any(|d| path.starts_with(d)) || CI_FILES.contains(&path) {
        return Some("CI configuration");
    }
    if let Some(rest) = path.strip_prefix("docs/work-items/") {
        let (wi, inner) = rest.split_once('/').unwrap_or((rest, ""));
        if wi != work_item {
            return Some("another work item's artifacts");
        }
        if !inner.starts_with("10-") {
            return Some(STAGE_ARTIFACT);
        }
    }
    None
}

/// Expand the argv template. A `{name}` whose value is `None` removes its argument, and when
/// that argument was exactly the placeholder and follows a `--flag`, the flag too (so
/// `--model {model}` disappears when no model is configured).
pub fn expand_argv(template: &[String], vars: &[(&str, Option<&str>)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(template.len());
    for arg in template {
        let mut s = arg.clone();
        let mut missing = false;
        for (name, value) in vars {
            let ph = format!("{{{name}}}");
            if s.contains(&ph) {
                match value {
                    Some(v) => s = s.replace(&ph, v),
                    None => missing = true,
                }
            }
        }
        if missing {
            let whole = vars.iter().any(|(n, _)| *arg == format!("{{{n}}}"));
            if whole && out.last().is_some_and(|p| p.starts_with('-')) {
                out.pop();
            }
            continue;
        }
        out.push(s);
    }
    out
}

/// The agent's final `result` object (Claude CLI `--output-format json`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentResult {
    pub is_error: bool,
    pub text: String,
    /// A valid session id ([`valid_session_id`]); an invalid one is in `rejected_session_id`.
    pub session_id: Option<String>,
    /// A `session_id` that failed [`valid_session_id`], escaped and cut for a warning; it is
    /// never stored or passed on.
    pub rejected_session_id: Option<String>,
    pub terminal_reason: Option<String>,
    /// The API error type of a failed run (`error.type`, or `error` when it is a string), such
    /// as `rate_limit_error`.
    pub error_type: Option<String>,
    /// Claude Code 2.1: the HTTP status of the API answer that ended the run (429, 529, …).
    pub api_error_status: Option<i64>,
    /// Claude Code 2.1: the API's error type (`rate_limit_error`, `overloaded_error`, …).
    pub api_error_type: Option<String>,
    /// Claude Code 2.1: the CLI's own name for what failed (`usage_limit_reached`,
    /// `connection_failed`).
    pub api_error: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
}

/// A session id we pass back to the agent (`--resume {session_id}`): 1 to 128 characters of
/// `[A-Za-z0-9_-]`, which a UUID and the CLI's ids are, not starting with `-` (it would be
/// read as an option).
pub fn valid_session_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether a stdout line is the final result object.
pub fn is_result_line(line: &str) -> bool {
    let t = line.trim();
    t.starts_with('{') && t.contains("\"result\"") && parse_result(t).is_some()
}

/// Parse a result line; `None` when it is not a JSON object of `type: result`.
pub fn parse_result(line: &str) -> Option<AgentResult> {
    let v: Value = serde_json::from_str(line.trim()).ok()?;
    let o = v.as_object()?;
    if o.get("type").and_then(Value::as_str) != Some("result") {
        return None;
    }
    let usage = o.get("usage").and_then(Value::as_object);
    let session = o.get("session_id").and_then(Value::as_str);
    let num = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_i64);
    Some(AgentResult {
        is_error: o.get("is_error").and_then(Value::as_bool).unwrap_or(false)
            || o.get("subtype")
                .and_then(Value::as_str)
                .is_some_and(|s| s != "success"),
        text: o
            .get("result")
            .and_then(Value::as_str)
            .unwrap_or("")
            .chars()
            .take(2000)
            .collect(),
        session_id: session.filter(|s| valid_session_id(s)).map(String::from),
        rejected_session_id: match o.get("session_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if valid_session_id(s) => None,
            Some(Value::String(s)) => Some(crate::domain::ids::printable(
                &s.chars().take(64).collect::<String>(),
            )),
            Some(other) => Some(format!("a JSON {}", json_kind(other))),
        },
        terminal_reason: o
            .get("terminal_reason")
            .and_then(Value::as_str)
            .map(String::from),
        error_type: match o.get("error") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Object(e)) => e.get("type").and_then(Value::as_str).map(String::from),
            _ => None,
        },
        api_error_status: o.get("api_error_status").and_then(Value::as_i64),
        api_error_type: word(o.get("api_error_type")),
        api_error: word(o.get("api_error")),
        input_tokens: num("input_tokens"),
        output_tokens: num("output_tokens"),
        cache_read_tokens: num("cache_read_input_tokens"),
        cache_write_tokens: num("cache_creation_input_tokens"),
        cost_usd: o.get("total_cost_usd").and_then(Value::as_f64),
    })
}

/// A short identifier from the stream (`rate_limit_error`), or `None` for anything else.
fn word(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str)
        .filter(|s| {
            (1..=64).contains(&s.len())
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
        .map(String::from)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The budget rule (`agent.budget_usd`): a task's next agent job is expected to cost what its
/// runs cost on average so far; when what it spent plus that would pass the budget, the task is
/// held with this reason instead of launched. `None`: the job may run.
pub fn over_budget(spent_usd: f64, runs: u64, budget_usd: f64) -> Option<String> {
    let next = if runs == 0 {
        0.0
    } else {
        spent_usd / runs as f64
    };
    (spent_usd + next > budget_usd || spent_usd >= budget_usd).then(|| {
        format!(
            "budget: its agents spent ${spent_usd:.2} of ${budget_usd:.2} (agent.budget_usd) and \
             the next run is expected to cost ${next:.2}; raise the budget, then `orch resume`"
        )
    })
}

/// Retry delay after failed attempt `n` (1-based): `min(base · 2^(n−1), 1 h)` plus up to 10 %
/// jitter derived from `seed` (so callers stay deterministic in tests). design §4.4's base is 60 s.
pub fn backoff_s(base: u64, n: u32, seed: u64) -> i64 {
    let delay = (base as i64)
        .saturating_mul(1i64 << n.saturating_sub(1).min(20))
        .min(3600);
    delay + (seed % (delay as u64 / 10 + 1)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_job_may_not_take_a_task_past_its_budget() {
        assert_eq!(over_budget(0.0, 0, 1.0), None);
        assert_eq!(over_budget(0.4, 2, 1.0), None, "0.4 + 0.2 fits");
        assert!(over_budget(0.6, 2, 1.0).is_none(), "0.6 + 0.3 fits");
        let why = over_budget(0.8, 2, 1.0).unwrap();
        assert!(
            why.contains("$0.80 of $1.00") && why.contains("orch resume"),
            "{why}"
        );
        assert!(over_budget(1.0, 0, 1.0).is_some(), "spent it all");
    }

    #[test]
    fn models_and_efforts() {
        assert!(valid_model("claude-opus-4-8"));
        assert!(valid_model("claude-3.5-sonnet"));
        for bad in [
            "claude-",
            "gpt-4",
            "claude-Opus",
            "claude-x;rm",
            "claude-x y",
            "",
        ] {
            assert!(!valid_model(bad), "{bad}");
        }
        assert!(valid_effort("xhigh") && !valid_effort("extreme"));
    }

    #[test]
    fn resolution_skips_invalid_levels_with_a_warning() {
        let (v, w) = resolve(
            "model",
            &[
                ("repo shop", Some("gpt-4")),
                ("ORCH_AGENT_MODEL_DEVELOPER", None),
                ("config", Some("claude-opus-4-8")),
            ],
            valid_model,
        );
        assert_eq!(v.as_deref(), Some("claude-opus-4-8"));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("gpt-4") && w[0].contains("repo shop"));
        let (v, _) = resolve("effort", &[("config", Some("ultra"))], valid_effort);
        assert_eq!(v, None);
    }

    #[test]
    fn argv_placeholders_and_dropped_flags() {
        let t: Vec<String> = [
            "claude",
            "--model",
            "{model}",
            "--effort",
            "{effort}",
            "--system-prompt-file",
            "{prompt_file}",
            "--role={role}",
        ]
        .map(String::from)
        .to_vec();
        let out = expand_argv(
            &t,
            &[
                ("model", None),
                ("effort", Some("high")),
                ("prompt_file", Some("/p/dev.md")),
                ("role", Some("developer")),
            ],
        );
        assert_eq!(
            out,
            [
                "claude",
                "--effort",
                "high",
                "--system-prompt-file",
                "/p/dev.md",
                "--role=developer"
            ]
        );
    }

    #[test]
    fn result_lines() {
        let line = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s1","total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":20}}"#;
        let r = parse_result(line).unwrap();
        assert!(!r.is_error);
        assert_eq!(r.input_tokens, Some(10));
        assert_eq!(r.cache_read_tokens, None, "absent is not zero");
        assert_eq!(r.cost_usd, Some(0.5));
        assert!(is_result_line(line));
        assert!(!is_result_line(r#"{"type":"assistant"}"#));
        assert!(parse_result("{not json").is_none());
        assert_eq!(r.session_id.as_deref(), Some("s1"));
    }

    #[test]
    fn each_role_writes_only_its_artifacts() {
        let paths = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let d = "docs/work-items/SHOP-1";
        let all = paths(&[
            &format!("{d}/01-brd.md"),
            &format!("{d}/04-test-plan.yaml"),
            &format!("{d}/06-adr/0001-x.md"),
            &format!("{d}/12-review.md"),
            &format!("{d}/13-test-report.md"),
            &format!("{d}/14-deploy-log.md"),
            "docs/work-items/SHOP-2/01-brd.md",
            "src/lib.rs",
            ".claude/settings.json",
        ]);
        let bad = |role| out_of_scope(role, "SHOP-1", &all);
        assert!(bad(Role::Developer).is_empty());
        let analyst = bad(Role::Analyst);
        assert!(
            !analyst
                .iter()
                .any(|p| p.ends_with("01-brd.md") && p.contains("SHOP-1"))
        );
        assert!(analyst.contains(&"src/lib.rs".to_string()));
        assert!(analyst.contains(&"docs/work-items/SHOP-2/01-brd.md".to_string()));
        assert_eq!(bad(Role::Reviewer).len(), all.len() - 1);
        assert!(!bad(Role::Architect).iter().any(|p| p.contains("06-adr")));
        assert!(
            !bad(Role::Tester)
                .iter()
                .any(|p| p.ends_with("13-test-report.md"))
        );
        assert!(
            !bad(Role::Deployer)
                .iter()
                .any(|p| p.ends_with("14-deploy-log.md"))
        );
        // A prefix is a prefix of a name in the directory itself, not of a path below it.
        assert_eq!(
            out_of_scope(
                Role::Analyst,
                "SHOP-1",
                &paths(&[&format!("{d}/01-x/evil.sh")])
            )
            .len(),
            1
        );
        assert_eq!(
            out_of_scope(
                Role::Reviewer,
                "SHOP-1",
                &paths(&["docs/work-items/SHOP-1"])
            )
            .len(),
            1
        );
    }

    #[test]
    fn protected_paths_are_named_with_why() {
        for (path, want) in [
            (".claude/settings.json", Some("agent settings")),
            ("CLAUDE.md", Some("agent settings")),
            ("sub/CLAUDE.md", Some("agent settings")),
            (".mcp.json", Some("agent settings")),
            (".github/workflows/ci.yml", Some("CI configuration")),
            (".gitea/workflows/x.yaml", Some("CI configuration")),
            (".gitlab-ci.yml", Some("CI configuration")),
            (
                "docs/work-items/SHOP-1/12-review.md",
                Some("another stage's artifact"),
            ),
            (
                "docs/work-items/SHOP-1/01-brd.md",
                Some("another stage's artifact"),
            ),
            (
                "docs/work-items/SHOP-2/src.txt",
                Some("another work item's artifacts"),
            ),
            ("docs/work-items/SHOP-1/10-dev-notes.md", None),
            ("src/claude.rs", None),
            (".github/CODEOWNERS", None),
            ("README.md", None),
        ] {
            assert_eq!(protected(path, "SHOP-1"), want, "{path}");
        }
    }

    #[test]
    fn session_ids_are_checked_before_they_are_kept() {
        for ok in [
            "s1",
            "0b7c8f5e-4d2a-4c1b-9e3f-1a2b3c4d5e6f",
            "stub-SHOP-1-1796124995292053746-26448",
            "A_b-9",
        ] {
            assert!(valid_session_id(ok), "{ok}");
        }
        let long = "a".repeat(129);
        for bad in [
            "",
            "x; touch /tmp/orch-pwned",
            "--help",
            "a b",
            "a/b",
            "../x",
            "$(id)",
            "é",
            "a\nb",
            long.as_str(),
        ] {
            assert!(!valid_session_id(bad), "{bad:?}");
            let line = serde_json::json!({"type": "result", "result": "ok", "session_id": bad})
                .to_string();
            let r = parse_result(&line).unwrap();
            assert_eq!(r.session_id, None, "{bad:?}");
            let shown = r.rejected_session_id.unwrap();
            assert!(!shown.contains('\n'), "escaped for a log line: {shown}");
        }
        let r = parse_result(&format!(r#"{{"type":"result","session_id":"{long}"}}"#)).unwrap();
        assert_eq!(
            r.rejected_session_id.unwrap().len(),
            64,
            "cut for a log line"
        );
        assert!(valid_session_id(&"a".repeat(128)));
        // Another JSON type is rejected too, and no session id is no warning.
        let r = parse_result(r#"{"type":"result","session_id":42}"#).unwrap();
        assert_eq!(
            (r.session_id, r.rejected_session_id.as_deref()),
            (None, Some("a JSON number"))
        );
        let r = parse_result(r#"{"type":"result","session_id":null}"#).unwrap();
        assert_eq!((r.session_id, r.rejected_session_id), (None, None));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        assert_eq!(backoff_s(60, 1, 0), 60);
        assert_eq!(backoff_s(60, 2, 0), 120);
        assert_eq!(backoff_s(60, 10, 0), 3600);
        assert!(backoff_s(60, 1, 999) <= 66);
        assert_eq!(backoff_s(1, 1, 7), 1);
    }
}
