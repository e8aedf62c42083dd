//! Running external programs: the one place in `orch` that spawns a process.
//!
//! Two ways in. [`Cmd`] runs a short command to completion with stdout/stderr captured and
//! optional bytes fed to stdin, and turns a failure into an error that names the command line and
//! carries the tail of what the program said (the git layer lives on it). [`run_supervised`] runs
//! a long-lived child (an agent, a test or staging suite, a hook) in its own process group under a
//! wall-clock timeout, an optional inactivity timeout and an optional end marker, streams its
//! output to a log file while keeping bounded tails in memory, and always kills the whole group
//! before it returns, so no grandchild outlives the run (SPEC §4.4, §6).
//!
//! Deliberately not here: any knowledge of what is being run (git's environment such as
//! `GIT_TERMINAL_PROMPT=0` is set by the git layer; the scrubbed child environment is built by
//! `ext/env.rs`; what a run's ending means is decided by its caller), and recording anything in
//! the database (the caller gets the group id and start time through `on_start`).
//! The child never inherits our stdin: with no bytes given it gets `/dev/null`, so a program that
//! wants to prompt fails instead of hanging.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{PipeWriter, Read, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::{Pid, getpgid};

use crate::ext::sys;

/// How many trailing lines of a failed command's output go into the error.
pub const TAIL_LINES: usize = 20;

/// A command line to run: program, argv, working directory, environment
/// changes and optional stdin bytes. Built by value, run by reference, so
/// the same `Cmd` can be run again and displayed after it ran.
#[derive(Debug, Clone)]
pub struct Cmd {
    program: OsString,
    args: Vec<OsString>,
    cwd: Option<PathBuf>,
    env_set: Vec<(OsString, OsString)>,
    env_remove: Vec<OsString>,
    stdin: Option<Vec<u8>>,
}

/// What a finished process left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code; `None` when the process was killed by a signal.
    pub code: Option<i32>,
    /// The signal that killed the process, if one did.
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    /// Exited on its own with code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Stdout as text (lossy: tools may print bytes that are not UTF-8).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The last `TAIL_LINES` lines of stderr, or of stdout when stderr is
    /// empty (some tools, e.g. `git commit`, explain failures on stdout).
    pub fn diagnostic_tail(&self) -> String {
        let stderr = tail(&self.stderr, TAIL_LINES);
        if stderr.is_empty() {
            tail(&self.stdout, TAIL_LINES)
        } else {
            stderr
        }
    }

    /// "exit 128" / "killed by signal 9", for messages.
    pub fn status_text(&self) -> String {
        match (self.code, self.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => "unknown exit status".to_string(),
        }
    }
}

