//! Checks of the host orch runs on, whatever the repos: the config file, the state and repos
//! directories (a probe file, removed at once), `git`, the agent program, the services' `*_env`
//! variables (set or not, here or in the units' secrets file), the secrets file's mode and owner,
//! and the installed units. Programs are resolved the way `execvp` would, with a warning for one
//! found off the `PATH` systemd gives a service; the repo checks use the same resolver for their
//! contracts' programs.
//!
//! Deliberately not here: asking systemd whether the units are enabled, and showing any value
//! from the environment or the secrets file (only whether a variable has one).

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::check::{Check, Status};
use crate::config::ServiceCfg;
use crate::domain::ids::printable;
use crate::ext::proc::Cmd;

/// Where `scripts/install.sh` puts the units.
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// The `EnvironmentFile=` of the units: service tokens and webhook secrets.
pub const SECRETS_FILE: &str = crate::ops::confine::UNITS_SECRETS_FILE;

/// The units `orch tick` needs to run unattended.
const TICK_UNITS: [&str; 2] = ["orch-tick.service", "orch-tick.timer"];

/// The `PATH` systemd gives a service that sets none. A program found elsewhere (say
/// `~/.local/bin`) works when `orch doctor` runs in a login shell and not under the timer.
const SERVICE_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

pub(super) fn config_check(file: Option<&Path>, repos: usize) -> Check {
    match file {
        Some(f) => Check::new(
            "config",
            Status::Ok,
            format!(
                "{} ({repos} repo{})",
                f.display(),
                if repos == 1 { "" } else { "s" }
            ),
        ),
        None => Check::new(
            "config",
            Status::Warn,
            "no config file (--config, $ORCH_CONFIG, ./orch.yaml, /etc/orch/orch.yaml); using \
             defaults with no repos; `orch init` writes a starter config",
        ),
    }
}

/// The directory exists and we can create a file in it (what every tick and job needs).
pub(super) fn dir_check(name: &str, dir: &Path) -> Check {
    if !dir.exists() {
        return Check::new(
            name,
            Status::Warn,
            format!(
                "`{}` does not exist yet; the first writing command (`orch tick`, `orch task \
                 add`) creates it (a mistyped `--state-dir` or `state_dir`?)",
                dir.display()
            ),
        );
    }
    let probe = dir.join(format!(".orch-doctor-{}", std::process::id()));
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe);
    match made {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Check::new(name, Status::Ok, format!("{} is writable", dir.display()))
        }
        Err(e) => Check::new(
            name,
            Status::Fail,
            format!(
                "cannot write in `{}`: {e}; it must be writable by the user orch runs as",
                dir.display()
            ),
        ),
    }
}

pub(super) fn git_check() -> Check {
    let cmd = Cmd::new("git").arg("--version").env("LC_ALL", "C");
    match cmd.checked() {
        Ok(out) => Check::new("git", Status::Ok, out.stdout_text().trim().to_string()),
        Err(e) => Check::new(
            "git",
            Status::Fail,
            format!("{e:#}; install git, every repo operation needs it"),
        ),
    }
}

/// The agent sandbox (design §9.2): on and working, off (a warning), or configured and broken.
pub(super) fn sandbox_check(config: &crate::config::Config) -> Check {
    use crate::ops::confine::{self, Mode};
    let name = "agent.sandbox";
    let (_, text) = confine::describe(config);
    match confine::mode(config) {
        Mode::Bwrap(bwrap) => {
            // Can it build a sandbox here (user namespaces, mounts)? The same kind it will build.
            let probe = Cmd::new(&bwrap)
                .args(["--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/"])
                .args([
                    "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "true",
                ])
                .timeout(std::time::Duration::from_secs(10));
            match probe.checked() {
                Ok(_) => Check::new(name, Status::Ok, text),
                Err(e) => Check::new(
                    name,
                    Status::Fail,
                    format!(
                        "`{}` cannot build a sandbox on this host ({e:#}); every job would fail to \
                         start: allow user namespaces or set `agent.sandbox: none`",
                        bwrap.display()
                    ),
                ),
            }
        }
        Mode::Off { missing: true, .. } => Check::new(name, Status::Fail, text),
        Mode::Off { .. } => Check::new(name, Status::Warn, text),
    }
}

