//! The agent sandbox (design §9.2) against a hostile agent (`tests/it/hostile-agent`): it reads
//! every `/proc/*/environ` and `cmdline`, the config, the secret files and the database, writes
//! the database and the state directory, approves and confirms its own task with every config
//! it finds, writes git config and a hook that would run a program, redirects its worktree's
//! `.git`, starts a `setsid` daemon and kills its supervisor; then does the analyst's work.
//!
//! Under bubblewrap every attempt must fail or change nothing. The same agent with the sandbox
//! off must be caught by the same checks (so the first test cannot pass by not looking). The
//! tests need `bwrap`: without it they say so and pass, except under `CI=true`, where `.ci/run`
//! installs it and its absence is a failure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::sched::{Cfg, DEADLINE, REMOTE, Sched, tick_until};
use crate::support::{World, poll, stub_agent, which};

const TOKEN_FILE_VALUE: &str = "tok-file-5ecret-7d41c9";
const TOKEN_ENV_VALUE: &str = "tok-env-5ecret-0be2f3";
const HOOK_VALUE: &str = "hook-5ecret-93a0aa";
const CONFIG_CANARY: &str = "config-canary-5e1f2a";

/// Whether the sandbox can be tested here; panics under `CI=true` when it cannot.
pub fn bwrap_or_skip(test: &str) -> bool {
    if which("bwrap").is_some() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: bubblewrap (`bwrap`) is missing under CI=true; .ci/run installs it");
    }
    eprintln!(
        "SKIPPED {test}: bubblewrap (`bwrap`) is not installed; `apt-get install bubblewrap` \
         to run the sandbox tests"
    );
    false
}

struct Hostile {
    w: World,
    out: PathBuf,
    marks: PathBuf,
    secrets: [PathBuf; 2],
}

impl Hostile {
    fn new(sandbox: bool) -> Hostile {
        // Not under /tmp, which the sandbox replaces anyway: each path must be hidden on its own
        // merits (the state directory, the config, the secret files).
        let w = World::in_dir(crate::support::tempdir_outside_tmp(), "");
        w.sandbox
            .store(sandbox, std::sync::atomic::Ordering::Relaxed);
        let dir = w.dir.path().to_path_buf();
        let (out, marks, sec) = (dir.join("out"), dir.join("marks"), dir.join("secrets"));
        for d in [&out, &marks, &sec] {
            std::fs::create_dir_all(d).unwrap();
        }
        let secrets = [sec.join("plane-token"), sec.join("plane-hook")];
        std::fs::write(&secrets[0], format!("{TOKEN_FILE_VALUE}\n")).unwrap();
        std::fs::write(&secrets[1], format!("{HOOK_VALUE}\n")).unwrap();
        let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/hostile-agent");
        std::fs::write(
            &w.config,
            format!(
                "# {CONFIG_CANARY}\n\
                 state_dir: {state:?}\n\
                 max_concurrency: 1\n\
                 agent:\n  argv: [{hostile:?}, \"--print\"]\n  inactivity_timeout_s: 60\n  \
                 max_attempts: 1\n  sandbox_writable: [{out:?}]\n  \
                 sandbox_readable: [{hostile:?}, {stub:?}, {orch:?}]\n\
                 scheduler:\n  reconcile_grace_s: 1\n  retry_backoff_s: 1\n\
                 tracker:\n  kind: plane\n  token_file: {tok:?}\n  token_env: ORCH_PLANE_TOKEN\n  \
                 webhook_secret_file: {hook:?}\n\
                 repos:\n  - name: shop\n    remote: {remote:?}\n    prefix: SHOP\n",
                state = w.state_dir().display().to_string(),
                hostile = hostile.display().to_string(),
                // A checkout or target dir under /tmp would be hidden by the sandbox's
                // private /tmp: the scripts and the orch binary the agent runs show through.
                stub = stub_agent().display().to_string(),
                orch = crate::support::orch_bin(),
                out = out.display().to_string(),
                tok = secrets[0].display().to_string(),
                hook = secrets[1].display().to_string(),
                remote = w.remote.display().to_string(),
            ),
        )
        .unwrap();
        Hostile {
            w,
            out,
            marks,
            secrets,
        }
    }

