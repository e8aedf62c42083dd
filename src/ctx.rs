//! The explicit context every command and use-case receives: the validated config, one SQLite
//! connection, the output mode and the clock read once. Also the two lookups nearly every
//! use-case starts with (a task by reference, the config of its repo), so their error messages
//! are written once.
//!
//! Deliberately not here: anything global. There is no config or connection singleton; a
//! long-lived process (the supervisor, a runner) builds a fresh `Ctx` with `reopen` when it
//! needs a new clock and connection for its final advance.

use std::time::Duration;

use anyhow::Result;

use crate::cli;
use crate::config::{self, Config, RepoCfg};
use crate::db::{self, Db, tasks::TaskRow};
use crate::domain::ids::TaskRef;
use crate::domain::time::Ts;
use crate::error::usage;
use crate::ext::git::Git;

/// Everything a command needs, built once and passed as `&Ctx`.
pub struct Ctx {
    pub config: Config,
    pub db: Db,
    pub json: bool,
    /// The clock, read once per command (refreshed by `tick_clock`).
    pub now: Ts,
    /// Set by long-lived processes (`orch serve`): the transition leases they take expire after
    /// this many seconds unless renewed, so a lease whose release failed is reclaimed although
    /// its owner lives on.
    pub lease_ttl: Option<i64>,
    /// The person behind an operator's command (`--by`, else `SUDO_USER`, `USER`, the uid's
    /// name), recorded beside the `operator` actor in the history (design §3.3).
    pub person: Option<String>,
    /// This process logs where nobody reads (a supervisor's job log): its alerts are also
    /// journaled for the next tick to repeat in the journal.
    pub relay_alerts: bool,
}

/// What a command does to the state: a read command never creates a directory or a database
/// and opens the database read-only (docs/decisions.md, "Read commands").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// The config the global flags name, or exit 2: no config found, an empty or unreadable file,
/// a `--state-dir` that is not a directory.
pub fn load_config(global: &cli::Global) -> Result<Config> {
    let path = config::require(global.config.as_deref())?;
    let config = config::load(&path, global.state_dir.clone())?;
    for (what, dir) in [
        ("state_dir", &config.state_dir),
        ("repos_dir", &config.repos_dir),
    ] {
        if dir.exists() && !dir.is_dir() {
            return Err(usage(format!(
                "{what} `{}` is not a directory; check `--state-dir`, `$ORCH_STATE_DIR` and `{what}` in `{}`",
                dir.display(),
                path.display()
            )));
        }
    }
    Ok(config)
}

impl Ctx {
    /// Build from the global flags: load the config, then for a writing command create the
    /// state dirs and open (creating, migrating) the database; for a reading one open the
    /// existing database read-only.
    pub fn open(global: &cli::Global, access: Access) -> Result<Ctx> {
        let config = load_config(global)?;
        match access {
            Access::Write => Self::with_config(config, global.json),
            Access::Read => Self::read_only(config, global.json),
        }
    }

    /// A context over `db`, its clock read now.
    fn over(config: Config, db: Db, json: bool) -> Ctx {
        Ctx {
            config,
            db,
            json,
            now: now(),
            lease_ttl: None,
            person: None,
            relay_alerts: false,
        }
    }

    /// A context over an existing database opened read-only; nothing on disk is created.
    pub fn read_only(config: Config, json: bool) -> Result<Ctx> {
        let db = Db::open_read_only(&config.db_path())?;
        Ok(Self::over(config, db, json))
    }

    pub fn with_config(config: Config, json: bool) -> Result<Ctx> {
        // Explicit modes whatever the umask (design §9.1): the state is orch's and its group's.
        for dir in [&config.state_dir, &config.repos_dir] {
            crate::ext::sys::private_dir(dir, 0o750)?;
        }
        crate::ext::sys::private_file(&config.db_path(), 0o640)?;
        let db = Db::open(&config.db_path())?;
        Ok(Self::over(config, db, json))
    }

    /// A context with the same config and output mode, its own new database connection and a
    /// fresh clock: for the last step of a long process (a supervisor's advance after an agent
    /// ran for an hour), and for callbacks that run while the caller's connection is borrowed.
    pub fn reopen(&self) -> Result<Ctx> {
        Ok(Ctx {
            config: self.config.clone(),
            db: Db::open(&self.config.db_path())?,
            json: self.json,
            now: now(),
            lease_ttl: self.lease_ttl,
            person: self.person.clone(),
            relay_alerts: self.relay_alerts,
        })
    }

    /// Refresh the clock (long commands).
    pub fn tick_clock(&mut self) {
        self.now = now();
    }

    /// Find a task or fail with exit 2 and the fix.
    pub fn task(&self, r: &TaskRef) -> Result<TaskRow> {
        db::tasks::find(self.db.conn(), r)?.ok_or_else(|| {
            let shown = match r {
                TaskRef::WorkItem(w) => w.to_string(),
                TaskRef::Tombstone(t) => t.clone(),
            };
            usage(format!(
                "work item `{shown}` not found; `orch task list --all` shows known tasks"
            ))
        })
    }

    /// The config of the repo a task belongs to, or exit 2 when the repo left the config.
    pub fn repo_of(&self, task: &TaskRow) -> Result<&RepoCfg> {
        self.config.repo(&task.repo).ok_or_else(|| {
            usage(format!(
                "task `{}` belongs to repo `{}`, which is not in the config",
                task.work_item, task.repo
            ))
        })
    }

    /// Git over the configured clones, with the config's bounds (`git.timeout_s`,
    /// `git.lock_timeout_s`).
    pub fn git(&self) -> Git {
        git_for(&self.config)
    }

    /// A write transaction that lends the context immutably alongside it.
    pub fn write<T>(&self, f: impl FnOnce(&Ctx, &rusqlite::Connection) -> Result<T>) -> Result<T> {
        self.db.write(|tx| f(self, tx))
    }
}

/// Git over the clones of `config`, with its bounds.
pub fn git_for(config: &Config) -> Git {
    let g = &config.git;
    Git::new(&config.repos_dir)
        .with_limits(
            Duration::from_secs(g.timeout_s),
            Duration::from_secs(g.lock_timeout_s),
        )
        .with_config(g.global_config.clone(), g.credential_helpers.clone())
}

/// The wall clock in seconds since the epoch (0 if the clock is before 1970).
pub fn now() -> Ts {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
