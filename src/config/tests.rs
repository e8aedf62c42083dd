//! Loading and validating configs: errors name the key and the file, paths resolve against
//! the file, the starter config loads.

use super::load::is_local_path;
use super::*;
use anyhow::Result;

fn load_str(s: &str) -> Result<Config> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("orch.yaml");
    std::fs::write(&p, s).unwrap();
    load(&p, Some(dir.path().join("state")))
}

#[test]
fn starter_config_is_valid() {
    let cfg = load_str(STARTER).expect("starter config loads");
    assert_eq!(cfg.max_concurrency, 2);
}

#[test]
fn errors_name_the_key_and_the_file() {
    for (yaml, key) in [
        ("max_concurrency: two\n", "max_concurrency"),
        ("max_concurrency: 0\n", "max_concurrency"),
        (
            "repos:\n - {name: Bad, remote: /x, prefix: A}\n",
            "repos[0].name",
        ),
        (
            "repos:\n - {name: a, remote: /x, prefix: a}\n",
            "repos[0].prefix",
        ),
        (
            "repos:\n - {name: a, remote: /x, prefix: A, ci: {mode: fast}}\n",
            "repos[0].ci.mode",
        ),
        (
            "repos:\n - {name: a, remote: /x, prefix: A, bogus: 1}\n",
            "bogus",
        ),
        (
            "repos:\n - {name: a, remote: /x, prefix: A}\n - {name: a, remote: /y, prefix: B}\n",
            "repos[1].name",
        ),
        // Git refuses a `.lock` component later (clone, lock file), so the config does now.
        (
            "repos:\n - {name: x.lock, remote: /x, prefix: A}\n",
            "repos[0].name",
        ),
        ("agent: {roles: {poet: {model: x}}}\n", "agent.roles.poet"),
        ("tracker: {kind: jira}\n", "tracker.kind"),
    ] {
        let e = load_str(yaml).unwrap_err().to_string();
        assert!(e.contains(key), "{yaml:?}: {e}");
        assert!(e.contains("orch.yaml"), "{yaml:?}: {e}");
    }
}

/// A zero timeout used to load and then kill every agent (or CI command) at once.
#[test]
fn zero_timeouts_and_attempts_are_refused_naming_the_key() {
    for (yaml, key) in [
        (
            "agent: {inactivity_timeout_s: 0}\n",
            "agent.inactivity_timeout_s",
        ),
        ("agent: {max_attempts: 0}\n", "agent.max_attempts"),
        (
            "agent: {roles: {developer: {timeout_s: 0}}}\n",
            "agent.roles.developer.timeout_s",
        ),
        (
            "repos:\n - {name: a, remote: /x, prefix: A, agent: {reviewer: {timeout_s: 0}}}\n",
            "repos[0].agent.reviewer.timeout_s",
        ),
        (
            "repos:\n - {name: a, remote: /x, prefix: A, ci: {mode: command, argv: [x], timeout_s: 0}}\n",
            "repos[0].ci.timeout_s",
        ),
        (
            "repos:\n - {name: a, remote: /x, prefix: A, deploy: {mode: hook, argv: [x], timeout_s: 0}}\n",
            "repos[0].deploy.timeout_s",
        ),
        (
            "scheduler: {reaper_max_running_s: 0}\n",
            "scheduler.reaper_max_running_s",
        ),
        ("git: {timeout_s: 0}\n", "git.timeout_s"),
        ("git: {lock_timeout_s: 0}\n", "git.lock_timeout_s"),
    ] {
        let e = load_str(yaml).unwrap_err().to_string();
        assert!(e.contains(key), "{yaml:?}: {e}");
        assert!(e.contains("at least 1"), "{yaml:?}: {e}");
    }
}

#[test]
fn local_remotes_are_told_from_urls() {
    for local in [
        "remote.git",
        "../x/remote.git",
        "/srv/git/shop.git",
        "./a:b",
    ] {
        assert!(is_local_path(local), "{local}");
    }
    for url in [
        "git@forge:team/shop.git",
        "https://forge/x.git",
        "file:///srv/x.git",
        "host:x",
    ] {
        assert!(!is_local_path(url), "{url}");
    }
}

#[test]
fn relative_paths_are_resolved_against_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("orch.yaml");
    std::fs::write(
        &p,
        "state_dir: st\nrepos:\n - {name: a, remote: remote.git, prefix: A}\n",
    )
    .unwrap();
    let cfg = load(&p, None).unwrap();
    assert_eq!(cfg.state_dir, dir.path().join("st"));
    assert_eq!(
        cfg.repos[0].remote,
        dir.path().join("remote.git").display().to_string()
    );
    assert_eq!(cfg.repos_dir, dir.path().join("st").join("repos"));
}

#[test]
fn sandbox_paths_secret_files_and_orchs_git_config_are_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("orch.yaml");
    std::fs::write(
        &p,
        "agent:\n  sandbox: none\n  env_allow: [ANTHROPIC_API_KEY]\n  \
         sandbox_writable: [\"~/.claude\", cache]\n  sandbox_readable: [/opt/tools]\n  \
         sandbox_hidden: [\"~/.ssh\"]\n\
         tracker: {kind: plane, token_file: secrets/plane, webhook_secret_file: /etc/hook}\n",
    )
    .unwrap();
    let cfg = load(&p, Some(dir.path().join("state"))).unwrap();
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap());
    assert_eq!(cfg.agent.sandbox, Some(SandboxMode::None));
    assert_eq!(cfg.agent.env_allow, ["ANTHROPIC_API_KEY"]);
    assert_eq!(
        cfg.agent.sandbox_writable,
        [home.join(".claude"), dir.path().join("cache")]
    );
    assert_eq!(
        cfg.agent.sandbox_readable,
        [std::path::PathBuf::from("/opt/tools")]
    );
    assert_eq!(cfg.agent.sandbox_hidden, [home.join(".ssh")]);
    let t = cfg.tracker.as_ref().unwrap();
    assert_eq!(
        t.token_file.as_deref(),
        Some(dir.path().join("secrets/plane").as_path())
    );
    assert!(t.has_token() && t.has_webhook_secret());
    assert_eq!(
        cfg.secret_files(),
        [dir.path().join("secrets/plane"), "/etc/hook".into()]
    );
    // orch's own global git config lives in the state dir unless named.
    assert_eq!(
        cfg.git.global_config.as_deref(),
        Some(dir.path().join("state/gitconfig").as_path())
    );
    // A sandbox mode that is not one is refused, naming the key.
    let e = load_str("agent:\n  sandbox: docker\n").unwrap_err();
    assert!(format!("{e:#}").contains("sandbox"), "{e:#}");
}
