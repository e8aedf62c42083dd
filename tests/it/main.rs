//! The integration tests of `orch`, one test binary: each module below was a test binary of its
//! own, and `support` holds what they share (the temp world, the fake HTTP services, waiting,
//! processes). One binary links once instead of fifteen times.

mod support;

mod chain;
mod concurrency;
mod day_audit;
mod day_docs;
mod day_jobs;
mod day_json;
mod day_state;
mod day_tick;
mod doctor;
mod fsck;
mod ingest;
mod ingest_corpus;
mod input;
mod kill_matrix;
mod leases;
mod outbox;
mod queue;
mod real_agent;
mod redaction;
mod release;
mod runners;
mod sandbox;
mod scheduler;
mod serve;
mod smoke;
mod stub_agent;
mod systemd;
mod tidy;
mod walkthrough;
mod write_scope;
