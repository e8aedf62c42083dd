//! What every check of `orch doctor` returns: a `Check` (a stable name, `ok`/`warn`/`fail`, and
//! a one-line detail that never holds a secret) and the `Report` of all of them.

use serde::Serialize;

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
    pub(super) fn new(name: impl Into<String>, status: Status, detail: impl Into<String>) -> Check {
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
