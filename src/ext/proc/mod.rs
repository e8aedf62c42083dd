//! Running external programs: the one place in `orch` that spawns a process, always from an argv
//! (never a shell string).
//!
//! Three ways in:
//! - [`Cmd`] (`cmd.rs`) runs a short command to completion with stdout/stderr captured and
//!   optional bytes fed to stdin, and turns a failure into an error that names the command line
//!   and carries the tail of what the program said (the git layer lives on it).
//! - [`run_supervised`] (`supervised.rs`, with its helper threads in `pipes.rs`) runs a
//!   long-lived child (an agent, a test or staging suite, a CI command) in its own process group
//!   under a wall-clock timeout, an optional inactivity timeout and an optional end marker,
//!   streams its output to a log file while keeping bounded tails in memory, and always kills the
//!   whole group before it returns, so no grandchild outlives the run (design §4.4, §6).
//! - [`spawn_detached`] (`detached.rs`) starts a process in a session of its own and does not
//!   wait for it (the tick launching a supervisor).
//!
//! Deliberately not here: any knowledge of what is being run (git's environment such as
//! `GIT_TERMINAL_PROMPT=0` is set by the git layer; the scrubbed child environment is built by
//! `ext/env.rs`; what a run's ending means is decided by its caller), and recording anything in
//! the database (the caller gets the group id and start time through `on_start`).
//! A child never inherits our stdin: with no bytes given it gets `/dev/null`, so a program that
//! wants to prompt fails instead of hanging.
//!
//! The only `unsafe` code of `src/` is here: one block in `pipes.rs` (`poll`) and one in
//! `detached.rs` (`setsid` between fork and exec), each with its `SAFETY:` comment.

mod cmd;
mod detached;
mod pipes;
pub mod signals;
mod supervised;

pub use cmd::{Cmd, Output, TAIL_LINES, tail};
pub use detached::spawn_detached;
pub use pipes::{EndMarker, MARKER_LINE_CAP, TAIL_KEEP_BYTES, TAIL_KEEP_LINES};
pub use supervised::{
    DEFAULT_GRACE, DEFAULT_LINGER_GRACE, Ending, RunOutcome, Spec, Started, run_supervised,
};

#[cfg(test)]
mod tests;
