//! Exit gates and the decision `orch advance` applies (design §3.1–§3.4, §3.7 breakpoints).
//! Pure: `ops::advance` gathers the facts (artifact bytes and blob ids from git, approvals and
//! CI status from the database), this module decides, and `ops::advance` applies the decision
//! with compare-and-swap writes.

use crate::domain::frontmatter::{self, Verdict};
use crate::domain::release::{Step, StepStatus};
use crate::domain::stage::{ANALYSIS_FILES, GateKind, Role, Stage, Track};

/// The marker recorded at stage entry when the verdict artifact (or the branch) did not exist.
pub const ABSENT: &str = "absent";

/// A verdict artifact as found in git.
#[derive(Debug, Clone, Default)]
pub struct Artifact {
    pub file: String,
    /// The git blob id, or `None` when the file does not exist.
    pub blob_id: Option<String>,
    pub bytes: Option<Vec<u8>>,
    /// Set when the file exists but is not read: not a regular file, or too large. It
    /// completes "`<file>` …".
    pub refused: Option<String>,
}

/// What the forge (or `ci.mode: command`) says about the branch head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CiState {
    Success,
    Failure(String),
    Pending,
}

/// How the development gate is decided for a repo (`ci.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CiGate {
    /// A code commit since entry.
    CodeChange,
    /// The recorded CI status of the branch head.
    Status,
}

/// Everything the gate of the current stage may look at. Fields a stage does not use stay at
/// their defaults; `ops::advance` only gathers what the stage needs.
#[derive(Debug, Clone, Default)]
pub struct GateFacts {
    pub work_item: String,
    /// Analysis files that do not exist.
    pub analysis_missing: Vec<&'static str>,
    /// `orch approve`, the tracker's *Approved*, or the `auto-approve` label.
    pub approved: bool,
    pub adr_count: usize,
    pub ci_gate: Option<CiGate>,
    pub code_change: bool,
    pub ci_state: Option<CiState>,
    pub verdict: Option<Artifact>,
    /// What was recorded when the task entered the stage (blob id, branch head, or `absent`).
    pub entry_marker: Option<String>,
    /// Set when the repo has no contract for this stage: the gate passes with this reason.
    pub not_applicable: Option<&'static str>,
    /// Set when the stage's own contract is absent but its release steps apply (design §7):
    /// the stage's verdict passes with this reason and the release steps decide.
    pub own_work_na: Option<&'static str>,
    /// The release steps of this visit (`deploy-staging`, `deploy` of a repo that opts in).
    pub release: Option<ReleaseFacts>,
}

/// One release step as recorded for this visit of the stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFact {
    pub status: StepStatus,
    pub detail: String,
}

