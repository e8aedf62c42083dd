//! The last mile as pure rules (design §7): the secret scan of the lines a branch adds, reading
//! and judging a coverage figure, the post-deploy health verdict, the proof that a merge landed,
//! and the reports orch writes for each step (`17-security-report.md`, `19-merge-gate.md`,
//! `18-coverage-report.md`, `14-deploy-log.md`, `16-post-deploy-log.md`).
//!
//! Not here: running anything (the scanner, the suite, the hook, the probes) or deciding the
//! order of the steps (`ops::release`).

use std::fmt::Write as _;

/// The release steps as recorded for one visit of a stage (`release_steps.step`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    Security,
    MergeGate,
    Coverage,
    DeployHook,
    Merge,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Security => "security",
            Step::MergeGate => "merge-gate",
            Step::Coverage => "coverage",
            Step::DeployHook => "deploy-hook",
            Step::Merge => "merge",
        }
    }

    pub fn parse(s: &str) -> Option<Step> {
        [
            Step::Security,
            Step::MergeGate,
            Step::Coverage,
            Step::DeployHook,
            Step::Merge,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }

    /// The report the step writes, relative to `docs/work-items/<WI>/`.
    pub fn file(self) -> &'static str {
        match self {
            Step::Security => "17-security-report.md",
            Step::MergeGate => "19-merge-gate.md",
            Step::Coverage => "18-coverage-report.md",
            Step::DeployHook => "14-deploy-log.md",
            Step::Merge => "20-merge.md",
        }
    }
}

/// What a recorded step says (`release_steps.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepStatus {
    Pass,
    Fail,
    /// The deploy hook was started and its end is not recorded (design §7.3 phase B).
    Initiated,
    /// The merge was asked for and its proof did not hold: a human decides.
    Unproven,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pass => "pass",
            StepStatus::Fail => "fail",
            StepStatus::Initiated => "initiated",
            StepStatus::Unproven => "unproven",
        }
    }

    pub fn parse(s: &str) -> Option<StepStatus> {
        [
            StepStatus::Pass,
            StepStatus::Fail,
            StepStatus::Initiated,
            StepStatus::Unproven,
        ]
        .into_iter()
        .find(|st| st.as_str() == s)
    }
}

// ---- the secret scan ----

/// One line a diff adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added<'a> {
    pub file: String,
    pub line: u32,
    pub text: &'a str,
}

/// The lines `git diff -U0 --no-color` adds, with their file and line number in the new side.
/// Deleted files and binary files add nothing; a path git quotes is kept as quoted.
pub fn added_lines(diff: &str) -> Vec<Added<'_>> {
    let mut out = Vec::new();
    let mut file: Option<String> = None;
    let mut next: u32 = 0;
    for line in diff.lines() {
        if let Some(rest) = line.strip_prefix("+++ ") {
            file = match rest {
                "/dev/null" => None,
                p => Some(p.strip_prefix("b/").unwrap_or(p).to_string()),
            };
        } else if line.starts_with("--- ") || line.starts_with("diff --git ") {
            if line.starts_with("diff --git ") {
                file = None;
            }
        } else if let Some(h) = line.strip_prefix("@@ ") {
            // `@@ -a,b +c,d @@`: the new side starts at line c.
            next = h
                .split_whitespace()
                .find_map(|w| w.strip_prefix('+'))
                .and_then(|w| w.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        } else if let Some(text) = line.strip_prefix('+') {
            if let Some(f) = &file {
                out.push(Added {
                    file: f.clone(),
                    line: next,
                    text,
                });
            }
            next = next.saturating_add(1);
        }
    }
    out
}

/// A secret-looking value in an added line: where, and which rule. Never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: String,
    pub line: u32,
    pub rule: &'static str,
}

