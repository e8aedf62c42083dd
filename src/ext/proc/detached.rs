//! Detached processes: [`spawn_detached`] starts a program in a session of its own and does not
//! wait for it, for `orch tick` handing a claimed job to its supervisor (`orch job run`), which
//! must outlive the tick. One of the two `unsafe` blocks of `src/` is here: `setsid` in the
//! `pre_exec` hook.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use super::supervised::Started;
use crate::ext::sys;

/// Start `argv` detached: a new session (so it outlives the caller and its terminal), stdin
/// from `/dev/null`, stdout and stderr appended to `log`. The caller does not wait for it;
/// liveness is judged later from the returned identity. Used by `orch tick` to hand a claimed
/// job to its supervisor. The child's environment is exactly `env` (nothing inherited), and its
/// log is created with mode 0640.
pub fn spawn_detached(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    log: &Path,
) -> Result<Started> {
    let (program, args) = argv
        .split_first()
        .context("cannot start a detached process from an empty argv")?;
    if let Some(dir) = log.parent() {
        sys::private_dir(dir, 0o750)?;
    }
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(log)
        .with_context(|| format!("opening `{}`", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
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
