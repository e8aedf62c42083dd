//! Pure decisions over plain data: the stage table, verdicts, gates, claim eligibility, lease
//! liveness, prompts. No SQL, no processes, no HTTP, no clock reads (`now` is passed in).

pub mod agent;
pub mod claim;
pub mod confine;
pub mod frontmatter;
pub mod fsck;
pub mod gate;
pub mod gitconfig;
pub mod history;
pub mod ids;
pub mod liveness;
pub mod names;
pub mod prompt;
pub mod redact;
pub mod release;
pub mod run;
pub mod runner;
pub mod sandbox;
pub mod stage;
pub mod stream;
pub mod time;
pub mod webhook;
