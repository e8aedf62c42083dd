//! The pipeline's vocabulary: stages, roles, job statuses, tracks, and the stage table of
//! design §3.1 as one `match`. Pure data; it does not know how a gate is evaluated against git
//! or the database (that is `domain::gate` over facts gathered by `ops`).

use std::fmt;
use std::str::FromStr;

use crate::domain::frontmatter::{self, VerdictSpec};

/// Where a task is. Stored as lowercase text; `deploy-staging` keeps its hyphen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    Created,
    Analysis,
    Architecture,
    Development,
    Review,
    Testing,
    DeployStaging,
    Deploy,
    Done,
    Cancelled,
}

/// The agent role that works a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Analyst,
    Architect,
    Developer,
    Reviewer,
    Tester,
    Deployer,
    /// Deterministic: the release steps of design §7 (the `deploy-staging → deploy` sub-gates,
    /// the merge and its proof on `deploy → done`). Never an agent.
    Releaser,
    /// Deterministic: the post-deploy watch of a `done` task (design §7.4). Never an agent.
    Monitor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStatus {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

/// The bug track skips architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Track {
    Feature,
    Bug,
}

/// The exit gate of a stage (design §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    /// `created`: the pipeline starts.
    Start,
    AnalysisApproved,
    ArchitectureDone,
    CiGreen,
    ReviewerVerdict,
    TestsPassed,
    StagingStatus,
    DeployStatus,
    Terminal,
}

/// One row of the stage table.
#[derive(Debug, Clone, Copy)]
pub struct StageSpec {
    /// The role launched on entering the stage (before per-repo contracts are considered).
    pub role: Option<Role>,
    pub gate: GateKind,
    /// The verdict artifact read by the gate, relative to `docs/work-items/<WI>/`.
    pub verdict_file: Option<&'static str>,
    pub verdict: Option<&'static VerdictSpec>,
}

pub const ANALYSIS_FILES: [&str; 4] = [
    "01-brd.md",
    "02-trz.md",
    "03-acceptance-criteria.md",
    "04-test-plan.yaml",
];
pub const ADR_DIR: &str = "06-adr";

impl Stage {
    pub const ALL: [Stage; 10] = [
        Stage::Created,
        Stage::Analysis,
        Stage::Architecture,
        Stage::Development,
        Stage::Review,
        Stage::Testing,
        Stage::DeployStaging,
        Stage::Deploy,
        Stage::Done,
        Stage::Cancelled,
    ];

    /// The stage table: the single source of truth for roles, gates and verdict artifacts.
    pub fn spec(self) -> StageSpec {
        use GateKind as G;
        let s = |role, gate, verdict_file, verdict| StageSpec {
            role,
            gate,
            verdict_file,
            verdict,
        };
        match self {
            Stage::Created => s(None, G::Start, None, None),
            Stage::Analysis => s(Some(Role::Analyst), G::AnalysisApproved, None, None),
            Stage::Architecture => s(Some(Role::Architect), G::ArchitectureDone, None, None),
            Stage::Development => s(Some(Role::Developer), G::CiGreen, None, None),
            Stage::Review => s(
                Some(Role::Reviewer),
                G::ReviewerVerdict,
                Some("12-review.md"),
                Some(&frontmatter::REVIEW),
            ),
            Stage::Testing => s(
                Some(Role::Tester),
                G::TestsPassed,
                Some("13-test-report.md"),
                Some(&frontmatter::TESTS),
            ),
            Stage::DeployStaging => s(
                Some(Role::Deployer),
                G::StagingStatus,
                Some("15-staging-log.md"),
                Some(&frontmatter::STAGING),
            ),
            Stage::Deploy => s(
                Some(Role::Deployer),
                G::DeployStatus,
                Some("14-deploy-log.md"),
                Some(&frontmatter::DEPLOY),
            ),
            Stage::Done | Stage::Cancelled => s(None, G::Terminal, None, None),
        }
    }

    /// The stage a passed gate leads to.
    pub fn next(self, track: Track) -> Option<Stage> {
        match self {
            Stage::Created => Some(Stage::Analysis),
            Stage::Analysis => Some(match track {
                Track::Feature => Stage::Architecture,
                Track::Bug => Stage::Development,
            }),
            Stage::Architecture => Some(Stage::Development),
            Stage::Development => Some(Stage::Review),
            Stage::Review => Some(Stage::Testing),
            Stage::Testing => Some(Stage::DeployStaging),
            Stage::DeployStaging => Some(Stage::Deploy),
            Stage::Deploy => Some(Stage::Done),
            Stage::Done | Stage::Cancelled => None,
        }
    }

