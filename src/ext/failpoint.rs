//! Named failpoints for crash tests: `ORCH_FAILPOINT=<name>[,<name>…]` makes any orch process
//! that reaches one of those points append `<name> <pid>` to the file named by
//! `ORCH_FAILPOINT_LOG` (when set) and then SIGKILL itself, exactly as a power cut or the OOM
//! killer would stop it on that line. The kill matrix test arms each name in turn and checks
//! that the next ticks finish the work without losing or doubling anything.
//!
//! Deliberately cheap when unarmed: the environment is read once per process and `hit` is a
//! slice lookup. Children that are not orch (agents, suites) never see the variables: the
//! scrubbed child environment removes every `ORCH_*` variable orch does not set itself.

use std::io::Write;
use std::sync::OnceLock;

/// Every failpoint, with where it sits. `orch debug failpoints` prints the names.
pub const ALL: &[(&str, &str)] = &[
    (
        "tick.after-lock",
        "tick: the tick lock is taken, before reaping",
    ),
    (
        "tick.after-reap",
        "tick: reaping is done, before reclaiming leases",
    ),
    (
        "tick.after-reclaim",
        "tick: leases are reclaimed, before reconciling",
    ),
    ("tick.after-reconcile", "tick: reconciled, before claiming"),
    (
        "launch.after-claim",
        "launch pass (a tick's, a supervisor's or a gesture's): a job is claimed, before its \
         supervisor is spawned",
    ),
    (
        "launch.after-spawn",
        "launch pass: the supervisor is spawned, before it is recorded",
    ),
    ("tick.before-drain", "tick: before delivering the outbox"),
    (
        "job.after-start",
        "supervisor: recorded itself, before preparing the worktree",
    ),
    (
        "job.agent-running",
        "supervisor: the agent is running (its group recorded)",
    ),
    (
        "job.agent-exited",
        "supervisor: the agent exited, before the commit",
    ),
    ("job.after-commit", "supervisor: committed, before the push"),
    (
        "job.after-push",
        "supervisor: pushed, before the exit code is recorded",
    ),
    (
        "job.after-exit",
        "supervisor: exit code recorded, before the job is finished",
    ),
    (
        "job.after-finish",
        "supervisor: job finished, before the advance",
    ),
    (
        "job.before-launch",
        "supervisor: the job's outcome is recorded, before its launch pass",
    ),
    (
        "gesture.before-launch",
        "gesture or ingest: the change is committed, before the launch pass",
    ),
    (
        "ci.running",
        "supervisor: the CI command is running (its group recorded)",
    ),
    (
        "ci.after-exit",
        "supervisor: the CI command exited, before its status is recorded",
    ),
    (
        "runner.suite-running",
        "runner: the suite is running (its group recorded)",
    ),
    (
        "runner.after-commit",
        "runner: the report is committed, before the push",
    ),
    (
        "runner.after-push",
        "runner: the report is pushed, before the advance",
    ),
    (
        "advance.lease-taken",
        "advance: the transition lease is taken, before the gate",
    ),
    (
        "advance.before-cas",
        "advance: the gate decided, before the stage write",
    ),
    (
        "advance.between-hops",
        "advance: one hop written (uncommitted), before the next",
    ),
    (
        "advance.after-cas",
        "advance: stage written, before the outbox rows (uncommitted)",
    ),
    (
        "advance.after-commit",
        "advance: the transaction committed, before the lease release",
    ),
    (
        "reap.after-kill",
        "reaper: the dead job's groups are killed, before it is re-queued",
    ),
    (
        "outbox.after-claim",
        "outbox: a row is claimed, before it is sent",
    ),
    (
        "outbox.after-send",
        "outbox: a row is sent, before it is marked done",
    ),
    (
        "cancel.after-kill",
        "cancel: intent recorded and processes killed, before the tombstone",
    ),
    (
        "cancel.after-commit",
        "cancel: the task is tombstoned, before the worktree is removed",
    ),
    (
        "ingest.after-route",
        "ingest: the delivery acted, before its inbox row is stored",
    ),
    (
        "release.after-security",
        "releaser: the secret scan is recorded, before the merge gate",
    ),
    (
        "release.scanner-running",
        "releaser: an external secret scanner is running (its group recorded)",
    ),
    (
        "release.merge-lease-taken",
        "releaser: the merge lease is taken, before the fetch and rebase",
    ),
    (
        "release.after-rebase",
        "releaser: the branch is rebased in the worktree, before its push",
    ),
    (
        "release.after-rebased-push",
        "releaser: the rebased branch is pushed, before the re-test",
    ),
    (
        "release.retest-running",
        "releaser: the re-test suite is running (its group recorded)",
    ),
    (
        "release.after-retest",
        "releaser: the re-test ended, before the merge gate is recorded",
    ),
    (
        "release.coverage-running",
        "releaser: the coverage command is running (its group recorded)",
    ),
    (
        "release.hook-initiated",
        "deploy hook: `initiated` is committed, before the hook starts",
    ),
    (
        "release.hook-running",
        "deploy hook: the hook is running (its group recorded)",
    ),
    (
        "release.after-hook",
        "deploy hook: the hook exited, before its outcome is recorded",
    ),
    (
        "release.after-hook-record",
        "deploy hook: the outcome is recorded, before the deploy log",
    ),
    (
        "release.before-merge",
        "merge: main is fetched and the branch checked, before the merge",
    ),
    (
        "release.before-forge-merge",
        "merge: the forge merge is queued in the outbox, before the job waits for it",
    ),
    (
        "release.after-merge",
        "merge: main holds the merge, before the proof",
    ),
    (
        "release.after-proof",
        "merge: the proof is recorded, before the advance to done",
    ),
];

fn armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| {
        std::env::var("ORCH_FAILPOINT")
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Whether `name` is armed in this process.
pub fn is_armed(name: &str) -> bool {
    armed().iter().any(|a| a == name)
}

/// Reach the failpoint `name`: when it is armed, note it and die by SIGKILL (no destructor,
/// no flush, no lease release runs). A name missing from `ALL` is a programming error.
pub fn hit(name: &'static str) {
    debug_assert!(
        ALL.iter().any(|(n, _)| *n == name),
        "failpoint `{name}` is not in failpoint::ALL"
    );
    if !is_armed(name) {
        return;
    }
    if let Some(path) = std::env::var_os("ORCH_FAILPOINT_LOG") {
        let line = format!("{name} {}\n", std::process::id());
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(line.as_bytes());
            let _ = f.sync_all();
        }
    }
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    // SIGKILL cannot be caught; this is never reached.
    std::process::abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for (n, what) in ALL {
            assert!(seen.insert(*n), "{n} twice");
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'-'),
                "{n}"
            );
            assert!(!what.is_empty());
        }
        assert!(ALL.len() >= 25);
    }

    #[test]
    fn an_unarmed_failpoint_does_nothing() {
        // The test process has no ORCH_FAILPOINT, so this returns.
        hit("tick.after-lock");
    }
}
