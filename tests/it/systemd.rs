//! The units in `systemd/` and `scripts/install.sh`: the settings the runbook relies on (a
//! oneshot tick every 10 s as the `orch` user, a read-only system but the state directory),
//! `systemd-analyze verify` where it exists, and an install into a staging root.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{tempdir, which};

/// One unit file: section → key → every value the key was given, in order.
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

/// Just enough of systemd's INI dialect for these files: `[Section]`, `Key=value`, `#`/`;`
/// comments, repeated keys. No line continuations (the units use none; a `\` at a line end is
/// rejected so a future one is noticed here).
fn parse_unit(text: &str) -> Unit {
    let mut unit = Unit::new();
    let mut section: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(
            !line.ends_with('\\'),
            "line {}: continuation lines are not supported by this test's parser",
            i + 1
        );
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            unit.entry(name.to_string()).or_default();
            section = Some(name.to_string());
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: not `Key=value`: {raw}", i + 1));
        let section = section
            .as_ref()
            .unwrap_or_else(|| panic!("line {}: `{key}` outside any section", i + 1));
        unit.get_mut(section)
            .unwrap()
            .entry(key.trim().to_string())
            .or_default()
            .push(value.trim().to_string());
    }
    unit
}

fn units_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd")
}

fn load(name: &str) -> Unit {
    let path = units_dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    parse_unit(&text)
}

/// The single value of `section.key`.
fn one<'a>(unit: &'a Unit, section: &str, key: &str) -> &'a str {
    let values = unit
        .get(section)
        .and_then(|s| s.get(key))
        .unwrap_or_else(|| panic!("[{section}] {key} missing"));
    assert_eq!(values.len(), 1, "[{section}] {key} given {values:?}");
    &values[0]
}

#[test]
fn the_parser_reads_sections_repeats_and_comments() {
    let u = parse_unit("# c\n[A]\nX=1\n; c\nX = 2\n[B]\nY=a=b\n");
    assert_eq!(u["A"]["X"], ["1", "2"]);
    assert_eq!(u["B"]["Y"], ["a=b"]);
    assert_eq!(u.len(), 2);
}

/// The hardening both services share (SPEC §9, docs/runbook.md).
fn assert_hardened(unit: &Unit, name: &str) {
    for (key, want) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("User", "orch"),
        ("Group", "orch"),
    ] {
        assert_eq!(one(unit, "Service", key), want, "{name}: {key}");
    }
    let rw = one(unit, "Service", "ReadWritePaths");
    assert!(
        rw.split_whitespace().any(|p| p == "/var/lib/orch"),
        "{name}: ReadWritePaths {rw:?} lacks /var/lib/orch"
    );
}

#[test]
fn tick_service_is_a_hardened_oneshot_running_orch_tick() {
    let u = load("orch-tick.service");
    assert_eq!(one(&u, "Service", "Type"), "oneshot");
    let exec = one(&u, "Service", "ExecStart");
    assert!(exec.ends_with("orch tick"), "ExecStart={exec}");
    assert!(
        exec.starts_with('/'),
        "ExecStart needs an absolute path: {exec}"
    );
    assert_hardened(&u, "orch-tick.service");
    // Supervisors launched by a tick must outlive it (see the comment in the unit).
    assert_eq!(one(&u, "Service", "KillMode"), "process");
    let env = &u["Service"]["Environment"];
    assert!(
        env.iter().any(|e| e == "ORCH_CONFIG=/etc/orch/orch.yaml"),
        "{env:?}"
    );
    assert_eq!(
        one(&u, "Service", "EnvironmentFile"),
        "-/etc/orch/secrets.env"
    );
    assert_loads_credentials(&u);
}

/// Every secret of the starter config is loaded as a systemd credential (design §9.1).
fn assert_loads_credentials(u: &Unit) {
    let creds = &u["Service"]["LoadCredential"];
    for name in [
        "ORCH_PLANE_TOKEN",
        "ORCH_GITEA_TOKEN",
        "ORCH_TELEGRAM_TOKEN",
        "ORCH_PLANE_WEBHOOK_SECRET",
        "ORCH_GITEA_WEBHOOK_SECRET",
    ] {
        let want = format!("{name}:/etc/orch/credentials/{name}");
        assert!(creds.contains(&want), "{want} in {creds:?}");
    }
}

