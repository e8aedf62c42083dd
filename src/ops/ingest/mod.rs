//! Webhook ingest (design §8): one delivery from the tracker (Plane) or the forge (Gitea) is
//! size-checked and signature-checked on its raw bytes, deduplicated against earlier *accepted*
//! deliveries of the same source, parsed, routed to one use-case (task add, approve,
//! confirm-deploy, cancel, advance, merge-lease release), and stored in the inbox with its
//! outcome. `orch ingest` and `orch serve` both call [`ingest`]; `orch ingest --replay` calls
//! [`replay`].
//!
//! The decisions (signature, delivery id, payload validation, which gesture) are
//! `domain::webhook`'s; this module gathers the config, environment, tasks and git heads they
//! need and applies them. It never prints, and it never fails on a bad delivery: a bad delivery
//! is an inbox row with outcome `rejected` and an HTTP status. It does not guard against two
//! concurrent deliveries of the same id acting twice; the use-cases it calls are idempotent
//! under their stage compare-and-swap, so the second one finds the work done and is ignored.
//!
//! Files: `inbox.rs` one delivery from its bytes to its inbox row (and the inbox list),
//! `routed.rs` the routing result both sources build, `plane.rs` and `gitea.rs` their routes.

mod gitea;
mod inbox;
mod plane;
mod routed;

pub use crate::domain::webhook::{Outcome, Source};
pub use inbox::{Ingested, events, ingest, replay};
