//! `orch completions bash|zsh|fish` and `orch man`: generated from the clap types, so they
//! always list exactly the commands, flags and fixed values the binary accepts. Both write to
//! stdout directly (they are documents for the shell and `man`, not orch's data), which is why
//! they are not in `output`'s `--json` contract.

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::{Cli, Shell};
use crate::error::Code;

pub fn completions(shell: Shell) -> Result<Code> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, "orch", &mut out);
    crate::output::raw(&out);
    Ok(Code::Ok)
}

pub fn man() -> Result<Code> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .context("rendering the man page")?;
    crate::output::raw(&out);
    Ok(Code::Ok)
}
