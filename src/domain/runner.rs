//! The deterministic runners' decisions (design §6): how a test or staging run is classified
//! (the code passed / the code failed / the environment is broken / the infrastructure
//! hiccuped), what follows from the class and the transient budget, the report each writes in
//! the frontmatter contract the gates read, and the shell quoting of the ssh wrapper. Pure: the
//! process, the clock and the database are the caller's.

use std::fmt::Write as _;

/// How the suite's process ended, as the classification sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    /// The program could not be started: not found, not executable, or another error.
    SpawnError {
        not_found_or_denied: bool,
        message: String,
    },
}

/// The outcome class of one run (the `outcome` of the runner's log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    CodePass,
    CodeFail,
    TransientInfra,
    PermanentEnv,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::CodePass => "code-pass",
            Class::CodeFail => "code-fail",
            Class::TransientInfra => "transient-infra",
            Class::PermanentEnv => "permanent-env",
        }
    }
}

/// The staging suite's default environment markers (design §6.2): text on stderr that means the
/// suite could not run at all.
pub const STAGING_MARKERS: [&str; 6] = [
    "command not found",
    "executable file not found",
    "No such container",
    "is not running",
    "Cannot connect to the Docker daemon",
    "Is the docker daemon running",
];

fn marker_in<'a>(stderr: &str, markers: &'a [String]) -> Option<&'a str> {
    markers
        .iter()
        .map(String::as_str)
        .find(|m| !m.is_empty() && stderr.contains(m))
}

/// The test suite (design §6.1). `smoke_failure` is `Some` when the suite passed but a smoke
/// check did not.
pub fn classify_tests(
    exit: &Exit,
    stderr: &str,
    markers: &[String],
    smoke_failure: Option<&str>,
) -> (Class, String) {
    match exit {
        Exit::SpawnError { message, .. } => (
            Class::PermanentEnv,
            format!("the test program could not be started: {message}"),
        ),
        Exit::Code(c @ (126 | 127)) => (
            Class::PermanentEnv,
            format!("exit {c}: the test program was not found or is not executable"),
        ),
        Exit::Code(c) if marker_in(stderr, markers).is_some() => (
            Class::PermanentEnv,
            format!(
                "exit {c} with environment marker `{}` on stderr",
                marker_in(stderr, markers).unwrap_or_default()
            ),
        ),
        Exit::TimedOut => (Class::TransientInfra, "the suite timed out (killed)".into()),
        Exit::Signal(s) => (
            Class::TransientInfra,
            format!("the suite was killed by signal {s}"),
        ),
        Exit::Code(0) => match smoke_failure {
            None => (Class::CodePass, "exit 0".into()),
            Some(why) => (Class::CodeFail, format!("exit 0 but smoke failed: {why}")),
        },
        Exit::Code(c) => (Class::CodeFail, format!("exit {c}")),
    }
}

/// The staging suite (design §6.2), in the order given there.
pub fn classify_staging(
    exit: &Exit,
    stderr: &str,
    markers: &[String],
    via_ssh: bool,
) -> (Class, String) {
    if *exit == Exit::TimedOut {
        return (
            Class::TransientInfra,
            "the staging suite timed out (killed)".into(),
        );
    }
    if let Some(m) = marker_in(stderr, markers) {
        return (
            Class::PermanentEnv,
            format!("environment marker `{m}` on stderr"),
        );
    }
    match exit {
        Exit::Code(c @ (126 | 127)) => (
            Class::PermanentEnv,
            format!("exit {c}: the staging program was not found or is not executable"),
        ),
        Exit::SpawnError { message, .. } => (
            Class::PermanentEnv,
            format!("the staging program could not be started: {message}"),
        ),
        Exit::Code(255) if via_ssh => (
            Class::TransientInfra,
            "exit 255 from ssh: the staging host could not be reached".into(),
        ),
        Exit::Signal(s) => (
            Class::TransientInfra,
            format!("the staging suite was killed by signal {s}"),
        ),
        Exit::TimedOut => (Class::TransientInfra, "timed out".into()),
        Exit::Code(0) => (Class::CodePass, "exit 0".into()),
        Exit::Code(c) => (Class::CodeFail, format!("exit {c}")),
    }
}

/// Which runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tests,
    Staging,
}

