//! `orch doctor`: checks that what the config names actually exists and answers — the config
//! file itself, the state and repos directories, the database, `git`, the agent program, each
//! repo's remote, its `main` branch, the programs of its test contract, staging contract and CI
//! command, the smoke URLs of its test contract, the ssh target of its staging contract, the
//! secrets of the configured services and the systemd units. Each check is one `Check` with a
//! status (`ok`, `warn`, `fail`) and a one-line detail that says what to fix.
//!
//! Responsible for: looking without changing anything beyond what every command does on start
//! (creating the state directory and database; the only other write is a probe file, removed at
//! once), and never printing a secret: service variables are reported as set or not,
//! credentials in remote URLs are masked. Deliberately not here: validating the config's types
//! and values (done by `config` before any command runs, so an invalid file is reported as the
//! usual error rather than as a check), calling the tracker, forge or chat APIs, and asking
//! systemd whether the units are enabled.

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Ctx;
use crate::config::{CiMode, RepoCfg, ServiceCfg};
use crate::domain::ids::printable;
use crate::ext::git;
use crate::ext::proc::Cmd;

/// Where `scripts/install.sh` puts the units.
pub const UNIT_DIR: &str = "/etc/systemd/system";

/// The `EnvironmentFile=` of the units: service tokens and webhook secrets.
pub const SECRETS_FILE: &str = "/etc/orch/secrets.env";

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

/// Bounds an ssh remote that does not answer; `Cmd` has no timeout of its own.
const SSH_OPTIONS: &str = "-o BatchMode=yes -o ConnectTimeout=5";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// A stable dotted name: `config`, `agent`, `repo.shop.remote`, `tracker.token_env`, …
    pub name: String,
    pub status: Status,
    /// What was found, or what is wrong and how to fix it. Never a secret.
    pub detail: String,
}