/// Where a program named by a config key would be found when orch runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Resolved {
    /// Found by searching `PATH`.
    OnPath(PathBuf),
    /// An absolute path to an executable file.
    At(PathBuf),
    /// Exists (on `PATH` or at the absolute path) but is not an executable file.
    NotExecutable(PathBuf),
    /// A relative path with a `/`: resolved against the task's worktree when it runs, which
    /// does not exist yet.
    WorktreeRelative,
    Missing,
}

/// Resolve `program` the way `execvp` would, from `path_var` (the `PATH` value).
pub(super) fn resolve_program(program: &str, path_var: Option<&OsStr>) -> Resolved {
    let p = Path::new(program);
    if program.contains('/') {
        if !p.is_absolute() {
            return Resolved::WorktreeRelative;
        }
        return match std::fs::metadata(p) {
            Ok(m) if is_executable(&m) => Resolved::At(p.to_path_buf()),
            Ok(_) => Resolved::NotExecutable(p.to_path_buf()),
            Err(_) => Resolved::Missing,
        };
    }
    let mut not_exec = None;
    for dir in path_var.map(std::env::split_paths).into_iter().flatten() {
        // An empty entry means the current directory, which is not where orch runs anything.
        if dir.as_os_str().is_empty() {
            continue;
        }
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(m) if is_executable(&m) => return Resolved::OnPath(candidate),
            Ok(_) => {
                not_exec.get_or_insert(candidate);
            }
            Err(_) => {}
        }
    }
    not_exec.map_or(Resolved::Missing, Resolved::NotExecutable)
}

fn is_executable(m: &std::fs::Metadata) -> bool {
    m.is_file() && m.permissions().mode() & 0o111 != 0
}

pub(super) fn program_check(name: &str, key: &str, program: &str, resolved: &Resolved) -> Check {
    let shown = printable(program);
    match resolved {
        Resolved::At(p) => Check::new(name, Status::Ok, p.display().to_string()),
        Resolved::OnPath(p) => {
            let dir = p.parent().map(Path::to_path_buf).unwrap_or_default();
            if SERVICE_PATH.iter().any(|d| Path::new(d) == dir) {
                Check::new(name, Status::Ok, format!("`{shown}` is {}", p.display()))
            } else {
                Check::new(
                    name,
                    Status::Warn,
                    format!(
                        "`{shown}` is {}, which is not on the default PATH of a systemd service; \
                         put its absolute path in {key}",
                        p.display()
                    ),
                )
            }
        }
        Resolved::NotExecutable(p) => Check::new(
            name,
            Status::Fail,
            format!(
                "`{shown}` at {} is not an executable file; `chmod +x` it or fix {key}",
                p.display()
            ),
        ),
        Resolved::WorktreeRelative => Check::new(
            name,
            Status::Ok,
            format!("`{shown}` is relative to the task's worktree; not checked here"),
        ),
        Resolved::Missing => Check::new(
            name,
            Status::Fail,
            format!("`{shown}` not found on PATH; install it or put its absolute path in {key}"),
        ),
    }
}