/// The last `n` non-blank-trailing lines of `bytes`, lossily decoded.
pub fn tail(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

impl Cmd {
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Cmd {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            cwd: None,
            env_set: Vec::new(),
            env_remove: Vec::new(),
            stdin: None,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Working directory of the child (ours when unset).
    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// Add or override one variable in the child's environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        let key = key.as_ref().to_owned();
        // A later set wins over an earlier removal of the same key.
        self.env_remove.retain(|k| *k != key);
        self.env_set.push((key, value.as_ref().to_owned()));
        self
    }

    /// Remove one inherited variable from the child's environment.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        let key = key.as_ref().to_owned();
        self.env_set.retain(|(k, _)| *k != key);
        self.env_remove.push(key);
        self
    }

    /// Bytes written to the child's stdin (then closed). Without this the
    /// child's stdin is `/dev/null`.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// The command line, shell-quoted where needed, for messages and logs.
    /// It is never fed to a shell.
    pub fn display(&self) -> String {
        let mut out = quote(&self.program);
        for arg in &self.args {
            out.push(' ');
            out.push_str(&quote(arg));
        }
        out
    }

    /// Run to completion, capturing stdout and stderr. A non-zero exit is
    /// not an error here (see [`Cmd::checked`]); failing to start is.
    pub fn output(&self) -> Result<Output> {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        for key in &self.env_remove {
            command.env_remove(key);
        }
        for (key, value) in &self.env_set {
            command.env(key, value);
        }
        command
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());

        tracing::debug!(cmd = %self.display(), "running");
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start `{}`", self.display()))?;

        let raw = match (child.stdin.take(), &self.stdin) {
            (Some(mut pipe), Some(bytes)) => {
                // Stdin is written from a second thread: a child that fills
                // its stdout pipe before reading all of stdin would otherwise
                // deadlock against us.
                let (waited, written) = std::thread::scope(|scope| {
                    let writer = scope.spawn(move || pipe.write_all(bytes));
                    // `pipe` is dropped (closed) when the writer ends, so the
                    // child sees EOF.
                    let waited = child.wait_with_output();
                    (waited, writer.join())
                });
                match written {
                    Ok(Ok(())) => {}
                    // The child may legitimately exit without reading all its
                    // input; its exit status says whether that was a problem.
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                    Ok(Err(e)) => {
                        return Err(e)
                            .with_context(|| format!("writing stdin of `{}`", self.display()));
                    }
                    Err(_) => anyhow::bail!("stdin writer of `{}` panicked", self.display()),
                }
                waited
            }
            _ => child.wait_with_output(),
        }
        .with_context(|| format!("waiting for `{}`", self.display()))?;

        let out = Output {
            code: raw.status.code(),
            signal: raw.status.signal(),
            stdout: raw.stdout,
            stderr: raw.stderr,
        };
        tracing::debug!(cmd = %self.display(), status = %out.status_text(), "finished");
        Ok(out)
    }

    /// Like [`Cmd::output`], but a non-zero exit is an error of the form
    /// "`git fetch origin` failed (exit 128): <last lines of stderr>".
    pub fn checked(&self) -> Result<Output> {
        let out = self.output()?;
        if out.success() {
            Ok(out)
        } else {
            Err(self.failure(&out))
        }
    }

    /// The error [`Cmd::checked`] would return for `out`; for callers that
    /// treat some non-zero exits as answers (e.g. `git diff --quiet`) and
    /// the rest as failures.
    pub fn failure(&self, out: &Output) -> anyhow::Error {
        let tail = out.diagnostic_tail();
        if tail.is_empty() {
            anyhow::anyhow!(
                "`{}` failed ({}) with no output",
                self.display(),
                out.status_text()
            )
        } else if tail.contains('\n') {
            anyhow::anyhow!(
                "`{}` failed ({}):\n{}",
                self.display(),
                out.status_text(),
                tail
            )
        } else {
            anyhow::anyhow!(
                "`{}` failed ({}): {}",
                self.display(),
                out.status_text(),
                tail
            )
        }
    }
}

