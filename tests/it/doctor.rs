//! `orch doctor` against a temp world: a healthy setup is all ok (the units aside, which a test
//! host does not have), and each broken piece — a remote that is gone, an agent that is not
//! installed, a service token that is not set — fails or warns naming the culprit, never a secret.

use std::path::Path;

use crate::support::{self, Run, World, stub_agent};
use serde_json::Value;

fn with_agent(w: &World, argv0: &str) {
    w.append_config(&format!("agent:\n  argv: [{argv0:?}, \"--print\"]\n"));
}

fn with_stub_agent(w: &World) {
    with_agent(w, &stub_agent().display().to_string());
}

fn check<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .expect("checks is an array")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check `{name}` in {doc:#}"))
}

fn status<'a>(doc: &'a Value, name: &str) -> &'a str {
    check(doc, name)["status"].as_str().unwrap()
}

fn detail<'a>(doc: &'a Value, name: &str) -> &'a str {
    check(doc, name)["detail"].as_str().unwrap()
}

/// The units check depends on the host: ok where orch is installed, a warning elsewhere.
fn units_expected() -> &'static str {
    let dir = Path::new("/etc/systemd/system");
    if dir.join("orch-tick.timer").is_file() && dir.join("orch-tick.service").is_file() {
        "ok"
    } else {
        "warn"
    }
}

#[test]
fn a_healthy_world_is_all_ok_but_the_units() {
    let w = World::with_repo_extra("tests: { argv: [\"sh\", \"test.sh\"] }\nci: { mode: none }");
    with_stub_agent(&w);
    // The sandbox is a fact of the host: on where bubblewrap is installed.
    let bwrap = crate::support::which("bwrap").is_some();
    w.sandbox.store(bwrap, std::sync::atomic::Ordering::Relaxed);
    // Doctor only reads: the state exists once a writing command has run (after the install).
    w.ok(&["tick"], 0);
    let r = w.ok(&["doctor", "--json"], 0);
    let doc = r.json();
    assert_eq!(doc["schema_version"], 1);
    for name in [
        "config",
        "state_dir",
        "repos_dir",
        "database",
        "git",
        "agent",
        "repo.shop.remote",
        "repo.shop.main",
        "repo.shop.tests",
    ] {
        assert_eq!(status(&doc, name), "ok", "{name}: {}", detail(&doc, name));
    }
    for c in doc["checks"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        match name {
            "units" => assert_eq!(c["status"], units_expected(), "{c}"),
            "agent.sandbox" => assert_eq!(c["status"], if bwrap { "ok" } else { "warn" }, "{c}"),
            // Present only where /etc/orch/secrets.env exists: a fact of the host, not the world.
            "secrets_file" => {}
            _ => assert_eq!(c["status"], "ok", "{c}"),
        }
    }
    if units_expected() == "warn" {
        assert!(
            detail(&doc, "units").contains("units not installed (scripts/install.sh)"),
            "{doc:#}"
        );
    }
    assert!(
        detail(&doc, "config").contains(&w.config.display().to_string()),
        "{doc:#}"
    );
    assert!(
        detail(&doc, "repo.shop.main").starts_with("`main` at "),
        "{doc:#}"
    );

    // Without --json: one line per check, status first.
    let r = w.ok(&["doctor"], 0);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        doc["checks"].as_array().unwrap().len(),
        "{r:?}"
    );
    assert!(lines[0].starts_with("ok   config  "), "{r:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ok   repo.shop.remote ")),
        "{r:?}"
    );
}

#[test]
fn a_remote_that_is_gone_fails_and_exits_1() {
    let w = World::new();
    with_stub_agent(&w);
    let gone = w.dir.path().join("no-such-remote.git");
    let text = std::fs::read_to_string(&w.config)
        .unwrap()
        .replace(&w.remote.display().to_string(), &gone.display().to_string());
    std::fs::write(&w.config, text).unwrap();

    let r = w.ok(&["doctor", "--json"], 1);
    let doc = r.json();
    assert_eq!(status(&doc, "repo.shop.remote"), "fail");
    let d = detail(&doc, "repo.shop.remote");
    assert!(d.contains(&gone.display().to_string()), "{d}");
    assert!(d.contains("does not appear to be a git repository"), "{d}");
    assert_eq!(status(&doc, "agent"), "ok");

    let r = w.ok(&["doctor"], 1);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with("fail repo.shop.remote ")),
        "{r:?}"
    );
}

