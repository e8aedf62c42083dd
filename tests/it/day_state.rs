//! The operator's first minutes (issue 12, items 1, 2 and 12): no command runs without a config,
//! read commands never create state and work with read-only access to it, the log carries no
//! colour codes when it is not a terminal, and bad usage exits 2.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::{Run, World, orch_bin, tempdir};

/// `orch args…` in `cwd` with no config anywhere it looks (no `--config`, no `$ORCH_CONFIG`,
/// no `./orch.yaml`; `/etc/orch/orch.yaml` is not on a test machine).
fn bare(cwd: &std::path::Path, args: &[&str]) -> Run {
    Run::of(
        Command::new(orch_bin())
            .current_dir(cwd)
            .args(args)
            .env_remove("ORCH_CONFIG")
            .env_remove("ORCH_STATE_DIR")
            .env("ORCH_LOG", "warn"),
    )
}

#[test]
fn without_a_config_every_command_but_init_and_demo_exits_2_and_creates_nothing() {
    if std::path::Path::new("/etc/orch/orch.yaml").exists() {
        eprintln!("SKIPPED: this machine has /etc/orch/orch.yaml");
        return;
    }
    let d = tempdir();
    let state = d.path().join("typo-state");
    let state_arg = state.display().to_string();
    for args in [
        vec!["queue"],
        vec!["why", "SHOP-1"],
        vec!["task", "list"],
        vec!["tick"],
        vec!["doctor"],
        vec!["--state-dir", &state_arg, "queue"],
        vec![
            "--state-dir",
            &state_arg,
            "task",
            "add",
            "--repo",
            "x",
            "--title",
            "t",
        ],
    ] {
        let r = bare(d.path(), &args);
        assert_eq!(r.code, 2, "orch {args:?}: {r:?}");
        assert!(
            r.stderr.contains(
                "no config found (looked at --config, $ORCH_CONFIG, ./orch.yaml, \
                 /etc/orch/orch.yaml); run `orch init`"
            ),
            "{r:?}"
        );
        assert!(!state.exists(), "orch {args:?} created the state dir");
    }
    // An empty file (or one of comments only) is no config either.
    std::fs::write(d.path().join("orch.yaml"), "# nothing yet\n\n").unwrap();
    let r = bare(d.path(), &["queue"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("is empty; `orch init`"), "{r:?}");
}

#[test]
fn read_commands_on_a_mistyped_state_dir_create_nothing() {
    let w = World::new();
    let typo = w.dir.path().join("sate");
    let typo_arg = typo.display().to_string();
    for args in [
        vec!["queue"],
        vec!["why", "SHOP-1"],
        vec!["task", "list"],
        vec!["task", "show", "SHOP-1"],
        vec!["events"],
        vec!["outbox"],
        vec!["lease", "list"],
        vec!["report", "overrides"],
    ] {
        let mut all = vec!["--state-dir", typo_arg.as_str()];
        all.extend(&args);
        let r = w.orch(&all);
        assert_eq!(r.code, 2, "orch {all:?}: {r:?}");
        assert!(r.stderr.contains("no database at"), "{r:?}");
        assert!(!typo.exists(), "orch {args:?} created `{}`", typo.display());
    }
    // Doctor says so in a check and goes on to the others.
    let r = w.orch(&["--state-dir", &typo_arg, "doctor"]);
    assert!(
        r.stdout.contains("database") && r.stdout.contains("does not exist yet"),
        "{r:?}"
    );
    assert!(r.stdout.contains("git"), "doctor went on: {r:?}");
    assert!(!typo.exists());
}

#[test]
fn a_file_as_state_dir_or_a_nonsense_listen_address_is_bad_usage() {
    let w = World::new();
    let file = w.dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let r = w.orch(&["--state-dir", &file.display().to_string(), "tick"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("is not a directory"), "{r:?}");
    let r = w.orch(&["serve", "--listen", "nonsense"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("nonsense"), "{r:?}");
}

/// Run the binary as `nobody` (uid 65534): root reads everything, so only another user shows
/// what read-only access to the state allows.
fn as_nobody(w: &World, args: &[&str]) -> Option<Run> {
    if !nix::unistd::getuid().is_root() || crate::support::which("setpriv").is_none() {
        eprintln!("SKIPPED: needs root and setpriv to run as another user");
        return None;
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(orch_bin())
        .arg("--config")
        .arg(&w.config)
        .args(args)
        .env_remove("ORCH_CONFIG")
        .env("ORCH_LOG", "warn");
    Some(Run::of(&mut c))
}

#[test]
fn an_operator_with_read_only_access_runs_the_read_commands() {
    let w = World::new();
    let wi = w.add("Read me", &[]);
    // Readable by all, writable by nobody but root.
    let mut dirs = vec![w.dir.path().to_path_buf()];
    for p in [w.state_dir(), w.state_dir().join("repos")] {
        dirs.push(p);
    }
    for d in &dirs {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for e in std::fs::read_dir(w.state_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    std::fs::set_permissions(&w.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    for args in [
        vec!["queue"],
        vec!["why", wi.as_str()],
        vec!["task", "show", wi.as_str()],
        vec!["task", "list"],
        vec!["events"],
    ] {
        let Some(r) = as_nobody(&w, &args) else {
            return;
        };
        assert_eq!(r.code, 0, "orch {args:?} as nobody: {r:?}");
        assert!(!r.stdout.is_empty(), "{r:?}");
    }
    let r = as_nobody(&w, &["doctor"]).unwrap();
    assert!(
        r.stdout.contains("fail") && r.stdout.contains("state_dir"),
        "doctor reports the read-only state dir: {r:?}"
    );
    assert!(
        r.stdout.contains("database") && r.stdout.contains("schema version"),
        "{r:?}"
    );
    // A write is refused by the file system, not half done.
    let r = as_nobody(&w, &["pause", &wi, "--reason", "x"]).unwrap();
    assert_ne!(r.code, 0, "{r:?}");
    // An unreadable config says so instead of suggesting `orch init`.
    std::fs::set_permissions(&w.config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = as_nobody(&w, &["queue"]).unwrap();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("permission denied"), "{r:?}");
    assert!(!r.stderr.contains("orch init"), "{r:?}");
}

#[test]
fn log_lines_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let w = World::new();
    w.add("Log something", &[]);
    let r = w.orch_with(&["tick"], &[("ORCH_LOG", "debug")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.is_empty(), "something was logged: {r:?}");
    assert!(
        !r.stderr.contains('\u{1b}'),
        "ANSI codes in the log: {:?}",
        r.stderr
    );
}