impl Check {
    fn new(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            status,
            detail: detail.into(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether any check failed (the command then exits 1).
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }
}

/// Run every check, in the order an operator would fix them.
pub fn doctor(ctx: &Ctx) -> Report {
    let cfg = &ctx.config;
    let path_var = std::env::var_os("PATH");
    let path_var = path_var.as_deref();
    let mut checks = vec![
        config_check(cfg.file.as_deref(), cfg.repos.len()),
        dir_check("state_dir", &cfg.state_dir),
        dir_check("repos_dir", &cfg.repos_dir),
        match ctx.db.schema_version() {
            Ok(v) => Check::new(
                "database",
                Status::Ok,
                format!("`{}` schema version {v}", cfg.db_path().display()),
            ),
            Err(e) => Check::new(
                "database",
                Status::Fail,
                format!("`{}`: {e:#}", cfg.db_path().display()),
            ),
        },
        git_check(),
        program_check(
            "agent",
            "agent.argv",
            &cfg.agent.argv[0],
            &resolve_program(&cfg.agent.argv[0], path_var),
        ),
    ];
    for repo in &cfg.repos {
        repo_checks(
            repo,
            &cfg.state_dir,
            cfg.forge.is_some(),
            path_var,
            &mut checks,
        );
    }
    let secrets = std::fs::read_to_string(SECRETS_FILE).ok();
    for (name, svc) in [
        ("tracker", &cfg.tracker),
        ("forge", &cfg.forge),
        ("chat", &cfg.chat),
    ] {
        if let Some(svc) = svc {
            service_checks(
                name,
                svc,
                |var| std::env::var_os(var).map(|v| !v.is_empty()),
                secrets.as_deref(),
                &mut checks,
            );
        }
    }
    if let Some(c) = secrets_file_check(Path::new(SECRETS_FILE)) {
        checks.push(c);
    }
    checks.push(units_check(Path::new(UNIT_DIR)));
    Report {
        schema_version: 1,
        checks,
    }
}

fn config_check(file: Option<&Path>, repos: usize) -> Check {
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
fn dir_check(name: &str, dir: &Path) -> Check {
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

fn git_check() -> Check {
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

/// Where a program named by a config key would be found when orch runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resolved {
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
fn resolve_program(program: &str, path_var: Option<&OsStr>) -> Resolved {
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

fn program_check(name: &str, key: &str, program: &str, resolved: &Resolved) -> Check {
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

fn repo_checks(
    repo: &RepoCfg,
    cwd: &Path,
    has_forge: bool,
    path_var: Option<&OsStr>,
    checks: &mut Vec<Check>,
) {
    let n = |what: &str| format!("repo.{}.{what}", repo.name);
    let shown = redact_remote(&repo.remote);
    match git::ls_remote(cwd, &repo.remote, SSH_OPTIONS) {
        Ok(out) if out.success() => {
            let stdout = out.stdout_text();
            checks.push(Check::new(
                n("remote"),
                Status::Ok,
                format!("{shown} answers"),
            ));
            checks.push(main_check(n("main"), &repo.main, &shown, &stdout));
        }
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let why = first_cause(&stderr);
            checks.push(Check::new(
                n("remote"),
                Status::Fail,
                format!(
                    "`git ls-remote {shown}` failed ({}): {}; check the URL and that the orch \
                     user can reach it without a prompt",
                    out.status_text(),
                    why.replace(&repo.remote, &shown)
                ),
            ));
        }
        Err(e) => checks.push(Check::new(
            n("remote"),
            Status::Fail,
            format!("{e:#}").replace(&repo.remote, &shown),
        )),
    }
    if let Some(t) = &repo.tests {
        let key = format!("repos[{}].tests.argv", repo.name);
        checks.push(program_check(
            &n("tests"),
            &key,
            &t.argv[0],
            &resolve_program(&t.argv[0], path_var),
        ));
        if !t.smoke.is_empty() {
            let urls: Vec<&str> = t.smoke.iter().map(|s| s.url.as_str()).collect();
            checks.push(smoke_check(n("smoke"), &repo.name, &urls));
        }
    }
    if let Some(s) = &repo.staging {
        let program = &s.argv[0];
        match &s.ssh {
            // The argv runs on the staging host: whether the program is there is for the
            // `staging_ssh` probe and the run itself to tell, not for this machine's PATH.
            Some(ssh) => {
                checks.push(Check::new(
                    n("staging"),
                    Status::Ok,
                    format!(
                        "`{}` runs on {}@{} over ssh; not checked here",
                        printable(program),
                        printable(&ssh.user),
                        printable(&ssh.host)
                    ),
                ));
                checks.push(ssh_check(n("staging_ssh"), &ssh.user, &ssh.host));
            }
            None => {
                let key = format!("repos[{}].staging.argv", repo.name);
                checks.push(program_check(
                    &n("staging"),
                    &key,
                    program,
                    &resolve_program(program, path_var),
                ));
            }
        }
    }
    match repo.ci.mode {
        CiMode::Command => {
            let key = format!("repos[{}].ci.argv", repo.name);
            checks.push(program_check(
                &n("ci"),
                &key,
                &repo.ci.argv[0],
                &resolve_program(&repo.ci.argv[0], path_var),
            ));
        }
        CiMode::Status if !has_forge => checks.push(Check::new(
            n("ci"),
            Status::Warn,
            "ci.mode is `status` but no `forge` is configured, so no CI status can arrive and \
             the development gate never passes",
        )),
        CiMode::Status | CiMode::None => {}
    }
}

/// The staging host answers a no-op over ssh the way the runner will reach it: keys only
/// (`BatchMode`), and a short connect timeout so a silent host cannot stall the doctor.
fn ssh_check(name: String, user: &str, host: &str) -> Check {
    let target = format!("{user}@{host}");
    let shown = printable(&target);
    let cmd = Cmd::new("ssh")
        .args(SSH_OPTIONS.split(' '))
        .args(["--", target.as_str(), "true"])
        .env("LC_ALL", "C");
    match cmd.output() {
        Ok(out) if out.success() => Check::new(name, Status::Ok, format!("{shown} answers")),
        Ok(out) => Check::new(
            name,
            Status::Fail,
            format!(
                "`{}` failed ({}): {}; check that the orch user can log in to {shown} with a \
                 key and no prompt, and that the host key is known",
                cmd.display(),
                out.status_text(),
                printable(first_cause(&String::from_utf8_lossy(&out.stderr)))
            ),
        ),
        Err(e) => Check::new(
            name,
            Status::Fail,
            format!("{e:#}; install the ssh client, the staging contract runs through it"),
        ),
    }
}

/// Why a smoke URL cannot be fetched, or `None` when it is an absolute `http`/`https` URL with
/// a host (what the runner's GET needs).
fn smoke_url_problem(url: &str) -> Option<&'static str> {
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return Some("is not a URL");
    };
    match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http" | "https") => {}
        Some(_) => return Some("is not an http or https URL"),
        None => return Some("has no scheme (http:// or https://)"),
    }
    match uri.host() {
        Some(h) if !h.is_empty() => None,
        _ => Some("has no host"),
    }
}

/// The smoke URLs of a repo's test contract all parse; a bad one is named with its key.
fn smoke_check(name: String, repo: &str, urls: &[&str]) -> Check {
    let bad: Vec<String> = urls
        .iter()
        .enumerate()
        .filter_map(|(i, url)| {
            smoke_url_problem(url).map(|why| {
                format!(
                    "`{}` {why} (repos[{repo}].tests.smoke[{i}].url)",
                    printable(&redact_remote(url))
                )
            })
        })
        .collect();
    if bad.is_empty() {
        let count = urls.len();
        Check::new(
            name,
            Status::Ok,
            format!(
                "{count} smoke URL{} parse{}",
                if count == 1 { "" } else { "s" },
                if count == 1 { "s" } else { "" }
            ),
        )
    } else {
        Check::new(
            name,
            Status::Fail,
            format!(
                "{}; a smoke URL must be http:// or https:// with a host",
                bad.join("; ")
            ),
        )
    }
}

/// The line of git's complaint that says why: git and ssh print the cause first and generic
/// advice ("Please make sure you have the correct access rights") after it.
fn first_cause(stderr: &str) -> &str {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("warning:"))
        .unwrap_or("no output")
}

/// The remote for messages: a password in the URL, or an HTTP user name (often a token), is
/// replaced by `***`.
fn redact_remote(remote: &str) -> String {
    let Some((scheme, rest)) = remote.split_once("://") else {
        return remote.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return remote.to_string();
    };
    let userinfo = &rest[..at];
    let masked = match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None if scheme.starts_with("http") => "***".to_string(),
        None => userinfo.to_string(),
    };
    format!("{scheme}://{masked}{}", &rest[at..])
}

