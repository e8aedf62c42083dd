//! The scheduler's test world: a [`World`] whose config drives the stub agent, ticks until a
//! condition holds (with every task, the queue and the job logs in the failure message), and the
//! jobs as the database has them. Shared by the scheduler, crash and kill-matrix tests.

use std::ops::Deref;
use std::panic::Location;
use std::path::PathBuf;
use std::time::Duration;

use super::{Run, World, poll, stub_agent};

/// How long a scenario may take before it is declared stuck (a loaded 2-core machine).
pub const DEADLINE: Duration = Duration::from_secs(90);
/// Pause between two ticks: polling, not a fixed wait.
pub const TICK_EVERY: Duration = Duration::from_millis(200);

/// In [`Cfg::extra_repos`]: the world's bare remote.
pub const REMOTE: &str = "@REMOTE@";

/// The config knobs a scenario changes.
pub struct Cfg {
    pub max_concurrency: u32,
    pub inactivity_timeout_s: u64,
    pub usage_limit_backoff_s: u64,
    pub max_attempts: u32,
    pub auto_approve: bool,
    pub serial_gate: bool,
    pub reconcile_grace_s: u64,
    /// More entries under `repos:` (indented as list items); [`REMOTE`] stands for the remote.
    pub extra_repos: String,
    /// Run agents and suites under bubblewrap, the stub's counters shown through.
    pub sandbox: bool,
    /// Supervisors and gestures launch the next job themselves, as in production; off by
    /// default here, so a test steps the scheduler one tick at a time (and the stub's knobs,
    /// given to the ticks, reach every agent).
    pub launch_on_finish: bool,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg {
            max_concurrency: 2,
            inactivity_timeout_s: 120,
            usage_limit_backoff_s: 3,
            max_attempts: 3,
            auto_approve: true,
            serial_gate: true,
            reconcile_grace_s: 1,
            extra_repos: String::new(),
            sandbox: false,
            launch_on_finish: false,
        }
    }
}

/// A [`World`] whose config drives the stub agent. Dropping it kills every process the world
/// started (supervisors, agents, their children; see [`World`]), so a failed test leaves
/// nothing running.
pub struct Sched {
    pub w: World,
}

impl Deref for Sched {
    type Target = World;
    fn deref(&self) -> &World {
        &self.w
    }
}

impl Sched {
    pub fn new(cfg: Cfg) -> Sched {
        let s = Sched { w: World::new() };
        s.configure(&cfg);
        s
    }

    pub fn configure(&self, c: &Cfg) {
        let yaml = format!(
            "state_dir: {state:?}\n\
max_concurrency: {mc}\n\
agent:\n  argv: [{stub:?}, \"--print\"]\n  inactivity_timeout_s: {inact}\n  usage_limit_backoff_s: {ulb}\n  max_attempts: {ma}\n  sandbox_writable: [{stub_state:?}]\n  sandbox_readable: [{stub:?}]\n\
scheduler:\n  reconcile_grace_s: {grace}\n  retry_backoff_s: 1\n\
repos:\n  - name: shop\n    remote: {remote:?}\n    prefix: SHOP\n    serial_gate: {sg}\n    default_labels: [{labels}]\n{extra}",
            state = self.state_dir().display().to_string(),
            mc = c.max_concurrency,
            stub = stub_agent().display().to_string(),
            inact = c.inactivity_timeout_s,
            ulb = c.usage_limit_backoff_s,
            stub_state = self.stub_state().display().to_string(),
            ma = c.max_attempts,
            remote = self.remote.display().to_string(),
            sg = c.serial_gate,
            grace = c.reconcile_grace_s,
            labels = if c.auto_approve { "auto-approve" } else { "" },
            extra = c
                .extra_repos
                .replace(REMOTE, &self.remote.display().to_string()),
        );
        std::fs::write(&self.config, yaml).unwrap();
        std::fs::create_dir_all(self.stub_state()).unwrap();
        self.w
            .sandbox
            .store(c.sandbox, std::sync::atomic::Ordering::Relaxed);
        self.w
            .launch
            .store(c.launch_on_finish, std::sync::atomic::Ordering::Relaxed);
    }

    /// `orch tick <args>` with the stub knobs in `env` (and only those).
    pub fn tick_with(&self, env: &[(&str, &str)], args: &[&str]) -> Run {
        let mut a = vec!["tick"];
        a.extend_from_slice(args);
        Run::of(self.stub_cmd(&a).envs(env.iter().copied()))
    }

    pub fn tick(&self, env: &[(&str, &str)]) -> Run {
        let r = self.tick_with(env, &[]);
        assert_eq!(r.code, 0, "orch tick:\n{r:?}\n{}", self.diagnose());
        r
    }

