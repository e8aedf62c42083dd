//! Tests of supervised runs, through the public API only: they exercise `supervised.rs` and
//! `pipes.rs` together on real processes. The unit tests of `Cmd`, the ring buffer and the line
//! scan sit next to their code.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::{Pid, getpgid};

use super::*;
use crate::ext::sys;

const DEADLINE: Duration = Duration::from_secs(10);
/// A run expected to be cut short must end well before its `sleep 30` would.
const QUICK: Duration = Duration::from_secs(15);
const RESULT_LINE: &str = r#"{"type":"result","subtype":"success"}"#;

fn test_env() -> Vec<(OsString, OsString)> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    vec![("PATH".into(), path)]
}

fn sh(script: &str) -> Spec {
    let mut spec = Spec::new(
        ["sh", "-c", script],
        std::env::temp_dir(),
        test_env(),
        Duration::from_secs(60),
    );
    spec.grace = Duration::from_secs(2);
    spec
}

fn result_marker() -> Option<EndMarker> {
    Some(Box::new(|line: &str| {
        line.starts_with(r#"{"type":"result""#)
    }))
}

fn run(spec: Spec) -> (RunOutcome, Started) {
    let mut started = None;
    let out = run_supervised(spec, |s| started = Some(*s));
    (out, started.expect("on_start was not called"))
}

/// Polls `cond` until it holds or `DEADLINE` passes; returns whether it held.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Pids of the live (not zombie) members of process group `pgid`, from field 5 of
/// `/proc/*/stat`, read after the last `)` because `comm` may contain one.
fn live_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        if pgrp.parse::<i32>() == Ok(pgid) && !matches!(*state, "Z" | "X") {
            members.push(pid);
        }
    }
    members
}

fn assert_group_gone(pgid: i32) {
    assert!(
        eventually(|| live_members(pgid).is_empty()),
        "members of group {pgid} survived the run: {:?}",
        live_members(pgid)
    );
}

#[test]
fn exit_codes_and_tails_are_reported() {
    let (out, started) = run(sh("exit 0"));
    assert_eq!(out.ending, Ending::Exited(0));
    assert_group_gone(started.pgid);

    let (out, _) = run(sh("echo out; echo err >&2; exit 3"));
    assert_eq!(out.ending, Ending::Exited(3));
    assert_eq!(out.stdout_tail, "out");
    assert_eq!(out.stderr_tail, "err");
    assert!(out.combined_tail.contains("out") && out.combined_tail.contains("err"));
    assert_eq!(out.result_line, None);
}

#[test]
fn a_child_killed_by_its_own_signal_is_signalled() {
    let (out, _) = run(sh("kill -TERM $$"));
    assert_eq!(out.ending, Ending::Signalled(libc::SIGTERM));
}

#[test]
fn on_start_gets_the_leader_of_a_new_group() {
    let mut seen = None;
    let out = run_supervised(sh("echo hi"), |s| {
        // The child is not reaped before on_start returns, so /proc still shows it.
        seen = Some((
            *s,
            sys::observe(s.pgid),
            getpgid(Some(Pid::from_raw(s.pgid))),
        ));
    });
    let (started, observed, pgid) = seen.unwrap();
    assert_eq!(out.ending, Ending::Exited(0));
    assert!(started.start_time > 0);
    assert_eq!(observed.map(|o| o.start_time), Some(started.start_time));
    assert_eq!(
        pgid,
        Ok(Pid::from_raw(started.pgid)),
        "not its own group leader"
    );
    assert_ne!(getpgid(None).unwrap().as_raw(), started.pgid);
}

#[test]
fn wall_clock_timeout_kills_the_group() {
    let mut spec = sh("sleep 30 & sleep 30");
    spec.wall_timeout = Duration::from_secs(1);
    let (out, started) = run(spec);
    assert_eq!(out.ending, Ending::TimedOut);
    assert!(out.duration >= Duration::from_secs(1), "{:?}", out.duration);
    assert!(out.duration < QUICK, "{:?}", out.duration);
    assert_group_gone(started.pgid);
}

