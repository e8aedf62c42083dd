//! What a finished agent run was (design §4.4), as a pure function of how its process ended,
//! the structured facts of its stream (`domain::stream::Facts`) and, for a program that printed
//! nothing at all, the last line of its stderr: a success, a usage limit, a provider outage, an
//! environment defect, or the run's own failure. The class decides what the run costs its job
//! (an attempt or nothing) and whether the dispatch breaker opens; `ops::agent` applies it.
//!
//! What the agent wrote is data, never an input here: an error class comes from the fields of
//! an *error* result (`api_error_status`, `api_error_type`, `api_error`, `terminal_reason`), the
//! CLI's own synthetic messages, or orch's observation of the process.

use crate::domain::stream::{Facts, one_line};
use crate::domain::time::Ts;

/// How the agent's process ended, as the supervisor saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    Exited(i32),
    Signalled(i32),
    /// The wall-clock timeout.
    WallTimeout,
    /// No output for the inactivity timeout.
    Inactive {
        after_s: u64,
    },
    /// The program could not be started (the message names it).
    SpawnFailed(String),
    /// It printed its result and lingered; the exit code if it still had one.
    MarkedDone(Option<i32>),
}

/// What a finished agent run was, which decides what it costs the job.
#[derive(Debug, Clone, PartialEq)]
pub enum RunClass {
    Succeeded,
    /// A usage or rate limit: the attempt is refunded and the breaker opens until `resets_at`
    /// (else `agent.usage_limit_backoff_s`).
    Limit {
        resets_at: Option<Ts>,
        kind: Option<String>,
        message: String,
    },
    /// The provider is overloaded, failing or unreachable: re-queued without spending an
    /// attempt (up to a cap per job); several in a row open the breaker.
    Outage {
        message: String,
    },
    /// The agent cannot work on this host as it is set up (no valid login, a program that
    /// cannot start): re-queued without spending an attempt, the breaker open, an alert.
    Environment {
        message: String,
    },
    /// The run failed on its own account: the attempt is spent.
    Failed {
        message: String,
    },
}

impl RunClass {
    /// The word stored with the run (`agent_runs.fault`); `None` for a success.
    pub fn fault(&self) -> Option<&'static str> {
        match self {
            RunClass::Succeeded => None,
            RunClass::Limit { .. } => Some("limit"),
            RunClass::Outage { .. } => Some("outage"),
            RunClass::Environment { .. } => Some("environment"),
            RunClass::Failed { .. } => Some("failed"),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            RunClass::Succeeded => "",
            RunClass::Limit { message, .. }
            | RunClass::Outage { message }
            | RunClass::Environment { message }
            | RunClass::Failed { message } => message,
        }
    }
}

