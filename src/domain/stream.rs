//! The agent CLI's event stream (Claude Code's `--output-format stream-json`: one JSON object
//! per line), read as data: [`Facts`] keeps what the supervisor decides on (the final result,
//! a rejected rate limit and its reset time, whether the CLI was left waiting on its API, the
//! last API error it reported), and [`Render`] turns each line into what a person following a
//! job reads (one line per assistant text block and per tool call, refusals, retries, the
//! result). Nothing here acts on the text an agent wrote: only the structured fields count,
//! and rendered text is cut to one line with control characters replaced.
//!
//! The shapes follow Claude Code 2.1.x as it prints them: `system` events (`init`,
//! `api_retry`, `permission_denied`), `assistant` and `user` messages (with `error` on a
//! synthetic assistant message that reports an API error), `rate_limit_event`, and the final
//! `result`. orch's own marker line `{"type":"orch_attempt",…}` opens each attempt in the log.
//! Unknown events are skipped, never an error.

use std::collections::HashMap;

use serde_json::Value;

use crate::domain::agent::{self, AgentResult};
use crate::domain::time::Ts;

/// The marker orch writes into an agent's log before each attempt.
pub fn attempt_marker(job: i64, attempt: u32, at: Ts) -> String {
    serde_json::json!({"type": "orch_attempt", "job": job, "attempt": attempt, "at": at})
        .to_string()
}

/// A usage limit the stream announced (`rate_limit_event` with status `rejected`, or the
/// `rate_limit_info` of an error result).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limit {
    pub resets_at: Option<Ts>,
    /// `five_hour`, `seven_day`, … as the CLI names the window.
    pub kind: Option<String>,
}

/// What a run's stream says, for the supervisor's decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// JSON events read (orch's own markers excluded).
    pub events: usize,
    /// The final `result` event.
    pub result: Option<AgentResult>,
    /// The last rejected rate limit announced.
    pub limit: Option<Limit>,
    /// The `error` of the last synthetic assistant message (`rate_limit`, `server_error`,
    /// `authentication_failed`, …).
    pub api_error: Option<String>,
    /// After the last event the CLI waits on its API (its request is out): it started, retried,
    /// or handed a tool's result back. After an assistant message with a tool call, a tool runs.
    pub waiting_on_api: bool,
    /// Tools the CLI refused to run (`permission_denied`), in order.
    pub denied: Vec<String>,
}

impl Facts {
    /// Read every line of `text`.
    pub fn of(text: &str) -> Facts {
        let mut f = Facts::default();
        for line in text.lines() {
            f.feed(line);
        }
        f
    }