#[test]
fn an_ignored_sigterm_is_followed_by_sigkill_after_the_grace() {
    let mut spec = sh("trap '' TERM; sleep 30 & sleep 30");
    spec.wall_timeout = Duration::from_millis(300);
    spec.grace = Duration::from_millis(500);
    let (out, started) = run(spec);
    assert_eq!(out.ending, Ending::TimedOut);
    assert!(
        out.duration >= Duration::from_millis(800),
        "SIGKILL came before the grace ended: {:?}",
        out.duration
    );
    assert!(out.duration < QUICK, "{:?}", out.duration);
    assert_group_gone(started.pgid);
}

#[test]
fn silence_past_the_inactivity_timeout_kills() {
    let mut spec = sh("sleep 30");
    spec.inactivity_timeout = Some(Duration::from_secs(1));
    let (out, started) = run(spec);
    assert_eq!(out.ending, Ending::Inactive);
    assert!(out.duration < QUICK, "{:?}", out.duration);
    assert_group_gone(started.pgid);
}

#[test]
fn steady_output_is_not_inactivity() {
    let mut spec = sh("i=0; while [ $i -lt 10 ]; do echo tick $i; sleep 0.2; i=$((i+1)); done");
    spec.inactivity_timeout = Some(Duration::from_secs(1));
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
    assert!(out.stdout_tail.ends_with("tick 9"), "{}", out.stdout_tail);
}

#[test]
fn stderr_output_counts_as_activity() {
    let mut spec = sh("i=0; while [ $i -lt 8 ]; do echo tick >&2; sleep 0.2; i=$((i+1)); done");
    spec.inactivity_timeout = Some(Duration::from_secs(1));
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
}

#[test]
fn a_missing_program_fails_to_spawn_with_not_found() {
    for program in ["/nonexistent/orch-test-program", "orch-no-such-program-xyz"] {
        let spec = Spec::new([program], std::env::temp_dir(), test_env(), DEADLINE);
        let mut called = false;
        let out = run_supervised(spec, |_| called = true);
        let Ending::SpawnFailed(kind, message) = &out.ending else {
            panic!("{:?}", out.ending);
        };
        assert_eq!(*kind, std::io::ErrorKind::NotFound);
        assert!(message.contains(&format!("`{program}`")), "{message}");
        assert!(!called, "on_start ran without a child");
    }
}

#[test]
fn a_non_executable_file_fails_to_spawn_with_permission_denied() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let spec = Spec::new([&script], dir.path(), test_env(), DEADLINE);
    let out = run_supervised(spec, |_| {});
    let Ending::SpawnFailed(kind, message) = &out.ending else {
        panic!("{:?}", out.ending);
    };
    assert_eq!(*kind, std::io::ErrorKind::PermissionDenied);
    assert!(message.contains("not-executable.sh`"), "{message}");
}

#[test]
fn a_missing_cwd_or_empty_argv_fails_to_spawn() {
    let spec = Spec::new(["true"], "/nonexistent/orch-cwd", test_env(), DEADLINE);
    let out = run_supervised(spec, |_| {});
    assert_eq!(
        out.ending,
        Ending::SpawnFailed(
            std::io::ErrorKind::NotFound,
            "cannot start `true` in `/nonexistent/orch-cwd`: No such file or directory (os error 2)"
                .to_string()
        )
    );

    let spec = Spec::new(
        Vec::<String>::new(),
        std::env::temp_dir(),
        test_env(),
        DEADLINE,
    );
    let out = run_supervised(spec, |_| {});
    assert_eq!(
        out.ending,
        Ending::SpawnFailed(
            std::io::ErrorKind::InvalidInput,
            "cannot start a command with an empty argv".to_string()
        )
    );
}

#[test]
fn an_end_marker_finishes_a_lingering_run_and_kills_its_group() {
    let mut spec = sh(&format!("sleep 30 & echo '{RESULT_LINE}'; sleep 30"));
    spec.end_marker = result_marker();
    spec.linger_grace = Duration::from_millis(500);
    let (out, started) = run(spec);
    assert_eq!(out.ending, Ending::MarkedDone { code: None });
    assert_eq!(out.result_line.as_deref(), Some(RESULT_LINE));
    assert!(out.duration < QUICK, "{:?}", out.duration);
    assert_group_gone(started.pgid);
}

