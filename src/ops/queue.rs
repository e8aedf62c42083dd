//! The queue as the operator sees it (`orch queue`, `orch why`): gathers the live rows once and
//! asks `domain::claim::wait_reason` — the same function the claim uses — why each queued job
//! waits. Reads only live rows (partial indexes) plus one 24-hour count, so its cost follows the
//! number of active tasks, not history.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::db::{self, jobs::JobRow, tasks::TaskRow};
use crate::domain::claim::{self, Global, JobFacts, OtherTask, TaskFacts, Wait};
use crate::domain::liveness::Liveness;
use crate::domain::stage::{JobStatus, Stage};
use crate::domain::time::{Ts, rfc3339};
use crate::ops::lease::{self, LeaseView};

#[derive(Debug, Serialize)]
pub struct Counts {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
}

#[derive(Debug, Serialize)]
pub struct RunningJob {
    pub job_id: i64,
    pub work_item: String,
    pub role: String,
    pub repo: String,
    pub pid: Option<i64>,
    pub agent_pid: Option<i64>,
    pub started_at: Option<String>,
    /// Seconds since the attempt started.
    pub elapsed_s: Option<i64>,
    /// The supervisor's log (`orch logs <job> -f` follows it).
    pub log: String,
}

#[derive(Debug, Serialize)]
pub struct BlockedBy {
    pub reason: &'static str,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct QueuedJob {
    pub job_id: i64,
    pub work_item: String,
    pub role: String,
    pub repo: String,
    pub available_at: String,
    pub blocked_by: Option<BlockedBy>,
}

#[derive(Debug, Serialize)]
pub struct ActiveTask {
    pub work_item: String,
    pub repo: String,
    pub stage: String,
    pub paused: bool,
    pub blocked: bool,
    pub held: bool,
    /// See `orch task list`: paused, blocked, held, failed, awaiting-approval, awaiting-confirm.
    pub flags: Vec<&'static str>,
    pub age_in_stage_s: i64,
    /// What the task's agents have cost so far (US dollars).
    pub cost_usd: f64,
}

#[derive(Debug, Serialize)]
pub struct SerialGate {
    pub active_task: Option<String>,
    pub waiting: Vec<String>,
    pub paused: Vec<String>,
    pub frozen: bool,
}

#[derive(Debug, Serialize)]
pub struct LeaseOut {
    pub work_item: Option<String>,
    pub repo: String,
    pub owner_kind: String,
    pub pid: i32,
    pub stage: Option<String>,
    pub acquired_at: String,
    pub alive: bool,
    pub liveness: String,
}

#[derive(Debug, Serialize)]
pub struct Leases {
    pub transition: Vec<LeaseOut>,
    pub merge: Vec<LeaseOut>,
}

#[derive(Debug, Serialize)]
pub struct FreezeOut {
    pub repo: String,
    pub reason: String,
    pub frozen_by: String,
    pub frozen_at: String,
}

#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub schema_version: u32,
    pub generated_at: String,
    pub max_concurrency: u32,
    pub counts: Counts,
    pub running: Vec<RunningJob>,
    pub queued: Vec<QueuedJob>,
    pub tasks: Vec<ActiveTask>,
    pub serial_gate: BTreeMap<String, SerialGate>,
    pub leases: Leases,
    pub freezes: Vec<FreezeOut>,
    pub breaker: Option<BlockedBy>,
}

pub fn lease_out(v: &LeaseView) -> LeaseOut {
    LeaseOut {
        work_item: v.row.work_item.clone(),
        repo: v.row.repo.clone(),
        owner_kind: v.row.owner_kind.clone(),
        pid: v.row.owner.pid,
        stage: v.row.stage.clone(),
        acquired_at: rfc3339(v.row.acquired_at),
        alive: v.liveness == Liveness::Alive,
        liveness: match v.liveness {
            Liveness::Alive => format!("pid {} is alive", v.row.owner.pid),
            Liveness::Dead(r) => r.display(v.row.owner.pid).to_string(),
        },
    }
}

