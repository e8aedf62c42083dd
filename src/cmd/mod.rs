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
use crate::ops::launch::Next;
use crate::ops::task::Gesture;
use crate::output;

#[derive(Serialize)]
struct GestureOut<'a> {
    schema_version: u32,
    work_item: &'a str,
    message: &'a str,
    exit_code: u8,
    advance: Option<advance::ReportOut<'a>>,
    next: Option<&'a Next>,
}

/// Print a human gesture's result (approve, confirm-deploy, cancel, pause, resume), with what
/// the launch after it did (`next`, when the gesture ran one).
pub(crate) fn print_gesture(json: bool, g: &Gesture, next: Option<&Next>) -> Code {
    if json {
        output::json(&GestureOut {
            schema_version: 1,
            work_item: &g.work_item,
            message: &g.message,
            exit_code: g.code as u8,
            advance: g.advance.as_ref().map(advance::report_out),
            next,
        });
    } else {
        output::line(&g.message);
        if let Some(n) = next {
            output::line(&n.line());
        }
    }
    g.code
}

/// What a mutation without a richer result answers with `--json`: what it acted on (one key
/// named for it: `repo`, `work_item`, `merge_repo`), whether it changed anything, and the line
/// an operator reads.
pub(crate) fn print_change(
    json: bool,
    subject: (&str, &str),
    changed: bool,
    message: &str,
) -> Code {
    if json {
        let mut doc = serde_json::Map::new();
        doc.insert("schema_version".into(), 1.into());
        doc.insert(subject.0.into(), subject.1.into());
        doc.insert("changed".into(), changed.into());
        doc.insert("message".into(), message.into());
        output::json(&doc);
    } else {
        output::line(message);
    }
    Code::Ok
}
