//! Use-cases shared by commands: each gathers facts, asks `domain` to decide, and applies the
//! decision through `db` and `ext`. Commands call one use-case; use-cases never print.

pub mod advance;
pub mod agent;
pub mod apply;
pub mod attempt;
pub mod claim;
pub mod confine;
pub mod demo;
pub mod doctor;
pub mod fsck;
pub mod gather;
pub mod ingest;
pub mod job;
pub mod launch;
pub mod lease;
pub mod logs;
pub mod notify;
pub mod outbox;
pub mod queue;
pub mod release;
pub mod retry;
pub mod runner;
pub mod show;
pub mod task;
pub mod tick;
pub mod why;
pub mod worktree;