/// The class of a finished run, from how it ended, the structured facts of its stream and the
/// last lines of its stderr (read only to tell a program that never started). The agent's words
/// never count: an error class comes from the fields of an *error* result, or from orch's own
/// observation of the process.
pub fn classify(end: &RunEnd, facts: &Facts, stderr_tail: &str) -> RunClass {
    let result = facts.result.as_ref();
    let clean_exit = matches!(end, RunEnd::Exited(0) | RunEnd::MarkedDone(Some(0) | None));
    if clean_exit
        && !result.is_some_and(|r| r.is_error)
        && (result.is_some() || *end == RunEnd::Exited(0))
    {
        return RunClass::Succeeded;
    }
    if let Some(r) = result.filter(|r| r.is_error) {
        let message = if r.text.trim().is_empty() {
            "the agent ended with an error result and no message".to_string()
        } else {
            one_line(&r.text, 300)
        };
        let status = r.api_error_status;
        let is =
            |v: &Option<String>, words: &[&str]| v.as_deref().is_some_and(|x| words.contains(&x));
        let assistant = |words: &[&str]| is(&facts.api_error, words);
        if r.terminal_reason.as_deref() == Some("blocking_limit")
            || status == Some(429)
            || is(&r.api_error_type, &["rate_limit_error"])
            || is(&r.error_type, &["rate_limit_error"])
            || is(&r.api_error, &["usage_limit_reached"])
            || assistant(&["rate_limit"])
        {
            let limit = facts.limit.clone().unwrap_or_default();
            return RunClass::Limit {
                resets_at: limit.resets_at,
                kind: limit.kind,
                message,
            };
        }
        if matches!(status, Some(401 | 403))
            || is(
                &r.api_error_type,
                &["authentication_error", "permission_error"],
            )
            || assistant(&["authentication_failed"])
        {
            return RunClass::Environment { message };
        }
        if status.is_some_and(|s| s == 408 || (500..=599).contains(&s))
            || is(
                &r.api_error_type,
                &["overloaded_error", "api_error", "timeout_error"],
            )
            || is(&r.error_type, &["overloaded_error"])
            || is(&r.api_error, &["connection_failed"])
            || (status.is_none() && assistant(&["server_error"]))
        {
            return RunClass::Outage { message };
        }
        return RunClass::Failed { message };
    }
    let last_err = stderr_tail
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| one_line(l, 300));
    let with_err = |what: String| match &last_err {
        Some(l) => format!("{what}: {l}"),
        None => what,
    };
    match end {
        RunEnd::SpawnFailed(m) => RunClass::Environment {
            message: format!(
                "the agent program could not be started: {}",
                one_line(m, 300)
            ),
        },
        // Nothing on stdout, and the shell's or bubblewrap's "cannot execute": the program
        // never ran (a path hidden by the sandbox, a missing interpreter).
        RunEnd::Exited(c)
            if facts.events == 0
                && (matches!(c, 126 | 127)
                    || (*c == 1
                        && last_err
                            .as_deref()
                            .is_some_and(|l| l.starts_with("bwrap: execvp ")))) =>
        {
            RunClass::Environment {
                message: with_err(format!("the agent program could not start (exit {c})")),
            }
        }
        RunEnd::Inactive { after_s } if facts.events > 0 && facts.waiting_on_api => {
            RunClass::Outage {
                message: format!(
                    "the agent's API did not answer for {after_s}s (inactivity timeout)"
                ),
            }
        }
        RunEnd::Inactive { after_s } => RunClass::Failed {
            message: format!("the agent printed nothing for {after_s}s (inactivity timeout)"),
        },
        RunEnd::WallTimeout => RunClass::Failed {
            message: "the agent ran past its wall-clock timeout".into(),
        },
        RunEnd::Signalled(s) => RunClass::Failed {
            message: with_err(format!("the agent was killed by signal {s}")),
        },
        RunEnd::Exited(c) => RunClass::Failed {
            message: with_err(format!("the agent exited with code {c} without a result")),
        },
        RunEnd::MarkedDone(code) => RunClass::Failed {
            message: format!(
                "the agent printed a result and ended with {}",
                code.map_or("a signal".to_string(), |c| format!("code {c}"))
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The class of a run whose stream ended with `lines` and whose process ended `end`.
    fn class(end: RunEnd, lines: &[&str]) -> RunClass {
        classify(&end, &Facts::of(&lines.join("\n")), "")
    }

    fn kind(c: &RunClass) -> &'static str {
        c.fault().unwrap_or("succeeded")
    }

    // Result lines as Claude Code 2.1.328 printed them against the fake Messages API (the
    // fields that matter; the real lines carry many more).
    const R429: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":429,"api_error_type":"rate_limit_error","result":"API Error: Request rejected (429) · Number of request tokens has exceeded your per-minute rate limit"}"#;
    const SUB_EVENT: &str = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1796165394,"rateLimitType":"five_hour","isUsingOverage":false}}"#;
    const SUB_MSG: &str = r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"You've hit your 5-hour limit · resets 10:49pm (UTC)"}]},"error":"rate_limit","api_error_status":429,"api_error":"usage_limit_reached"}"#;
    const SUB: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":429,"api_error_type":"rate_limit_error","api_error":"usage_limit_reached","result":"You've hit your 5-hour limit · resets 10:49pm (UTC)"}"#;
    const R529: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":529,"api_error_type":"overloaded_error","api_error":null,"result":"API Error: 529 Overloaded. This is a server-side issue, usually temporary"}"#;
    const R500: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":500,"api_error_type":"api_error","result":"API Error: 500 Internal server error."}"#;
    const R400: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":400,"api_error_type":"invalid_request_error","result":"API Error: 400 bad model"}"#;
    const R401: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":401,"api_error_type":"authentication_error","result":"Invalid API key · Fix external API key"}"#;
    const LOGIN_MSG: &str = r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"Not logged in · Please run /login"}]},"error":"authentication_failed","is_api_error_message":true}"#;
    const LOGIN: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":null,"result":"Not logged in · Please run /login"}"#;
    const REFUSED_MSG: &str = r#"{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"API Error: Connection refused"}]},"error":"server_error","is_api_error_message":true}"#;
    const REFUSED: &str = r#"{"type":"result","subtype":"success","is_error":true,"terminal_reason":"api_error","api_error_status":null,"api_error_type":null,"api_error":"connection_failed","result":"API Error: Connection refused — a firewall or proxy may be blocking it (ECONNREFUSED)"}"#;
    const INIT: &str = r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s","tools":["Write"],"model":"claude-opus-4-8","permissionMode":"dontAsk"}"#;
    const TOOL: &str = r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"sleep 999"}}]}}"#;
    const OK: &str = r#"{"type":"result","subtype":"success","is_error":false,"terminal_reason":"completed","result":"done","total_cost_usd":0.01}"#;

    #[test]
    fn runs_are_classified_from_the_streams_structured_fields() {
        let e1 = RunEnd::Exited(1);
        for (end, lines, want) in [
            (RunEnd::Exited(0), vec![INIT, OK], "succeeded"),
            (RunEnd::MarkedDone(None), vec![INIT, OK], "succeeded"),
            (RunEnd::Exited(0), vec![], "succeeded"),
            (e1.clone(), vec![INIT, R429], "limit"),
            (e1.clone(), vec![INIT, SUB_EVENT, SUB_MSG, SUB], "limit"),
            (e1.clone(), vec![INIT, R529], "outage"),
            (e1.clone(), vec![INIT, R500], "outage"),
            (e1.clone(), vec![INIT, REFUSED_MSG, REFUSED], "outage"),
            (e1.clone(), vec![INIT, R401], "environment"),
            (e1.clone(), vec![INIT, LOGIN_MSG, LOGIN], "environment"),
            (e1.clone(), vec![INIT, R400], "failed"),
            (e1.clone(), vec![INIT], "failed"),
            (RunEnd::Exited(0), vec![INIT, R529], "outage"),
            // A hung API (the CLI waits on its request) is an outage; a hung tool is not.
            (RunEnd::Inactive { after_s: 900 }, vec![INIT], "outage"),
            (
                RunEnd::Inactive { after_s: 900 },
                vec![INIT, TOOL],
                "failed",
            ),
            (RunEnd::Inactive { after_s: 900 }, vec![], "failed"),
            (RunEnd::WallTimeout, vec![INIT], "failed"),
            (RunEnd::Signalled(9), vec![INIT], "failed"),
            (
                RunEnd::SpawnFailed("no such file".into()),
                vec![],
                "environment",
            ),
            (RunEnd::Exited(127), vec![], "environment"),
            (RunEnd::Exited(127), vec![INIT], "failed"),
            // The old shapes still count.
            (
                e1.clone(),
                vec![
                    r#"{"type":"result","subtype":"error","is_error":true,"result":"x","terminal_reason":"blocking_limit"}"#,
                ],
                "limit",
            ),
            (
                e1.clone(),
                vec![
                    r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":"x","error":{"type":"rate_limit_error","message":"slow down"}}"#,
                ],
                "limit",
            ),
        ] {
            let c = class(end.clone(), &lines);
            assert_eq!(kind(&c), want, "{end:?} {lines:?}: {c:?}");
        }
        match class(RunEnd::Exited(1), &[INIT, SUB_EVENT, SUB_MSG, SUB]) {
            RunClass::Limit {
                resets_at,
                kind,
                message,
            } => {
                assert_eq!(resets_at, Some(1796165394));
                assert_eq!(kind.as_deref(), Some("five_hour"));
                assert!(
                    message.starts_with("You've hit your 5-hour limit"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        let bwrap = classify(
            &RunEnd::Exited(1),
            &Facts::default(),
            "bwrap: execvp claude: No such file or directory\n",
        );
        assert_eq!(kind(&bwrap), "environment", "{bwrap:?}");
        assert!(bwrap.message().contains("execvp claude"), "{bwrap:?}");
    }

    /// An agent that printed "usage limit reached" anywhere in its output opened the breaker
    /// and stopped all dispatch; the output is data and no longer an input to the decision.
    #[test]
    fn the_agents_words_never_make_a_limit_or_an_outage() {
        for text in [
            "Claude AI usage limit reached|1767225600",
            "API Error: 529 Overloaded",
            "You've hit your 5-hour limit",
        ] {
            let failed = serde_json::json!({"type": "result", "subtype": "error", "is_error": true,
                "result": text, "terminal_reason": "error"})
            .to_string();
            assert_eq!(
                kind(&class(RunEnd::Exited(1), &[INIT, &failed])),
                "failed",
                "{text}"
            );
            let said = serde_json::json!({"type": "assistant", "message": {"content": [
                {"type": "text", "text": text}]}})
            .to_string();
            assert_eq!(
                kind(&class(RunEnd::Exited(1), &[INIT, &said])),
                "failed",
                "{text}"
            );
        }
        // The signal on a successful result is contradictory, not a limit.
        let ok_limit = r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","terminal_reason":"blocking_limit","api_error_status":429}"#;
        assert_eq!(kind(&class(RunEnd::Exited(0), &[ok_limit])), "succeeded");
        // Wrong types are no signal.
        let odd = r#"{"type":"result","is_error":true,"result":"x","terminal_reason":["blocking_limit"],"error":{"type":7},"api_error_status":"429","api_error_type":"rate limit error!"}"#;
        assert_eq!(kind(&class(RunEnd::Exited(1), &[odd])), "failed");
        // stderr counts only for a program that printed nothing at all.
        let c = classify(
            &RunEnd::Exited(1),
            &Facts::of(INIT),
            "bwrap: execvp claude: No such file or directory",
        );
        assert_eq!(kind(&c), "failed");
    }
}