/// Quote one word the way a POSIX shell would read it back, but only when
/// it needs it, so ordinary command lines stay readable.
fn quote(word: &OsStr) -> String {
    let text = word.to_string_lossy();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-+=/.,:@%^".contains(c));
    if plain {
        return text.into_owned();
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else if c.is_control() {
            // Keep messages on one line and terminals sane.
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

// ----------------------------------------------------------------------------------------------
// Supervised runs: long-lived children in their own process group.

/// Lines kept in each tail of a supervised run.
pub const TAIL_KEEP_LINES: usize = 200;

/// Bytes kept in each tail of a supervised run; the tail strings are cut to this size as well.
pub const TAIL_KEEP_BYTES: usize = 64 * 1024;

/// The longest stdout line checked against [`Spec::end_marker`]. A longer line is checked (and
/// reported as the result line) by its first this-many bytes, so output without newlines cannot
/// grow memory.
pub const MARKER_LINE_CAP: usize = 1024 * 1024;

/// Default [`Spec::grace`]: from SIGTERM to SIGKILL of the group.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Default [`Spec::linger_grace`]: how long a child may go on after printing its end marker.
pub const DEFAULT_LINGER_GRACE: Duration = Duration::from_secs(5);

/// How long the pipes are still read once the leader was reaped and its group killed. Only a
/// process that left the group (`setsid`) can still hold them open then, and it must not hold us.
const PIPE_DRAIN: Duration = Duration::from_secs(1);

/// Size of one read from a child's pipe.
const READ_CHUNK: usize = 64 * 1024;

/// Recognises the stdout line that means a supervised run is done (see [`Spec::end_marker`]).
pub type EndMarker = Box<dyn Fn(&str) -> bool + Send>;

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
    outcome
}

/// Why `orch` terminated the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    WallClock,
    Inactivity,
    Lingered,
}

/// What the helper threads tell the supervisor.
enum Event {
    /// The leader has exited; it is a zombie until the supervisor reaps it, so its group id
    /// cannot be handed to anyone else in the meantime.
    LeaderExited,
    /// The end marker was seen (the line is in `Shared::result_line`).
    Marker,
    /// One output stream is finished.
    Closed,
}

/// State the output pumps share with the supervisor.
struct Shared {
    last_output: Mutex<Instant>,
    combined: Mutex<Ring>,
    result_line: Mutex<Option<String>>,
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
                let reason = if marker_seen {
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
            let next = deadlines.into_iter().chain([sigkill_at]).flatten().min();
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

/// Reads one output stream until it ends or the supervisor says stop: every chunk goes to the
/// log, the stream's tail and the combined tail; stdout lines are checked for the end marker.
fn pump(
    mut pipe: impl Read + AsFd,
    wake: &impl AsFd,
    shared: &Shared,
    mut log: Option<LogSink>,
    mut scan: Option<LineScan>,
    events: &Sender<Event>,
) -> Ring {
    set_nonblocking(pipe.as_fd());
    let mut ring = Ring::default();
    let mut buf = vec![0; READ_CHUNK];
    while ready(pipe.as_fd(), libc::POLLIN, wake.as_fd()) {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading a supervised child's output");
                break;
            }
        };
        let chunk = &buf[..n];
        *lock(&shared.last_output) = Instant::now();
        if let Some(log) = &mut log {
            log.append(chunk);
        }
        ring.push(chunk);
        lock(&shared.combined).push(chunk);
        if let Some(line) = scan.as_mut().and_then(|s| s.feed(chunk)) {
            marker_found(shared, line, events);
        }
    }
    // A marker printed without a final newline still counts.
    if let Some(line) = scan.as_mut().and_then(LineScan::finish) {
        marker_found(shared, line, events);
    }
    let _ = events.send(Event::Closed);
    ring
}

fn marker_found(shared: &Shared, line: String, events: &Sender<Event>) {
    lock(&shared.result_line).get_or_insert(line);
    let _ = events.send(Event::Marker);
}

/// Writes `bytes` to the child's stdin, then closes it (by dropping the pipe). A child that exits
/// or closes its stdin without reading everything is not an error: its exit says whether that
/// mattered.
fn feed(pipe: ChildStdin, bytes: &[u8], wake: &impl AsFd) {
    let mut pipe = pipe;
    set_nonblocking(pipe.as_fd());
    let mut rest = bytes;
    while !rest.is_empty() && ready(pipe.as_fd(), libc::POLLOUT, wake.as_fd()) {
        match pipe.write(rest) {
            Ok(0) => break,
            Ok(n) => rest = &rest[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
}

/// Waits until `fd` is ready for `events`, or has hung up or failed (which the next read or write
/// reports). Returns false once `wake` hangs up: the supervisor telling its helpers to stop.
fn ready(fd: BorrowedFd<'_>, events: libc::c_short, wake: BorrowedFd<'_>) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is an initialised array of exactly `fds.len()` pollfd structs that lives
        // across the call, and both descriptors are borrowed, so they stay open during it.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            tracing::warn!(error = %e, "cannot poll a supervised child's pipe");
            return false;
        }
        if fds[1].revents != 0 {
            return false;
        }
        if fds[0].revents != 0 {
            return true;
        }
    }
}

/// Our end of a pipe never blocks, so a helper only ever waits in `ready`, where the supervisor
/// can stop it. If this fails the helper still works; it may just be stopped later.
fn set_nonblocking(fd: BorrowedFd<'_>) {
    let result = fcntl(fd, FcntlArg::F_GETFL).and_then(|flags| {
        let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
        fcntl(fd, FcntlArg::F_SETFL(flags))
    });
    if let Err(e) = result {
        tracing::debug!(error = %e, "cannot make a pipe non-blocking");
    }
}

fn open_log(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// One stream's handle on the run log. A failed write is reported once and ends logging for the
/// stream; the run itself goes on.
struct LogSink {
    file: Option<File>,
    path: PathBuf,
}

impl LogSink {
    fn new(file: File, path: PathBuf) -> Self {
        LogSink {
            file: Some(file),
            path,
        }
    }

    fn append(&mut self, chunk: &[u8]) {
        if let Some(file) = &mut self.file
            && let Err(e) = file.write_all(chunk)
        {
            tracing::warn!(log = %self.path.display(), error = %e, "cannot append to a run log; the rest of this stream is not logged");
            self.file = None;
        }
    }
}

fn join_ring(handle: Option<JoinHandle<Ring>>) -> Ring {
    // A pump that panicked (say, in the caller's end marker) leaves an empty tail, not a panic.
    handle.and_then(|h| h.join().ok()).unwrap_or_default()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The last [`TAIL_KEEP_BYTES`] bytes of a stream.
#[derive(Default)]
struct Ring {
    bytes: VecDeque<u8>,
}

impl Ring {
    fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(TAIL_KEEP_BYTES)..];
        let excess = (self.bytes.len() + chunk.len()).saturating_sub(TAIL_KEEP_BYTES);
        self.bytes.drain(..excess);
        self.bytes.extend(chunk);
    }

    /// The last [`TAIL_KEEP_LINES`] lines, lossily decoded and cut to [`TAIL_KEEP_BYTES`] bytes
    /// (invalid bytes decode to three-byte replacement characters, so the text can outgrow them).
    fn text(&mut self) -> String {
        let text = tail(self.bytes.make_contiguous(), TAIL_KEEP_LINES);
        if text.len() <= TAIL_KEEP_BYTES {
            return text;
        }
        let mut cut = text.len() - TAIL_KEEP_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text[cut..].to_string()
    }
}

/// Splits stdout into lines (each kept to [`MARKER_LINE_CAP`] bytes) and finds the first one the
/// end marker recognises.
struct LineScan {
    is_end: EndMarker,
    line: Vec<u8>,
    found: bool,
}

impl LineScan {
    fn new(is_end: EndMarker) -> Self {
        LineScan {
            is_end,
            line: Vec::new(),
            found: false,
        }
    }

    /// Takes the next chunk of stdout; returns the marker line if it completes in this chunk.
    fn feed(&mut self, chunk: &[u8]) -> Option<String> {
        if self.found {
            return None;
        }
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            let (body, complete) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            let room = MARKER_LINE_CAP.saturating_sub(self.line.len());
            self.line.extend_from_slice(&body[..body.len().min(room)]);
            if complete {
                let found = self.check();
                self.line.clear();
                if found.is_some() {
                    return found;
                }
            }
        }
        None
    }

    /// At the end of the stream: checks a last line that had no newline.
    fn finish(&mut self) -> Option<String> {
        if self.found || self.line.is_empty() {
            return None;
        }
        let found = self.check();
        self.line.clear();
        found
    }

    fn check(&mut self) -> Option<String> {
        let text = String::from_utf8_lossy(&self.line);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        if (self.is_end)(text) {
            self.found = true;
            Some(text.to_string())
        } else {
            None
        }
    }
}

