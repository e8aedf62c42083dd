//! `orch.yaml` plus `ORCH_*` overrides, loaded and validated once per command (design §11).
//! Validation checks types and values and names the key and the file; it deliberately does not
//! check that programs, remotes or services exist (that is `orch doctor`'s job).
//!
//! Files: `types.rs` the schema with its defaults and accessors, `load.rs` finding, parsing and
//! resolving, `validate.rs` the value checks.

mod load;
mod types;
mod validate;

pub use load::{STARTER, load, locate, require};
pub use types::*;

#[cfg(test)]
mod tests;