/// The branch names in `git ls-remote --heads` output.
fn heads(ls_remote_stdout: &str) -> Vec<&str> {
    ls_remote_stdout
        .lines()
        .filter_map(|l| l.split('\t').nth(1))
        .filter_map(|r| r.strip_prefix("refs/heads/"))
        .collect()
}

fn main_check(name: String, main: &str, shown_remote: &str, ls_remote_stdout: &str) -> Check {
    let found = ls_remote_stdout.lines().find_map(|l| {
        let (sha, r) = l.split_once('\t')?;
        (r.strip_prefix("refs/heads/") == Some(main)).then_some(sha)
    });
    if let Some(sha) = found {
        return Check::new(
            name,
            Status::Ok,
            format!("`{main}` at {}", &sha[..sha.len().min(12)]),
        );
    }
    let all = heads(ls_remote_stdout);
    let has = if all.is_empty() {
        "it has no branches; push the first commit of `main` there".to_string()
    } else {
        let mut list = all.iter().take(5).copied().collect::<Vec<_>>().join(", ");
        if all.len() > 5 {
            list.push_str(&format!(" and {} more", all.len() - 5));
        }
        format!("it has {list}; fix the repo's `main` key or push the branch")
    };
    Check::new(
        name,
        Status::Fail,
        format!("no branch `{main}` on {shown_remote}: {has}"),
    )
}

/// The `*_env` variables of one service. `in_env(var)` is `None` when the variable is unset,
/// `Some(false)` when it is set but empty. `secrets` is the text of the units' environment file,
/// when we may read it; only its variable names are looked at.
fn service_checks(
    service: &str,
    svc: &ServiceCfg,
    in_env: impl Fn(&str) -> Option<bool>,
    secrets: Option<&str>,
    checks: &mut Vec<Check>,
) {
    let name = format!("{service}.token_env");
    match &svc.token_env {
        None => checks.push(Check::new(
            name,
            Status::Warn,
            format!(
                "`{service}` ({}) has no token_env, so its API calls are unauthenticated",
                svc.kind
            ),
        )),
        Some(var) => checks.push(var_check(name, var, &in_env, secrets)),
    }
    if let Some(var) = &svc.webhook_secret_env {
        checks.push(var_check(
            format!("{service}.webhook_secret_env"),
            var,
            &in_env,
            secrets,
        ));
    }
}