#[test]
fn tick_timer_fires_every_ten_seconds() {
    let u = load("orch-tick.timer");
    for (key, want) in [
        ("OnBootSec", "10s"),
        ("OnUnitActiveSec", "10s"),
        ("AccuracySec", "1s"),
        ("Unit", "orch-tick.service"),
    ] {
        assert_eq!(one(&u, "Timer", key), want, "{key}");
    }
    assert_eq!(one(&u, "Install", "WantedBy"), "timers.target");
}

/// Gestures under systemd wake the scheduler through this unit instead of starting jobs from an
/// operator's shell; the tick watches the same file (`ops::launch::wake`).
#[test]
fn the_wake_path_starts_a_tick_when_a_gesture_writes_the_wake_file() {
    let u = load("orch-wake.path");
    assert_eq!(one(&u, "Path", "PathChanged"), "/var/lib/orch/wake");
    assert_eq!(one(&u, "Path", "Unit"), "orch-tick.service");
    assert_eq!(one(&u, "Install", "WantedBy"), "paths.target");
    let tick = load("orch-tick.service");
    assert_eq!(
        one(&tick, "Service", "StateDirectory"),
        "orch orch/tmp",
        "the watched file lies in the tick's state directory"
    );
}

#[test]
fn serve_service_runs_the_shim_hardened() {
    let u = load("orch-serve.service");
    let exec = one(&u, "Service", "ExecStart");
    assert!(exec.contains("orch serve"), "ExecStart={exec}");
    assert!(
        exec.contains("127.0.0.1"),
        "the shim listens on loopback: {exec}"
    );
    assert_hardened(&u, "orch-serve.service");
    assert_eq!(one(&u, "Service", "Restart"), "on-failure");
    assert_loads_credentials(&u);
}

/// Messages of `systemd-analyze` that mean it cannot work in this environment (no systemd as
/// PID 1, no bus), as opposed to something wrong in a unit.
const NO_SYSTEMD: &[&str] = &[
    "System has not been booted with systemd",
    "Failed to connect to bus",
    "Failed to initialize manager",
    "Failed to set up the manager",
    "Operation not permitted",
];

/// Warnings that `systemd-analyze verify` prints while still exiting 0: a misspelt key or a bad
/// value is ignored by systemd, which would quietly drop a hardening setting.
const IGNORED_SETTING: &[&str] = &[
    "Unknown key",
    "Unknown section",
    "Failed to parse",
    "ignoring",
];