/// The secrets of one service: its `*_file` keys, or its `*_env` variables. `in_env(var)` is `None` when the variable is unset,
/// `Some(false)` when it is set but empty. `secrets` is the text of the units' environment file,
/// when we may read it; only its variable names are looked at.
pub(super) fn service_checks(
    service: &str,
    svc: &ServiceCfg,
    in_env: impl Fn(&str) -> Option<bool>,
    secrets: Option<&str>,
    checks: &mut Vec<Check>,
) {
    match (&svc.token_file, &svc.token_env) {
        (Some(f), _) => checks.push(file_check(format!("{service}.token_file"), f)),
        (None, Some(var)) => checks.push(var_check(
            format!("{service}.token_env"),
            var,
            &in_env,
            secrets,
        )),
        (None, None) => checks.push(Check::new(
            format!("{service}.token_env"),
            Status::Warn,
            format!(
                "`{service}` ({}) has neither token_file nor token_env, so its API calls are \
                 unauthenticated",
                svc.kind
            ),
        )),
    }
    match (&svc.webhook_secret_file, &svc.webhook_secret_env) {
        (Some(f), _) => checks.push(file_check(format!("{service}.webhook_secret_file"), f)),
        (None, Some(var)) => checks.push(var_check(
            format!("{service}.webhook_secret_env"),
            var,
            &in_env,
            secrets,
        )),
        (None, None) => {}
    }
}

/// A secret file: readable by this process and by nobody but its owner (and group).
fn file_check(name: String, path: &Path) -> Check {
    let shown = path.display();
    match crate::ext::secrets::read(crate::ext::secrets::Where {
        file: Some(path),
        env: None,
    }) {
        Err(e) => Check::new(name, Status::Fail, format!("{e:#}")),
        Ok(_) => match std::fs::metadata(path).map(|m| m.permissions().mode() & 0o007) {
            Ok(0) => Check::new(name, Status::Ok, format!("`{shown}` is readable")),
            _ => Check::new(
                name,
                Status::Warn,
                format!("`{shown}` is readable by every local user; `chmod o-rwx` it"),
            ),
        },
    }
}

fn var_check(
    name: String,
    var: &str,
    in_env: &impl Fn(&str) -> Option<bool>,
    secrets: Option<&str>,
) -> Check {
    if crate::ext::secrets::credential_path(var).is_some() {
        return Check::new(
            name,
            Status::Ok,
            format!("`{var}` is a credential in $CREDENTIALS_DIRECTORY"),
        );
    }
    match in_env(var) {
        Some(true) => Check::new(name, Status::Ok, format!("`{var}` is set")),
        Some(false) => Check::new(
            name,
            Status::Fail,
            format!("`{var}` is set but empty; put the value in {SECRETS_FILE}"),
        ),
        None => match secrets.map(|text| env_file_has(text, var)) {
            Some(true) => Check::new(
                name,
                Status::Ok,
                format!("`{var}` is set in {SECRETS_FILE} (not in this environment)"),
            ),
            Some(false) => Check::new(
                name,
                Status::Fail,
                format!("`{var}` is set neither here nor in {SECRETS_FILE}; add it there"),
            ),
            None => Check::new(
                name,
                Status::Warn,
                format!(
                    "`{var}` is not set in this environment and {SECRETS_FILE} is not readable \
                     here; the units read it from that file"
                ),
            ),
        },
    }
}

/// Whether a systemd `EnvironmentFile` assigns `var` a non-empty value.
fn env_file_has(text: &str, var: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        if line.starts_with('#') || line.starts_with(';') {
            return false;
        }
        match line.split_once('=') {
            Some((k, v)) => {
                let v = v.trim();
                k.trim() == var && !v.is_empty() && v != "\"\"" && v != "''"
            }
            None => false,
        }
    })
}

/// The secrets file must be readable by root only: systemd reads it before dropping to `orch`.
/// No check when the file does not exist (orch works without services).
pub(super) fn secrets_file_check(path: &Path) -> Option<Check> {
    let m = std::fs::metadata(path).ok()?;
    let mode = m.permissions().mode() & 0o7777;
    let name = "secrets_file";
    Some(if mode & 0o077 != 0 {
        Check::new(
            name,
            Status::Fail,
            format!(
                "{} has mode {mode:04o}; `chmod 600 {}`",
                path.display(),
                path.display()
            ),
        )
    } else if m.uid() != 0 {
        Check::new(
            name,
            Status::Warn,
            format!(
                "{} is owned by uid {}, not root; `chown root: {}`",
                path.display(),
                m.uid(),
                path.display()
            ),
        )
    } else {
        Check::new(
            name,
            Status::Ok,
            format!("{} is mode {mode:04o}, owned by root", path.display()),
        )
    })
}

