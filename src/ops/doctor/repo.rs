//! Checks of each configured repo: its remote answers `git ls-remote` (`ext::git::Git::ls_remote`:
//! hardened like every git call, bounded by git's low-speed limit and, for an ssh remote, by
//! `SSH_OPTIONS`) and has the `main` branch; the programs of its test, staging and CI contracts
//! exist; its smoke URLs parse; its staging host answers a no-op over ssh.
//!
//! Never prints a secret: credentials in a remote or smoke URL are masked (`redact_remote`)
//! before they reach a detail. Deliberately not here: cloning or fetching (the doctor changes
//! nothing), and requesting the smoke URLs (only their syntax is checked).

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use super::check::{Check, Status};
use super::host::{program_check, resolve_program};
use crate::config::{CiMode, RepoCfg};
use crate::domain::ids::printable;
use crate::ext::git::Git;
use crate::ext::proc::Cmd;

/// Bounds an ssh host that does not answer (an ssh remote's `ls-remote`, the staging probe).
const SSH_OPTIONS: &str = "-o BatchMode=yes -o ConnectTimeout=5";
/// A probe gives up after this long whatever it waits for, so a silent remote cannot stall the
/// doctor.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The checks of one repo, appended to `checks` in the order they are reported. Git runs in
/// `cwd` (the state directory), never in a clone: the doctor does not need one.
pub(super) fn repo_checks(
    repo: &RepoCfg,
    git: &Git,
    cwd: &Path,
    has_forge: bool,
    path_var: Option<&OsStr>,
    checks: &mut Vec<Check>,
) {
    let n = |what: &str| format!("repo.{}.{what}", repo.name);
    let shown = redact_remote(&repo.remote);
    let git = git.clone().with_limits(PROBE_TIMEOUT, PROBE_TIMEOUT);
    match git.ls_remote(cwd, &repo.remote, SSH_OPTIONS) {
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
    // The last mile's programs (design §7).
    let programs: [(&str, String, Option<&String>); 3] = [
        (
            "deploy",
            format!("repos[{}].deploy.argv", repo.name),
            repo.deploy
                .as_ref()
                .filter(|d| d.mode == crate::config::DeployMode::Hook)
                .and_then(|d| d.argv.first()),
        ),
        (
            "coverage",
            format!("repos[{}].coverage.argv", repo.name),
            repo.coverage.as_ref().and_then(|c| c.argv.first()),
        ),
        (
            "security",
            format!("repos[{}].security.argv", repo.name),
            repo.security.as_ref().and_then(|c| c.argv.first()),
        ),
    ];
    for (what, key, program) in programs {
        if let Some(p) = program {
            checks.push(program_check(
                &n(what),
                &key,
                p,
                &resolve_program(p, path_var),
            ));
        }
    }
    if repo.security_enabled() && repo.security.as_ref().is_none_or(|s| s.argv.is_empty()) {
        let found = resolve_program("gitleaks", path_var);
        let (status, text) = match found {
            super::host::Resolved::OnPath(p) => (
                Status::Ok,
                format!("the secret scan runs gitleaks ({})", p.display()),
            ),
            _ => (
                Status::Ok,
                "the secret scan is orch's built-in one (private keys and prefixed tokens); \
                 install gitleaks for a wider one"
                    .to_string(),
            ),
        };
        checks.push(Check::new(n("security"), status, text));
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
        .env("LC_ALL", "C")
        .timeout(PROBE_TIMEOUT);
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

/// The remote for messages, its userinfo (a password, or an HTTP user name that is often a
/// token) masked as everywhere else (`domain::redact`).
fn redact_remote(remote: &str) -> String {
    crate::domain::redact::redact_urls(remote).into_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_remote_urls_are_masked() {
        for (remote, shown) in [
            (
                "https://bot:s3cret@forge.example/x.git",
                "https://***@forge.example/x.git",
            ),
            (
                "https://ghp_token@forge.example/x.git",
                "https://***@forge.example/x.git",
            ),
            (
                "ssh://git@forge.example/x.git",
                "ssh://***@forge.example/x.git",
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
        assert!(c.detail.contains("https://***@x y"), "{}", c.detail);
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
}
