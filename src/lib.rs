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
use crate::ctx::Ctx;
use crate::error::Code;

fn init_logging(global: &cli::Global) {
    use tracing_subscriber::EnvFilter;
    let default = match (global.quiet, global.verbose) {
        (true, _) => "error",
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
        .with_target(false)
        .try_init();
}

/// The whole program: returns the process exit code.
pub fn run<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => Code::Usage as u8,
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_logging(&cli.global);
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
            ExitCode::from(code as u8)
        }
    }
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
    let mut ctx = Ctx::open(g)?;
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
        Command::Tick { plan } => cmd::tick::run(&mut ctx, plan),
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
        Command::Doctor => cmd::doctor::run(&mut ctx),
        Command::Fsck => cmd::fsck::run(&mut ctx),
        Command::Debug(d) => cmd::debug::run(&ctx, d),
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
