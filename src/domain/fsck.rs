//! The invariants `orch fsck` audits, as pure rules over facts gathered by `ops::fsck`: each
//! broken one becomes a `Violation` that names the object and the command that repairs it.
//!
//! Deliberately not here: reading the database, `/proc` or the file system (the facts arrive
//! judged: a supervisor is alive or not, a worktree exists or not), and repairing anything.

use serde::Serialize;

use crate::domain::stage::Stage;
use crate::domain::time::{Ts, rfc3339};

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// A stable name (`running-job-without-supervisor`, `idle-task`, …).
    pub check: &'static str,
    /// The work item, job, lease, row or path it is about.
    pub subject: String,
    pub detail: String,
    /// What repairs it.
    pub fix: String,
}

/// A task that is not finished, as the audit sees it.
#[derive(Debug, Clone)]
pub struct TaskFacts {
    pub work_item: String,
    pub stage: Stage,
    pub stage_entered_at: Ts,
    /// The `to` of the newest history row that moved the task (advanced, rolled back, override,
    /// cancelled); `None` before the first move.
    pub last_move_to: Option<Stage>,
    pub queued_jobs: u32,
    pub running_jobs: Vec<i64>,
    /// Why the task may rest without a job (paused, held, blocked, approval, confirm, CI,
    /// a failed job, …); `None` when nothing explains an idle task.
    pub wait: Option<String>,
    /// When the newest job of the current stage finished, if it did.
    pub last_job_finished_at: Option<Ts>,
}

/// A running job with its supervisor judged.
#[derive(Debug, Clone)]
pub struct RunningJob {
    pub id: i64,
    pub work_item: String,
    pub started_at: Option<Ts>,
    /// `None`: alive; `Some(why)`: dead (never recorded, exited, a zombie, pid reused, …).
    pub supervisor_dead: Option<String>,
    /// The worktree the job works in exists (runner and agent jobs alike).
    pub worktree_exists: bool,
}

/// A lease with its owner judged.
#[derive(Debug, Clone)]
pub struct LeaseFacts {
    /// `transition lease of SHOP-7` or `merge lease of repo shop`.
    pub what: String,
    pub release: String,
    pub owner_dead: Option<String>,
}

/// A pending outbox row.
#[derive(Debug, Clone)]
pub struct OutboxFacts {
    pub id: i64,
    pub kind: String,
    pub next_attempt_at: Ts,
    /// How long after its due time a tick may reasonably take to deliver it.
    pub allowance_s: i64,
}

/// Everything the audit reads.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub now: Ts,
    /// How long a fresh state may take to settle (a job that just ended, its advance).
    pub grace_s: i64,
    /// How long a claimed job's supervisor may take to record itself.
    pub launch_grace_s: i64,
    pub tasks: Vec<TaskFacts>,
    pub running: Vec<RunningJob>,
    pub leases: Vec<LeaseFacts>,
    pub outbox: Vec<OutboxFacts>,
    /// Queued jobs whose task is `done` or `cancelled`: `(job, work item)`.
    pub queued_of_finished: Vec<(i64, String)>,
    /// Worktree directories that belong to no task (`path`, `clone dir`).
    pub orphan_worktrees: Vec<(String, String)>,
    /// Lines of `PRAGMA integrity_check` other than `ok`, and of `foreign_key_check`.
    pub integrity: Vec<String>,
    pub foreign_keys: Vec<String>,
    /// A dependency cycle, as work items in order.
    pub dependency_cycle: Option<Vec<String>>,
    /// `done` tasks of repos with `merge` configured that have no proven merge (design §7.2).
    pub done_without_proof: Vec<String>,
}

