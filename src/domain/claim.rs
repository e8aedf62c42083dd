//! Claim eligibility (design §4.2): why a queued job may not be claimed now. One pure function
//! serves `orch queue`, `orch why` and the claim of `orch tick`, so what the operator is told is
//! exactly what the scheduler does. The facts are gathered by `ops::queue`; nothing here reads
//! the database or the clock.

use crate::domain::stage::{Role, Stage};
use crate::domain::time::{Ts, human_duration, rfc3339};

/// The reasons, in the order they are reported (the first that holds wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    Delayed,
    Paused,
    Blocked,
    Held,
    TaskBusy,
    Dependency,
    SerialGate,
    Frozen,
    Breaker,
    Concurrency,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Delayed => "delayed",
            WaitReason::Paused => "paused",
            WaitReason::Blocked => "blocked",
            WaitReason::Held => "held",
            WaitReason::TaskBusy => "task-busy",
            WaitReason::Dependency => "dependency",
            WaitReason::SerialGate => "serial-gate",
            WaitReason::Frozen => "frozen",
            WaitReason::Breaker => "breaker",
            WaitReason::Concurrency => "concurrency",
        }
    }
}

/// Why one job waits: the reason and one human-readable line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub reason: WaitReason,
    pub detail: String,
}

/// A task as the eligibility rules see it.
#[derive(Debug, Clone)]
pub struct TaskFacts<'a> {
    pub work_item: &'a str,
    pub repo: &'a str,
    pub stage: Stage,
    /// (since, reason, by)
    pub paused: Option<(Ts, &'a str, &'a str)>,
    pub blocked: Option<&'a str>,
    pub held: Option<&'a str>,
    /// A cancel is recorded and not applied yet: nothing of the task starts any more.
    pub cancel_requested: bool,
}

/// Another task that a job's task depends on, or that is ahead of it in its repo.
#[derive(Debug, Clone)]
pub struct OtherTask<'a> {
    pub work_item: &'a str,
    pub stage: Stage,
}

/// Everything the rules need about one queued job.
#[derive(Debug, Clone)]
pub struct JobFacts<'a> {
    pub role: Role,
    pub available_at: Ts,
    pub task: TaskFacts<'a>,
    /// Tasks this task depends on that are not terminal.
    pub open_deps: Vec<OtherTask<'a>>,
    /// Whether the repo has `serial_gate: true`.
    pub serial_gate: bool,
    /// The nearest earlier non-terminal, unpaused task of the same repo, if any.
    pub ahead: Option<OtherTask<'a>>,
    /// The repo's freeze: (reason, by).
    pub frozen: Option<(&'a str, &'a str)>,
    /// Another job of the same task that is running: one task never has two workers.
    pub busy_with: Option<i64>,
}

/// Facts shared by all jobs of one pass.
#[derive(Debug, Clone, Copy)]
pub struct Global<'a> {
    pub now: Ts,
    pub running: u32,
    pub max_concurrency: u32,
    /// The breaker: (open until, reason), when open.
    pub breaker: Option<(Ts, &'a str)>,
}

impl Global<'_> {
    /// No job can be claimed, whatever its task: the breaker is open or every slot is taken
    /// (the last two reasons of `wait_reason`, which hold for every job alike).
    pub fn closed(&self) -> bool {
        self.breaker.is_some_and(|(until, _)| until > self.now)
            || self.running >= self.max_concurrency
    }
}