/// The release steps the gate of `deploy-staging` or `deploy` looks at: per step, `None` when
/// the repo does not configure it, `Some(None)` when it has not run in this visit.
#[derive(Debug, Clone, Default)]
pub struct ReleaseFacts {
    pub security: Option<Option<StepFact>>,
    pub merge_gate: Option<Option<StepFact>>,
    pub coverage: Option<Option<StepFact>>,
    pub merge: Option<Option<StepFact>>,
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateResult {
    Pass(String),
    /// The stage's work is missing or invalid (an artifact not written, not rewritten,
    /// malformed; no code commit): the role must do it (again).
    NotSatisfied(String),
    /// The work is there; a person (an approval) or an outside system (CI) has not answered
    /// yet. Nothing for the role to redo.
    Waiting(String),
    /// The work was judged and found wanting: roll back (a verdict failure).
    Fail {
        reason: String,
        feedback: String,
    },
    /// The stage's own work is done and a deterministic step of another role is due (a release
    /// step, design §7): `orch advance` queues that role's job.
    Pending {
        why: String,
        role: Role,
    },
}

/// Evaluate the exit gate of `stage` over `facts`.
pub fn evaluate(stage: Stage, facts: &GateFacts) -> GateResult {
    if let Some(na) = facts.not_applicable {
        return GateResult::Pass(na.to_string());
    }
    let own = match facts.own_work_na {
        Some(na) => GateResult::Pass(na.to_string()),
        None => own_gate(stage, facts),
    };
    match (own, &facts.release) {
        (GateResult::Pass(why), Some(r)) => release_gate(stage, why, r),
        (other, _) => other,
    }
}

/// The release steps after the stage's own verdict passed (design §7.1, §7.2), in order; the
/// first one not run is due, the first one failed rolls back.
fn release_gate(stage: Stage, why: String, r: &ReleaseFacts) -> GateResult {
    let steps: &[(&Option<Option<StepFact>>, Step, &str)] = match stage {
        Stage::DeployStaging => &[
            (&r.security, Step::Security, "security scan"),
            (&r.merge_gate, Step::MergeGate, "merge gate"),
            (&r.coverage, Step::Coverage, "coverage"),
        ],
        Stage::Deploy => &[(&r.merge, Step::Merge, "merge into main")],
        _ => &[],
    };
    let mut passed = vec![why];
    for (fact, step, label) in steps {
        match fact {
            None => {}
            Some(None) => {
                return GateResult::Pending {
                    why: format!("{}; {label} not run yet", passed.join("; ")),
                    role: Role::Releaser,
                };
            }
            Some(Some(f)) => match f.status {
                StepStatus::Pass => passed.push(format!("{label}: {}", first_line(&f.detail))),
                StepStatus::Fail => {
                    return GateResult::Fail {
                        reason: format!(
                            "{label} failed: {} (see `{}`)",
                            first_line(&f.detail),
                            step.file()
                        ),
                        feedback: f.detail.clone(),
                    };
                }
                StepStatus::Initiated | StepStatus::Unproven => {
                    return GateResult::Waiting(format!(
                        "{label}: {} (a human decides)",
                        first_line(&f.detail)
                    ));
                }
            },
        }
    }
    GateResult::Pass(passed.join("; "))
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The stage's own exit gate (its verdict, approval, ADRs or CI).
fn own_gate(stage: Stage, facts: &GateFacts) -> GateResult {
    let wi = &facts.work_item;
    match stage.spec().gate {
        GateKind::Start => GateResult::Pass("pipeline started".into()),
        GateKind::Terminal => GateResult::NotSatisfied(format!("`{wi}` is already `{stage}`")),
        GateKind::AnalysisApproved => {
            if !facts.analysis_missing.is_empty() {
                let missing: Vec<String> = facts
                    .analysis_missing
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect();
                GateResult::NotSatisfied(format!("missing {}", missing.join(", ")))
            } else if !facts.approved {
                GateResult::Waiting(format!(
                    "analysis files present; waiting for a human approval (`orch approve {wi}`)"
                ))
            } else {
                GateResult::Pass("analysis approved".into())
            }
        }
        GateKind::ArchitectureDone => {
            if facts.adr_count > 0 {
                GateResult::Pass(format!("{} ADR file(s) in `06-adr/`", facts.adr_count))
            } else {
                GateResult::NotSatisfied("`06-adr/` holds no `.md` file".into())
            }
        }
        // Whatever the CI says, it speaks for code written during this visit only: a status of
        // an older head (the architect's docs) must not pass the developer's stage.
        GateKind::CiGreen if !facts.code_change => GateResult::NotSatisfied(format!(
            "no commit outside `docs/work-items/` on the task branch since `{wi}` entered `development`"
        )),
        GateKind::CiGreen => match facts.ci_gate {
            Some(CiGate::Status) => match &facts.ci_state {
                Some(CiState::Success) => GateResult::Pass("ci: success".into()),
                Some(CiState::Failure(detail)) => GateResult::Fail {
                    reason: format!("ci: failure ({detail})"),
                    feedback: detail.clone(),
                },
                Some(CiState::Pending) => {
                    GateResult::Waiting("ci status of the branch head is pending".into())
                }
                None => GateResult::Waiting("no ci status recorded for the branch head".into()),
            },
            Some(CiGate::CodeChange) | None => {
                GateResult::Pass("code committed on the task branch".into())
            }
        },
        GateKind::ReviewerVerdict
        | GateKind::TestsPassed
        | GateKind::StagingStatus
        | GateKind::DeployStatus => verdict_gate(stage, facts),
    }
}

fn verdict_gate(stage: Stage, facts: &GateFacts) -> GateResult {
    let wi = &facts.work_item;
    let spec = stage.spec();
    let (Some(file), Some(vspec)) = (spec.verdict_file, spec.verdict) else {
        return GateResult::NotSatisfied(format!("`{stage}` has no verdict artifact"));
    };
    let Some(art) = &facts.verdict else {
        return GateResult::NotSatisfied(format!("`{file}` does not exist"));
    };
    if let Some(why) = &art.refused {
        return GateResult::NotSatisfied(format!("`{file}` {why}"));
    }
    let (Some(blob), Some(bytes)) = (&art.blob_id, &art.bytes) else {
        return GateResult::NotSatisfied(format!("`{file}` does not exist"));
    };
    if facts.entry_marker.as_deref() == Some(blob.as_str()) {
        return GateResult::NotSatisfied(format!(
            "`{file}` has not been rewritten since `{wi}` entered `{stage}`"
        ));
    }
    match frontmatter::verdict_of(bytes, vspec) {
        Verdict::Pass { key, value } => GateResult::Pass(format!("`{file}` has `{key}: {value}`")),
        Verdict::Fail { key, value } => GateResult::Fail {
            reason: format!("`{file}` has `{key}: {value}`"),
            feedback: feedback_of(stage, bytes),
        },
        Verdict::NotSatisfied { reason } => GateResult::NotSatisfied(format!("`{file}`: {reason}")),
    }
}

/// The text a rollback embeds in the next developer prompt (design §3.3).
pub fn feedback_of(stage: Stage, bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let body = body_of(&text);
    let picked = match stage {
        Stage::Review => {
            let findings = section(body, |h| h.contains("finding")).unwrap_or_default();
            let items = priority_items(&findings, &["P0", "P1"]);
            if !items.is_empty() {
                items
            } else if !findings.trim().is_empty() {
                findings
            } else {
                body.to_string()
            }
        }
        Stage::Testing => section(body, |h| h.contains("output"))
            .filter(|s| !s.trim().is_empty())
            .or_else(|| {
                let rows: Vec<&str> = body
                    .lines()
                    .filter(|l| has_token(l, &["FAIL", "FAILED"]))
                    .collect();
                (!rows.is_empty()).then(|| rows.join("\n"))
            })
            .or_else(|| section(body, |h| h.contains("conclusion")))
            .unwrap_or_else(|| body.to_string()),
        Stage::Created
        | Stage::Analysis
        | Stage::Architecture
        | Stage::Development
        | Stage::DeployStaging
        | Stage::Deploy
        | Stage::Done
        | Stage::Cancelled => body.to_string(),
    };
    match stage {
        // Test output is a tail already: its end (the failure) is what must survive the cap.
        Stage::Testing => cap_tail(picked.trim_end(), 16 * 1024),
        Stage::Created
        | Stage::Analysis
        | Stage::Architecture
        | Stage::Development
        | Stage::Review
        | Stage::DeployStaging
        | Stage::Deploy
        | Stage::Done
        | Stage::Cancelled => cap(picked.trim_end(), 16 * 1024),
    }
}

/// Keep the last `max` bytes, from a line boundary.
fn cap_tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    let rest = &s[start..];
    let rest = rest.split_once('\n').map(|(_, r)| r).unwrap_or(rest);
    format!("… (earlier output cut at {} KiB)\n{rest}", max / 1024)
}

/// The markdown after the frontmatter (or all of it when there is none).
fn body_of(text: &str) -> &str {
    let t = text.trim_start_matches('\u{feff}');
    let mut lines = t.split_inclusive('\n');
    if lines.next().map(|l| l.trim_end()) != Some("---") {
        return t;
    }
    let mut offset = t.find('\n').map(|i| i + 1).unwrap_or(t.len());
    for l in lines {
        offset += l.len();
        if l.trim_end() == "---" {
            return &t[offset..];
        }
    }
    t
}

/// The lines of the first `##` section whose lower-cased heading satisfies `pick`.
fn section(body: &str, pick: impl Fn(&str) -> bool) -> Option<String> {
    let mut out: Option<Vec<&str>> = None;
    for line in body.lines() {
        let is_heading = line.starts_with("## ") || line == "##";
        match (&mut out, is_heading) {
            (None, true) if pick(&line.to_lowercase()) => out = Some(Vec::new()),
            (Some(_), true) => break,
            (Some(v), false) => v.push(line),
            _ => {}
        }
    }
    out.map(|v| v.join("\n").trim_matches('\n').to_string())
}

/// The entries of a findings section that carry one of the priority tokens, with their
/// indented continuation lines. Two formats: items tagged one by one (`- P0: …`,
/// `- [P1] …`), and plain items under a priority subsection (`### P0 — Blocker` then
/// `- [ ] …`), whose heading is kept above them. An item tagged with a wanted priority is kept
/// under any heading.
fn priority_items(section: &str, prios: &[&str]) -> String {
    let mut out: Vec<&str> = Vec::new();
    // Under a `###` heading that names a priority: whether it is a wanted one.
    let mut under: Option<bool> = None;
    let mut keep = false;
    for line in section.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed.starts_with('#') {
            under = if has_token(trimmed, prios) {
                Some(true)
            } else if names_a_priority(trimmed) {
                Some(false)
            } else {
                None
            };
            if under == Some(true) {
                out.push(line);
            }
            keep = false;
            continue;
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        // A new top-level item or paragraph starts a new entry; indented lines continue it.
        if !indented {
            keep = !is_none_item(trimmed)
                && (has_token(line, prios) || (under == Some(true) && !names_a_priority(line)));
        }
        if keep {
            out.push(line);
        }
    }
    // Wanted headings whose items were all "none" leave nothing worth sending.
    if out.iter().all(|l| l.trim_start().starts_with('#')) {
        return String::new();
    }
    out.join("\n")
}

/// An item that says there is nothing (`- _(нет)_`, `- Нет.`, `- none`, `- n/a`).
fn is_none_item(line: &str) -> bool {
    let word: String = line
        .trim_start_matches(['-', '*', '+', ' '])
        .trim_start_matches("[ ]")
        .chars()
        .filter(|c| !matches!(c, '_' | '(' | ')' | '.' | '*' | ' ' | '—' | '-'))
        .flat_map(char::to_lowercase)
        .collect();
    matches!(word.as_str(), "" | "нет" | "none" | "na" | "n/a")
}

/// Whether a line carries any priority token `P0`…`P9`.
fn names_a_priority(line: &str) -> bool {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|t| {
            t.len() == 2
                && t.as_bytes()[0].eq_ignore_ascii_case(&b'p')
                && t.as_bytes()[1].is_ascii_digit()
        })
}