/// What the runner does after classifying (design §3.3 and §6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write the report with this verdict and advance.
    Report {
        pass: bool,
    },
    /// Write a FAIL report saying the suite never finished, then advance (a rollback).
    ReportUnfinished,
    Hold,
    Defer,
}

/// `used` is how many infra retries the task already had since it entered the stage.
pub fn decide(kind: Kind, class: Class, used: u32, max: u32) -> Decision {
    match class {
        Class::CodePass => Decision::Report { pass: true },
        Class::CodeFail => Decision::Report { pass: false },
        Class::PermanentEnv => Decision::Hold,
        Class::TransientInfra if used < max => Decision::Defer,
        // A suite that never finishes is a code defect for tests, never for staging.
        Class::TransientInfra => match kind {
            Kind::Tests => Decision::ReportUnfinished,
            Kind::Staging => Decision::Hold,
        },
    }
}

/// The marker that identifies a deferred tester job in its prompt (the budget counts these).
pub const TESTS_RETRY_MARKER: &str = "test-runner infra-retry";
pub const STAGING_RETRY_MARKER: &str = "staging-runner infra-retry";

/// Quote one argument for a POSIX shell (the remote side of ssh).
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `ssh -o BatchMode=yes -o ConnectTimeout=10 <user>@<host> <quoted argv>` (design §6.2).
pub fn ssh_wrap(user: &str, host: &str, argv: &[String]) -> Vec<String> {
    let remote: Vec<String> = argv.iter().map(|a| sh_quote(a)).collect();
    vec![
        "ssh".into(),
        "-o".into(),
        "BatchMode=yes".into(),
        "-o".into(),
        "ConnectTimeout=10".into(),
        "--".into(),
        format!("{user}@{host}"),
        remote.join(" "),
    ]
}

/// One smoke check's result for the report.
#[derive(Debug, Clone)]
pub struct SmokeLine {
    pub url: String,
    pub ok: bool,
    pub detail: String,
}

/// Everything a report says.
pub struct ReportFacts<'a> {
    pub work_item: &'a str,
    pub pass: bool,
    /// The suite did not complete (the transient budget ran out).
    pub unfinished: bool,
    pub class: Class,
    pub reason: &'a str,
    pub exit_code: Option<i32>,
    pub duration_s: f64,
    pub command: &'a str,
    pub smoke: &'a [SmokeLine],
    pub output_tail: &'a str,
    pub created_at: &'a str,
    pub run_id: &'a str,
    pub host: &'a str,
}

fn yaml_str(s: &str) -> String {
    // A double-quoted YAML scalar: JSON string escaping is valid YAML.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// `13-test-report.md`: `result` and `status` always agree, so a negative token can never sit
/// in a PASS report's verdict keys.
pub fn test_report(f: &ReportFacts<'_>) -> String {
    let (result, status) = if f.pass {
        ("PASS", "success")
    } else {
        ("FAIL", "failed")
    };
    let smoke_summary = if f.smoke.is_empty() {
        "none".to_string()
    } else if f.smoke.iter().all(|s| s.ok) {
        format!("{} ok", f.smoke.len())
    } else {
        format!(
            "{} of {} not ok",
            f.smoke.iter().filter(|s| !s.ok).count(),
            f.smoke.len()
        )
    };
    let mut s = format!(
        "---\nresult: {result}\nwork_item: {wi}\nstage: testing\nauthor_agent: test-runner\nstatus: {status}\ncreated_at: {at}\nrun_id: {run}\nmodel_used: n/a\nexit_code: {code}\nduration_s: {dur:.1}\ncommand: {cmd}\nsmoke: {smoke}\n---\n",
        wi = f.work_item,
        at = f.created_at,
        run = f.run_id,
        code = f
            .exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "null".into()),
        dur = f.duration_s,
        cmd = yaml_str(f.command),
        smoke = yaml_str(&smoke_summary),
    );
    let _ = write!(
        s,
        "# Test report: {}\n\n## Summary\n\n{}\n\n## Environment\n\n- runner: orch test-runner (deterministic, no LLM)\n- host: {}\n- command: `{}`\n- outcome class: {}\n",
        f.work_item,
        summary(f),
        f.host,
        f.command,
        f.class.as_str()
    );
    s.push_str("\n## Smoke checks\n\n");
    if f.smoke.is_empty() {
        s.push_str("none configured\n");
    }
    for l in f.smoke {
        let _ = writeln!(
            s,
            "- {} {}: {}",
            if l.ok { "ok" } else { "not ok" },
            l.url,
            l.detail
        );
    }
    // The failed smoke checks lead the output section: it is what a rollback hands to the
    // developer, and a suite that passed says nothing about them.
    let failed_smoke: String = f
        .smoke
        .iter()
        .filter(|l| !l.ok)
        .map(|l| format!("smoke check failed: {} {}\n", l.url, l.detail))
        .collect();
    let _ = write!(
        s,
        "\n## Test output\n\n```text\n{}{}\n```\n\n## Conclusion\n\n{}\n",
        failed_smoke,
        f.output_tail.replace("```", "ʼʼʼ"),
        conclusion(f, "the change may go on to staging", "back to development")
    );
    s
}

