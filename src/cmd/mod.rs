//! One adapter per subcommand: turn arguments into typed values, call one use-case in `ops`,
//! print the result through `output`, return the exit code. Commands never call each other.

pub mod advance;
pub mod approve;
pub mod cancel;
pub mod completions;
pub mod confirm_deploy;
pub mod debug;
pub mod demo;
pub mod doctor;
pub mod events;
pub mod freeze;
pub mod fsck;
pub mod ingest;
pub mod init;
pub mod job;
pub mod lease;
pub mod logs;
pub mod outbox;
pub mod pause;
pub mod queue;
pub mod report;
pub mod resume;
pub mod retry;
pub mod run_tests;
pub mod serve;
pub mod task;
pub mod tick;
pub mod unfreeze;
pub mod why;

use serde::Serialize;

use crate::error::Code;
use crate::ops::task::Gesture;
use crate::output;

#[derive(Serialize)]
struct GestureOut<'a> {
    schema_version: u32,
    work_item: &'a str,
    message: &'a str,
    exit_code: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    advance: Option<advance::ReportOut<'a>>,
}

/// Print a human gesture's result (approve, confirm-deploy, cancel, pause, resume).
pub(crate) fn print_gesture(json: bool, g: &Gesture) -> Code {
    if json {
        output::json(&GestureOut {
            schema_version: 1,
            work_item: &g.work_item,
            message: &g.message,
            exit_code: g.code as u8,
            advance: g.advance.as_ref().map(advance::report_out),
        });
    } else {
        output::line(&g.message);
    }
    g.code
}

#[derive(Serialize)]
struct Message<'a> {
    schema_version: u32,
    message: &'a str,
}

/// Print a one-line result.
pub(crate) fn print_message(json: bool, message: &str) -> Code {
    if json {
        output::json(&Message {
            schema_version: 1,
            message,
        });
    } else {
        output::line(message);
    }
    Code::Ok
}