/// Everything the eligibility rules need, gathered once.
pub struct World {
    pub now: Ts,
    pub max_concurrency: u32,
    pub active: Vec<TaskRow>,
    pub by_id: HashMap<i64, usize>,
    pub jobs: Vec<JobRow>,
    /// Tasks of live jobs that are not active (finished while a job was still queued).
    pub others: HashMap<i64, TaskRow>,
    pub freezes: Vec<db::misc::Freeze>,
    pub breaker: Option<(Ts, String)>,
    pub deps: HashMap<i64, Vec<(String, Stage)>>,
    pub serial: HashMap<String, bool>,
    /// Jobs claimed during this pass (they count as running for the concurrency rule).
    pub claimed: u32,
    /// For each active task, the index in `active` of the nearest earlier unpaused active task
    /// of its repo (the serial gate's `ahead`), computed once so a wait costs no scan.
    ahead_of: HashMap<i64, Option<usize>>,
    /// The running jobs of each task, by id.
    running_of: HashMap<i64, Vec<i64>>,
    running: u32,
}

impl World {
    pub fn gather(ctx: &Ctx) -> Result<World> {
        Self::gather_in(ctx.db.conn(), &ctx.config, ctx.now)
    }

    /// Gather over any connection (the claim gathers inside its own write transaction).
    pub fn gather_in(
        c: &rusqlite::Connection,
        config: &crate::config::Config,
        now: Ts,
    ) -> Result<World> {
        let active = db::tasks::active(c)?;
        let by_id: HashMap<i64, usize> = active
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.0, i))
            .collect();
        let jobs = db::jobs::live(c)?;
        let mut others = HashMap::new();
        for j in &jobs {
            if !by_id.contains_key(&j.task_id.0) && !others.contains_key(&j.task_id.0) {
                others.insert(j.task_id.0, db::tasks::get(c, j.task_id)?);
            }
        }
        // One query for every dependency that is still open, not one per task.
        let mut deps: HashMap<i64, Vec<(String, Stage)>> = HashMap::new();
        for (task, wi, stage) in db::misc::open_deps(c)? {
            deps.entry(task).or_default().push((wi, stage));
        }
        // Everything `wait` looks up, once: a queue of thousands of jobs must not cost a scan
        // of every task and job per job.
        let mut ahead_of = HashMap::with_capacity(active.len());
        let mut order: Vec<usize> = (0..active.len()).collect();
        order.sort_by(|&a, &b| {
            (&active[a].repo, active[a].id.0).cmp(&(&active[b].repo, active[b].id.0))
        });
        let mut last: Option<usize> = None;
        for &i in &order {
            let t = &active[i];
            if last.is_some_and(|l| active[l].repo != t.repo) {
                last = None;
            }
            ahead_of.insert(t.id.0, last);
            if t.paused_at.is_none() {
                last = Some(i);
            }
        }
        let mut running_of: HashMap<i64, Vec<i64>> = HashMap::new();
        for j in jobs.iter().filter(|j| j.status == JobStatus::Running) {
            running_of.entry(j.task_id.0).or_default().push(j.id.0);
        }
        let running = running_of.values().map(Vec::len).sum::<usize>() as u32;
        Ok(World {
            now,
            max_concurrency: config.max_concurrency,
            by_id,
            jobs,
            others,
            freezes: db::misc::freezes(c)?,
            breaker: db::misc::breaker(c)?,
            deps,
            serial: config
                .repos
                .iter()
                .map(|r| (r.name.clone(), r.serial_gate))
                .collect(),
            active,
            claimed: 0,
            ahead_of,
            running_of,
            running,
        })
    }

    /// Count job `id` as running, as a fresh gather would after this process claimed it.
    pub fn mark_claimed(&mut self, id: crate::domain::ids::JobId) {
        let Some(j) = self.jobs.iter_mut().find(|j| j.id == id) else {
            return;
        };
        if j.status != JobStatus::Running {
            j.status = JobStatus::Running;
            j.attempts += 1;
            self.running_of.entry(j.task_id.0).or_default().push(id.0);
            self.running += 1;
        }
    }

    pub fn task(&self, id: i64) -> Option<&TaskRow> {
        self.by_id
            .get(&id)
            .map(|i| &self.active[*i])
            .or_else(|| self.others.get(&id))
    }

    pub fn running(&self) -> u32 {
        self.running
    }

    /// No queued job can be claimed now, whatever its task: the breaker is open or every slot
    /// is taken (the last two reasons of `wait_reason`, which hold for every job alike).
    pub fn dispatch_closed(&self) -> bool {
        self.global().closed()
    }

    /// The nearest earlier non-terminal, unpaused task of the same repo.
    fn ahead(&self, t: &TaskRow) -> Option<&TaskRow> {
        match self.ahead_of.get(&t.id.0) {
            Some(i) => i.map(|i| &self.active[i]),
            // A finished task with a job still queued: not in `active`, so look.
            None => self
                .active
                .iter()
                .filter(|o| o.repo == t.repo && o.id.0 < t.id.0 && o.paused_at.is_none())
                .max_by_key(|o| o.id.0),
        }
    }

    fn global(&self) -> Global<'_> {
        Global {
            now: self.now,
            running: self.running() + self.claimed,
            max_concurrency: self.max_concurrency,
            breaker: self.breaker.as_ref().map(|(t, r)| (*t, r.as_str())),
        }
    }

    /// Why a queued job waits, or `None` when it is claimable.
    pub fn wait(&self, j: &JobRow) -> Option<Wait> {
        let t = self.task(j.task_id.0)?;
        let ahead = self.ahead(t);
        let open = self.deps.get(&j.task_id.0);
        let facts = JobFacts {
            role: j.role,
            available_at: j.available_at,
            task: TaskFacts {
                work_item: &t.work_item,
                repo: &t.repo,
                stage: t.stage,
                paused: t.paused_at.map(|at| {
                    (
                        at,
                        t.paused_reason.as_deref().unwrap_or(""),
                        t.paused_by.as_deref().unwrap_or("operator"),
                    )
                }),
                blocked: t
                    .blocked_at
                    .map(|_| t.blocked_reason.as_deref().unwrap_or("")),
                held: t.held_at.map(|_| t.held_reason.as_deref().unwrap_or("")),
                cancel_requested: t.cancel_requested_at.is_some(),
            },
            open_deps: open
                .map(|v| {
                    v.iter()
                        .map(|(w, s)| OtherTask {
                            work_item: w,
                            stage: *s,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            serial_gate: self.serial.get(&t.repo).copied().unwrap_or(true),
            ahead: ahead.map(|a| OtherTask {
                work_item: &a.work_item,
                stage: a.stage,
            }),
            frozen: self
                .freezes
                .iter()
                .find(|f| f.repo == t.repo)
                .map(|f| (f.reason.as_str(), f.frozen_by.as_str())),
            busy_with: self
                .running_of
                .get(&j.task_id.0)
                .and_then(|ids| ids.iter().copied().find(|&id| id != j.id.0)),
        };
        claim::wait_reason(&facts, &self.global())
    }
}

pub fn snapshot(ctx: &Ctx, repo: Option<&str>) -> Result<Snapshot> {
    // One read transaction over the same connection: a consistent view and one lock.
    ctx.db.read(|_| snapshot_in(ctx, repo))
}

fn snapshot_in(ctx: &Ctx, repo: Option<&str>) -> Result<Snapshot> {
    let w = World::gather(ctx)?;
    let c = ctx.db.conn();
    let keep = |r: &str| repo.is_none_or(|want| want == r);
    let mut counts = Counts {
        queued: 0,
        running: 0,
        done: 0,
        failed: 0,
        cancelled: 0,
    };
    for j in &w.jobs {
        match j.status {
            JobStatus::Queued => counts.queued += 1,
            JobStatus::Running => counts.running += 1,
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled => {}
        }
    }
    for (status, n) in db::jobs::finished_since(c, ctx.now - 86_400)? {
        match status {
            JobStatus::Done => counts.done = n,
            JobStatus::Failed => counts.failed = n,
            JobStatus::Cancelled => counts.cancelled = n,
            JobStatus::Queued | JobStatus::Running => {}
        }
    }
    let wi = |id: i64| {
        w.task(id)
            .map(|t| t.work_item.clone())
            .unwrap_or_else(|| format!("task#{id}"))
    };
    let mut running = Vec::new();
    let mut queued = Vec::new();
    let mut waiting_serial: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for j in w.jobs.iter().filter(|j| keep(&j.repo)) {
        match j.status {
            JobStatus::Running => running.push(RunningJob {
                job_id: j.id.0,
                work_item: wi(j.task_id.0),
                role: j.role.to_string(),
                repo: j.repo.clone(),
                pid: j.supervisor_pid,
                agent_pid: j.agent_pgid,
                started_at: j.started_at.map(rfc3339),
                elapsed_s: j.started_at.map(|s| (ctx.now - s).max(0)),
                log: crate::ops::logs::path(&ctx.config, j.id, false)
                    .display()
                    .to_string(),
            }),
            JobStatus::Queued => {
                let wait = w.wait(j);
                if let Some(wt) = &wait
                    && wt.reason == claim::WaitReason::SerialGate
                {
                    waiting_serial
                        .entry(j.repo.clone())
                        .or_default()
                        .push(wi(j.task_id.0));
                }
                queued.push(QueuedJob {
                    job_id: j.id.0,
                    work_item: wi(j.task_id.0),
                    role: j.role.to_string(),
                    repo: j.repo.clone(),
                    available_at: rfc3339(j.available_at),
                    blocked_by: wait.map(|wt| BlockedBy {
                        reason: wt.reason.as_str(),
                        detail: wt.detail,
                    }),
                });
            }
            JobStatus::Done | JobStatus::Failed | JobStatus::Cancelled => {}
        }
    }
    let live: std::collections::HashSet<i64> = w.jobs.iter().map(|j| j.task_id.0).collect();
    let mut tasks = Vec::new();
    let costs = db::usage::cost_of_active(c)?;
    for t in w.active.iter().filter(|t| keep(&t.repo)) {
        let (flags, _) = crate::ops::show::flags(ctx, c, t, live.contains(&t.id.0))?;
        tasks.push(ActiveTask {
            work_item: t.work_item.clone(),
            repo: t.repo.clone(),
            stage: t.stage.to_string(),
            paused: t.paused_at.is_some(),
            blocked: t.blocked_at.is_some(),
            held: t.held_at.is_some(),
            flags,
            age_in_stage_s: (ctx.now - t.stage_entered_at).max(0),
            cost_usd: costs.get(&t.id).copied().unwrap_or(0.0),
        });
    }
    let mut serial_gate = BTreeMap::new();
    for r in ctx
        .config
        .repos
        .iter()
        .filter(|r| r.serial_gate && keep(&r.name))
    {
        let mine: Vec<&TaskRow> = w.active.iter().filter(|t| t.repo == r.name).collect();
        serial_gate.insert(
            r.name.clone(),
            SerialGate {
                active_task: mine
                    .iter()
                    .find(|t| t.paused_at.is_none())
                    .map(|t| t.work_item.clone()),
                waiting: waiting_serial.remove(&r.name).unwrap_or_default(),
                paused: mine
                    .iter()
                    .filter(|t| t.paused_at.is_some())
                    .map(|t| t.work_item.clone())
                    .collect(),
                frozen: w.freezes.iter().any(|f| f.repo == r.name),
            },
        );
    }
    let transition = lease::view(db::leases::transition_all(c)?, w.now);
    let merge = lease::view_merge(c, db::leases::merge_all(c)?, w.now)?;
    Ok(Snapshot {
        schema_version: 1,
        generated_at: rfc3339(ctx.now),
        max_concurrency: ctx.config.max_concurrency,
        counts,
        running,
        queued,
        tasks,
        serial_gate,
        leases: Leases {
            transition: transition
                .iter()
                .filter(|l| keep(&l.row.repo))
                .map(lease_out)
                .collect(),
            merge: merge
                .iter()
                .filter(|l| keep(&l.row.repo))
                .map(lease_out)
                .collect(),
        },
        freezes: w
            .freezes
            .iter()
            .filter(|f| keep(&f.repo))
            .map(|f| FreezeOut {
                repo: f.repo.clone(),
                reason: f.reason.clone(),
                frozen_by: f.frozen_by.clone(),
                frozen_at: rfc3339(f.frozen_at),
            })
            .collect(),
        breaker: w
            .breaker
            .as_ref()
            .filter(|(t, _)| *t > ctx.now)
            .map(|(t, r)| BlockedBy {
                reason: "breaker",
                detail: format!("{r} (dispatch suspended until {})", rfc3339(*t)),
            }),
    })
}
