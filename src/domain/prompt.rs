//! The job prompt (`jobs.prompt`, handed to the agent on stdin): what the task is and, after a
//! rollback, exactly what went wrong, embedded verbatim with the artifact path (design §3.3).
//! Pure text assembly; the role's system prompt lives in `commands/<role>.md`.

use crate::domain::stage::{Role, Stage};

/// The task as the prompt describes it.
pub struct TaskText<'a> {
    pub work_item: &'a str,
    pub title: &'a str,
    pub description: &'a str,
    pub repo: &'a str,
    pub branch: &'a str,
}

/// Why a developer job follows a failed verdict.
pub struct Rollback<'a> {
    pub from: Stage,
    pub reason: &'a str,
    pub artifact_path: &'a str,
    pub feedback: &'a str,
    pub retry: u32,
    pub max_retries: u32,
}

pub fn job_prompt(
    t: &TaskText<'_>,
    role: Role,
    stage: Stage,
    rollback: Option<&Rollback<'_>>,
) -> String {
    let mut p = format!(
        "Work item: {wi}\nTitle: {title}\nRepo: {repo}\nBranch: {branch}\nRole: {role}\nStage: {stage}\nArtifacts: docs/work-items/{wi}/\n",
        wi = t.work_item,
        title = t.title,
        repo = t.repo,
        branch = t.branch,
    );
    if !t.description.trim().is_empty() {
        p.push_str("\n## Description\n\n");
        p.push_str(t.description.trim_end());
        p.push('\n');
    }
    if let Some(r) = rollback {
        let what = match r.from {
            Stage::Review => "The reviewer requested changes. Address every finding below.",
            Stage::Testing => "The tests failed. Fix the code so that the failing tests pass.",
            Stage::DeployStaging => "The staging suite failed. Fix the cause shown below.",
            Stage::Deploy => "The deploy failed. Fix the cause shown below.",
            Stage::Development => "The CI of the branch head failed. Fix the failing checks.",
            Stage::Created
            | Stage::Analysis
            | Stage::Architecture
            | Stage::Done
            | Stage::Cancelled => "The previous round was rejected.",
        };
        p.push_str(&format!(
            "\n## Rollback from {from} (developer retry {n} of {max})\n\n{what}\nGate: {reason}\nFull artifact: {path}\n\n### Feedback (verbatim)\n\n{feedback}\n",
            from = r.from,
            n = r.retry,
            max = r.max_retries,
            reason = r.reason,
            path = r.artifact_path,
            feedback = r.feedback,
        ));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_prompt_embeds_feedback_and_path() {
        let t = TaskText {
            work_item: "SHOP-7",
            title: "Add health",
            description: "Expose /health.",
            repo: "shop",
            branch: "feature/SHOP-7-add-health",
        };
        let r = Rollback {
            from: Stage::Review,
            reason: "`12-review.md` has `verdict: REQUEST_CHANGES`",
            artifact_path: "docs/work-items/SHOP-7/12-review.md",
            feedback: "- P0: missing test",
            retry: 1,
            max_retries: 3,
        };
        let p = job_prompt(&t, Role::Developer, Stage::Development, Some(&r));
        assert!(p.contains("- P0: missing test"));
        assert!(p.contains("docs/work-items/SHOP-7/12-review.md"));
        assert!(p.contains("developer retry 1 of 3"));
        let plain = job_prompt(&t, Role::Analyst, Stage::Analysis, None);
        assert!(plain.contains("Role: analyst") && !plain.contains("Rollback"));
    }
}
