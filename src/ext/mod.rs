//! The doors to the outside world: processes (`proc`, the only spawner), git over per-repo
//! clones (`git`), file locks (`lock`) and `/proc` facts and signals (`sys`).

pub mod env;
pub mod failpoint;
pub mod git;
pub mod gitea;
pub mod http;
pub mod lock;
pub mod plane;
pub mod proc;
pub mod sys;
pub mod telegram;