    pub fn stage_of(&self, wi: &str) -> String {
        self.sql(&format!("SELECT stage FROM tasks WHERE work_item = '{wi}'"))
    }

    /// The jobs of a task, oldest first.
    pub fn jobs(&self, wi: &str) -> Vec<Job> {
        let rows = self.sql(&format!(
            "SELECT j.id, j.role, j.status, j.attempts, j.max_attempts, \
             coalesce(j.supervisor_pid, 0), coalesce(j.agent_pgid, 0), coalesce(j.agent_start, 0) \
             FROM jobs j JOIN tasks t ON t.id = j.task_id WHERE t.work_item = '{wi}' ORDER BY j.id"
        ));
        rows.lines()
            .filter(|l| !l.is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                Job {
                    id: f[0].parse().unwrap(),
                    role: f[1].to_string(),
                    status: f[2].to_string(),
                    attempts: f[3].parse().unwrap(),
                    max_attempts: f[4].parse().unwrap(),
                    supervisor_pid: f[5].parse().unwrap(),
                    agent_pgid: f[6].parse().unwrap(),
                    agent_start: f[7].parse().unwrap(),
                }
            })
            .collect()
    }

    /// The newest job of `role` for a task.
    pub fn job(&self, wi: &str, role: &str) -> Option<Job> {
        self.jobs(wi).into_iter().rev().find(|j| j.role == role)
    }

    pub fn job_error(&self, id: i64) -> String {
        self.sql(&format!(
            "SELECT coalesce(error, '') FROM jobs WHERE id = {id}"
        ))
    }

    pub fn job_done(&self, wi: &str, role: &str) -> bool {
        self.job(wi, role).is_some_and(|j| j.status == "done")
    }

    pub fn transitions_count(&self) -> String {
        self.sql("SELECT count(*) FROM transitions")
    }

    /// Everything worth reading when a scenario is stuck: each task as `task show` has it, the
    /// queue, and the tail of every job log.
    pub fn diagnose(&self) -> String {
        let mut s = String::new();
        let wis = self.sql("SELECT work_item FROM tasks ORDER BY id");
        for wi in wis.lines().filter(|l| !l.is_empty()) {
            let r = self.orch(&["task", "show", wi, "--json"]);
            s.push_str(&format!(
                "\n=== orch task show {wi} --json\n{}\n",
                tail(&r.stdout, 12_000)
            ));
        }
        let q = self.orch(&["queue", "--json"]);
        s.push_str(&format!("\n=== orch queue --json\n{}\n", q.stdout));
        let logs = self.state_dir().join("logs");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&logs)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        for f in files {
            let text = std::fs::read(&f).unwrap_or_default();
            s.push_str(&format!(
                "\n=== {}\n{}\n",
                f.display(),
                tail(&String::from_utf8_lossy(&text), 4_000)
            ));
        }
        s.push_str(&format!(
            "\n=== live processes of this world: {:?}\n",
            self.procs()
        ));
        s
    }
}

#[derive(Debug, Clone)]
pub struct Job {
    pub id: i64,
    pub role: String,
    pub status: String,
    pub attempts: i64,
    pub max_attempts: i64,
    pub supervisor_pid: i32,
    pub agent_pgid: i32,
    pub agent_start: u64,
}

pub fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut i = s.len() - n;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// Run `orch tick` (with the stub knobs `env`) every [`TICK_EVERY`] until `pred` holds; panic
/// with the tasks, the queue and the job logs when `deadline` passes first. Returns the
/// stdout of every tick, in order.
#[track_caller]
pub fn tick_until(
    w: &Sched,
    env: &[(&str, &str)],
    mut pred: impl FnMut(&Sched) -> bool,
    deadline: Duration,
) -> String {
    let caller = Location::caller();
    let mut out = String::new();
    let mut ticks = 0;
    let held = poll(deadline, TICK_EVERY, || {
        let r = w.tick_with(env, &[]);
        ticks += 1;
        assert_eq!(
            r.code,
            0,
            "{caller}: tick {ticks} failed:\n{r:?}\n{}",
            w.diagnose()
        );
        out.push_str(&r.stdout);
        pred(w)
    });
    if !held {
        panic!(
            "{caller}: the condition did not hold after {ticks} ticks in {deadline:?}\n\
             --- tick output\n{out}\n{}",
            w.diagnose()
        );
    }
    out
}

/// Poll `pred` (no ticks) until it holds or `deadline` passes.
#[track_caller]
pub fn wait_until(w: &Sched, what: &str, mut pred: impl FnMut(&Sched) -> bool, deadline: Duration) {
    let caller = Location::caller();
    if !poll(deadline, Duration::from_millis(100), || pred(w)) {
        panic!(
            "{caller}: {what}: not reached in {deadline:?}\n{}",
            w.diagnose()
        );
    }
}
