//! The doors to the outside world: processes (`proc`, the only spawner), git over per-repo
//! clones (`git`), file locks (`lock`), `/proc` facts and signals (`sys`) and secrets read at
//! the moment of use (`secrets`).

pub mod env;
pub mod failpoint;
pub mod git;
pub mod gitea;
pub mod http;
pub mod lock;
pub mod plane;
pub mod proc;
pub mod secrets;
pub mod sys;
pub mod telegram;