fn has_token(line: &str, tokens: &[&str]) -> bool {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|t| tokens.iter().any(|k| t.eq_ignore_ascii_case(k)))
}

fn cap(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n… (cut at {} KiB)", &s[..end], max / 1024)
}

/// What to do when a role's job ended `done` but left its stage's work missing or invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingPlan {
    /// Run the role once more, telling it what is missing.
    Rerun,
    /// It already had its second chance: hold the task for a human, with an alert.
    Hold,
}

/// `reruns`: the jobs of this visit that were already such a second chance.
pub fn on_missing(reruns: u32) -> MissingPlan {
    if reruns == 0 {
        MissingPlan::Rerun
    } else {
        MissingPlan::Hold
    }
}

/// The contracts a repo has, as far as the N/A passes are concerned.
#[derive(Debug, Clone, Copy)]
pub struct Contracts {
    pub staging: bool,
    /// `deploy.mode` other than `none`.
    pub deploy: bool,
    /// `merge` is configured: the merge and its proof are the work of `deploy` (design §7.2).
    pub merge: bool,
    /// Release steps run on the `deploy-staging → deploy` edge (security, merge gate,
    /// coverage): `deploy-staging` has work even without a staging contract.
    pub edge: bool,
}

/// Whether `stage` is passed as "not applicable" for a repo with these contracts (design §3.1):
/// no staging contract, or no deploy contract.
pub fn not_applicable(stage: Stage, contracts: Contracts) -> Option<&'static str> {
    match stage {
        Stage::DeployStaging => (!contracts.staging && !contracts.edge).then_some("staging N/A"),
        Stage::Deploy => (!contracts.deploy && !contracts.merge).then_some("deploy N/A"),
        Stage::Created
        | Stage::Analysis
        | Stage::Architecture
        | Stage::Development
        | Stage::Review
        | Stage::Testing
        | Stage::Done
        | Stage::Cancelled => None,
    }
}