    /// Whether a failed verdict of this stage rolls the task back to development.
    pub fn rolls_back(self) -> bool {
        match self {
            Stage::Review | Stage::Testing | Stage::DeployStaging | Stage::Deploy => true,
            Stage::Created
            | Stage::Analysis
            | Stage::Architecture
            | Stage::Development
            | Stage::Done
            | Stage::Cancelled => false,
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Stage::Done | Stage::Cancelled)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Created => "created",
            Stage::Analysis => "analysis",
            Stage::Architecture => "architecture",
            Stage::Development => "development",
            Stage::Review => "review",
            Stage::Testing => "testing",
            Stage::DeployStaging => "deploy-staging",
            Stage::Deploy => "deploy",
            Stage::Done => "done",
            Stage::Cancelled => "cancelled",
        }
    }
}

impl Role {
    pub const ALL: [Role; 8] = [
        Role::Analyst,
        Role::Architect,
        Role::Developer,
        Role::Reviewer,
        Role::Tester,
        Role::Deployer,
        Role::Releaser,
        Role::Monitor,
    ];

    /// Whether this role may be an agent (the deterministic roles never are).
    pub fn is_agent(self) -> bool {
        !matches!(self, Role::Releaser | Role::Monitor)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Analyst => "analyst",
            Role::Architect => "architect",
            Role::Developer => "developer",
            Role::Reviewer => "reviewer",
            Role::Tester => "tester",
            Role::Deployer => "deployer",
            Role::Releaser => "releaser",
            Role::Monitor => "monitor",
        }
    }
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

impl Track {
    pub fn as_str(self) -> &'static str {
        match self {
            Track::Feature => "feature",
            Track::Bug => "bug",
        }
    }
}

/// The error of parsing one of the enums above from text: names the value and the choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    pub what: &'static str,
    pub value: String,
    pub choices: Vec<&'static str>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} `{}`; expected one of: {}",
            self.what,
            self.value,
            self.choices.join(", ")
        )
    }
}

impl std::error::Error for UnknownName {}

pub(crate) fn parse_named<T: Copy>(
    what: &'static str,
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
) -> Result<T, UnknownName> {
    all.iter()
        .copied()
        .find(|v| name(*v) == s)
        .ok_or_else(|| UnknownName {
            what,
            value: s.to_string(),
            choices: all.iter().map(|v| name(*v)).collect(),
        })
}

impl FromStr for Stage {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("stage", s, &Stage::ALL, Stage::as_str)
    }
}

impl FromStr for Role {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("role", s, &Role::ALL, Role::as_str)
    }
}

impl FromStr for JobStatus {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use JobStatus as J;
        parse_named(
            "job status",
            s,
            &[J::Queued, J::Running, J::Done, J::Failed, J::Cancelled],
            J::as_str,
        )
    }
}

impl FromStr for Track {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_named("track", s, &[Track::Feature, Track::Bug], Track::as_str)
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(Stage, Role, JobStatus, Track);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_round_trips_through_its_name() {
        for s in Stage::ALL {
            assert_eq!(s.as_str().parse::<Stage>(), Ok(s));
        }
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>(), Ok(r));
        }
        assert_eq!(Stage::DeployStaging.as_str(), "deploy-staging");
    }

    #[test]
    fn unknown_stage_names_the_choices() {
        let e = "deploying".parse::<Stage>().unwrap_err();
        assert!(e.to_string().contains("unknown stage `deploying`"));
        assert!(e.to_string().contains("deploy-staging"));
    }

    #[test]
    fn feature_track_walks_every_stage_and_bug_track_skips_architecture() {
        let mut s = Stage::Created;
        let mut seen = vec![s];
        while let Some(n) = s.next(Track::Feature) {
            seen.push(n);
            s = n;
        }
        assert_eq!(seen.len(), 9);
        assert_eq!(s, Stage::Done);
        assert_eq!(
            Stage::Analysis.next(Track::Bug),
            Some(Stage::Development),
            "bug track goes straight to development"
        );
        assert_eq!(Stage::Cancelled.next(Track::Feature), None);
    }

    #[test]
    fn verdict_stages_name_their_artifact_and_roll_back() {
        for (stage, file) in [
            (Stage::Review, "12-review.md"),
            (Stage::Testing, "13-test-report.md"),
            (Stage::DeployStaging, "15-staging-log.md"),
            (Stage::Deploy, "14-deploy-log.md"),
        ] {
            assert_eq!(stage.spec().verdict_file, Some(file));
            assert!(stage.spec().verdict.is_some());
            assert!(stage.rolls_back());
        }
        assert!(!Stage::Development.rolls_back());
        assert_eq!(Stage::Done.spec().gate, GateKind::Terminal);
    }
}