/// Start `argv` detached: a new session (so it outlives the caller and its terminal), stdin
/// from `/dev/null`, stdout and stderr appended to `log`. The caller does not wait for it;
/// liveness is judged later from the returned identity. Used by `orch tick` to hand a claimed
/// job to its supervisor.
pub fn spawn_detached(argv: &[OsString], log: &Path) -> Result<Started> {
    let (program, args) = argv
        .split_first()
        .context("cannot start a detached process from an empty argv")?;
    if let Some(dir) = log.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating `{}`", dir.display()))?;
    }
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening `{}`", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    // SAFETY: `setsid` is async-signal-safe and touches no memory of the parent; it is the only
    // thing run between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    let child = cmd
        .spawn()
        .with_context(|| format!("starting `{}`", program.to_string_lossy()))?;
    let pid = child.id() as i32;
    // The child is deliberately not waited for: it is a session leader of its own.
    drop(child);
    let start_time = sys::observe(pid).map(|o| o.start_time).unwrap_or(0);
    Ok(Started {
        pgid: pid,
        start_time,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_stdout_stderr_and_code() {
        let out = Cmd::new("sh")
            .args(["-c", "echo out; echo err >&2; exit 3"])
            .output()
            .unwrap();
        assert_eq!(out.code, Some(3));
        assert!(!out.success());
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn checked_error_names_command_and_stderr_tail() {
        let script = "for i in $(seq 1 30); do echo line$i >&2; done; exit 7";
        let err = Cmd::new("sh").args(["-c", script]).checked().unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.starts_with("`sh -c 'for i in"), "{msg}");
        assert!(msg.contains("failed (exit 7):"), "{msg}");
        assert!(msg.contains("line30"), "{msg}");
        assert!(msg.contains("line11"), "{msg}");
        assert!(!msg.contains("line10\n"), "only the last 20 lines: {msg}");
    }

    #[test]
    fn stdin_is_fed_and_large_io_does_not_deadlock() {
        // 4 MiB through cat: far beyond pipe buffers in both directions.
        let input: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let out = Cmd::new("cat").stdin(input.clone()).checked().unwrap();
        assert_eq!(out.stdout, input);
    }

    #[test]
    fn child_ignoring_its_stdin_is_not_an_error() {
        let out = Cmd::new("true")
            .stdin(vec![b'x'; 1 << 20])
            .checked()
            .unwrap();
        assert!(out.success());
    }

    #[test]
    fn stdin_defaults_to_dev_null() {
        let out = Cmd::new("cat").checked().unwrap();
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn env_and_cwd_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let out = Cmd::new("sh")
            .args([
                "-c",
                "pwd; echo \"${ORCH_T_SET}\"; echo \"${ORCH_T_GONE-unset}\"",
            ])
            .cwd(dir.path())
            .env("ORCH_T_SET", "yes")
            .env("ORCH_T_GONE", "x")
            .env_remove("ORCH_T_GONE")
            .checked()
            .unwrap();
        let text = out.stdout_text();
        let lines: Vec<&str> = text.lines().collect();
        let canon = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(lines, [canon.to_str().unwrap(), "yes", "unset"]);
    }

    #[test]
    fn missing_program_is_an_error_naming_it() {
        let err = Cmd::new("orch-no-such-program-xyz")
            .arg("a b")
            .output()
            .unwrap_err();
        assert!(format!("{err:#}").contains("`orch-no-such-program-xyz 'a b'`"));
    }

    #[test]
    fn killed_by_signal_is_reported() {
        let out = Cmd::new("sh").args(["-c", "kill -9 $$"]).output().unwrap();
        assert_eq!(out.code, None);
        assert_eq!(out.signal, Some(9));
        let err = Cmd::new("sh")
            .args(["-c", "kill -9 $$"])
            .checked()
            .unwrap_err();
        assert!(err.to_string().contains("killed by signal 9"), "{err}");
    }

    #[test]
    fn display_quotes_only_when_needed() {
        let cmd = Cmd::new("git")
            .args(["-C", "/tmp/x", "commit", "-m", "it's done", ""])
            .arg("a\nb");
        assert_eq!(
            cmd.display(),
            "git -C /tmp/x commit -m 'it'\\''s done' '' 'a\\u{a}b'"
        );
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail(b"a\nb\nc\n\n", 2), "b\nc");
        assert_eq!(tail(b"", 2), "");
    }

    // --- supervised runs ---

    use std::os::unix::fs::PermissionsExt;

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
        let mut spec = sh(
            "head -c 300000 /dev/urandom; head -c 300000 /dev/urandom >&2; printf '\\377\\376\\n'",
        );
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

    #[test]
    fn ring_keeps_the_last_bytes() {
        let mut ring = Ring::default();
        ring.push(b"abc");
        ring.push(&vec![b'y'; TAIL_KEEP_BYTES - 1]);
        assert_eq!(ring.bytes.len(), TAIL_KEEP_BYTES);
        assert_eq!(ring.bytes.front(), Some(&b'c'));
        ring.push(&vec![b'z'; 3 * TAIL_KEEP_BYTES]);
        assert_eq!(ring.bytes.len(), TAIL_KEEP_BYTES);
        assert!(ring.bytes.iter().all(|&b| b == b'z'));
        // Invalid bytes decode to wider replacement characters; the text stays within bounds.
        ring.push(&vec![0xff; TAIL_KEEP_BYTES]);
        let text = ring.text();
        assert!(text.len() <= TAIL_KEEP_BYTES && text.starts_with('\u{fffd}'));
    }

    #[test]
    fn line_scan_finds_the_marker_across_chunks_and_caps_lines() {
        let mut scan = LineScan::new(Box::new(|l: &str| l == "DONE"));
        assert_eq!(scan.feed(b"noise\nDO"), None);
        assert_eq!(scan.feed(b"NE\nDONE\n"), Some("DONE".to_string()));
        assert_eq!(scan.feed(b"DONE\n"), None, "only the first marker counts");

        let mut scan = LineScan::new(Box::new(|l: &str| l.starts_with("xx")));
        assert_eq!(scan.feed(&vec![b'x'; 2 * MARKER_LINE_CAP]), None);
        assert_eq!(scan.line.len(), MARKER_LINE_CAP);
        let line = scan.feed(b"xx\n").unwrap();
        assert_eq!(line.len(), MARKER_LINE_CAP);

        let mut scan = LineScan::new(Box::new(|l: &str| l == "last"));
        assert_eq!(scan.feed(b"first\nlast"), None);
        assert_eq!(scan.finish(), Some("last".to_string()));
    }
}