    fn tick(&self) {
        let secrets = self
            .secrets
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" ");
        let mut c = self.w.stub_cmd(&["tick"]);
        c.env("ORCH_PLANE_TOKEN", TOKEN_ENV_VALUE)
            .env("HOSTILE_CONFIG", &self.w.config)
            .env("HOSTILE_STATE", self.w.state_dir())
            .env("HOSTILE_DB", self.w.db_path())
            .env("HOSTILE_SECRETS", secrets)
            .env("HOSTILE_ORCH", crate::support::orch_bin())
            .env("HOSTILE_MARKS", &self.marks)
            .env("HOSTILE_OUT", &self.out)
            .env("HOSTILE_STUB", stub_agent());
        let r = crate::support::Run::of(&mut c);
        assert_eq!(r.code, 0, "tick: {r:?}");
    }

    /// Tick until the analyst's job has ended (or been reaped), then return what the agent got
    /// away with.
    fn run(&self) -> Vec<String> {
        let wi = self.w.add("Hostile analysis", &[]);
        let ended = poll(Duration::from_secs(90), Duration::from_millis(300), || {
            self.tick();
            let s = self.w.sql("SELECT status FROM jobs ORDER BY id LIMIT 1");
            matches!(s.trim(), "done" | "failed" | "cancelled")
        });
        let log = self.read_log("job-1.agent.log") + &lossy(&self.out.join("report"));
        assert!(ended, "the job never ended:\n{log}");
        assert!(
            log.contains("HOSTILE daemon started"),
            "the hostile agent did not run:\n{log}\n--- supervisor\n{}\n--- jobs\n{}\n--- out {:?}",
            self.read_log("job-1.log"),
            self.w.sql("SELECT id, role, status, error FROM jobs"),
            std::fs::read_dir(&self.out).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>()),
        );
        let mut breaches = Vec::new();
        let mut found = |what: &str, yes: bool| {
            if yes {
                breaches.push(what.to_string());
            }
        };
        found("read the token file", log.contains(TOKEN_FILE_VALUE));
        found("read the token variable", log.contains(TOKEN_ENV_VALUE));
        found("read the webhook secret file", log.contains(HOOK_VALUE));
        found("read the config", log.contains(CONFIG_CANARY));
        found("read the database", log.contains("SQLite format 3"));
        found("wrote the database", log.contains("HOSTILE db write: ok"));
        found(
            "wrote the state directory",
            self.w.state_dir().join("pwned").exists(),
        );
        let approvals = self.w.sql(&format!(
            "SELECT count(*) FROM transitions t JOIN tasks k ON k.id = t.task_id \
             WHERE k.work_item = '{wi}' AND t.outcome = 'approved'"
        ));
        found("approved its own task", approvals.trim() != "0");
        found(
            "moved its task",
            !matches!(self.w.stage(&wi).as_str(), "analysis"),
        );
        for m in std::fs::read_dir(&self.marks).unwrap().flatten() {
            found(
                &format!(
                    "made orch run its program ({})",
                    m.file_name().to_string_lossy()
                ),
                true,
            );
        }
        found(
            "killed its supervisor",
            !self
                .read_log("job-1.log")
                .contains("job 1 (SHOP-1, analyst): "),
        );
        // Whatever it started ends with the job.
        let daemon_gone = poll(Duration::from_secs(10), Duration::from_millis(100), || {
            !self.daemon_alive()
        });
        found("left a daemon running after its job", !daemon_gone);
        self.kill_daemon();
        breaches
    }

    fn read_log(&self, name: &str) -> String {
        lossy(&self.w.state_dir().join("logs").join(name))
    }

    fn daemon_pids(&self) -> Vec<i32> {
        let needle = self.out.join("daemon").display().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
            })
            .collect()
    }

    fn daemon_alive(&self) -> bool {
        !self.daemon_pids().is_empty()
    }

    fn kill_daemon(&self) {
        for pid in self.daemon_pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// A file's text, whatever bytes the agent put in it (a database read, say).
fn lossy(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.kill_daemon();
    }
}

#[test]
fn a_hostile_agent_in_the_sandbox_gets_nothing_and_changes_nothing() {
    if !bwrap_or_skip("a_hostile_agent_in_the_sandbox_gets_nothing_and_changes_nothing") {
        return;
    }
    let h = Hostile::new(true);
    let breaches = h.run();
    assert!(
        breaches.is_empty(),
        "the hostile agent got away with: {breaches:#?}\n--- agent log\n{}",
        h.read_log("job-1.agent.log")
    );
    // It did its honest work, and the task waits for a human as it should.
    let wi = "SHOP-1";
    assert_eq!(h.w.stage(wi), "analysis");
    assert_eq!(
        h.w.sql("SELECT status FROM jobs ORDER BY id LIMIT 1")
            .trim(),
        "done",
        "{}",
        h.read_log("job-1.log")
    );
    let why = h.w.orch(&["why", wi]);
    assert!(why.stdout.contains("orch approve"), "{why:?}");
    // The gestures were refused as such from inside.
    let log = h.read_log("job-1.agent.log") + &lossy(&h.out.join("report"));
    assert!(log.contains("HOSTILE approve as-is: exit 2"), "{log}");
    // Its supervisor's environment was read (as root, or as orch's user before it was made
    // undumpable) and held no secret: the tick starts supervisors scrubbed.
    let sup = log
        .lines()
        .find(|l| l.starts_with("HOSTILE supervisor environ: "))
        .unwrap_or_else(|| panic!("no supervisor environ line:\n{log}"));
    if sup.contains("HOSTILE_OUT=") {
        assert!(!sup.contains(TOKEN_ENV_VALUE), "{sup}");
        assert!(!sup.contains("ORCH_PLANE_TOKEN="), "{sup}");
    }
}

