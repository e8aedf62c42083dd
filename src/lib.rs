//! orch: an operator-first runner of an AI-agent software-development pipeline.
//!
//! `run` parses the command line, sets up logging, loads the config, builds the `Ctx`,
//! dispatches to one `cmd::*` adapter, prints the error chain and maps it to the exit-code
//! contract of design §12. Nothing below it calls `std::process::exit`.

pub mod cli;
pub mod cmd;
pub mod config;
pub mod ctx;
pub mod db;
pub mod domain;
pub mod error;
pub mod ext;
pub mod ops;
pub mod output;
pub mod serve;

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::cli::{LeaseCmd, TaskCmd};
use crate::ctx::{Access, Ctx};
use crate::error::Code;

/// `service`: the command is a long-running service (`orch serve`), whose journal is its request
/// log: one `info` line per request is shown by default.
fn init_logging(global: &cli::Global, service: bool) {
    use tracing_subscriber::EnvFilter;
    let default = match (global.quiet, global.verbose) {
        (true, _) => "error",
        (false, 0) if service => "info",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, _) => "debug",
    };
    let filter = EnvFilter::try_from_env("ORCH_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    // The HTTP library's trace lines hold full request paths, and a chat token is one.
    let filter = ["ureq=warn", "ureq_proto=warn"]
        .iter()
        .fold(filter, |f, d| match d.parse() {
            Ok(d) => f.add_directive(d),
            Err(_) => f,
        });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(output::LogWriter)
        .with_ansi(colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_target(false)
        .try_init();
}

/// Colour the log only for a person at a terminal: a log file or the journal gets plain text
/// (so `grep "WARN alert:"` finds its lines), and a set, non-empty `NO_COLOR` turns it off
/// (no-color.org).
fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// clap's usage error as one line: its paragraph up to the usage block, so the argument it
/// names (`<WORK_ITEM>`) stays in the message.
fn usage_message(rendered: &str) -> String {
    let para: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .collect();
    let text = para.join(" ");
    text.strip_prefix("error: ").unwrap_or(&text).to_string()
}

/// The whole program: returns the process exit code.
pub fn run<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => Code::Usage as u8,
            };
            let _ = e.print();
            // A script that asked for JSON gets its error as JSON too, even a usage error.
            if code != 0 && args.iter().skip(1).any(|a| a == "--json") {
                let rendered = e.render().to_string();
                output::json_error(code, &usage_message(&rendered));
            }
            return ExitCode::from(code);
        }
    };
    let json = cli.global.json;
    init_logging(&cli.global, matches!(cli.command, Command::Serve { .. }));
    // No process of orch lends its environment or memory to a same-user process (an agent).
    if let Err(e) = ext::sys::undumpable() {
        tracing::warn!("{e:#}");
    }
    // An interrupt while a child runs must stop the child's whole group first.
    if let Err(e) = ext::proc::signals::install() {
        tracing::warn!("{e:#}");
    }
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code as u8),
        Err(err) => {
            let code = error::code_of(&err);
            output::error(&err);
            if json {
                output::json_error(code as u8, &format!("{err:#}"));
            }
            ExitCode::from(code as u8)
        }
    }
}

/// Whether a command may change the state. Read commands never create the state directory or
/// the database, and open it read-only.
fn access(command: &Command) -> Access {
    match command {
        Command::Queue { .. }
        | Command::Why { .. }
        | Command::Task(TaskCmd::List { .. } | TaskCmd::Show { .. })
        | Command::Events { .. }
        | Command::Outbox { .. }
        | Command::Lease(LeaseCmd::List)
        | Command::Report(_)
        | Command::Fsck
        | Command::Logs { .. }
        | Command::Doctor { .. } => Access::Read,
        _ => Access::Write,
    }
}

/// Who is acting: `--by`, else the person behind `sudo`, else the login name, else the name of
/// the uid. Validated like a name, since it is stored and shown.
fn person(g: &cli::Global) -> Result<String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let name =
        g.by.clone()
            .or_else(|| env("SUDO_USER"))
            .or_else(|| env("USER"))
            .or_else(ext::sys::uid_name)
            .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()));
    domain::ids::check_person(&name).map_err(error::usage)?;
    Ok(name)
}

