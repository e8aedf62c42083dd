//! Supervised runs: a long-lived child (an agent, a test or staging suite, a CI command) in its
//! own process group, and the state machine that ends it. [`run_supervised`] spawns it with a
//! complete environment, hands its identity to the caller through `on_start`, and waits for the
//! leader to exit while watching a wall-clock timeout, an optional inactivity timeout and an
//! optional end marker with its linger grace. A passed deadline sends SIGTERM to the group and,
//! after the grace, SIGKILL; whatever happened, the whole group is SIGKILLed before it returns,
//! so no grandchild outlives the run (design §4.4, §6).
//!
//! The helper threads that move bytes (the output pumps, the stdin feeder) are in `pipes.rs`;
//! this file owns the child, the deadlines and the signals, and has no `unsafe` code.

use std::ffi::{OsStr, OsString};
use std::io::PipeWriter;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::{Pid, getpgid};

use super::cmd::quote;
use super::pipes::{
    EndMarker, Event, LineScan, LogSink, Ring, Shared, feed, join_ring, lock, open_log, pump,
};
use super::signals;
use crate::ext::sys;

/// Default [`Spec::grace`]: from SIGTERM to SIGKILL of the group.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Default [`Spec::linger_grace`]: how long a child may go on after printing its end marker.
pub const DEFAULT_LINGER_GRACE: Duration = Duration::from_secs(5);

/// How often a run watched for interrupts looks for one.
const INTERRUPT_POLL: Duration = Duration::from_millis(100);

/// How long the pipes are still read once the leader was reaped and its group killed. Only a
/// process that left the group (`setsid`) can still hold them open then, and it must not hold us.
const PIPE_DRAIN: Duration = Duration::from_secs(1);

/// What to run under supervision. The environment is complete: the child gets exactly `env`
/// (see `ext::env::child_env`), nothing inherited.
pub struct Spec {
    /// Program and arguments; `argv[0]` is looked up in the `PATH` of `env` by the OS (with no
    /// `PATH` there, the C library's default). Never a shell string.
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    /// The complete environment of the child.
    pub env: Vec<(OsString, OsString)>,
    /// Bytes written to the child's stdin, which is then closed; `None` gives it `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Stdout and stderr are appended here as they arrive; missing directories are created.
    pub log: Option<PathBuf>,
    /// From spawn to SIGTERM of the group.
    pub wall_timeout: Duration,
    /// No output on either stream for this long → SIGTERM of the group.
    pub inactivity_timeout: Option<Duration>,
    /// From SIGTERM of the group to SIGKILL of the group.
    pub grace: Duration,
    /// Recognises the stdout line that means "done" (checked without its line ending, lossily
    /// decoded, at most [`MARKER_LINE_CAP`] bytes). Only the first such line counts.
    pub end_marker: Option<EndMarker>,
    /// After the end marker, how long the child may take to exit on its own before its group is
    /// terminated (SIGTERM, `grace`, SIGKILL).
    pub linger_grace: Duration,
}

impl Spec {
    /// A spec with no stdin, no log, no inactivity timeout, no end marker, [`DEFAULT_GRACE`] and
    /// [`DEFAULT_LINGER_GRACE`].
    pub fn new<I, S>(
        argv: I,
        cwd: impl Into<PathBuf>,
        env: Vec<(OsString, OsString)>,
        wall_timeout: Duration,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Spec {
            argv: argv.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            cwd: cwd.into(),
            env,
            stdin: None,
            log: None,
            wall_timeout,
            inactivity_timeout: None,
            grace: DEFAULT_GRACE,
            end_marker: None,
            linger_grace: DEFAULT_LINGER_GRACE,
        }
    }

    /// The command line, shell-quoted where needed, for messages and logs.
    pub fn display(&self) -> String {
        let words: Vec<String> = self.argv.iter().map(|a| quote(a)).collect();
        words.join(" ")
    }
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The environment is left out on purpose: it is not ours to print.
        f.debug_struct("Spec")
            .field("argv", &self.display())
            .field("cwd", &self.cwd)
            .field("env_vars", &self.env.len())
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .field("log", &self.log)
            .field("wall_timeout", &self.wall_timeout)
            .field("inactivity_timeout", &self.inactivity_timeout)
            .field("grace", &self.grace)
            .field("end_marker", &self.end_marker.is_some())
            .field("linger_grace", &self.linger_grace)
            .finish()
    }
}