pub(super) fn units_check(dir: &Path) -> Check {
    let missing: Vec<&str> = TICK_UNITS
        .iter()
        .copied()
        .filter(|u| !dir.join(u).is_file())
        .collect();
    if missing.is_empty() {
        Check::new(
            "units",
            Status::Ok,
            format!("{} installed in {}", TICK_UNITS.join(", "), dir.display()),
        )
    } else if missing.len() == TICK_UNITS.len() {
        Check::new(
            "units",
            Status::Warn,
            format!(
                "units not installed (scripts/install.sh) in {}",
                dir.display()
            ),
        )
    } else {
        Check::new(
            "units",
            Status::Warn,
            format!(
                "{} missing in {}; run scripts/install.sh",
                missing.join(", "),
                dir.display()
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_like_execvp() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let other = dir.path().join("other");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let write = |p: &Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(&bin.join("tool"), 0o755);
        write(&bin.join("plain"), 0o644);
        write(&other.join("plain"), 0o755);
        write(&bin.join("only-plain"), 0o644);
        let path = std::env::join_paths([&bin, &other]).unwrap();
        let path = Some(path.as_os_str());

        let cases: Vec<(String, Resolved)> = vec![
            ("tool".into(), Resolved::OnPath(bin.join("tool"))),
            // A non-executable match earlier on PATH is skipped, as execvp does.
            ("plain".into(), Resolved::OnPath(other.join("plain"))),
            (
                "only-plain".into(),
                Resolved::NotExecutable(bin.join("only-plain")),
            ),
            ("no-such-agent-xyz".into(), Resolved::Missing),
            (
                bin.join("tool").display().to_string(),
                Resolved::At(bin.join("tool")),
            ),
            (
                bin.join("plain").display().to_string(),
                Resolved::NotExecutable(bin.join("plain")),
            ),
            (
                bin.display().to_string(),
                Resolved::NotExecutable(bin.clone()),
            ),
            (bin.join("missing").display().to_string(), Resolved::Missing),
            ("scripts/test.sh".into(), Resolved::WorktreeRelative),
        ];
        for (program, want) in cases {
            assert_eq!(resolve_program(&program, path), want, "{program}");
        }
        assert_eq!(resolve_program("tool", None), Resolved::Missing);
    }

    #[test]
    fn program_statuses() {
        let cases = [
            (Resolved::OnPath("/usr/bin/git".into()), Status::Ok),
            (
                Resolved::OnPath("/home/op/.local/bin/claude".into()),
                Status::Warn,
            ),
            (Resolved::At("/opt/claude/bin/claude".into()), Status::Ok),
            (Resolved::NotExecutable("/opt/x".into()), Status::Fail),
            (Resolved::WorktreeRelative, Status::Ok),
            (Resolved::Missing, Status::Fail),
        ];
        for (resolved, want) in cases {
            let c = program_check("agent", "agent.argv", "claude", &resolved);
            assert_eq!(c.status, want, "{resolved:?}: {}", c.detail);
            assert!(c.detail.contains("claude"), "{}", c.detail);
        }
        let c = program_check("agent", "agent.argv", "x", &Resolved::Missing);
        assert!(c.detail.contains("agent.argv"), "{}", c.detail);
    }

    #[test]
    fn service_variables_are_named_and_never_valued() {
        let svc = ServiceCfg {
            kind: "plane".into(),
            base_url: None,
            workspace: None,
            token_env: Some("ORCH_PLANE_TOKEN".into()),
            token_file: None,
            webhook_secret_env: Some("ORCH_PLANE_WEBHOOK_SECRET".into()),
            webhook_secret_file: None,
            allow_unsigned: false,
            chat_id: None,
        };
        let secrets = "# tokens\nORCH_PLANE_TOKEN=hunter2\nORCH_PLANE_WEBHOOK_SECRET=\n";
        type Case<'a> = (Option<bool>, Option<&'a str>, Status, &'a str);
        let cases: [Case; 5] = [
            (Some(true), None, Status::Ok, "is set"),
            (Some(false), None, Status::Fail, "set but empty"),
            (None, Some(secrets), Status::Ok, "in /etc/orch/secrets.env"),
            (None, Some("OTHER=1\n"), Status::Fail, "neither here nor"),
            (None, None, Status::Warn, "not set in this environment"),
        ];
        for (in_env, file, status, says) in cases {
            let mut checks = Vec::new();
            service_checks("tracker", &svc, |_| in_env, file, &mut checks);
            assert_eq!(checks.len(), 2);
            let c = &checks[0];
            assert_eq!(c.name, "tracker.token_env");
            assert_eq!(c.status, status, "{in_env:?} {file:?}: {}", c.detail);
            assert!(c.detail.contains("`ORCH_PLANE_TOKEN`"), "{}", c.detail);
            assert!(c.detail.contains(says), "{}", c.detail);
            assert!(!c.detail.contains("hunter2"), "{}", c.detail);
        }
        // An empty assignment in the file does not count as set.
        let mut checks = Vec::new();
        service_checks("tracker", &svc, |_| None, Some(secrets), &mut checks);
        assert_eq!(checks[1].name, "tracker.webhook_secret_env");
        assert_eq!(checks[1].status, Status::Fail);
    }

    #[test]
    fn env_file_assignments() {
        let text = "A=1\n  B = 2\n#C=3\n;D=4\nE=\nF=\"\"\nG\n";
        for (var, set) in [
            ("A", true),
            ("B", true),
            ("C", false),
            ("D", false),
            ("E", false),
            ("F", false),
            ("G", false),
            ("H", false),
        ] {
            assert_eq!(env_file_has(text, var), set, "{var}");
        }
    }

    #[test]
    fn secrets_file_must_be_private() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("secrets.env");
        assert_eq!(secrets_file_check(&f), None);
        std::fs::write(&f, "X=1\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = secrets_file_check(&f).unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("chmod 600"), "{}", c.detail);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let c = secrets_file_check(&f).unwrap();
        let owned_by_root = std::fs::metadata(&f).unwrap().uid() == 0;
        let want = if owned_by_root {
            Status::Ok
        } else {
            Status::Warn
        };
        assert_eq!(c.status, want, "{}", c.detail);
    }

    #[test]
    fn units_installed_partly_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let c = units_check(dir.path());
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.detail
                .contains("units not installed (scripts/install.sh)")
        );
        std::fs::write(dir.path().join("orch-tick.timer"), "").unwrap();
        let c = units_check(dir.path());
        assert_eq!(c.status, Status::Warn);
        assert!(
            c.detail.starts_with("orch-tick.service missing"),
            "{}",
            c.detail
        );
        std::fs::write(dir.path().join("orch-tick.service"), "").unwrap();
        assert_eq!(units_check(dir.path()).status, Status::Ok);
    }

    #[test]
    fn unwritable_state_dir_fails() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(dir_check("state_dir", dir.path()).status, Status::Ok);
        // Missing: not created yet (doctor creates nothing), a warning.
        let gone = dir.path().join("gone");
        let c = dir_check("state_dir", &gone);
        assert_eq!(c.status, Status::Warn);
        assert!(c.detail.contains("does not exist yet"), "{}", c.detail);
        // The probe file is cleaned up.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let c = dir_check("state_dir", &file);
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("cannot write in"), "{}", c.detail);
    }
}
