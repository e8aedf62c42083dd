//! `orch doctor`: run the checks of `ops::doctor` and print one line per check (`ok   config  …`),
//! or `{schema_version, checks}` with `--json`. Exits 1 when any check failed, 0 otherwise
//! (warnings included).

use anyhow::Result;

use crate::cli::Global;
use crate::error::Code;
use crate::ops::doctor;
use crate::output;

/// Doctor reads: it opens the database read-only and reports one it cannot open as a failed
/// check instead of stopping there.
pub fn run(g: &Global, agent: bool) -> Result<Code> {
    let config = crate::ctx::load_config(g)?;
    let db = crate::db::Db::open_read_only(&config.db_path());
    let mut rep = doctor::doctor(&config, &db);
    if agent {
        rep.checks.push(doctor::agent_probe(&config));
    }
    if g.json {
        output::json(&rep);
    } else {
        let width = rep.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &rep.checks {
            output::line(&format!(
                "{:<4} {:<width$}  {}",
                c.status.as_str(),
                c.name,
                c.detail
            ));
        }
    }
    Ok(if rep.failed() {
        Code::Runtime
    } else {
        Code::Ok
    })
}