#[test]
fn human_gestures_are_refused_inside_a_job() {
    let w = World::new();
    let wi = w.add("Gestures", &[]);
    let before = w.sql("SELECT stage, approved_at FROM tasks");
    for args in [
        vec!["approve", wi.as_str()],
        vec!["confirm-deploy", wi.as_str()],
        vec!["cancel", wi.as_str()],
        vec!["resume", wi.as_str()],
        vec!["unfreeze", "shop"],
        vec!["advance", wi.as_str(), "--to", "done", "--reason", "x"],
        vec!["lease", "release", wi.as_str(), "--force"],
    ] {
        let r = w.orch_with(&args, &[("ORCH_SANDBOX", "1")]);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains("human gesture"), "{args:?}: {r:?}");
    }
    assert_eq!(w.sql("SELECT stage, approved_at FROM tasks"), before);
    // Outside a job the same gesture works, and `ORCH_SANDBOX=0` is outside.
    let r = w.orch_with(&["approve", &wi], &[("ORCH_SANDBOX", "0")]);
    assert!(r.stdout.contains("approval of `SHOP-1` recorded"), "{r:?}");
}

#[test]
fn the_same_agent_unconfined_is_caught_by_those_checks() {
    if !bwrap_or_skip("the_same_agent_unconfined_is_caught_by_those_checks") {
        return;
    }
    let h = Hostile::new(false);
    let breaches = h.run();
    for expected in [
        "read the config",
        "read the database",
        "wrote the database",
        "killed its supervisor",
        "left a daemon running after its job",
    ] {
        assert!(
            breaches.iter().any(|b| b == expected),
            "unconfined, `{expected}` should have been seen; saw {breaches:#?}"
        );
    }
    // What holds without the sandbox: the gestures are refused while ORCH_SANDBOX is set, and
    // orch's git runs no program of the agent's config.
    assert!(
        !breaches.iter().any(|b| b.starts_with("made orch run")),
        "{breaches:#?}"
    );
    let log = h.read_log("job-1.agent.log");
    assert!(log.contains("HOSTILE approve as-is: exit 2"), "{log}");
}

#[test]
fn a_whole_pipeline_runs_confined_and_a_contract_may_opt_out() {
    if !bwrap_or_skip("a_whole_pipeline_runs_confined_and_a_contract_may_opt_out") {
        return;
    }
    // Two repos, each with a test suite that passes only if it can NOT read the config (`shop`,
    // confined) or only if it CAN (`open`, `sandbox: false`).
    let w = Sched {
        w: World::in_dir(crate::support::tempdir_outside_tmp(), ""),
    };
    let config = w.config.display().to_string();
    let tests = |cond: &str, sandbox: bool| {
        format!(
            "    tests: {{ argv: [\"sh\", \"-c\", \"{cond} cat '{config}' >/dev/null 2>&1\"], \
             sandbox: {sandbox} }}\n"
        )
    };
    w.configure(&Cfg {
        sandbox: true,
        extra_repos: tests("!", true)
            + &format!(
                "  - name: open\n    remote: {REMOTE}\n    prefix: OPEN\n    \
                 default_labels: [auto-approve]\n"
            )
            + &tests("", false),
        ..Cfg::default()
    });
    let shop = w.add("Confined all the way", &[]);
    let open = w
        .ok(
            &[
                "task",
                "add",
                "--repo",
                "open",
                "--title",
                "Needs the host",
                "--json",
            ],
            0,
        )
        .json()["work_item"]
        .as_str()
        .unwrap()
        .to_string();
    tick_until(
        &w,
        &[],
        |w| w.stage_of(&shop) == "done" && w.stage_of(&open) == "done",
        DEADLINE * 2,
    );
}