#[test]
fn a_main_branch_missing_on_the_remote_fails() {
    let w = World::with_repo_extra("main: trunk");
    with_stub_agent(&w);
    let doc = w.ok(&["doctor", "--json"], 1).json();
    assert_eq!(status(&doc, "repo.shop.remote"), "ok");
    assert_eq!(status(&doc, "repo.shop.main"), "fail");
    let d = detail(&doc, "repo.shop.main");
    assert!(
        d.contains("no branch `trunk`") && d.contains("it has main"),
        "{d}"
    );
}

#[test]
fn an_agent_not_on_path_fails_naming_it() {
    let w = World::new();
    with_agent(&w, "no-such-agent-xyz");
    let r = w.ok(&["doctor", "--json"], 1);
    let doc = r.json();
    assert_eq!(status(&doc, "agent"), "fail");
    let d = detail(&doc, "agent");
    assert!(d.contains("`no-such-agent-xyz` not found on PATH"), "{d}");
    assert!(d.contains("agent.argv"), "{d}");
    // The other checks still ran.
    assert_eq!(status(&doc, "repo.shop.main"), "ok");
}

#[test]
fn a_test_contract_program_that_is_missing_fails() {
    let w = World::with_repo_extra("tests: { argv: [\"no-such-runner-xyz\"] }");
    with_stub_agent(&w);
    let doc = w.ok(&["doctor", "--json"], 1).json();
    assert_eq!(status(&doc, "repo.shop.tests"), "fail");
    assert!(
        detail(&doc, "repo.shop.tests").contains("`no-such-runner-xyz`"),
        "{doc:#}"
    );
}

#[test]
fn a_smoke_url_that_does_not_parse_fails_naming_it() {
    let w = World::with_repo_extra(
        "tests:\n  argv: [\"true\"]\n  smoke:\n    - { url: \"http://127.0.0.1:9/health\" }\n    \
         - { url: \"not a url\" }",
    );
    with_stub_agent(&w);
    let doc = w.ok(&["doctor", "--json"], 1).json();
    assert_eq!(status(&doc, "repo.shop.tests"), "ok");
    assert_eq!(status(&doc, "repo.shop.smoke"), "fail");
    let d = detail(&doc, "repo.shop.smoke");
    assert!(d.contains("`not a url`"), "{d}");
    assert!(d.contains("repos[shop].tests.smoke[1].url"), "{d}");
    assert!(!d.contains("127.0.0.1"), "the good URL is not blamed: {d}");
}

#[test]
fn a_staging_program_that_is_missing_fails() {
    let w = World::with_repo_extra("staging: { argv: [\"no-such-staging-xyz\", \"--now\"] }");
    with_stub_agent(&w);
    let doc = w.ok(&["doctor", "--json"], 1).json();
    assert_eq!(status(&doc, "repo.shop.staging"), "fail");
    let d = detail(&doc, "repo.shop.staging");
    assert!(d.contains("`no-such-staging-xyz` not found on PATH"), "{d}");
    assert!(d.contains("repos[shop].staging.argv"), "{d}");
    // No ssh in the contract, so no ssh probe.
    assert!(
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "repo.shop.staging_ssh"),
        "{doc:#}"
    );

    // A path relative to the worktree cannot be checked before the worktree exists.
    let w = World::with_repo_extra("staging: { argv: [\"scripts/deploy-staging.sh\"] }");
    with_stub_agent(&w);
    let doc = w.ok(&["doctor", "--json"], 0).json();
    assert_eq!(status(&doc, "repo.shop.staging"), "ok");
    assert!(
        detail(&doc, "repo.shop.staging").contains("relative to the task's worktree"),
        "{doc:#}"
    );
}

/// A world whose staging contract goes over ssh to `deploy@staging.invalid`, and a fake `ssh`
/// early on PATH that records its arguments and exits `code` (255 with ssh's own complaint).
fn doctor_with_fake_ssh(code: i32) -> (World, Run, Vec<String>) {
    let w = World::with_repo_extra(
        "staging:\n  argv: [\"/srv/app/deploy-staging.sh\", \"--fast\"]\n  \
         ssh: { user: deploy, host: staging.invalid }",
    );
    with_stub_agent(&w);
    let args = w.dir.path().join("ssh-args");
    let ssh = w.script(
        "fake-bin/ssh",
        &format!(
            "for a in \"$@\"; do printf '%s\\n' \"$a\"; done > '{}'\n\
             [ {code} -eq 0 ] || echo 'ssh: connect to host staging.invalid port 22: Connection \
             refused' >&2\nexit {code}",
            args.display()
        ),
    );
    let path = support::path_with(ssh.parent().unwrap());
    let run = w.orch_with(&["doctor", "--json"], &[("PATH", &path)]);
    let argv = std::fs::read_to_string(&args)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    (w, run, argv)
}