/// Every violation, in a stable order.
pub fn violations(f: &Facts) -> Vec<Violation> {
    let mut out = Vec::new();
    let v = |check, subject: &str, detail: String, fix: String| Violation {
        check,
        subject: subject.to_string(),
        detail,
        fix,
    };
    for j in &f.running {
        if let Some(why) = &j.supervisor_dead {
            out.push(v(
                "running-job-without-supervisor",
                &format!("job {}", j.id),
                format!("job {} of `{}` is running but {why}", j.id, j.work_item),
                "`orch tick` reaps it (kills what is left, then retries or finishes it)".into(),
            ));
        } else if !j.worktree_exists && j.started_at.is_some_and(|s| f.now - s > f.launch_grace_s) {
            out.push(v(
                "running-job-without-worktree",
                &format!("job {}", j.id),
                format!(
                    "job {} of `{}` is running but its worktree does not exist",
                    j.id, j.work_item
                ),
                format!(
                    "`orch cancel {}` stops it; `orch task add` starts it again",
                    j.work_item
                ),
            ));
        }
    }
    for t in &f.tasks {
        if t.running_jobs.len() > 1 {
            let ids: Vec<String> = t.running_jobs.iter().map(|i| i.to_string()).collect();
            out.push(v(
                "two-running-jobs",
                &t.work_item,
                format!(
                    "`{}` has {} running jobs ({}): two workers share one worktree",
                    t.work_item,
                    t.running_jobs.len(),
                    ids.join(", ")
                ),
                format!(
                    "`orch cancel {}` stops them all; or let the newest finish and `orch tick`",
                    t.work_item
                ),
            ));
        }
        if let Some(moved) = t.last_move_to
            && moved != t.stage
        {
            out.push(v(
                "stage-not-last-hop",
                &t.work_item,
                format!(
                    "`{}` is in `{}` but its history last moved it to `{moved}`",
                    t.work_item, t.stage
                ),
                format!(
                    "`orch advance {} --to {} --reason 'fsck: repair stage'` records the move",
                    t.work_item, t.stage
                ),
            ));
        }
        let idle = t.queued_jobs == 0 && t.running_jobs.is_empty();
        let settling = f.now - t.stage_entered_at < f.grace_s
            || t.last_job_finished_at
                .is_some_and(|at| f.now - at < f.grace_s);
        if idle && t.stage.spec().role.is_some() && t.wait.is_none() && !settling {
            out.push(v(
                "idle-task",
                &t.work_item,
                format!(
                    "`{}` has been in `{}` since {} with no job and nothing to wait for",
                    t.work_item,
                    t.stage,
                    rfc3339(t.stage_entered_at)
                ),
                format!(
                    "`orch advance {}` decides its gate; `orch why {}` says more",
                    t.work_item, t.work_item
                ),
            ));
        }
    }
    for l in &f.leases {
        if let Some(why) = &l.owner_dead {
            out.push(v(
                "lease-of-dead-owner",
                &l.what,
                format!("the {} is held by an owner that is gone: {why}", l.what),
                format!("`{}` (or the next `orch tick` reclaims it)", l.release),
            ));
        }
    }
    for (job, wi) in &f.queued_of_finished {
        out.push(v(
            "queued-job-of-finished-task",
            &format!("job {job}"),
            format!("job {job} is queued but `{wi}` is finished"),
            "`orch tick` cancels it as superseded".into(),
        ));
    }
    for o in &f.outbox {
        let late = f.now - o.next_attempt_at;
        if late > o.allowance_s {
            out.push(v(
                "outbox-stalled",
                &format!("outbox {}", o.id),
                format!(
                    "outbox row {} (`{}`) was due at {} and is still pending ({late}s late)",
                    o.id,
                    o.kind,
                    rfc3339(o.next_attempt_at)
                ),
                "`orch tick` delivers it; check the timer (`systemctl status orch-tick.timer`) and `orch outbox`".into(),
            ));
        }
    }
    for (path, clone) in &f.orphan_worktrees {
        out.push(v(
            "orphan-worktree",
            path,
            format!("worktree `{path}` belongs to no task"),
            format!("`git -C {clone} worktree remove --force {path}`"),
        ));
    }
    for wi in &f.done_without_proof {
        out.push(v(
            "done-without-merge-proof",
            wi,
            format!("`{wi}` is `done` but its merge into main was never proven"),
            format!(
                "check main for its code (`git merge-base --is-ancestor`); it may have reached `done` by an override (`orch report overrides`), or `orch task show {wi}`"
            ),
        ));
    }
    if let Some(cycle) = &f.dependency_cycle {
        out.push(v(
            "dependency-cycle",
            &cycle.join(" → "),
            format!("tasks depend on each other: {}", cycle.join(" → ")),
            "cancel one of them (`orch cancel`); their jobs can never be claimed".into(),
        ));
    }
    for line in &f.integrity {
        out.push(v(
            "integrity",
            "orch.db",
            format!("SQLite integrity check: {line}"),
            "stop the timer and restore the database from a backup".into(),
        ));
    }
    for line in &f.foreign_keys {
        out.push(v(
            "foreign-key",
            "orch.db",
            format!("SQLite foreign key check: {line}"),
            "stop the timer and restore the database from a backup".into(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(stage: Stage) -> TaskFacts {
        TaskFacts {
            work_item: "SHOP-1".into(),
            stage,
            stage_entered_at: 0,
            last_move_to: Some(stage),
            queued_jobs: 0,
            running_jobs: vec![],
            wait: None,
            last_job_finished_at: None,
        }
    }

    fn facts() -> Facts {
        Facts {
            now: 10_000,
            grace_s: 120,
            launch_grace_s: 60,
            ..Facts::default()
        }
    }

    fn checks(f: &Facts) -> Vec<&'static str> {
        violations(f).into_iter().map(|v| v.check).collect()
    }

    #[test]
    fn a_healthy_world_is_clean() {
        let mut f = facts();
        let mut busy = task(Stage::Review);
        busy.running_jobs = vec![4];
        let mut waiting = task(Stage::Analysis);
        waiting.wait = Some("approval".into());
        let mut queued = task(Stage::Testing);
        queued.queued_jobs = 1;
        f.tasks = vec![busy, waiting, queued];
        f.running = vec![RunningJob {
            id: 4,
            work_item: "SHOP-1".into(),
            started_at: Some(9_000),
            supervisor_dead: None,
            worktree_exists: true,
        }];
        assert_eq!(checks(&f), Vec::<&str>::new());
    }

    #[test]
    fn each_invariant_is_named_with_its_fix() {
        let mut f = facts();
        let mut two = task(Stage::Review);
        two.running_jobs = vec![1, 2];
        let mut moved = task(Stage::Testing);
        moved.last_move_to = Some(Stage::Review);
        moved.queued_jobs = 1;
        let idle = task(Stage::Review);
        f.tasks = vec![two, moved, idle];
        f.running = vec![
            RunningJob {
                id: 1,
                work_item: "SHOP-1".into(),
                started_at: Some(0),
                supervisor_dead: Some("its supervisor exited".into()),
                worktree_exists: true,
            },
            RunningJob {
                id: 2,
                work_item: "SHOP-1".into(),
                started_at: Some(0),
                supervisor_dead: None,
                worktree_exists: false,
            },
        ];
        f.leases = vec![LeaseFacts {
            what: "transition lease of `SHOP-1`".into(),
            release: "orch lease release SHOP-1".into(),
            owner_dead: Some("pid 7 exited".into()),
        }];
        f.queued_of_finished = vec![(9, "SHOP-2".into())];
        f.outbox = vec![OutboxFacts {
            id: 3,
            kind: "plane.state".into(),
            next_attempt_at: 100,
            allowance_s: 300,
        }];
        f.orphan_worktrees = vec![("/r/_wt/shop/SHOP-9".into(), "/r/shop".into())];
        f.integrity = vec!["page 3 is never used".into()];
        f.foreign_keys = vec!["jobs row 5 → tasks".into()];
        f.dependency_cycle = Some(vec!["SHOP-1".into(), "SHOP-2".into(), "SHOP-1".into()]);
        let got = checks(&f);
        for want in [
            "running-job-without-supervisor",
            "running-job-without-worktree",
            "two-running-jobs",
            "stage-not-last-hop",
            "idle-task",
            "lease-of-dead-owner",
            "queued-job-of-finished-task",
            "outbox-stalled",
            "orphan-worktree",
            "dependency-cycle",
            "integrity",
            "foreign-key",
        ] {
            assert!(got.contains(&want), "{want} missing from {got:?}");
        }
        for v in violations(&f) {
            assert!(!v.fix.is_empty() && !v.detail.is_empty(), "{v:?}");
        }
    }

    #[test]
    fn fresh_states_settle_before_they_count() {
        let mut f = facts();
        let mut just_entered = task(Stage::Review);
        just_entered.stage_entered_at = f.now - 10;
        let mut just_finished = task(Stage::Testing);
        just_finished.last_job_finished_at = Some(f.now - 5);
        f.tasks = vec![just_entered, just_finished];
        f.outbox = vec![OutboxFacts {
            id: 1,
            kind: "chat.message".into(),
            next_attempt_at: f.now - 30,
            allowance_s: 120,
        }];
        f.running = vec![RunningJob {
            id: 1,
            work_item: "SHOP-1".into(),
            started_at: Some(f.now - 5),
            supervisor_dead: None,
            worktree_exists: false,
        }];
        assert_eq!(checks(&f), Vec::<&str>::new());
    }

    #[test]
    fn stages_without_a_role_never_idle() {
        let mut f = facts();
        f.tasks = vec![task(Stage::Created)];
        assert_eq!(checks(&f), Vec::<&str>::new());
    }
}
