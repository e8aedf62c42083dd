//! How an agent run is set up and read back (design §4.4), as pure functions: model and effort
//! resolution with validation, the argv template, the agent's final `result` JSON (with its
//! session id checked), usage-limit detection and the retry backoff. Launching the process is
//! `ext::proc`'s job.
//!
//! What the agent prints is data, never an instruction: a decision reads only the structured
//! fields of the CLI's `result` object (`is_error`, `subtype`, `terminal_reason`, `error`), never
//! words in its text or in the output around it, and a value from it that will reach an argv is
//! validated first.

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

/// The tools a role's agent may use without asking (`{tools}`; Claude CLI `--allowedTools`).
/// Every role reads the repository and writes its artifacts; the roles that build and run
/// code (developer, tester, deployer) also get the shell. Headless (`--print`), a tool that is
/// not allowed is refused, and an agent without `Write` exits 0 having changed nothing.
pub fn default_tools(role: Role) -> &'static str {
    match role {
        Role::Analyst | Role::Architect | Role::Reviewer => {
            "Read Glob Grep LS Write Edit MultiEdit TodoWrite Bash(git log:*) Bash(git diff:*) \
             Bash(git show:*) Bash(git status:*) Bash(ls:*)"
        }
        Role::Developer | Role::Tester | Role::Deployer => {
            "Read Glob Grep LS Write Edit MultiEdit TodoWrite Bash"
        }
        // Deterministic roles: no agent is ever launched for them (`Role::is_agent`).
        Role::Releaser | Role::Monitor => "",
    }
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
        input_tokens: num("input_tokens"),
        output_tokens: num("output_tokens"),
        cache_read_tokens: num("cache_read_input_tokens"),
        cache_write_tokens: num("cache_creation_input_tokens"),
        cost_usd: o.get("total_cost_usd").and_then(Value::as_f64),
    })
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

/// A usage-limit answer, from the CLI's structured result only: an error result whose
/// `terminal_reason` is `blocking_limit` or whose API error type is `rate_limit_error`. The
/// result's text and the output around it are the agent's words (data): an agent that prints
/// "usage limit reached" has not hit one, and must not stop all dispatch.
pub fn is_usage_limit(result: Option<&AgentResult>) -> bool {
    result.is_some_and(|r| {
        r.is_error
            && (r.terminal_reason.as_deref() == Some("blocking_limit")
                || r.error_type.as_deref() == Some("rate_limit_error"))
    })
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
    fn only_the_structured_result_says_usage_limit() {
        let limited = |line: &str| is_usage_limit(parse_result(line).as_ref());
        for (line, want) in [
            (
                r#"{"type":"result","subtype":"error","is_error":true,"result":"Claude AI usage limit reached|1","terminal_reason":"blocking_limit"}"#,
                true,
            ),
            (
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":"x","error":{"type":"rate_limit_error","message":"slow down"}}"#,
                true,
            ),
            (
                r#"{"type":"result","is_error":true,"result":"x","error":"rate_limit_error"}"#,
                true,
            ),
            // The same signal on a successful result is contradictory, not a limit.
            (
                r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","terminal_reason":"blocking_limit"}"#,
                false,
            ),
            // An error of another kind.
            (
                r#"{"type":"result","subtype":"error","is_error":true,"result":"x","error":{"type":"overloaded_error"}}"#,
                false,
            ),
            // The words, in a failed result's text, are the agent's: not a limit.
            (
                r#"{"type":"result","subtype":"error","is_error":true,"result":"Claude AI usage limit reached|1767225600","terminal_reason":"error"}"#,
                false,
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":false,"result":"the usage limit reached its cap"}"#,
                false,
            ),
            // Wrong types are no signal.
            (
                r#"{"type":"result","is_error":true,"result":"x","terminal_reason":["blocking_limit"],"error":{"type":7}}"#,
                false,
            ),
        ] {
            assert_eq!(limited(line), want, "{line}");
        }
        assert!(!is_usage_limit(None), "no result, no limit");
    }

    /// An agent that printed "usage limit reached" anywhere in its output opened the breaker
    /// and stopped all dispatch; the output is data and no longer an input to the decision.
    #[test]
    fn free_text_in_the_output_does_not_trip_the_breaker() {
        let failed = r#"{"type":"result","subtype":"error","is_error":true,"result":"stub analyst exit 1","terminal_reason":"error"}"#;
        let tail = "Claude AI usage limit reached|1767225600\nUSAGE LIMIT REACHED\n";
        assert!(!is_usage_limit(parse_result(failed).as_ref()));
        // A result line inside the free text is no different: only the parsed result counts.
        assert!(!is_usage_limit(
            tail.lines().rev().find_map(parse_result).as_ref()
        ));
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