/// How a supervised run ended. Whenever `orch` itself signalled the group, the ending says why
/// ([`Ending::TimedOut`], [`Ending::Inactive`], [`Ending::MarkedDone`]), whatever the exit status
/// the leader then had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The leader exited on its own with this code. That includes exiting within
    /// `linger_grace` after the end marker (then [`RunOutcome::result_line`] is set).
    Exited(i32),
    /// The leader died of this signal, which `orch` did not send.
    Signalled(i32),
    /// The wall-clock timeout passed.
    TimedOut,
    /// No output for the inactivity timeout.
    Inactive,
    /// Nothing ran (or, if a supervising thread could not be created, the child was killed at
    /// once): the error kind (`NotFound` for a missing program or cwd, `PermissionDenied` for one
    /// that is not executable) and a message naming `argv[0]`.
    SpawnFailed(std::io::ErrorKind, String),
    /// The end marker was printed and the child did not exit within `linger_grace`, so its group
    /// was terminated. `code` is the leader's exit code if it still exited with one (a SIGTERM
    /// handler), `None` if a signal killed it.
    MarkedDone { code: Option<i32> },
}

impl Ending {
    /// How the child ended, completing "the command …".
    pub fn describe(&self) -> String {
        match self {
            Ending::Exited(c) => format!("exited with code {c}"),
            Ending::Signalled(s) => format!("was killed by signal {s}"),
            Ending::TimedOut => "timed out (wall clock)".into(),
            Ending::Inactive => "was silent too long (inactivity timeout)".into(),
            Ending::SpawnFailed(kind, msg) => format!("could not be started ({kind:?}): {msg}"),
            Ending::MarkedDone { code } => match code {
                Some(c) => format!("printed its result and exited with code {c}"),
                None => "printed its result and lingered (its process group was killed)".into(),
            },
        }
    }
}

/// The child's identity, handed to `on_start` right after spawn so the caller can record it
/// before waiting. The child leads its own group, so `pgid` is also its pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub pgid: i32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot), as `ext::sys::identity_of`
    /// records it; 0 if it could not be read.
    pub start_time: u64,
}

/// What a supervised run left behind. Each tail holds at most [`TAIL_KEEP_LINES`] lines and
/// [`TAIL_KEEP_BYTES`] bytes, lossily decoded, trailing whitespace trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub ending: Ending,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// Both streams interleaved in the order their chunks were read, which follows the order
    /// they were written only roughly: the two pipes are read by separate threads.
    pub combined_tail: String,
    /// The first stdout line the end marker recognised, whatever the ending.
    pub result_line: Option<String>,
    /// From just before spawn to return.
    pub duration: Duration,
}

/// Runs `spec` to its end under supervision; see [`Spec`] and [`Ending`].
///
/// `on_start` is called once, right after spawn, with the child's group id and start time; it is
/// not called when the spawn fails. The function never fails and never panics on the child's
/// account: a child that closes its pipes, forks and exits, ignores SIGTERM or floods its output
/// is handled. Before it returns, the leader has been reaped and the whole group SIGKILLed.
/// A process that left the group (`setsid`) is out of reach; its hold on the pipes is cut after a
/// short drain.
pub fn run_supervised(spec: Spec, on_start: impl FnOnce(&Started)) -> RunOutcome {
    let began = Instant::now();
    let cmd = spec.display();
    let mut run = match Running::start(spec) {
        Ok(run) => run,
        Err((kind, message)) => {
            tracing::debug!(%cmd, %message, "supervised run failed to start");
            return RunOutcome {
                ending: Ending::SpawnFailed(kind, message),
                stdout_tail: String::new(),
                stderr_tail: String::new(),
                combined_tail: String::new(),
                result_line: None,
                duration: began.elapsed(),
            };
        }
    };
    tracing::debug!(%cmd, pgid = run.started.pgid, "supervised run started");
    on_start(&run.started);
    let kill = run.supervise();
    let outcome = run.finish(kill, began);
    tracing::debug!(%cmd, ending = ?outcome.ending, duration = ?outcome.duration, "supervised run ended");
    if let Some(Kill::Interrupted(sig)) = kill {
        // The group is gone; now the process ends as the signal asked.
        signals::die_of(sig);
    }
    outcome
}

