//! Short synchronous commands: [`Cmd`] builds an argv with its working directory, environment
//! changes and stdin bytes, runs it to completion with stdout and stderr captured, and turns a
//! failure into an error that names the command line and carries the tail of what the program
//! said. Git and the doctor's probes live on it.
//!
//! With [`Cmd::timeout`] the program runs in a process group of its own, and the whole group
//! (git and the ssh or helper it started) is SIGKILLed at the deadline; the run is then an error
//! that says so. Without it a `Cmd` waits as long as its program runs.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::domain::redact::redact_urls;

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
    timeout: Option<Duration>,
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

/// The last `n` non-blank-trailing lines of `bytes`, lossily decoded, credentials in URLs
/// masked (a tail goes into errors, logs and the database).
pub fn tail(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    redact_urls(&lines[start..].join("\n")).into_owned()
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
            timeout: None,
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

    /// Kill the program (and every process of its group) when it runs longer than `limit`.
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
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
        if self.timeout.is_some() {
            // Its own group, so the deadline reaches what it started (ssh, a helper).
            command.process_group(0);
        }

        tracing::debug!(cmd = %self.display(), "running");
        let child = command
            .spawn()
            .with_context(|| format!("cannot start `{}`", self.display()))?;
        let (done, done_rx) = mpsc::channel::<()>();
        let timed_out = AtomicBool::new(false);
        let pgid = child.id() as i32;
        std::thread::scope(|scope| {
            if let Some(limit) = self.timeout {
                let timed_out = &timed_out;
                scope.spawn(move || {
                    if done_rx.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout) {
                        timed_out.store(true, Ordering::SeqCst);
                        if pgid > 1 {
                            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                        }
                    }
                });
            }
            let out = self.wait(child);
            let _ = done.send(());
            out
        })
        .and_then(|out| {
            if timed_out.load(Ordering::SeqCst) {
                anyhow::bail!(
                    "`{}` timed out after {}s; its process group was killed",
                    self.display(),
                    self.timeout.map(|t| t.as_secs()).unwrap_or(0)
                );
            }
            Ok(out)
        })
    }

    /// Feed stdin (if any), read both outputs to their end and reap the child.
    fn wait(&self, mut child: std::process::Child) -> Result<Output> {
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

    /// A question git answers with its exit code (`merge-base --is-ancestor`, `diff --quiet`):
    /// exit 0 is yes, exit 1 is no, and anything else the failure [`Cmd::checked`] would report.
    pub fn yes_no(&self) -> Result<bool> {
        let out = self.output()?;
        match out.code {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(self.failure(&out)),
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
/// it needs it, so ordinary command lines stay readable. Credentials in a URL
/// are masked first: a remote with a token is an argument of git.
pub(super) fn quote(word: &OsStr) -> String {
    let text = word.to_string_lossy();
    let text = redact_urls(&text);
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

    /// A stalled `git fetch` used to hold the repo lock for hours: a command with a timeout is
    /// killed with everything it started, and the error says so.
    #[test]
    fn a_timeout_kills_the_whole_group_and_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let started = std::time::Instant::now();
        let err = Cmd::new("sh")
            .args(["-c", &script])
            .timeout(Duration::from_millis(300))
            .output()
            .unwrap_err()
            .to_string();
        assert!(err.contains("timed out after"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(20));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild is gone too (no zombie of ours: it was reparented and reaped by init).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
            && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| !s.contains(") Z"))
                .unwrap_or(false)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "grandchild {pid} survived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Fast commands are not disturbed by a timeout.
        let out = Cmd::new("true")
            .timeout(Duration::from_secs(5))
            .output()
            .unwrap();
        assert!(out.success());
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

    /// A failed `git clone http://user:token@…` put the token in its error twice: in the
    /// command line and in what the program said.
    #[test]
    fn a_failure_masks_credentials_in_the_command_line_and_the_tail() {
        let cmd = Cmd::new("sh").args([
            "-c",
            "echo \"fatal: cannot reach $1\" >&2; exit 3",
            "sh",
            "https://user:t0ken@host/x.git",
        ]);
        assert!(!cmd.display().contains("t0ken"), "{}", cmd.display());
        let e = format!("{:#}", cmd.checked().unwrap_err());
        assert!(!e.contains("t0ken"), "{e}");
        assert_eq!(
            e.matches("https://***@host/x.git").count(),
            2,
            "both still name the remote: {e}"
        );
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail(b"a\nb\nc\n\n", 2), "b\nc");
        assert_eq!(tail(b"", 2), "");
    }
}