/// The first reason (in the order of design §4.2) that keeps the job from being claimed, or
/// `None` when it is claimable now.
pub fn wait_reason(job: &JobFacts<'_>, g: &Global<'_>) -> Option<Wait> {
    let w = |reason, detail: String| Some(Wait { reason, detail });
    let t = &job.task;
    // A job delayed no longer than the open breaker waits for the breaker: that is what the
    // operator must know (a usage limit delays its job to the breaker's end).
    if let Some((until, reason)) = g.breaker
        && until > g.now
        && job.available_at > g.now
        && job.available_at <= until
    {
        return w(
            WaitReason::Breaker,
            format!("{reason} (dispatch suspended until {})", rfc3339(until)),
        );
    }
    if job.available_at > g.now {
        return w(
            WaitReason::Delayed,
            format!(
                "not before {} (in {})",
                rfc3339(job.available_at),
                human_duration(job.available_at - g.now)
            ),
        );
    }
    if let Some((since, reason, by)) = t.paused {
        return w(
            WaitReason::Paused,
            format!(
                "{} paused since {} by {}: {}",
                t.work_item,
                rfc3339(since),
                by,
                reason
            ),
        );
    }
    // A finished task's only job is its post-deploy watch.
    if t.stage.is_terminal() && !(job.role == Role::Monitor && t.stage == Stage::Done) {
        return w(
            WaitReason::Blocked,
            format!("{} is already {}", t.work_item, t.stage),
        );
    }
    if t.cancel_requested {
        return w(
            WaitReason::Blocked,
            format!("{} is being cancelled", t.work_item),
        );
    }
    if let Some(reason) = t.blocked {
        return w(
            WaitReason::Blocked,
            format!("{} is blocked: {}", t.work_item, reason),
        );
    }
    if let Some(reason) = t.held {
        return w(
            WaitReason::Held,
            format!("{} is held: {}", t.work_item, reason),
        );
    }
    if let Some(other) = job.busy_with {
        return w(
            WaitReason::TaskBusy,
            format!("{} is already running job {other}", t.work_item),
        );
    }
    if let Some(dep) = job.open_deps.first() {
        return w(
            WaitReason::Dependency,
            format!("waits for {} ({}) to finish", dep.work_item, dep.stage),
        );
    }
    if job.role == Role::Analyst
        && job.serial_gate
        && let Some(a) = &job.ahead
    {
        return w(
            WaitReason::SerialGate,
            format!("{} ({}) is ahead in repo {}", a.work_item, a.stage, t.repo),
        );
    }
    if job.role == Role::Analyst
        && let Some((reason, by)) = job.frozen
    {
        return w(
            WaitReason::Frozen,
            format!("repo {} frozen by {}: {}", t.repo, by, reason),
        );
    }
    if let Some((until, reason)) = g.breaker
        && until > g.now
    {
        return w(
            WaitReason::Breaker,
            format!("{reason} (dispatch suspended until {})", rfc3339(until)),
        );
    }
    if g.running >= g.max_concurrency {
        return w(
            WaitReason::Concurrency,
            format!("running {}/{}", g.running, g.max_concurrency),
        );
    }
    None
}