#[test]
fn exiting_within_the_linger_grace_is_an_ordinary_exit() {
    let mut spec = sh(&format!("echo '{RESULT_LINE}'; echo after; exit 0"));
    spec.end_marker = result_marker();
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
    assert_eq!(out.result_line.as_deref(), Some(RESULT_LINE));
    assert_eq!(out.stdout_tail, format!("{RESULT_LINE}\nafter"));
}

#[test]
fn a_marker_without_a_final_newline_or_with_crlf_counts() {
    for script in [
        format!("printf '%s' '{RESULT_LINE}'"),
        format!("printf '%s\\r\\n' '{RESULT_LINE}'; sleep 30"),
    ] {
        let mut spec = sh(&script);
        spec.end_marker = result_marker();
        spec.linger_grace = Duration::from_millis(200);
        let (out, _) = run(spec);
        assert_eq!(out.result_line.as_deref(), Some(RESULT_LINE), "{script}");
        assert!(out.duration < QUICK, "{:?}", out.duration);
    }
}

#[test]
fn a_huge_line_does_not_hide_a_later_marker() {
    let mut spec = sh(&format!(
        "head -c 3000000 /dev/zero; echo; echo '{RESULT_LINE}'; sleep 30"
    ));
    spec.end_marker = result_marker();
    spec.linger_grace = Duration::from_millis(200);
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::MarkedDone { code: None });
    assert_eq!(out.result_line.as_deref(), Some(RESULT_LINE));
}

#[test]
fn a_background_grandchild_does_not_outlive_the_run() {
    let (out, started) = run(sh("sleep 30 & echo started"));
    assert_eq!(out.ending, Ending::Exited(0));
    assert_eq!(out.stdout_tail, "started");
    assert!(
        out.duration < QUICK,
        "waited for the grandchild's pipe: {:?}",
        out.duration
    );
    assert_group_gone(started.pgid);
}

#[test]
fn a_process_that_left_the_group_cannot_hold_the_run_open() {
    // `setsid` puts the sleep in a session of its own, out of reach of the group kill, with
    // our stdout still open; the run must stop reading instead of waiting for it.
    let (out, _) = run(sh("setsid sleep 30 & echo $!"));
    let escaped: i32 = out.stdout_tail.parse().unwrap();
    let _ = nix::sys::signal::kill(Pid::from_raw(escaped), Signal::SIGKILL);
    assert_eq!(out.ending, Ending::Exited(0));
    assert!(out.duration < QUICK, "{:?}", out.duration);
}

#[test]
fn a_marked_child_that_exits_on_sigterm_keeps_its_code() {
    let mut spec = sh(&format!(
        "trap 'exit 0' TERM; echo '{RESULT_LINE}'; sleep 30 & wait"
    ));
    spec.end_marker = result_marker();
    spec.linger_grace = Duration::from_millis(200);
    let (out, started) = run(spec);
    assert_eq!(out.ending, Ending::MarkedDone { code: Some(0) });
    assert!(out.duration < QUICK, "{:?}", out.duration);
    assert_group_gone(started.pgid);
}

#[test]
fn a_child_closing_its_pipes_early_is_still_waited_for() {
    let (out, _) = run(sh("echo bye; exec >&- 2>&- <&-; sleep 0.3; exit 4"));
    assert_eq!(out.ending, Ending::Exited(4));
    assert_eq!(out.stdout_tail, "bye");
}

#[test]
fn fifty_megabytes_of_output_keep_tails_bounded_and_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs/SHOP-7/job.log");
    let mut spec = sh("head -c 50000000 /dev/zero; echo done >&2");
    spec.log = Some(log.clone());
    // Exercises the line cap: 50 MB without a newline.
    spec.end_marker = result_marker();
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
    for tail in [&out.stdout_tail, &out.stderr_tail, &out.combined_tail] {
        assert!(
            tail.len() <= TAIL_KEEP_BYTES,
            "tail of {} bytes",
            tail.len()
        );
    }
    assert_eq!(out.stdout_tail.len(), TAIL_KEEP_BYTES);
    assert_eq!(out.stderr_tail, "done");
    assert_eq!(fs::metadata(&log).unwrap().len(), 50_000_000 + 5);
}