/// The built-in rules: private keys and the common token formats with a fixed prefix (so a
/// match is rarely a false alarm).
pub fn scan(lines: &[Added<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in lines {
        if let Some(rule) = rule_of(l.text) {
            out.push(Finding {
                file: l.file.clone(),
                line: l.line,
                rule,
            });
        }
    }
    out
}

fn rule_of(text: &str) -> Option<&'static str> {
    if text.contains("-----BEGIN ") && text.contains("PRIVATE KEY") {
        return Some("private key");
    }
    let alnum_upper = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit();
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let token = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    type Rule<'f> = (&'static str, usize, &'f dyn Fn(char) -> bool, &'static str);
    let rules: &[Rule<'_>] = &[
        ("AKIA", 16, &alnum_upper, "AWS access key id"),
        ("ASIA", 16, &alnum_upper, "AWS access key id"),
        ("ghp_", 36, &alnum, "GitHub token"),
        ("gho_", 36, &alnum, "GitHub token"),
        ("ghu_", 36, &alnum, "GitHub token"),
        ("ghs_", 36, &alnum, "GitHub token"),
        ("ghr_", 36, &alnum, "GitHub token"),
        ("github_pat_", 40, &token, "GitHub token"),
        ("glpat-", 20, &token, "GitLab token"),
        ("xoxb-", 20, &token, "Slack token"),
        ("xoxp-", 20, &token, "Slack token"),
        ("xoxa-", 20, &token, "Slack token"),
        ("sk_live_", 20, &alnum, "Stripe secret key"),
        ("rk_live_", 20, &alnum, "Stripe secret key"),
        ("AIza", 35, &token, "Google API key"),
        ("sk-ant-", 32, &token, "Anthropic API key"),
        ("sk-proj-", 32, &token, "OpenAI API key"),
    ];
    for (prefix, min, class, rule) in rules {
        let mut from = 0;
        while let Some(i) = text[from..].find(prefix) {
            let start = from + i;
            // The prefix must begin a word: `xAKIA…` inside an identifier is not a key id.
            let boundary = text[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_ascii_alphanumeric());
            let run = text[start + prefix.len()..]
                .chars()
                .take_while(|c| class(*c))
                .count();
            if boundary && run >= *min {
                return Some(rule);
            }
            from = start + prefix.len();
        }
    }
    None
}

/// Facts common to every report orch writes.
#[derive(Debug, Clone)]
pub struct ReportHead<'a> {
    pub work_item: &'a str,
    pub stage: &'a str,
    pub created_at: &'a str,
    pub run_id: &'a str,
}

fn frontmatter(h: &ReportHead<'_>, keys: &[(&str, String)]) -> String {
    let mut s = String::from("---\n");
    for (k, v) in keys {
        let _ = writeln!(s, "{k}: {v}");
    }
    let _ = writeln!(
        s,
        "work_item: {}\nstage: {}\nauthor_agent: orch\ncreated_at: {}\nrun_id: {}\n---",
        h.work_item, h.stage, h.created_at, h.run_id
    );
    s
}

/// `17-security-report.md`. `scanner_output` is the external scanner's tail (it runs with
/// redaction); findings of the built-in scan never carry the value.
pub fn security_report(
    h: &ReportHead<'_>,
    pass: bool,
    scanner: &str,
    range: &str,
    findings: &[Finding],
    scanner_output: &str,
) -> String {
    let status = if pass { "PASS" } else { "FAIL" };
    let mut s = frontmatter(
        h,
        &[
            ("security_status", status.into()),
            ("scanner", scanner.into()),
            ("range", range.into()),
            ("findings", findings.len().to_string()),
        ],
    );
    let _ = writeln!(s, "\n# Secret scan of {}\n", h.work_item);
    let _ = writeln!(
        s,
        "Scanner: {scanner}. Range: `{range}`. Result: **{status}**.\n"
    );
    let _ = writeln!(s, "## Findings\n");
    if findings.is_empty() && scanner_output.trim().is_empty() {
        let _ = writeln!(s, "None.");
    }
    for f in findings {
        let _ = writeln!(
            s,
            "- `{}:{}`: {} (the value is not repeated here; remove it and rotate it)",
            f.file, f.line, f.rule
        );
    }
    if !scanner_output.trim().is_empty() {
        let _ = writeln!(s, "\n```text\n{}\n```", scanner_output.trim_end());
    }
    s
}

