//! `orch init [--dir DIR]`: write the commented starter config (never over an existing one) and
//! create the state directory and database it names.

use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::Global;
use crate::config;
use crate::error::{Code, usage};
use crate::output;

pub fn run(g: &Global, dir: Option<&Path>) -> Result<Code> {
    let dir = dir.unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating `{}`", dir.display()))?;
    let path = dir.join("orch.yaml");
    if path.exists() {
        return Err(usage(format!(
            "`{}` already exists; edit it or remove it first",
            path.display()
        )));
    }
    // Keep a fresh starter self-contained: its state lives next to it unless told otherwise.
    let text = config::STARTER
        .replace("state_dir: /var/lib/orch\n", "state_dir: state\n")
        .replace(
            "repos_dir: /var/lib/orch/repos\n",
            "repos_dir: state/repos\n",
        );
    std::fs::write(&path, text).with_context(|| format!("writing `{}`", path.display()))?;
    let cfg = config::load(&path, g.state_dir.clone())?;
    let ctx = crate::ctx::Ctx::with_config(cfg, g.json)?;
    let msg = format!(
        "wrote `{}`; state in `{}`",
        path.display(),
        ctx.config.state_dir.display()
    );
    if g.json {
        output::json(&serde_json::json!({
            "schema_version": 1,
            "config": path.display().to_string(),
            "state_dir": ctx.config.state_dir.display().to_string(),
            "message": msg,
        }));
    } else {
        output::line(&msg);
    }
    Ok(Code::Ok)
}