#[test]
fn binary_output_does_not_break_anything() {
    let mut spec =
        sh("head -c 300000 /dev/urandom; head -c 300000 /dev/urandom >&2; printf '\\377\\376\\n'");
    spec.end_marker = result_marker();
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
    for tail in [&out.stdout_tail, &out.stderr_tail, &out.combined_tail] {
        assert!(
            tail.len() <= TAIL_KEEP_BYTES,
            "tail of {} bytes",
            tail.len()
        );
    }
    assert_eq!(out.result_line, None);
}

#[test]
fn tails_keep_the_last_200_lines() {
    let (out, _) = run(sh("seq 1 300; seq 1001 1300 >&2"));
    let lines: Vec<&str> = out.stdout_tail.lines().collect();
    assert_eq!(lines.len(), TAIL_KEEP_LINES);
    assert_eq!((lines[0], lines[199]), ("101", "300"));
    let lines: Vec<&str> = out.stderr_tail.lines().collect();
    assert_eq!((lines.len(), lines[0]), (TAIL_KEEP_LINES, "1101"));
    assert_eq!(out.combined_tail.lines().count(), TAIL_KEEP_LINES);
}

#[test]
fn the_log_is_appended_to_with_both_streams() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("job.log");
    fs::write(&log, "previous run\n").unwrap();
    let mut spec = sh("echo one; echo two >&2");
    spec.log = Some(log.clone());
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
    let text = fs::read_to_string(&log).unwrap();
    assert!(text.starts_with("previous run\n"), "{text}");
    assert!(text.contains("one\n") && text.contains("two\n"), "{text}");
    assert_eq!(text.len(), "previous run\none\ntwo\n".len());
}

#[test]
fn an_unopenable_log_fails_before_spawning() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    fs::write(&blocker, "").unwrap();
    let mut spec = sh("echo should-not-run");
    spec.log = Some(blocker.join("job.log"));
    let mut called = false;
    let out = run_supervised(spec, |_| called = true);
    let Ending::SpawnFailed(_, message) = &out.ending else {
        panic!("{:?}", out.ending);
    };
    assert!(
        message.starts_with("cannot start `sh`: cannot open its log `"),
        "{message}"
    );
    assert!(!called);
}

#[test]
fn stdin_is_delivered_and_closed() {
    let mut spec = Spec::new(["cat"], std::env::temp_dir(), test_env(), DEADLINE);
    spec.stdin = Some(b"hello\nworld\n".to_vec());
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
    assert_eq!(out.stdout_tail, "hello\nworld");

    // Far beyond the pipe buffer in both directions.
    let mut spec = sh("cat; echo end >&2");
    spec.stdin = Some(vec![b'x'; 4 * 1024 * 1024]);
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
    assert_eq!(out.stderr_tail, "end");
    assert_eq!(out.stdout_tail.len(), TAIL_KEEP_BYTES);
}

#[test]
fn stdin_is_dev_null_by_default_and_may_be_ignored() {
    let (out, _) = run(Spec::new(
        ["cat"],
        std::env::temp_dir(),
        test_env(),
        DEADLINE,
    ));
    assert_eq!(out.ending, Ending::Exited(0));
    assert_eq!(out.stdout_tail, "");

    let mut spec = sh("exit 0");
    spec.stdin = Some(vec![b'x'; 4 * 1024 * 1024]);
    let (out, _) = run(spec);
    assert_eq!(out.ending, Ending::Exited(0));
}

#[test]
fn the_environment_is_exactly_the_given_one_and_cwd_applies() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = test_env();
    env.push(("ORCH_SANDBOX".into(), "1".into()));
    let mut spec = sh("pwd; echo \"$ORCH_SANDBOX\"; echo \"${HOME-unset}\"");
    spec.cwd = dir.path().to_owned();
    spec.env = env;
    let (out, _) = run(spec);
    let canon = fs::canonicalize(dir.path()).unwrap();
    assert_eq!(
        out.stdout_tail,
        format!("{}\n1\nunset", canon.to_str().unwrap())
    );
}
