//! How an agent run is set up and read back (design §4.4), as pure functions: model and effort
//! resolution with validation, the argv template, the agent's final `result` JSON, usage-limit
//! detection and the retry backoff. Launching the process is `ext::proc`'s job.

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
    pub session_id: Option<String>,
    pub terminal_reason: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
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
        session_id: o
            .get("session_id")
            .and_then(Value::as_str)
            .filter(|s| s.len() <= 200)
            .map(String::from),
        terminal_reason: o
            .get("terminal_reason")
            .and_then(Value::as_str)
            .map(String::from),
        input_tokens: num("input_tokens"),
        output_tokens: num("output_tokens"),
        cache_read_tokens: num("cache_read_input_tokens"),
        cache_write_tokens: num("cache_creation_input_tokens"),
        cost_usd: o.get("total_cost_usd").and_then(Value::as_f64),
    })
}

/// A usage-limit answer: the result says `blocking_limit`, or the output says the usage limit
/// was reached.
pub fn is_usage_limit(result: Option<&AgentResult>, output_tail: &str) -> bool {
    let said = |s: &str| s.to_ascii_lowercase().contains("usage limit reached");
    result.is_some_and(|r| r.terminal_reason.as_deref() == Some("blocking_limit") || said(&r.text))
        || said(output_tail)
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
        let limit = r#"{"type":"result","subtype":"error","is_error":true,"result":"Claude AI usage limit reached|1","terminal_reason":"blocking_limit"}"#;
        assert!(is_usage_limit(parse_result(limit).as_ref(), ""));
        assert!(!is_usage_limit(parse_result(line).as_ref(), "all fine"));
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