/// `15-staging-log.md`.
pub fn staging_log(f: &ReportFacts<'_>) -> String {
    let (verdict, status) = if f.pass {
        ("SUCCESS", "success")
    } else {
        ("FAILED", "failed")
    };
    let mut s = format!(
        "---\nstaging_status: {verdict}\nwork_item: {wi}\nstage: deploy-staging\nauthor_agent: staging-runner\nstatus: {status}\ncreated_at: {at}\nrun_id: {run}\nmodel_used: n/a\nexit_code: {code}\nduration_s: {dur:.1}\ncommand: {cmd}\n---\n",
        wi = f.work_item,
        at = f.created_at,
        run = f.run_id,
        code = f
            .exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "null".into()),
        dur = f.duration_s,
        cmd = yaml_str(f.command),
    );
    let _ = write!(
        s,
        "# Staging log: {}\n\n## Summary\n\n{}\n\n## Environment\n\n- runner: orch staging-runner (deterministic, no LLM)\n- host: {}\n- command: `{}`\n- outcome class: {}\n\n## Output\n\n```text\n{}\n```\n\n## Conclusion\n\n{}\n",
        f.work_item,
        summary(f),
        f.host,
        f.command,
        f.class.as_str(),
        f.output_tail.replace("```", "ʼʼʼ"),
        conclusion(
            f,
            "the change may go on to the production deploy",
            "back to development"
        )
    );
    s
}

fn summary(f: &ReportFacts<'_>) -> String {
    if f.unfinished {
        format!(
            "The suite did not complete ({}); after the retries for infrastructure trouble it is treated as a code defect.",
            f.reason
        )
    } else if f.pass {
        format!(
            "The suite ran and passed ({}) in {:.1} s.",
            f.reason, f.duration_s
        )
    } else {
        format!(
            "The suite ran and did not pass ({}) in {:.1} s.",
            f.reason, f.duration_s
        )
    }
}