/// A dependency edge `task → depends_on` would close a cycle when `depends_on` already reaches
/// `task`. Returns the cycle as a path of task ids (`task, depends_on, …, task`), or `None`.
pub fn dependency_cycle(edges: &[(i64, i64)], task: i64, depends_on: i64) -> Option<Vec<i64>> {
    if task == depends_on {
        return Some(vec![task, task]);
    }
    // Depth-first search from `depends_on` along existing edges, looking for `task`.
    let mut stack: Vec<(i64, Vec<i64>)> = vec![(depends_on, vec![task, depends_on])];
    let mut seen = std::collections::HashSet::new();
    while let Some((node, path)) = stack.pop() {
        if !seen.insert(node) {
            continue;
        }
        for &(from, to) in edges {
            if from == node {
                let mut p = path.clone();
                p.push(to);
                if to == task {
                    return Some(p);
                }
                stack.push((to, p));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base<'a>() -> JobFacts<'a> {
        JobFacts {
            role: Role::Analyst,
            available_at: 100,
            task: TaskFacts {
                work_item: "DEMO-3",
                repo: "demo",
                stage: Stage::Analysis,
                paused: None,
                blocked: None,
                held: None,
                cancel_requested: false,
            },
            open_deps: vec![],
            serial_gate: true,
            ahead: None,
            frozen: None,
            busy_with: None,
        }
    }

    fn g<'a>() -> Global<'a> {
        Global {
            now: 1000,
            running: 0,
            max_concurrency: 2,
            breaker: None,
        }
    }

    fn reason(j: &JobFacts<'_>, gl: &Global<'_>) -> Option<&'static str> {
        wait_reason(j, gl).map(|w| w.reason.as_str())
    }

    #[test]
    fn a_plain_job_is_claimable() {
        assert_eq!(wait_reason(&base(), &g()), None);
    }

    #[test]
    fn reasons_follow_the_documented_order() {
        // Every reason holds at once; remove them one by one from the front.
        let mut j = base();
        // Delayed past the breaker's end (a delay within it reports the breaker, below).
        j.available_at = 6000;
        j.task.paused = Some((10, "lunch", "ops"));
        j.task.blocked = Some("retries exhausted");
        j.task.held = Some("env");
        j.open_deps = vec![OtherTask {
            work_item: "DEMO-1",
            stage: Stage::Review,
        }];
        j.ahead = Some(OtherTask {
            work_item: "DEMO-2",
            stage: Stage::Analysis,
        });
        j.frozen = Some(("release", "ops"));
        j.busy_with = Some(41);
        let mut gl = g();
        gl.breaker = Some((5000, "usage limit"));
        gl.running = 2;
        let order = [
            "delayed",
            "paused",
            "blocked",
            "held",
            "task-busy",
            "dependency",
            "serial-gate",
            "frozen",
            "breaker",
            "concurrency",
        ];
        for expected in order {
            assert_eq!(reason(&j, &gl), Some(expected));
            match expected {
                "delayed" => j.available_at = 0,
                "paused" => j.task.paused = None,
                "blocked" => j.task.blocked = None,
                "held" => j.task.held = None,
                "task-busy" => j.busy_with = None,
                "dependency" => j.open_deps.clear(),
                "serial-gate" => j.ahead = None,
                "frozen" => j.frozen = None,
                "breaker" => gl.breaker = None,
                _ => gl.running = 1,
            }
        }
        assert_eq!(wait_reason(&j, &gl), None);
    }

    /// A usage limit delays its job to the breaker's end, and `why` said "delayed" without
    /// the limit.
    #[test]
    fn a_job_delayed_within_the_open_breaker_waits_for_the_breaker() {
        let mut j = base();
        j.available_at = 5000;
        let mut gl = g();
        gl.breaker = Some((5000, "agent provider rate-limited until 01:23 UTC"));
        let w = wait_reason(&j, &gl).unwrap();
        assert_eq!(w.reason, WaitReason::Breaker);
        assert!(
            w.detail
                .starts_with("agent provider rate-limited until 01:23 UTC"),
            "{}",
            w.detail
        );
        j.available_at = 5001;
        assert_eq!(reason(&j, &gl), Some("delayed"));
        gl.breaker = Some((900, "expired"));
        assert_eq!(reason(&j, &gl), Some("delayed"));
    }

    #[test]
    fn details_name_the_responsible_party() {
        let mut j = base();
        j.ahead = Some(OtherTask {
            work_item: "DEMO-2",
            stage: Stage::Analysis,
        });
        let w = wait_reason(&j, &g()).unwrap();
        assert_eq!(w.detail, "DEMO-2 (analysis) is ahead in repo demo");
        let mut gl = g();
        gl.running = 2;
        j.ahead = None;
        assert_eq!(wait_reason(&j, &gl).unwrap().detail, "running 2/2");
    }

    #[test]
    fn serial_gate_and_freeze_hold_only_analyst_jobs() {
        let mut j = base();
        j.role = Role::Developer;
        j.task.stage = Stage::Development;
        j.ahead = Some(OtherTask {
            work_item: "DEMO-1",
            stage: Stage::Analysis,
        });
        j.frozen = Some(("release", "ops"));
        assert_eq!(wait_reason(&j, &g()), None);
        j.role = Role::Analyst;
        j.serial_gate = false;
        assert_eq!(
            reason(&j, &g()),
            Some("frozen"),
            "freeze holds analysts whatever serial_gate says"
        );
    }

    #[test]
    fn an_expired_breaker_does_not_hold() {
        let mut gl = g();
        gl.breaker = Some((999, "x"));
        assert_eq!(wait_reason(&base(), &gl), None);
    }

    #[test]
    fn cycles_are_found_and_named() {
        let edges = [(2, 1), (3, 2)];
        assert_eq!(dependency_cycle(&edges, 1, 3), Some(vec![1, 3, 2, 1]));
        assert_eq!(dependency_cycle(&edges, 4, 3), None);
        assert_eq!(dependency_cycle(&edges, 5, 5), Some(vec![5, 5]));
    }
}