/// `19-merge-gate.md`: the rebase onto main, the push and the re-test.
pub fn merge_gate_report(
    h: &ReportHead<'_>,
    pass: bool,
    base: &str,
    validated: Option<&str>,
    what: &str,
    detail: &str,
) -> String {
    let status = if pass { "PASS" } else { "FAIL" };
    let mut keys = vec![
        ("merge_gate_status", status.to_string()),
        ("base", base.to_string()),
    ];
    if let Some(v) = validated {
        keys.push(("validated_sha", v.to_string()));
    }
    let mut s = frontmatter(h, &keys);
    let _ = writeln!(s, "\n# Merge gate of {}\n", h.work_item);
    let _ = writeln!(s, "{what}\n");
    if !detail.trim().is_empty() {
        let _ = writeln!(s, "## Output\n\n```text\n{}\n```", detail.trim_end());
    }
    s
}

/// The figure a coverage command printed: the last `NN.N%` of its output, else a bare number
/// on its last non-empty line.
pub fn parse_percent(output: &str) -> Option<f64> {
    let mut last = None;
    for (i, c) in output.char_indices() {
        if c != '%' {
            continue;
        }
        let head = &output[..i];
        let start = head
            .char_indices()
            .rev()
            .take_while(|(_, ch)| ch.is_ascii_digit() || *ch == '.')
            .last()
            .map(|(j, _)| j);
        if let Some(j) = start
            && let Ok(v) = head[j..].parse::<f64>()
        {
            last = Some(v);
        }
    }
    last.or_else(|| {
        output
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| l.trim().parse::<f64>().ok())
    })
    .filter(|v| v.is_finite() && (0.0..=100.0).contains(v))
}

/// Judge a coverage figure: at or above `floor`, and (ratchet) not below `baseline` by more
/// than `epsilon`. `Ok(reason)` passes.
pub fn judge_coverage(
    percent: f64,
    floor: Option<f64>,
    baseline: Option<f64>,
    ratchet: bool,
    epsilon: f64,
) -> Result<String, String> {
    if let Some(f) = floor
        && percent < f
    {
        return Err(format!("coverage {percent:.2}% is below the floor {f:.2}%"));
    }
    if ratchet
        && let Some(b) = baseline
        && percent + epsilon < b
    {
        return Err(format!(
            "coverage {percent:.2}% dropped below the baseline {b:.2}% (epsilon {epsilon})"
        ));
    }
    let mut why = format!("coverage {percent:.2}%");
    if let Some(f) = floor {
        let _ = write!(why, ", floor {f:.2}%");
    }
    if let Some(b) = baseline.filter(|_| ratchet) {
        let _ = write!(why, ", baseline {b:.2}%");
    }
    Ok(why)
}

/// `18-coverage-report.md`.
pub fn coverage_report(
    h: &ReportHead<'_>,
    percent: Option<f64>,
    verdict: &Result<String, String>,
    output: &str,
) -> String {
    let status = if verdict.is_ok() { "PASS" } else { "FAIL" };
    let mut keys = vec![("coverage_status", status.to_string())];
    if let Some(p) = percent {
        keys.push(("coverage_percent", format!("{p:.2}")));
    }
    let mut s = frontmatter(h, &keys);
    let why = match verdict {
        Ok(w) | Err(w) => w,
    };
    let _ = writeln!(s, "\n# Coverage of {}\n\n{why}\n", h.work_item);
    if !output.trim().is_empty() {
        let _ = writeln!(s, "## Output\n\n```text\n{}\n```", output.trim_end());
    }
    s
}

/// `14-deploy-log.md` of a deploy hook (design §7.3 phase C).
pub fn deploy_log(
    h: &ReportHead<'_>,
    exit_code: Option<i32>,
    ending: &str,
    output: &str,
) -> String {
    let ok = exit_code == Some(0);
    let status = if ok { "SUCCESS" } else { "FAILED" };
    let code = exit_code
        .map(|c| c.to_string())
        .unwrap_or_else(|| "none".into());
    let mut s = frontmatter(
        h,
        &[("deploy_status", status.into()), ("hook_exit_code", code)],
    );
    let _ = writeln!(
        s,
        "\n# Deploy of {}\n\nThe deploy hook {ending}.\n",
        h.work_item
    );
    if !output.trim().is_empty() {
        let _ = writeln!(s, "## Output\n\n```text\n{}\n```", output.trim_end());
    }
    s
}

// ---- the merge proof ----