#[test]
fn units_pass_systemd_analyze_verify() {
    let Some(analyze) = which("systemd-analyze") else {
        eprintln!("systemd-analyze not on PATH; skipping the verify step");
        return;
    };
    let tmp = tempdir();
    let bin = env!("CARGO_BIN_EXE_orch");
    let mut files = Vec::new();
    for name in [
        "orch-tick.service",
        "orch-tick.timer",
        "orch-wake.path",
        "orch-serve.service",
    ] {
        let text = std::fs::read_to_string(units_dir().join(name)).unwrap();
        // The test host has no `orch` user and no /usr/local/bin/orch: point at the binary just
        // built and run as whoever runs the test.
        let text: String = text
            .lines()
            .filter(|l| !l.starts_with("User=") && !l.starts_with("Group="))
            .map(|l| match l.strip_prefix("ExecStart=/usr/local/bin/orch") {
                Some(rest) => format!("ExecStart={bin}{rest}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        files.push(path);
    }
    let out = Command::new(&analyze)
        .arg("verify")
        .args(&files)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .expect("systemd-analyze runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let about_our_units: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("orch-tick.") || l.contains("orch-serve."))
        .collect();
    if !out.status.success() {
        if about_our_units.is_empty() && NO_SYSTEMD.iter().any(|m| said.contains(m)) {
            eprintln!("systemd-analyze cannot run here (no systemd); not asserting:\n{said}");
            return;
        }
        panic!("systemd-analyze verify failed ({}):\n{said}", out.status);
    }
    let ignored: Vec<&&str> = about_our_units
        .iter()
        .filter(|l| IGNORED_SETTING.iter().any(|m| l.contains(m)))
        .collect();
    assert!(
        ignored.is_empty(),
        "systemd ignores settings of the units:\n{said}"
    );
}

fn install(prefix: &Path, extra: &[&str]) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install.sh");
    Command::new("bash")
        .arg(script)
        .arg("--prefix")
        .arg(prefix)
        .arg("--bin")
        .arg(env!("CARGO_BIN_EXE_orch"))
        .args(extra)
        .env_remove("ORCH_CONFIG")
        .env_remove("ORCH_STATE_DIR")
        .env_remove("ORCH_REPOS_DIR")
        .output()
        .expect("install.sh runs")
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn show(out: &std::process::Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn install_into_a_staging_root_and_again_without_overwriting_the_config() {
    let tmp = tempdir();
    let root = tmp.path().join("root");

    // A dry run changes nothing.
    let out = install(&root, &["--dry-run"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(!root.exists(), "--dry-run created {}", root.display());

    let out = install(&root, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "systemctl daemon-reload && systemctl enable --now orch-tick.timer orch-wake.path"
        ),
        "{stdout}"
    );

    let bin = root.join("usr/local/bin/orch");
    assert_eq!(mode(&bin), 0o755);
    assert_eq!(
        std::fs::read(&bin).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_orch")).unwrap()
    );
    // The man page and the completions, generated by the installed binary.
    let share = root.join("usr/local/share");
    let man = std::fs::read_to_string(share.join("man/man1/orch.1")).unwrap();
    assert!(man.starts_with(".ie") || man.contains(".TH orch"), "{man}");
    assert!(man.contains("retry"), "the man page lists the commands");
    for (file, needle) in [
        ("bash-completion/completions/orch", "_orch()"),
        ("zsh/site-functions/_orch", "#compdef orch"),
        ("fish/vendor_completions.d/orch.fish", "complete -c orch"),
    ] {
        let text = std::fs::read_to_string(share.join(file)).unwrap();
        assert!(text.contains(needle), "{file}: {text}");
        assert!(
            text.contains("deploy-staging"),
            "{file} completes stage names"
        );
        assert_eq!(mode(&share.join(file)), 0o644, "{file}");
    }
    for unit in [
        "orch-tick.service",
        "orch-tick.timer",
        "orch-wake.path",
        "orch-serve.service",
    ] {
        let p = root.join("etc/systemd/system").join(unit);
        assert_eq!(mode(&p), 0o644, "{unit}");
        assert_eq!(
            std::fs::read(&p).unwrap(),
            std::fs::read(units_dir().join(unit)).unwrap(),
            "{unit}"
        );
    }
    let config = root.join("etc/orch/orch.yaml");
    let secrets = root.join("etc/orch/secrets.env");
    assert_eq!(mode(&secrets), 0o600);
    let cred = root.join("etc/orch/credentials/ORCH_PLANE_TOKEN");
    assert_eq!(mode(&cred), 0o600);
    assert_eq!(mode(&root.join("etc/orch/credentials")), 0o700);
    assert_eq!(std::fs::read(&cred).unwrap(), b"");
    assert_eq!(mode(&root.join("var/lib/orch")), 0o750);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("\nstate_dir: /var/lib/orch\n"), "{text}");
    assert!(
        text.contains("\nrepos_dir: /var/lib/orch/repos\n"),
        "{text}"
    );

    // The installed config loads (the state dir is redirected: /var/lib/orch is not ours).
    let out = Command::new(&bin)
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(tmp.path().join("state"))
        .args(["doctor", "--json"])
        .env_remove("ORCH_CONFIG")
        .env("ORCH_LOG", "warn")
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}\n{}", show(&out)));
    let first = &doc["checks"][0];
    assert_eq!(first["name"], "config");
    assert_eq!(first["status"], "ok", "{first}");

    // An operator edits both files; a second install (an upgrade) keeps them.
    let edited = format!("{text}\n# edited by the operator\n");
    std::fs::write(&config, &edited).unwrap();
    std::fs::write(&secrets, "ORCH_PLANE_TOKEN=kept\n").unwrap();
    std::fs::write(&cred, "kept\n").unwrap();
    let out = install(&root, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("keeping existing"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), edited);
    assert_eq!(
        std::fs::read_to_string(&secrets).unwrap(),
        "ORCH_PLANE_TOKEN=kept\n"
    );
    assert_eq!(mode(&secrets), 0o600);
    assert_eq!(std::fs::read_to_string(&cred).unwrap(), "kept\n");
}

#[test]
fn install_rejects_unknown_arguments() {
    let tmp = tempdir();
    let out = install(&tmp.path().join("root"), &["--bogus"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown argument `--bogus`"),
        "{}",
        show(&out)
    );
    assert!(!tmp.path().join("root").exists());
}
