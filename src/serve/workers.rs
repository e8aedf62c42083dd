//! The worker pool of `orch serve`: complete requests go through a bounded queue to a fixed
//! number of threads, each with its own `Ctx` (a SQLite connection is not `Sync`). A full queue
//! is a 503 at once; a panic while handling one request answers 500 and rebuilds that worker's
//! context, so it never reaches another request.
//!
//! It does not touch the network (the exchanges of `connection` do, and await the answer without
//! blocking) and does not decide what a route answers (that is `routes`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::mpsc::Receiver;

use anyhow::Result;

use crate::config::Config;
use crate::ctx::Ctx;

use super::reply::{Reply, internal_error};
use super::routes::{self, Route};
use super::shared::{Job, Msg};

/// How long a transition lease taken by a worker lasts unrenewed: `orch serve` lives on, so a
/// lease whose release failed must expire rather than stay held as long as the process runs.
pub(super) const LEASE_TTL_S: i64 = 600;

/// A worker's own context (a SQLite connection is not `Sync`), taking expiring leases.
pub(super) fn worker_ctx(config: &Config) -> Result<Ctx> {
    let mut ctx = Ctx::with_config(config.clone(), false)?;
    ctx.lease_ttl = Some(LEASE_TTL_S);
    Ok(ctx)
}

/// One thread of the pool and the context it owns.
pub(super) struct Worker {
    config: Config,
    /// `None` after a failed rebuild; the next request tries again.
    ctx: Option<Ctx>,
}

impl Worker {
    /// A worker over a context opened in advance (so a database problem fails the start).
    pub(super) fn new(config: Config, ctx: Ctx) -> Worker {
        Worker {
            config,
            ctx: Some(ctx),
        }
    }

    /// Take requests from `queue` until told to stop or the queue is gone.
    pub(super) fn work(&mut self, queue: &Mutex<Receiver<Msg>>) {
        loop {
            let msg = match queue.lock() {
                Ok(q) => q.recv(),
                Err(_) => return,
            };
            let job = match msg {
                Ok(Msg::Job(job)) => job,
                Ok(Msg::Stop) | Err(_) => return,
            };
            let reply = match catch_unwind(AssertUnwindSafe(|| self.handle(&job))) {
                Ok(r) => r,
                Err(_) => {
                    tracing::error!(route = ?job.route, "a request handler panicked; rebuilding this worker's database connection");
                    self.ctx = None;
                    internal_error()
                }
            };
            // The connection may be gone; its answer then goes nowhere.
            let _ = job.reply.send(reply);
        }
    }

    fn handle(&mut self, job: &Job) -> Reply {
        match job.route {
            Route::Health => routes::health(),
            route => self.with_ctx(|ctx| routes::answer(ctx, route, &job.headers, &job.body)),
        }
    }

    /// Run `f` with this worker's context, its clock set to now; build the context again when
    /// an earlier failure dropped it.
    fn with_ctx(&mut self, f: impl FnOnce(&Ctx) -> Result<Reply>) -> Reply {
        if self.ctx.is_none() {
            match worker_ctx(&self.config) {
                Ok(c) => self.ctx = Some(c),
                Err(e) => {
                    tracing::error!("cannot open the database: {e:#}");
                    return Reply::busy("database unavailable; see the orch serve log");
                }
            }
        }
        let Some(ctx) = self.ctx.as_mut() else {
            return Reply::busy("database unavailable; see the orch serve log");
        };
        ctx.tick_clock();
        match f(ctx) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("request failed: {e:#}");
                internal_error()
            }
        }
    }
}