#[test]
fn a_staging_ssh_target_that_answers_is_ok() {
    let (_w, r, argv) = doctor_with_fake_ssh(0);
    assert_eq!(r.code, 0, "{r:?}");
    let doc = r.json();
    assert_eq!(status(&doc, "repo.shop.staging_ssh"), "ok");
    assert_eq!(
        detail(&doc, "repo.shop.staging_ssh"),
        "deploy@staging.invalid answers"
    );
    assert_eq!(
        argv,
        [
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "--",
            "deploy@staging.invalid",
            "true"
        ]
    );
    // The program runs on the staging host, so this machine's PATH says nothing about it.
    assert_eq!(status(&doc, "repo.shop.staging"), "ok");
    assert!(
        detail(&doc, "repo.shop.staging").contains("runs on deploy@staging.invalid over ssh"),
        "{doc:#}"
    );
}

#[test]
fn a_staging_ssh_target_that_does_not_answer_fails() {
    let (_w, r, argv) = doctor_with_fake_ssh(255);
    assert_eq!(r.code, 1, "{r:?}");
    let doc = r.json();
    assert_eq!(status(&doc, "repo.shop.staging_ssh"), "fail");
    let d = detail(&doc, "repo.shop.staging_ssh");
    assert!(d.contains("(exit 255)"), "{d}");
    assert!(
        d.contains("ssh: connect to host staging.invalid port 22: Connection refused"),
        "{d}"
    );
    assert!(d.contains("deploy@staging.invalid"), "{d}");
    assert_eq!(argv.last().map(String::as_str), Some("true"));
    // The other checks still ran.
    assert_eq!(status(&doc, "repo.shop.main"), "ok");
}

#[test]
fn an_unset_tracker_token_is_named_and_no_secret_is_printed() {
    const TOKEN: &str = "ORCH_DOCTOR_TEST_PLANE_TOKEN";
    const SECRET: &str = "ORCH_DOCTOR_TEST_PLANE_WEBHOOK_SECRET";
    const VALUE: &str = "s3cr3t-value-never-printed";
    let w = World::new();
    with_stub_agent(&w);
    w.append_config(&format!(
        "tracker: {{ kind: plane, base_url: \"http://127.0.0.1:9\", workspace: team, \
             token_env: {TOKEN}, webhook_secret_env: {SECRET} }}\n"
    ));
    for json in [true, false] {
        let mut cmd = w.orch_cmd(if json {
            &["doctor", "--json"]
        } else {
            &["doctor"]
        });
        cmd.env_remove(TOKEN).env(SECRET, VALUE);
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stdout.contains(VALUE) && !stderr.contains(VALUE),
            "a secret was printed:\n{stdout}\n{stderr}"
        );
        if json {
            let doc: Value = serde_json::from_str(&stdout).unwrap();
            let token = check(&doc, "tracker.token_env");
            assert!(
                token["status"] == "warn" || token["status"] == "fail",
                "{token}"
            );
            assert!(
                detail(&doc, "tracker.token_env").contains(&format!("`{TOKEN}`")),
                "{doc:#}"
            );
            assert_eq!(status(&doc, "tracker.webhook_secret_env"), "ok");
            assert_eq!(
                detail(&doc, "tracker.webhook_secret_env"),
                format!("`{SECRET}` is set")
            );
            let failed = doc["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["status"] == "fail");
            assert_eq!(out.status.code(), Some(if failed { 1 } else { 0 }));
        } else {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.contains("tracker.token_env") && l.contains(TOKEN)),
                "{stdout}"
            );
        }
    }
}

#[test]
fn the_sandbox_check_warns_when_off_and_fails_when_bwrap_is_asked_for_but_missing() {
    let w = World::new();
    let r = w.orch(&["doctor", "--json"]);
    let doc = r.json();
    assert_eq!(status(&doc, "agent.sandbox"), "warn", "{doc:#}");
    assert!(
        detail(&doc, "agent.sandbox").contains("agents run unconfined"),
        "{doc:#}"
    );
    // `bwrap` asked for, and a PATH where it cannot be found.
    let empty = crate::support::tempdir();
    let r = w.orch_with(
        &["doctor", "--json"],
        &[
            ("ORCH_AGENT_SANDBOX", "bwrap"),
            ("PATH", empty.path().to_str().unwrap()),
        ],
    );
    let doc = r.json();
    assert_eq!(status(&doc, "agent.sandbox"), "fail", "{doc:#}");
    assert!(
        detail(&doc, "agent.sandbox").contains("install bubblewrap"),
        "{doc:#}"
    );
}