fn var_check(
    name: String,
    var: &str,
    in_env: &impl Fn(&str) -> Option<bool>,
    secrets: Option<&str>,
) -> Check {
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
fn secrets_file_check(path: &Path) -> Option<Check> {
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

fn units_check(dir: &Path) -> Check {
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
    fn credentials_in_remote_urls_are_masked() {
        for (remote, shown) in [
            (
                "https://bot:s3cret@forge.example/x.git",
                "https://bot:***@forge.example/x.git",
            ),
            (
                "https://ghp_token@forge.example/x.git",
                "https://***@forge.example/x.git",
            ),
            (
                "ssh://git@forge.example/x.git",
                "ssh://git@forge.example/x.git",
            ),
            ("git@forge.example:x.git", "git@forge.example:x.git"),
            (
                "https://forge.example/a@b.git",
                "https://forge.example/a@b.git",
            ),
            ("/srv/x.git", "/srv/x.git"),
        ] {
            assert_eq!(redact_remote(remote), shown, "{remote}");
        }
    }

    #[test]
    fn the_cause_of_a_remote_failure_is_its_first_line() {
        let missing = "fatal: '/nope/x.git' does not appear to be a git repository\n\
                       fatal: Could not read from remote repository.\n\n\
                       Please make sure you have the correct access rights\n\
                       and the repository exists.";
        let ssh = "Warning: Permanently added 'h' to the list of known hosts.\n\
                   git@h: Permission denied (publickey).\n\
                   fatal: Could not read from remote repository.";
        for (stderr, cause) in [
            (
                missing,
                "fatal: '/nope/x.git' does not appear to be a git repository",
            ),
            (ssh, "git@h: Permission denied (publickey)."),
            ("", "no output"),
        ] {
            assert_eq!(first_cause(stderr), cause);
        }
    }

    #[test]
    fn smoke_urls_must_be_http_with_a_host() {
        for (url, problem) in [
            ("http://127.0.0.1:8080/health", None),
            ("https://shop.example/", None),
            ("HTTPS://shop.example", None),
            ("http://[::1]:80/x?y=1", None),
            ("not a url", Some("is not a URL")),
            ("", Some("is not a URL")),
            ("ftp://shop.example/", Some("is not an http or https URL")),
            ("/health", Some("has no scheme (http:// or https://)")),
            (
                "shop.example:8080",
                Some("has no scheme (http:// or https://)"),
            ),
        ] {
            assert_eq!(smoke_url_problem(url), problem, "{url:?}");
        }
    }

    #[test]
    fn a_bad_smoke_url_is_named_with_its_key_and_no_password() {
        let c = smoke_check(
            "repo.shop.smoke".into(),
            "shop",
            &["http://ok.example/", "https://bot:s3cret@x y/"],
        );
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.detail.contains("repos[shop].tests.smoke[1].url"),
            "{}",
            c.detail
        );
        assert!(c.detail.contains("bot:***@x y"), "{}", c.detail);
        assert!(!c.detail.contains("s3cret"), "{}", c.detail);
        assert!(!c.detail.contains("ok.example"), "{}", c.detail);
        let c = smoke_check("repo.shop.smoke".into(), "shop", &["http://ok.example/"]);
        assert_eq!(
            (c.status, c.detail.as_str()),
            (Status::Ok, "1 smoke URL parses")
        );
    }

    #[test]
    fn main_is_found_by_its_exact_ref() {
        let out = "aaaaaaaaaaaaaaaa\trefs/heads/feature/main\nbbbbbbbbbbbbbbbb\trefs/heads/main\n";
        let c = main_check("m".into(), "main", "r", out);
        assert_eq!(c.status, Status::Ok);
        assert_eq!(c.detail, "`main` at bbbbbbbbbbbb");

        let c = main_check("m".into(), "trunk", "r", out);
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("no branch `trunk`"), "{}", c.detail);
        assert!(c.detail.contains("feature/main, main"), "{}", c.detail);

        let c = main_check("m".into(), "main", "r", "");
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("no branches"), "{}", c.detail);
    }

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
            webhook_secret_env: Some("ORCH_PLANE_WEBHOOK_SECRET".into()),
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
        let gone = dir.path().join("gone");
        let c = dir_check("state_dir", &gone);
        assert_eq!(c.status, Status::Fail);
        assert!(c.detail.contains("cannot write in"), "{}", c.detail);
        // The probe file is cleaned up.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