fn conclusion(f: &ReportFacts<'_>, pass: &str, fail: &str) -> String {
    if f.pass {
        format!("Passed: {pass}.")
    } else {
        format!("Not passed: {fail}, with the output above.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::frontmatter::{self, Verdict};

    fn markers(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tests_classification() {
        let none: Vec<String> = vec![];
        let spawn = Exit::SpawnError {
            not_found_or_denied: true,
            message: "not found".into(),
        };
        type Case<'a> = (Exit, &'a str, Vec<String>, Option<&'a str>, Class);
        let cases: Vec<Case<'_>> = vec![
            (Exit::Code(0), "", none.clone(), None, Class::CodePass),
            (Exit::Code(1), "", none.clone(), None, Class::CodeFail),
            (Exit::Code(3), "", none.clone(), None, Class::CodeFail),
            (
                Exit::Code(0),
                "",
                none.clone(),
                Some("500"),
                Class::CodeFail,
            ),
            (Exit::Code(126), "", none.clone(), None, Class::PermanentEnv),
            (Exit::Code(127), "", none.clone(), None, Class::PermanentEnv),
            (spawn, "", none.clone(), None, Class::PermanentEnv),
            (
                Exit::Code(1),
                "Error: No such container: db",
                markers(&["No such container"]),
                None,
                Class::PermanentEnv,
            ),
            // Empty by default: a failing test may print "is not running".
            (
                Exit::Code(1),
                "server is not running",
                none.clone(),
                None,
                Class::CodeFail,
            ),
            (
                Exit::TimedOut,
                "",
                none.clone(),
                None,
                Class::TransientInfra,
            ),
            (
                Exit::Signal(9),
                "",
                none.clone(),
                None,
                Class::TransientInfra,
            ),
        ];
        for (exit, stderr, m, smoke, want) in cases {
            assert_eq!(
                classify_tests(&exit, stderr, &m, smoke).0,
                want,
                "{exit:?} {stderr}"
            );
        }
    }

    #[test]
    fn staging_classification_follows_the_spec_order() {
        let m = markers(&STAGING_MARKERS);
        assert_eq!(
            classify_staging(&Exit::TimedOut, "command not found", &m, false).0,
            Class::TransientInfra
        );
        assert_eq!(
            classify_staging(&Exit::Code(1), "bash: x: command not found", &m, false).0,
            Class::PermanentEnv
        );
        assert_eq!(
            classify_staging(&Exit::Code(127), "", &m, false).0,
            Class::PermanentEnv
        );
        assert_eq!(
            classify_staging(&Exit::Code(255), "", &m, true).0,
            Class::TransientInfra
        );
        assert_eq!(
            classify_staging(&Exit::Code(255), "", &m, false).0,
            Class::CodeFail
        );
        assert_eq!(
            classify_staging(&Exit::Code(0), "", &m, true).0,
            Class::CodePass
        );
        assert_eq!(
            classify_staging(&Exit::Code(2), "", &m, true).0,
            Class::CodeFail
        );
    }

    #[test]
    fn decisions_and_budgets() {
        assert_eq!(
            decide(Kind::Tests, Class::TransientInfra, 0, 2),
            Decision::Defer
        );
        assert_eq!(
            decide(Kind::Tests, Class::TransientInfra, 2, 2),
            Decision::ReportUnfinished
        );
        assert_eq!(
            decide(Kind::Staging, Class::TransientInfra, 2, 2),
            Decision::Hold
        );
        assert_eq!(
            decide(Kind::Staging, Class::PermanentEnv, 0, 2),
            Decision::Hold
        );
        assert_eq!(
            decide(Kind::Tests, Class::CodeFail, 0, 2),
            Decision::Report { pass: false }
        );
    }

    #[test]
    fn ssh_quoting_keeps_arguments_literal() {
        assert_eq!(sh_quote("plain-arg_1.sh"), "plain-arg_1.sh");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(sh_quote(""), "''");
        let w = ssh_wrap("deploy", "stage1", &["./check".into(), "a b".into()]);
        assert_eq!(w.last().unwrap(), "./check 'a b'");
        assert_eq!(w[0], "ssh");
    }

    fn facts<'a>(pass: bool, smoke: &'a [SmokeLine]) -> ReportFacts<'a> {
        ReportFacts {
            work_item: "SHOP-7",
            pass,
            unfinished: false,
            class: if pass {
                Class::CodePass
            } else {
                Class::CodeFail
            },
            reason: "exit 1",
            exit_code: Some(if pass { 0 } else { 1 }),
            duration_s: 2.04,
            command: "cargo test -- \"quoted\"",
            smoke,
            output_tail: "test a ... FAILED\n```\nassertion failed",
            created_at: "2026-11-30T08:00:00Z",
            run_id: "r1",
            host: "ci1",
        }
    }

    #[test]
    fn reports_round_trip_through_the_gate_parser() {
        let smoke = [SmokeLine {
            url: "http://127.0.0.1:1/health".into(),
            ok: true,
            detail: "200".into(),
        }];
        let pass = test_report(&facts(true, &smoke));
        assert!(
            matches!(
                frontmatter::verdict_of(pass.as_bytes(), &frontmatter::TESTS),
                Verdict::Pass { .. }
            ),
            "{pass}"
        );
        let fail = test_report(&facts(false, &[]));
        assert!(matches!(
            frontmatter::verdict_of(fail.as_bytes(), &frontmatter::TESTS),
            Verdict::Fail { .. }
        ));
        assert!(fail.contains("## Test output") && fail.contains("assertion failed"));
        let s = staging_log(&facts(true, &[]));
        assert!(
            matches!(
                frontmatter::verdict_of(s.as_bytes(), &frontmatter::STAGING),
                Verdict::Pass { .. }
            ),
            "{s}"
        );
        let s = staging_log(&facts(false, &[]));
        assert!(matches!(
            frontmatter::verdict_of(s.as_bytes(), &frontmatter::STAGING),
            Verdict::Fail { .. }
        ));
    }
}