/// Why a merge counts as landed: the validated commit is in main (merge and rebase styles), or
/// main holds a commit with the validated tree whose parent was main before (squash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    Proven(String),
    NotProven(String),
}

/// The proof over git facts gathered after a fresh fetch.
pub fn prove(
    squash: bool,
    validated_in_main: bool,
    merged_tree_matches: Option<bool>,
    validated: &str,
    main: &str,
) -> Proof {
    let short = |s: &str| s.chars().take(12).collect::<String>();
    if validated_in_main {
        return Proof::Proven(format!(
            "{} is an ancestor of main at {}",
            short(validated),
            short(main)
        ));
    }
    if squash && merged_tree_matches == Some(true) {
        return Proof::Proven(format!(
            "main at {} holds a squash of {} (same tree)",
            short(main),
            short(validated)
        ));
    }
    Proof::NotProven(format!(
        "{} is not in main at {} after a fresh fetch",
        short(validated),
        short(main)
    ))
}

// ---- the post-deploy watch ----

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Healthy(String),
    Degraded(String),
}

/// The verdict over probe rounds (`true`: every URL answered as expected): `fail_threshold`
/// failed rounds in a row, or a share of failed rounds above `error_ratio`, is DEGRADED.
pub fn judge_health(rounds: &[bool], fail_threshold: u32, error_ratio: f64) -> Health {
    let mut run = 0u32;
    let mut worst = 0u32;
    for ok in rounds {
        run = if *ok { 0 } else { run + 1 };
        worst = worst.max(run);
    }
    let failed = rounds.iter().filter(|ok| !**ok).count();
    let ratio = if rounds.is_empty() {
        0.0
    } else {
        failed as f64 / rounds.len() as f64
    };
    if worst >= fail_threshold {
        return Health::Degraded(format!(
            "{worst} failed probe rounds in a row (threshold {fail_threshold})"
        ));
    }
    if ratio > error_ratio {
        return Health::Degraded(format!(
            "{failed} of {} probe rounds failed ({:.0}% > {:.0}%)",
            rounds.len(),
            ratio * 100.0,
            error_ratio * 100.0
        ));
    }
    Health::Healthy(format!("{failed} of {} probe rounds failed", rounds.len()))
}