/// One stage move, with the reason recorded in its history row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    pub from: Stage,
    pub to: Stage,
    pub reason: String,
}

/// What `orch advance` does after a gate passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardPlan {
    pub hops: Vec<Hop>,
    /// A `--before` breakpoint stopped the walk before entering this stage.
    pub breakpoint: Option<Stage>,
}

/// Walk forward from `stage` after its gate passed: stages without a contract pass as N/A in the
/// same call (each recorded as its own hop), and a `--before` breakpoint stops the walk before
/// the stage it names.
pub fn forward(
    stage: Stage,
    track: Track,
    pass_reason: &str,
    contracts: Contracts,
    breakpoint: Option<Stage>,
) -> ForwardPlan {
    let mut hops: Vec<Hop> = Vec::new();
    let mut from = stage;
    let mut reason = pass_reason.to_string();
    while let Some(to) = from.next(track) {
        if breakpoint == Some(to) {
            return ForwardPlan {
                hops,
                breakpoint: Some(to),
            };
        }
        let reason_here = if to == Stage::Done && !contracts.merge {
            format!("{reason}; merge: not configured")
        } else {
            reason.clone()
        };
        hops.push(Hop {
            from,
            to,
            reason: reason_here,
        });
        match not_applicable(to, contracts) {
            Some(r) => {
                reason = r.to_string();
                from = to;
            }
            None => break,
        }
    }
    ForwardPlan {
        hops,
        breakpoint: None,
    }
}

