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
//!
//! Files: this one holds `doctor`, which runs the checks in order; `check.rs` the `Status`,
//! `Check` and `Report` every check returns; `host.rs` the checks of the machine (config, directories, `git`, programs on `PATH`,
//! service secrets, the secrets file, the units), `repo.rs` the checks of each repo (remote,
//! main branch, contract programs, ssh, smoke URLs).

use std::path::Path;

use crate::config::Config;
use crate::db::Db;

mod agent;
mod check;
mod host;
mod repo;

pub use agent::agent_probe;
pub use check::{Check, Report, Status};

pub use host::{SECRETS_FILE, UNIT_DIR};

use host::{
    config_check, dir_check, git_check, program_check, resolve_program, sandbox_check,
    secrets_file_check, service_checks, units_check,
};
use repo::repo_checks;

/// Run every check, in the order an operator would fix them. `db` is the database opened
/// read-only, or why it could not be: doctor reports that as a check and goes on.
pub fn doctor(cfg: &Config, db: &anyhow::Result<Db>) -> Report {
    let path_var = std::env::var_os("PATH");
    let path_var = path_var.as_deref();
    let mut checks = vec![
        config_check(cfg.file.as_deref(), cfg.repos.len()),
        dir_check("state_dir", &cfg.state_dir),
        dir_check("repos_dir", &cfg.repos_dir),
        match db.as_ref().map(Db::schema_version) {
            Ok(Ok(v)) => Check::new(
                "database",
                Status::Ok,
                format!("`{}` schema version {v}", cfg.db_path().display()),
            ),
            // Before the first writing command there is no database yet: not a fault.
            Err(_) if !cfg.db_path().exists() => Check::new(
                "database",
                Status::Warn,
                format!(
                    "`{}` does not exist yet; the first writing command (`orch tick`, \
                     `orch task add`) creates it",
                    cfg.db_path().display()
                ),
            ),
            Ok(Err(e)) => Check::new(
                "database",
                Status::Fail,
                format!("`{}`: {e:#}", cfg.db_path().display()),
            ),
            Err(e) => Check::new("database", Status::Fail, format!("{e:#}")),
        },
        git_check(),
        program_check(
            "agent",
            "agent.argv",
            &cfg.agent.argv[0],
            &resolve_program(&cfg.agent.argv[0], path_var),
        ),
        sandbox_check(cfg),
    ];
    let git = crate::ctx::git_for(cfg);
    // git runs in the state directory; before the first writing command creates it, in `/`.
    let cwd = if cfg.state_dir.is_dir() {
        cfg.state_dir.as_path()
    } else {
        Path::new("/")
    };
    for repo in &cfg.repos {
        repo_checks(repo, &git, cwd, cfg.forge.is_some(), path_var, &mut checks);
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