/// Why `orch` terminated the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    WallClock,
    Inactivity,
    Lingered,
    /// This process got SIGINT, SIGTERM or SIGHUP (see `signals`).
    Interrupted(i32),
}

/// A supervised child and its helper threads. Dropping it before the child was reaped (a panic in
/// `on_start`) kills the group and reaps the child, so nothing is left running.
struct Running {
    child: Child,
    pgid: i32,
    started: Started,
    spawned_at: Instant,
    wall_timeout: Duration,
    inactivity_timeout: Option<Duration>,
    grace: Duration,
    linger_grace: Duration,
    events: Receiver<Event>,
    closed_streams: usize,
    shared: Arc<Shared>,
    /// Dropping this hangs up the read end every helper polls: the signal to stop.
    wake: Option<PipeWriter>,
    stdout_pump: Option<JoinHandle<Ring>>,
    stderr_pump: Option<JoinHandle<Ring>>,
    feeder: Option<JoinHandle<()>>,
    waiter: Option<JoinHandle<()>>,
    reaped: bool,
}

/// Why a run could not start: what `Ending::SpawnFailed` carries.
type StartError = (std::io::ErrorKind, String);

impl Running {
    fn start(spec: Spec) -> std::result::Result<Running, StartError> {
        let Spec {
            argv,
            cwd,
            env,
            stdin,
            log,
            wall_timeout,
            inactivity_timeout,
            grace,
            end_marker,
            linger_grace,
        } = spec;
        let Some(program) = argv.first() else {
            return Err((
                std::io::ErrorKind::InvalidInput,
                "cannot start a command with an empty argv".to_string(),
            ));
        };
        let shown = quote(program);
        let fail = |what: &str, e: std::io::Error| {
            (e.kind(), format!("cannot start `{shown}`: {what}: {e}"))
        };

        let logs = match &log {
            Some(path) => {
                let file = open_log(path)
                    .map_err(|e| fail(&format!("cannot open its log `{}`", path.display()), e))?;
                let second = file
                    .try_clone()
                    .map_err(|e| fail(&format!("cannot open its log `{}`", path.display()), e))?;
                Some((
                    LogSink::new(file, path.clone()),
                    LogSink::new(second, path.clone()),
                ))
            }
            None => None,
        };
        let (wake_rx, wake_tx) = std::io::pipe().map_err(|e| fail("cannot create a pipe", e))?;
        let wake_rx = Arc::new(wake_rx);

        let mut command = Command::new(program);
        command
            .args(&argv[1..])
            .current_dir(&cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .process_group(0)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawned_at = Instant::now();
        let mut child = command.spawn().map_err(|e| {
            (
                e.kind(),
                format!("cannot start `{shown}` in `{}`: {e}", cwd.display()),
            )
        })?;
        let Ok(pid) = i32::try_from(child.id()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err((
                std::io::ErrorKind::Other,
                format!(
                    "cannot supervise `{shown}`: its pid {} does not fit an i32",
                    child.id()
                ),
            ));
        };
        let started = Started {
            pgid: pid,
            start_time: sys::observe(pid).map_or(0, |o| o.start_time),
        };
        let (tx, events) = mpsc::channel();
        let shared = Arc::new(Shared {
            last_output: Mutex::new(spawned_at),
            combined: Mutex::new(Ring::default()),
            result_line: Mutex::new(None),
        });
        let child_stdin = child.stdin.take();
        let child_stdout = child.stdout.take();
        let child_stderr = child.stderr.take();
        // From here on the child is owned by `run`: an early return kills and reaps it.
        let mut run = Running {
            child,
            pgid: pid,
            started,
            spawned_at,
            wall_timeout,
            inactivity_timeout,
            grace,
            linger_grace,
            events,
            closed_streams: 0,
            shared: Arc::clone(&shared),
            wake: Some(wake_tx),
            stdout_pump: None,
            stderr_pump: None,
            feeder: None,
            waiter: None,
            reaped: false,
        };
        let thread_failed = |e: std::io::Error| {
            (
                e.kind(),
                format!("cannot supervise `{shown}`: cannot start a thread: {e}"),
            )
        };

        let waiter_tx = tx.clone();
        run.waiter = Some(
            thread::Builder::new()
                .name("orch-wait".into())
                .spawn(move || {
                    wait_for_exit(pid);
                    let _ = waiter_tx.send(Event::LeaderExited);
                })
                .map_err(thread_failed)?,
        );

        let (out_log, err_log) = logs.unzip();
        let scan = end_marker.map(LineScan::new);
        if let Some(pipe) = child_stdout {
            let (tx, wake, shared) = (tx.clone(), Arc::clone(&wake_rx), Arc::clone(&shared));
            run.stdout_pump = Some(
                thread::Builder::new()
                    .name("orch-stdout".into())
                    .spawn(move || pump(pipe, &*wake, &shared, out_log, scan, &tx))
                    .map_err(thread_failed)?,
            );
        } else {
            run.closed_streams += 1;
        }
        if let Some(pipe) = child_stderr {
            let (tx, wake, shared) = (tx.clone(), Arc::clone(&wake_rx), Arc::clone(&shared));
            run.stderr_pump = Some(
                thread::Builder::new()
                    .name("orch-stderr".into())
                    .spawn(move || pump(pipe, &*wake, &shared, err_log, None, &tx))
                    .map_err(thread_failed)?,
            );
        } else {
            run.closed_streams += 1;
        }
        if let (Some(pipe), Some(bytes)) = (child_stdin, stdin) {
            let wake = Arc::clone(&wake_rx);
            run.feeder = Some(
                thread::Builder::new()
                    .name("orch-stdin".into())
                    .spawn(move || feed(pipe, &bytes, &*wake))
                    .map_err(thread_failed)?,
            );
        }
        Ok(run)
    }

    /// Waits for the leader to exit, terminating the group when a timeout passes or the child
    /// lingers after its end marker. Returns why `orch` terminated the group, if it did.
    fn supervise(&mut self) -> Option<Kill> {
        let watch = signals::watch();
        let wall_deadline = self.spawned_at.checked_add(self.wall_timeout);
        let mut kill = None;
        let mut marker_seen = false;
        let mut linger_deadline: Option<Instant> = None;
        let mut sigkill_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let inactive_deadline = self
                .inactivity_timeout
                .and_then(|limit| lock(&self.shared.last_output).checked_add(limit));
            // Once the end marker is out, only the linger grace matters: the work is done.
            let deadlines = if kill.is_some() {
                [None, None]
            } else if marker_seen {
                [linger_deadline, None]
            } else {
                [wall_deadline, inactive_deadline]
            };
            if kill.is_none() {
                let due = |d: Option<Instant>| d.is_some_and(|d| now >= d);
                let reason = if let Some(sig) = watch.as_ref().and_then(|w| w.received()) {
                    Some(Kill::Interrupted(sig))
                } else if marker_seen {
                    due(linger_deadline).then_some(Kill::Lingered)
                } else if due(wall_deadline) {
                    Some(Kill::WallClock)
                } else if due(inactive_deadline) {
                    Some(Kill::Inactivity)
                } else {
                    None
                };
                if let Some(reason) = reason {
                    tracing::debug!(pgid = self.pgid, ?reason, "terminating the process group");
                    signal_group(self.pgid, Signal::SIGTERM);
                    sigkill_at = now.checked_add(self.grace);
                    kill = Some(reason);
                    continue;
                }
            }
            if sigkill_at.is_some_and(|t| now >= t) {
                signal_group(self.pgid, Signal::SIGKILL);
                sigkill_at = None;
            }
            // With interrupts watched, wake at least every 100 ms to look for one.
            let poll = watch.as_ref().and_then(|_| now.checked_add(INTERRUPT_POLL));
            let next = deadlines
                .into_iter()
                .chain([sigkill_at, poll])
                .flatten()
                .min();
            let event = match next {
                Some(t) => self.events.recv_timeout(t.saturating_duration_since(now)),
                None => self
                    .events
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::LeaderExited) => return kill,
                Ok(Event::Marker) => {
                    if !marker_seen {
                        marker_seen = true;
                        linger_deadline = Instant::now().checked_add(self.linger_grace);
                    }
                }
                Ok(Event::Closed) => self.closed_streams += 1,
                Err(RecvTimeoutError::Timeout) => {}
                // Every helper is gone, the waiter included, which cannot happen while the leader
                // runs; the group is killed and the leader reaped next, so nothing is left behind.
                Err(RecvTimeoutError::Disconnected) => return kill,
            }
        }
    }

    /// Kills what is left of the group, reaps the leader, drains the pipes for a bounded time and
    /// assembles the outcome.
    fn finish(mut self, kill: Option<Kill>, began: Instant) -> RunOutcome {
        // The leader is a zombie (or, failing that, still alive), so the group id is still ours.
        signal_group(self.pgid, Signal::SIGKILL);
        let status = self.child.wait();
        self.reaped = true;

        let drain_deadline = Instant::now() + PIPE_DRAIN;
        while self.closed_streams < 2 {
            let left = drain_deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Closed) => self.closed_streams += 1,
                Ok(Event::LeaderExited | Event::Marker) => {}
                Err(_) => break,
            }
        }
        if self.closed_streams < 2 {
            tracing::warn!(
                pgid = self.pgid,
                "a process outside the group still holds the output pipes; no longer reading them"
            );
        }
        drop(self.wake.take());
        let mut stdout = join_ring(self.stdout_pump.take());
        let mut stderr = join_ring(self.stderr_pump.take());
        for handle in [self.feeder.take(), self.waiter.take()]
            .into_iter()
            .flatten()
        {
            let _ = handle.join();
        }

        let ending = match (kill, status) {
            (Some(Kill::WallClock), _) => Ending::TimedOut,
            (Some(Kill::Inactivity), _) => Ending::Inactive,
            // The process ends right after (`run_supervised`); the ending is only logged.
            (Some(Kill::Interrupted(sig)), _) => Ending::Signalled(sig),
            (Some(Kill::Lingered), status) => Ending::MarkedDone {
                code: status.ok().and_then(|s| s.code()),
            },
            (None, Ok(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => Ending::Exited(code),
                (None, Some(signal)) => Ending::Signalled(signal),
                (None, None) => Ending::Exited(-1),
            },
            (None, Err(e)) => {
                tracing::warn!(pgid = self.pgid, error = %e, "exit status of a supervised child is lost; counting it as a failure");
                Ending::Exited(-1)
            }
        };
        RunOutcome {
            ending,
            stdout_tail: stdout.text(),
            stderr_tail: stderr.text(),
            combined_tail: lock(&self.shared.combined).text(),
            result_line: lock(&self.shared.result_line).take(),
            duration: began.elapsed(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            signal_group(self.pgid, Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Sends `signal` to the process group `pgid`; a group that is already gone is not an error.
/// Only ever called for the group of a child we have not reaped yet, which keeps the id ours.
fn signal_group(pgid: i32, signal: Signal) {
    let own = getpgid(None).map(Pid::as_raw).unwrap_or(0);
    if pgid <= 1 || pgid == own {
        tracing::warn!(
            pgid,
            "refusing to signal a process group orch did not start"
        );
        return;
    }
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, %signal, error = %e, "cannot signal a process group"),
    }
}

/// Blocks until the child `pid` has exited, leaving it unreaped (`WNOWAIT`) so that its pid and
/// group id stay reserved until the supervisor has killed the rest of the group.
fn wait_for_exit(pid: i32) {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
            Err(Errno::EINTR) => continue,
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(pid, error = %e, "cannot wait for a supervised child");
                return;
            }
        }
    }
}