fn dispatch(cli: Cli) -> Result<Code> {
    let g = &cli.global;
    if let Some(gesture) = cli.command.human_gesture()
        && domain::sandbox::sandboxed(std::env::var("ORCH_SANDBOX").ok().as_deref())
    {
        return Err(error::usage(format!(
            "`orch {gesture}` is a human gesture and this process runs inside an orch job \
             (ORCH_SANDBOX is set): an agent or a suite may not take it; an operator runs it \
             from a shell of their own"
        )));
    }
    if let Command::Init { dir } = &cli.command {
        return cmd::init::run(g, dir.as_deref());
    }
    if let Command::Demo { dir, keep } = &cli.command {
        return cmd::demo::run(g, dir.as_deref(), *keep);
    }
    if let Command::Doctor { agent } = &cli.command {
        return cmd::doctor::run(g, *agent);
    }
    if let Command::Completions { shell } = &cli.command {
        return cmd::completions::completions(*shell);
    }
    if let Command::Man = &cli.command {
        return cmd::completions::man();
    }
    if let Command::Debug(d) = cli.command {
        return cmd::debug::run(g.json, d);
    }
    let mut ctx = Ctx::open(g, access(&cli.command))?;
    if access(&cli.command) == Access::Write {
        ctx.person = Some(person(g)?);
    }
    ctx.relay_alerts = matches!(cli.command, Command::Job(_));
    let deliver = cmd::outbox::delivers_after(&cli.command);
    let code = match cli.command {
        Command::Init { .. } => Ok(Code::Ok),
        Command::Task(t) => cmd::task::run(&mut ctx, t),
        Command::Approve { work_item } => cmd::approve::run(&mut ctx, &work_item),
        Command::ConfirmDeploy { work_item } => cmd::confirm_deploy::run(&mut ctx, &work_item),
        Command::Cancel { work_item, reason } => {
            cmd::cancel::run(&mut ctx, &work_item, reason.as_deref())
        }
        Command::Advance(a) => cmd::advance::run(&mut ctx, a),
        Command::Pause {
            work_item,
            reason,
            before,
        } => cmd::pause::run(&mut ctx, &work_item, &reason, before.as_deref()),
        Command::Resume { work_item } => cmd::resume::run(&mut ctx, &work_item),
        Command::Freeze { repo, reason } => cmd::freeze::run(&mut ctx, &repo, &reason),
        Command::Unfreeze { repo } => cmd::unfreeze::run(&mut ctx, &repo),
        Command::Queue { repo } => cmd::queue::run(&mut ctx, repo.as_deref()),
        Command::Why { work_item } => cmd::why::run(&mut ctx, &work_item),
        Command::Lease(l) => cmd::lease::run(&mut ctx, l),
        Command::Report(r) => cmd::report::run(&mut ctx, r),
        Command::Tick { plan } => cmd::tick::run(&mut ctx, plan, g.verbose > 0),
        Command::RunTests {
            work_item,
            no_advance,
        } => cmd::run_tests::run(
            &mut ctx,
            crate::domain::runner::Kind::Tests,
            &work_item,
            no_advance,
        ),
        Command::RunStaging {
            work_item,
            no_advance,
        } => cmd::run_tests::run(
            &mut ctx,
            crate::domain::runner::Kind::Staging,
            &work_item,
            no_advance,
        ),
        Command::Job(j) => cmd::job::run(&mut ctx, j),
        Command::Retry { target } => cmd::retry::run(&mut ctx, &target),
        Command::Logs {
            target,
            follow,
            tail,
            agent,
            raw,
        } => cmd::logs::run(&mut ctx, &target, follow, tail, agent, raw),
        Command::Doctor { .. } | Command::Completions { .. } | Command::Man | Command::Debug(_) => {
            unreachable!("handled before the context is built")
        }
        Command::Fsck => cmd::fsck::run(&mut ctx),
        Command::Outbox { failed } => cmd::outbox::run(&mut ctx, failed),
        Command::Ingest(a) => cmd::ingest::run(&mut ctx, a),
        Command::Events { rejected } => cmd::events::run(&mut ctx, rejected),
        Command::Serve { listen } => cmd::serve::run(&mut ctx, &listen),
        Command::Demo { .. } => unreachable!("handled before the context is built"),
    };
    if deliver {
        cmd::outbox::deliver_after(&ctx);
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_coloured_only_at_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
    }

    /// `orch approve --json` without its work item answered `{"message": "the following
    /// required arguments were not provided:"}`: the argument's name was lost.
    #[test]
    fn a_json_usage_error_keeps_the_missing_arguments_name() {
        let e = Cli::try_parse_from(["orch", "approve", "--json"]).unwrap_err();
        let m = usage_message(&e.render().to_string());
        assert_eq!(
            m,
            "the following required arguments were not provided: <WORK_ITEM>"
        );
        let e = Cli::try_parse_from(["orch", "tick", "--bogus"]).unwrap_err();
        let m = usage_message(&e.render().to_string());
        assert!(m.starts_with("unexpected argument '--bogus' found"), "{m}");
        assert!(!m.contains("Usage:"), "{m}");
    }
}