/// `16-post-deploy-log.md`.
pub fn post_deploy_log(h: &ReportHead<'_>, health: &Health, lines: &[String]) -> String {
    let (status, why) = match health {
        Health::Healthy(w) => ("HEALTHY", w),
        Health::Degraded(w) => ("DEGRADED", w),
    };
    let mut s = frontmatter(h, &[("post_deploy_status", status.into())]);
    let _ = writeln!(
        s,
        "\n# Post-deploy watch of {}\n\n{status}: {why}.\n",
        h.work_item
    );
    let _ = writeln!(s, "## Probes\n");
    for l in lines {
        let _ = writeln!(s, "- {l}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "diff --git a/src/a.rs b/src/a.rs
index 1111111..2222222 100644
--- a/src/a.rs
+++ b/src/a.rs
@@ -3,0 +4,2 @@ fn x() {
+let key = \"AKIAABCDEFGHIJKLMNOP\";
+let fine = 1;
@@ -10 +12 @@
-old
+-----BEGIN OPENSSH PRIVATE KEY-----
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-AKIAABCDEFGHIJKLMNOP
diff --git a/docs/n.md b/docs/n.md
new file mode 100644
--- /dev/null
+++ b/docs/n.md
@@ -0,0 +1 @@
+token: ghp_0123456789abcdefghijklmnopqrstuvwxyz
";

    #[test]
    fn added_lines_carry_their_file_and_new_line_number() {
        let a = added_lines(DIFF);
        let at: Vec<(&str, u32)> = a.iter().map(|l| (l.file.as_str(), l.line)).collect();
        assert_eq!(
            at,
            [
                ("src/a.rs", 4),
                ("src/a.rs", 5),
                ("src/a.rs", 12),
                ("docs/n.md", 1)
            ]
        );
    }

    #[test]
    fn the_scan_names_file_line_and_rule_never_the_value() {
        let f = scan(&added_lines(DIFF));
        let got: Vec<(&str, u32, &str)> = f
            .iter()
            .map(|x| (x.file.as_str(), x.line, x.rule))
            .collect();
        assert_eq!(
            got,
            [
                ("src/a.rs", 4, "AWS access key id"),
                ("src/a.rs", 12, "private key"),
                ("docs/n.md", 1, "GitHub token"),
            ]
        );
        let h = ReportHead {
            work_item: "SHOP-1",
            stage: "deploy-staging",
            created_at: "t",
            run_id: "r",
        };
        let r = security_report(&h, false, "builtin", "origin/main..abc", &f, "");
        assert!(r.contains("security_status: FAIL"), "{r}");
        assert!(r.contains("`src/a.rs:4`: AWS access key id"), "{r}");
        assert!(!r.contains("AKIAABCDEFGHIJKLMNOP"), "{r}");
        assert!(!r.contains("ghp_0123"), "{r}");
    }

    #[test]
    fn near_misses_are_not_secrets() {
        for text in [
            "let s = \"AKIA-short\";",
            "xAKIAABCDEFGHIJKLMNOP",
            "ghp_short",
            "-----BEGIN PUBLIC KEY-----",
            "sk_test_0123456789abcdefghij",
        ] {
            assert_eq!(rule_of(text), None, "{text}");
        }
        assert_eq!(
            rule_of("-----BEGIN RSA PRIVATE KEY-----"),
            Some("private key")
        );
    }

    #[test]
    fn coverage_figures_are_read_and_judged() {
        assert_eq!(parse_percent("lines: 81.3%\nTOTAL 83.25%\n"), Some(83.25));
        assert_eq!(parse_percent("noise\n77.5\n"), Some(77.5));
        assert_eq!(parse_percent("no figure"), None);
        assert_eq!(parse_percent("150%"), None);
        assert!(judge_coverage(80.0, Some(80.0), None, true, 0.1).is_ok());
        assert!(judge_coverage(79.9, Some(80.0), None, true, 0.1).is_err());
        assert!(judge_coverage(84.95, None, Some(85.0), true, 0.1).is_ok());
        assert!(judge_coverage(84.8, None, Some(85.0), true, 0.1).is_err());
        assert!(judge_coverage(10.0, None, Some(85.0), false, 0.1).is_ok());
    }

    #[test]
    fn a_merge_is_proven_by_ancestry_or_a_squash_of_the_same_tree() {
        assert!(matches!(
            prove(false, true, None, "a", "m"),
            Proof::Proven(_)
        ));
        assert!(matches!(
            prove(false, false, Some(true), "a", "m"),
            Proof::NotProven(_)
        ));
        assert!(matches!(
            prove(true, false, Some(true), "a", "m"),
            Proof::Proven(_)
        ));
        assert!(matches!(
            prove(true, false, Some(false), "a", "m"),
            Proof::NotProven(_)
        ));
    }

    #[test]
    fn health_counts_runs_and_ratios() {
        assert!(matches!(
            judge_health(&[true, false, false, true], 3, 0.6),
            Health::Healthy(_)
        ));
        assert!(matches!(
            judge_health(&[true, false, false, false], 3, 0.9),
            Health::Degraded(_)
        ));
        assert!(matches!(
            judge_health(&[false, true, false, true, false], 3, 0.5),
            Health::Degraded(_)
        ));
        assert!(matches!(judge_health(&[], 3, 0.5), Health::Healthy(_)));
    }

    #[test]
    fn reports_carry_the_verdict_keys_the_gates_read() {
        let h = ReportHead {
            work_item: "SHOP-1",
            stage: "deploy",
            created_at: "t",
            run_id: "r",
        };
        let d = deploy_log(&h, Some(0), "exited 0", "ok");
        assert!(d.contains("deploy_status: SUCCESS") && d.contains("hook_exit_code: 0"));
        let d = deploy_log(&h, Some(3), "exited 3", "");
        assert!(d.contains("deploy_status: FAILED") && d.contains("hook_exit_code: 3"));
        let c = coverage_report(&h, Some(81.0), &Ok("coverage 81%".into()), "");
        assert!(c.contains("coverage_status: PASS") && c.contains("coverage_percent: 81.00"));
        let m = merge_gate_report(&h, false, "abc", None, "conflict", "src/a.rs");
        assert!(m.contains("merge_gate_status: FAIL"));
    }
}