/// Rollback or block after a verdict failure (design §3.3): `retries` is the count so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPlan {
    RollBack { new_retries: u32 },
    Block,
}

pub fn on_failure(retries: u32, max_retries: u32) -> FailPlan {
    if retries >= max_retries {
        FailPlan::Block
    } else {
        FailPlan::RollBack {
            new_retries: retries + 1,
        }
    }
}

/// Whether all four analysis files are in `present`.
pub fn missing_analysis_files(present: impl Fn(&str) -> bool) -> Vec<&'static str> {
    ANALYSIS_FILES
        .iter()
        .copied()
        .filter(|f| !present(f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(file: &str, blob: &str, text: &str) -> Option<Artifact> {
        Some(Artifact {
            file: file.into(),
            blob_id: Some(blob.into()),
            bytes: Some(text.as_bytes().to_vec()),
            refused: None,
        })
    }

    #[test]
    fn a_refused_artifact_is_not_satisfied_with_its_reason() {
        let mut f = facts();
        f.verdict = Some(Artifact {
            file: "12-review.md".into(),
            blob_id: None,
            bytes: None,
            refused: Some("is a FIFO, not a regular file".into()),
        });
        assert_eq!(
            evaluate(Stage::Review, &f),
            GateResult::NotSatisfied("`12-review.md` is a FIFO, not a regular file".into())
        );
    }

    fn facts() -> GateFacts {
        GateFacts {
            work_item: "SHOP-7".into(),
            entry_marker: Some(ABSENT.into()),
            ..GateFacts::default()
        }
    }

    const NONE: Contracts = Contracts {
        staging: false,
        deploy: false,
        merge: false,
        edge: false,
    };

    #[test]
    fn analysis_needs_files_and_approval() {
        let mut f = facts();
        f.analysis_missing = vec!["02-trz.md"];
        f.approved = true;
        assert_eq!(
            evaluate(Stage::Analysis, &f),
            GateResult::NotSatisfied("missing `02-trz.md`".into())
        );
        f.analysis_missing.clear();
        f.approved = false;
        assert!(
            matches!(evaluate(Stage::Analysis, &f), GateResult::Waiting(r) if r.contains("orch approve SHOP-7"))
        );
        f.approved = true;
        assert!(matches!(evaluate(Stage::Analysis, &f), GateResult::Pass(_)));
    }

    #[test]
    fn review_verdicts() {
        let mut f = facts();
        assert_eq!(
            evaluate(Stage::Review, &f),
            GateResult::NotSatisfied("`12-review.md` does not exist".into())
        );
        f.verdict = art("12-review.md", "b1", "---\nverdict: APPROVED\n---\n");
        assert!(
            matches!(evaluate(Stage::Review, &f), GateResult::Pass(r) if r.contains("verdict: APPROVED"))
        );
        f.verdict = art(
            "12-review.md",
            "b2",
            "---\nverdict: REQUEST_CHANGES\n---\n# Review\n## Findings\n- P0: null deref in `parse`\n  at line 3\n- P2: naming\n- P1: missing test\n## Notes\nP0 elsewhere\n",
        );
        match evaluate(Stage::Review, &f) {
            GateResult::Fail { reason, feedback } => {
                assert!(reason.contains("REQUEST_CHANGES"));
                assert_eq!(
                    feedback,
                    "- P0: null deref in `parse`\n  at line 3\n- P1: missing test"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// The reviewer format of the original system puts plain `- [ ]` items under `### P0 —
    /// Blocker` / `### P1 — Must fix` headings: every item used to be dropped, leaving the
    /// developer two bare headings.
    #[test]
    fn review_findings_under_priority_subsections_reach_the_prompt() {
        let text = "---\nverdict: REQUEST_CHANGES\n---\n# Review SHOP-7 — x\n## Summary\nmeh\n\
            ## Findings\n\n### P0 — Blocker\n- [ ] **Null deref in `parse`.** It panics on\n  empty input.\n\
            - [ ] Lock is never released\n\n### P1 — Must fix\n- [ ] Missing test for retries\n\n\
            ### P2 — Should fix\n- [ ] Naming\n\n### P3 — Nice to have\n- _(нет)_\n\
            ## Verdict rationale\nP0 above\n";
        let fb = feedback_of(Stage::Review, text.as_bytes());
        assert_eq!(
            fb,
            "### P0 — Blocker\n- [ ] **Null deref in `parse`.** It panics on\n  empty input.\n\
             - [ ] Lock is never released\n### P1 — Must fix\n- [ ] Missing test for retries"
        );
        // Tagged items work too, and a tagged item under a P2 heading is still kept.
        let tagged = "---\nverdict: REQUEST_CHANGES\n---\n## Findings\n- [P1] retries untested\n\
            - [P3] typo\n### P2 — Should fix\n- [ ] naming\n- [P0] data loss\n";
        assert_eq!(
            feedback_of(Stage::Review, tagged.as_bytes()),
            "- [P1] retries untested\n- [P0] data loss"
        );
        // Empty P0/P1 subsections fall back to the whole findings section.
        let only_p2 = "---\nverdict: REQUEST_CHANGES\n---\n## Findings\n### P0 — Blocker\n- _(нет)_\n\
            ### P1 — Must fix\n- Нет.\n### P2 — Should fix\n- [ ] naming\n";
        assert!(feedback_of(Stage::Review, only_p2.as_bytes()).contains("- [ ] naming"));
    }

    #[test]
    fn a_verdict_unchanged_since_stage_entry_does_not_decide() {
        let mut f = facts();
        f.verdict = art("12-review.md", "same", "---\nverdict: APPROVED\n---\n");
        f.entry_marker = Some("same".into());
        assert_eq!(
            evaluate(Stage::Review, &f),
            GateResult::NotSatisfied(
                "`12-review.md` has not been rewritten since `SHOP-7` entered `review`".into()
            )
        );
    }

    #[test]
    fn tests_gate_negative_priority_and_feedback() {
        let mut f = facts();
        f.verdict = art(
            "13-test-report.md",
            "b",
            "---\nresult: PASS\nstatus: FAILED\n---\n## Summary\nok\n## Test output\nthread main panicked\n## Conclusion\nbad\n",
        );
        match evaluate(Stage::Testing, &f) {
            GateResult::Fail { feedback, .. } => assert_eq!(feedback, "thread main panicked"),
            other => panic!("{other:?}"),
        }
        f.verdict = art(
            "13-test-report.md",
            "b",
            "---\nresult: FAIL\n---\n| t1 | PASS |\n| t2 | FAIL |\n",
        );
        match evaluate(Stage::Testing, &f) {
            GateResult::Fail { feedback, .. } => assert_eq!(feedback, "| t2 | FAIL |"),
            other => panic!("{other:?}"),
        }
        f.verdict = art(
            "13-test-report.md",
            "b",
            "---\nresult: PASS\nstatus: stored\n---\n",
        );
        assert!(matches!(evaluate(Stage::Testing, &f), GateResult::Pass(_)));
        f.verdict = art("13-test-report.md", "b", "result: PASS\n");
        assert!(
            matches!(evaluate(Stage::Testing, &f), GateResult::NotSatisfied(r) if r.starts_with("`13-test-report.md`: "))
        );
    }

    #[test]
    fn development_gate_by_ci_mode() {
        let mut f = facts();
        f.ci_gate = Some(CiGate::CodeChange);
        assert!(matches!(
            evaluate(Stage::Development, &f),
            GateResult::NotSatisfied(_)
        ));
        f.code_change = true;
        assert!(matches!(
            evaluate(Stage::Development, &f),
            GateResult::Pass(_)
        ));
        f.ci_gate = Some(CiGate::Status);
        f.ci_state = Some(CiState::Pending);
        assert!(matches!(
            evaluate(Stage::Development, &f),
            GateResult::Waiting(_)
        ));
        f.ci_state = Some(CiState::Failure("ci/build: failure".into()));
        assert!(matches!(
            evaluate(Stage::Development, &f),
            GateResult::Fail { .. }
        ));
        f.ci_state = Some(CiState::Success);
        assert!(matches!(
            evaluate(Stage::Development, &f),
            GateResult::Pass(_)
        ));
    }

    /// With `ci.mode: status`, a `success` for the architect's docs-only head (arriving while
    /// the developer still ran) advanced `development → review`: the developer's code was never
    /// reviewed. A status counts only for a head with a code commit made since entry.
    #[test]
    fn a_green_status_without_new_code_since_entry_does_not_pass() {
        let mut f = facts();
        f.ci_gate = Some(CiGate::Status);
        f.ci_state = Some(CiState::Success);
        f.code_change = false;
        match evaluate(Stage::Development, &f) {
            GateResult::NotSatisfied(r) => assert!(r.contains("no commit outside"), "{r}"),
            other => panic!("{other:?}"),
        }
        f.code_change = true;
        assert!(matches!(
            evaluate(Stage::Development, &f),
            GateResult::Pass(_)
        ));
    }

    #[test]
    fn waits_for_people_and_ci_are_told_from_missing_work() {
        let mut f = facts();
        f.analysis_missing = vec![];
        f.approved = false;
        assert!(matches!(
            evaluate(Stage::Analysis, &f),
            GateResult::Waiting(_)
        ));
        f.analysis_missing = vec!["01-brd.md"];
        assert!(matches!(
            evaluate(Stage::Analysis, &f),
            GateResult::NotSatisfied(_)
        ));
        f.ci_gate = Some(CiGate::Status);
        f.code_change = true;
        for s in [None, Some(CiState::Pending)] {
            f.ci_state = s;
            assert!(matches!(
                evaluate(Stage::Development, &f),
                GateResult::Waiting(_)
            ));
        }
    }

    #[test]
    fn a_missing_artifact_is_rerun_once_then_held() {
        assert_eq!(on_missing(0), MissingPlan::Rerun);
        assert_eq!(on_missing(1), MissingPlan::Hold);
        assert_eq!(on_missing(5), MissingPlan::Hold);
    }

    #[test]
    fn testing_passes_to_done_without_contracts() {
        let p = forward(Stage::Testing, Track::Feature, "tests PASS", NONE, None);
        let path: Vec<(Stage, Stage, &str)> = p
            .hops
            .iter()
            .map(|h| (h.from, h.to, h.reason.as_str()))
            .collect();
        assert_eq!(
            path,
            vec![
                (Stage::Testing, Stage::DeployStaging, "tests PASS"),
                (Stage::DeployStaging, Stage::Deploy, "staging N/A"),
                (
                    Stage::Deploy,
                    Stage::Done,
                    "deploy N/A; merge: not configured"
                ),
            ]
        );
    }

    #[test]
    fn contracts_stop_the_walk_and_breakpoints_pause_before() {
        let c = Contracts {
            staging: true,
            deploy: true,
            merge: false,
            edge: false,
        };
        let p = forward(Stage::Testing, Track::Feature, "ok", c, None);
        assert_eq!(p.hops.len(), 1);
        assert_eq!(p.hops[0].to, Stage::DeployStaging);
        let p = forward(
            Stage::Testing,
            Track::Feature,
            "ok",
            NONE,
            Some(Stage::Deploy),
        );
        assert_eq!(
            p.hops.len(),
            1,
            "entered deploy-staging, stopped before deploy"
        );
        assert_eq!(p.breakpoint, Some(Stage::Deploy));
        let p = forward(
            Stage::Development,
            Track::Feature,
            "ok",
            NONE,
            Some(Stage::Review),
        );
        assert!(p.hops.is_empty());
        assert_eq!(p.breakpoint, Some(Stage::Review));
    }

    #[test]
    fn a_task_resting_in_a_stage_without_contract_passes_it() {
        let mut f = facts();
        f.not_applicable = not_applicable(Stage::Deploy, NONE);
        assert_eq!(
            evaluate(Stage::Deploy, &f),
            GateResult::Pass("deploy N/A".into())
        );
        let with = Contracts {
            staging: true,
            deploy: true,
            merge: false,
            edge: false,
        };
        assert_eq!(not_applicable(Stage::DeployStaging, with), None);
    }

    #[test]
    fn long_test_output_keeps_its_end() {
        let mut out = String::from("---\nresult: FAIL\n---\n## Test output\n");
        for i in 0..2000 {
            out.push_str(&format!("test case_{i} ... ok\n"));
        }
        out.push_str("FINAL-FAILURE-LINE\n");
        let fb = feedback_of(Stage::Testing, out.as_bytes());
        assert!(
            fb.ends_with("FINAL-FAILURE-LINE"),
            "{}",
            &fb[fb.len() - 100..]
        );
        assert!(fb.starts_with("… (earlier output cut"));
        assert!(fb.len() < 17 * 1024);
    }

    #[test]
    fn the_fourth_failure_blocks() {
        assert_eq!(on_failure(0, 3), FailPlan::RollBack { new_retries: 1 });
        assert_eq!(on_failure(2, 3), FailPlan::RollBack { new_retries: 3 });
        assert_eq!(on_failure(3, 3), FailPlan::Block);
    }
}