    pub fn feed(&mut self, line: &str) {
        let t = line.trim();
        if !t.starts_with('{') {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(t) else {
            return;
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == "orch_attempt" {
            return;
        }
        self.events += 1;
        match kind {
            "system" => match v.get("subtype").and_then(Value::as_str) {
                Some("init" | "api_retry") => self.waiting_on_api = true,
                Some("permission_denied") => {
                    if let Some(name) = v.get("tool_name").and_then(Value::as_str) {
                        self.denied.push(name.to_string());
                    }
                }
                _ => {}
            },
            "rate_limit_event" => {
                let info = v.get("rate_limit_info");
                if info.and_then(|i| i.get("status")).and_then(Value::as_str) == Some("rejected") {
                    self.limit = Some(limit_of(info));
                }
            }
            "assistant" => {
                let calls_a_tool = v
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"));
                // A streamed message may come as several events; only one with a tool call
                // leaves a tool running. A text-only one is followed by more API work or the end.
                self.waiting_on_api = !calls_a_tool;
                if let Some(e) = v.get("error").and_then(Value::as_str) {
                    self.api_error = Some(e.to_string());
                }
                let info = v.pointer("/api_error_params/rate_limit_info");
                if info.and_then(|i| i.get("status")).and_then(Value::as_str) == Some("rejected") {
                    self.limit = Some(limit_of(info));
                }
            }
            "user" => self.waiting_on_api = true,
            "result" => {
                self.waiting_on_api = false;
                self.result = agent::parse_result(t);
            }
            _ => {}
        }
    }
}

/// `rate_limit_info` → [`Limit`].
pub fn limit_of(info: Option<&Value>) -> Limit {
    Limit {
        resets_at: info
            .and_then(|i| i.get("resetsAt"))
            .and_then(Value::as_i64)
            .filter(|t| *t > 0),
        kind: info
            .and_then(|i| i.get("rateLimitType"))
            .and_then(Value::as_str)
            .filter(|k| k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .map(|k| k.chars().take(32).collect()),
    }
}

/// Text from the stream as one displayable line: the first non-empty line, control and
/// bidirectional formatting characters replaced, at most `max` characters (then `…`).
pub fn one_line(s: &str, max: usize) -> String {
    let first = s
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let more_lines = s.trim().lines().count() > 1;
    let mut out: String = first
        .chars()
        .take(max)
        .map(|c| {
            if c.is_control()
                || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
            {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect();
    if first.chars().count() > max || more_lines {
        out.push('…');
    }
    out
}

/// Turns the stream into lines a person reads, one event at a time.
#[derive(Debug, Default)]
pub struct Render {
    /// The working directory of the run (from `init`): tool paths are shown relative to it.
    cwd: Option<String>,
    /// What each tool call was, by its id, to name a refusal.
    calls: HashMap<String, String>,
    /// Tool calls refused (their error result is not repeated).
    refused: Vec<String>,
}

impl Render {
    /// The lines for one line of the log (none for events not worth showing).
    pub fn line(&mut self, raw: &str) -> Vec<String> {
        let t = raw.trim_end();
        if t.trim().is_empty() {
            return Vec::new();
        }
        let v = match serde_json::from_str::<Value>(t.trim()) {
            Ok(v @ Value::Object(_)) => v,
            // What the CLI (or bwrap) printed on stderr, as it is.
            _ => return vec![one_line(t, 300)],
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "orch_attempt" => vec![format!(
                "── attempt {} of job {} · {} ──",
                v["attempt"].as_u64().unwrap_or(0),
                v["job"].as_i64().unwrap_or(0),
                v["at"]
                    .as_i64()
                    .map(crate::domain::time::rfc3339)
                    .unwrap_or_default()
            )],
            "system" => self.system(&v),
            "rate_limit_event" => {
                let info = v.get("rate_limit_info");
                let status = info
                    .and_then(|i| i.get("status"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                if status != "rejected" {
                    return Vec::new();
                }
                let l = limit_of(info);
                vec![format!(
                    "rate limit reached ({}){}",
                    l.kind.as_deref().unwrap_or("unknown window"),
                    l.resets_at
                        .map(|t| format!(", resets {}", crate::domain::time::rfc3339(t)))
                        .unwrap_or_default()
                )]
            }
            "assistant" => self.assistant(&v),
            "user" => self.user(&v),
            "result" => vec![result_line(&v)],
            _ => Vec::new(),
        }
    }

    fn system(&mut self, v: &Value) -> Vec<String> {
        match v.get("subtype").and_then(Value::as_str) {
            Some("init") => {
                self.cwd = v.get("cwd").and_then(Value::as_str).map(String::from);
                let tools = v.get("tools").and_then(Value::as_array).map_or(0, Vec::len);
                vec![format!(
                    "agent started: {}, {} tools, permission mode {}",
                    one_line(v["model"].as_str().unwrap_or("model ?"), 60),
                    tools,
                    one_line(v["permissionMode"].as_str().unwrap_or("?"), 30)
                )]
            }
            Some("api_retry") => vec![format!(
                "API error {} ({}); retry {}/{} in {:.1}s",
                v["error_status"]
                    .as_i64()
                    .map_or("?".to_string(), |s| s.to_string()),
                one_line(v["error"].as_str().unwrap_or("?"), 40),
                v["attempt"].as_u64().unwrap_or(0),
                v["max_retries"].as_u64().unwrap_or(0),
                v["retry_delay_ms"].as_f64().unwrap_or(0.0) / 1000.0
            )],
            Some("permission_denied") => {
                let id = v["tool_use_id"].as_str().unwrap_or("");
                self.refused.push(id.to_string());
                let what =
                    self.calls.get(id).cloned().unwrap_or_else(|| {
                        one_line(v["tool_name"].as_str().unwrap_or("a tool"), 40)
                    });
                vec![format!(
                    "refused: {what} ({})",
                    one_line(v["decision_reason_type"].as_str().unwrap_or("denied"), 30)
                )]
            }
            _ => Vec::new(),
        }
    }

    fn assistant(&mut self, v: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let Some(blocks) = v.pointer("/message/content").and_then(Value::as_array) else {
            return out;
        };
        for b in blocks {
            match b["type"].as_str() {
                Some("text") => {
                    let t = b["text"].as_str().unwrap_or("");
                    if !t.trim().is_empty() {
                        out.push(one_line(t, 160));
                    }
                }
                Some("tool_use") => {
                    let label = self.call(b);
                    if let Some(id) = b["id"].as_str() {
                        self.calls.insert(id.to_string(), label.clone());
                    }
                    out.push(label);
                }
                _ => {}
            }
        }
        out
    }

    fn user(&mut self, v: &Value) -> Vec<String> {
        let Some(blocks) = v.pointer("/message/content").and_then(Value::as_array) else {
            return Vec::new();
        };
        blocks
            .iter()
            .filter(|b| b["type"] == "tool_result" && b["is_error"] == true)
            .filter(|b| {
                !self
                    .refused
                    .iter()
                    .any(|r| b["tool_use_id"].as_str() == Some(r))
            })
            .map(|b| {
                let text = match &b["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                    _ => String::new(),
                };
                format!("  error: {}", one_line(&text, 160))
            })
            .collect()
    }

    /// `Write docs/…`, `Bash: git status`, `Grep TODO`.
    fn call(&self, b: &Value) -> String {
        let name = one_line(b["name"].as_str().unwrap_or("a tool"), 40);
        let input = &b["input"];
        let path = |k: &str| {
            input[k].as_str().map(|p| {
                let rel = self
                    .cwd
                    .as_deref()
                    .and_then(|c| p.strip_prefix(c))
                    .map(|r| r.trim_start_matches('/'))
                    .unwrap_or(p);
                one_line(rel, 160)
            })
        };
        match name.as_str() {
            "Bash" => format!(
                "Bash: {}",
                one_line(input["command"].as_str().unwrap_or(""), 160)
            ),
            "Write" | "Edit" | "Read" | "MultiEdit" => match path("file_path") {
                Some(p) => format!("{name} {p}"),
                None => name,
            },
            "NotebookEdit" => match path("notebook_path") {
                Some(p) => format!("{name} {p}"),
                None => name,
            },
            "Glob" | "Grep" => match input["pattern"].as_str() {
                Some(p) => format!("{name} {}", one_line(p, 120)),
                None => name,
            },
            _ => name,
        }
    }
}

/// `result: success · 4 turns · 12.3s · tokens in 300 / out 60 / cache read 150 / write 21 ·
/// $0.0032`, or the error it ended with.
fn result_line(v: &Value) -> String {
    let r = agent::parse_result(&v.to_string()).unwrap_or_default();
    let usage = format!(
        "tokens in {} / out {} / cache read {} / write {}",
        r.input_tokens.unwrap_or(0),
        r.output_tokens.unwrap_or(0),
        r.cache_read_tokens.unwrap_or(0),
        r.cache_write_tokens.unwrap_or(0)
    );
    let secs = v["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    let turns = v["num_turns"].as_u64().unwrap_or(0);
    if r.is_error {
        let status = r
            .api_error_status
            .map(|s| format!(" (API {s})"))
            .unwrap_or_default();
        format!(
            "result: error{status} after {secs:.1}s: {}",
            one_line(&r.text, 200)
        )
    } else {
        format!(
            "result: success · {turns} turns · {secs:.1}s · {usage} · ${:.4}",
            r.cost_usd.unwrap_or(0.0)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as Claude Code 2.1.328 printed them on this machine (shortened where only the
    // length differed).
    const INIT: &str = r#"{"type":"system","subtype":"init","cwd":"/w/SHOP-1","session_id":"9390d1ea-4a8f-4d66-9134-55896efd1189","tools":["Bash","Edit","Glob","Grep","Read","Write"],"mcp_servers":[],"model":"claude-opus-4-8","permissionMode":"dontAsk","apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.328"}"#;
    const TOOL: &str = r#"{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"rm -rf src","description":"delete"}}],"stop_reason":null,"usage":{"input_tokens":100,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"s"}"#;
    const DENIED: &str = r#"{"type":"system","subtype":"permission_denied","tool_name":"Bash","tool_use_id":"toolu_1","decision_reason_type":"mode","message":"Permission to use Bash has been denied because Claude Code is running in don't ask mode."}"#;
    const DENIED_RESULT: &str = r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"Permission to use Bash has been denied","is_error":true,"tool_use_id":"toolu_1"}]},"session_id":"s"}"#;
    const WRITE: &str = r#"{"type":"assistant","message":{"id":"msg_2","content":[{"type":"text","text":"Writing the BRD.\nIt covers the goals."},{"type":"tool_use","id":"toolu_2","name":"Write","input":{"file_path":"/w/SHOP-1/docs/work-items/SHOP-1/01-brd.md","content":"x"}}]},"session_id":"s"}"#;
    const WRITTEN: &str = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_2","type":"tool_result","content":"File created successfully"}]},"session_id":"s"}"#;
    const LIMIT_EVENT: &str = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1796165394,"rateLimitType":"five_hour","isUsingOverage":false},"uuid":"u","session_id":"s"}"#;
    const LIMIT_MSG: &str = r#"{"type":"assistant","message":{"id":"c43c","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"You've hit your 5-hour limit · resets 10:49pm (UTC)"}]},"session_id":"s","error":"rate_limit","is_api_error_message":true,"api_error_status":429,"api_error":"usage_limit_reached","api_error_params":{"rate_limit_info":{"status":"rejected","resetsAt":1796165394,"rateLimitType":"five_hour","isUsingOverage":false}},"api_error_type":"rate_limit_error"}"#;
    const LIMIT_RESULT: &str = r#"{"duration_api_ms":0,"stop_reason":"stop_sequence","session_id":"s","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"terminal_reason":"api_error","is_error":true,"num_turns":1,"subtype":"success","api_error_status":429,"api_error_type":"rate_limit_error","api_error":"usage_limit_reached","result":"You've hit your 5-hour limit · resets 10:49pm (UTC)","type":"result","duration_ms":212}"#;
    const RETRY: &str = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":1010,"error_status":429,"error":"rate_limit","session_id":"s","uuid":"u"}"#;
    const OK_RESULT: &str = r#"{"duration_api_ms":104,"stop_reason":"end_turn","session_id":"s","total_cost_usd":0.00320625,"usage":{"input_tokens":300,"cache_creation_input_tokens":21,"cache_read_input_tokens":150,"output_tokens":60},"terminal_reason":"completed","is_error":false,"num_turns":3,"subtype":"success","api_error_status":null,"result":"done","type":"result","duration_ms":1285}"#;

    #[test]
    fn facts_follow_the_stream() {
        let f = Facts::of(&[INIT, TOOL].join("\n"));
        assert!(!f.waiting_on_api, "a tool is running");
        let f = Facts::of(&[INIT, TOOL, DENIED, DENIED_RESULT].join("\n"));
        assert!(f.waiting_on_api, "the refusal went back to the API");
        assert_eq!(f.denied, ["Bash"]);
        let f = Facts::of(INIT);
        assert!(f.waiting_on_api && f.result.is_none());
        let f = Facts::of(&[INIT, RETRY].join("\n"));
        assert!(f.waiting_on_api);
        let f = Facts::of(&[INIT, LIMIT_EVENT, LIMIT_MSG, LIMIT_RESULT].join("\n"));
        assert_eq!(
            f.limit,
            Some(Limit {
                resets_at: Some(1796165394),
                kind: Some("five_hour".into())
            })
        );
        assert_eq!(f.api_error.as_deref(), Some("rate_limit"));
        let r = f.result.unwrap();
        assert!(r.is_error && r.api_error_status == Some(429));
        assert_eq!(f.events, 4);
        // Garbage and orch's own markers are no events.
        let f = Facts::of(&format!("not json\n{{\n{}\n", attempt_marker(1, 1, 0)));
        assert_eq!(f, Facts::default());
    }

    #[test]
    fn rendering_shows_what_the_agent_did_one_line_each() {
        let mut r = Render::default();
        let lines: Vec<String> = [
            attempt_marker(7, 2, 1796165394).as_str(),
            INIT,
            TOOL,
            DENIED,
            DENIED_RESULT,
            WRITE,
            WRITTEN,
            RETRY,
            LIMIT_EVENT,
            OK_RESULT,
            "bwrap: execvp claude: No such file or directory",
        ]
        .iter()
        .flat_map(|l| r.line(l))
        .collect();
        assert_eq!(
            lines,
            [
                "── attempt 2 of job 7 · 2026-12-01T22:49:54Z ──",
                "agent started: claude-opus-4-8, 6 tools, permission mode dontAsk",
                "Bash: rm -rf src",
                "refused: Bash: rm -rf src (mode)",
                "Writing the BRD.…",
                "Write docs/work-items/SHOP-1/01-brd.md",
                "API error 429 (rate_limit); retry 1/10 in 1.0s",
                "rate limit reached (five_hour), resets 2026-12-01T22:49:54Z",
                "result: success · 3 turns · 1.3s · tokens in 300 / out 60 / cache read 150 / write 21 · $0.0032",
                "bwrap: execvp claude: No such file or directory",
            ]
        );
        let mut r = Render::default();
        assert_eq!(
            r.line(LIMIT_RESULT),
            [
                "result: error (API 429) after 0.2s: You've hit your 5-hour limit · resets 10:49pm (UTC)"
            ]
        );
    }

    #[test]
    fn rendered_text_cannot_drive_the_terminal() {
        let hostile = serde_json::json!({"type": "assistant", "message": {"content": [
            {"type": "text", "text": "\u{1b}[2Jcleared \u{202E}txt.exe"},
            {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "echo \u{7}"}},
        ]}})
        .to_string();
        let lines = Render::default().line(&hostile);
        assert!(
            lines
                .iter()
                .all(|l| !l.chars().any(|c| c.is_control() || c == '\u{202E}')),
            "{lines:?}"
        );
        assert_eq!(
            one_line(&"x".repeat(200), 10),
            format!("{}…", "x".repeat(10))
        );
    }
}
