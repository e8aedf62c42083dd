//! `orch serve`: the minimal webhook shim of design §8. `POST /webhook/plane` and
//! `POST /webhook/gitea` run the same ingest code path as `orch ingest`, in-process; `GET /health`,
//! `GET /queue` (the `orch queue --json` document) and `GET /metrics` read the state.
//!
//! Two sides. The network side is one thread running a single-threaded tokio runtime: it accepts
//! connections and serves each with hyper's HTTP/1.1 server, which reads heads under a deadline
//! and a size limit; an exchange then reads the body under its own deadline and limit, answers
//! what needs no database, and waits (without blocking the thread) for the rest. A fixed pool of
//! [`WORKERS`] threads does the database work, each with its own `Ctx` because a SQLite
//! connection is not `Sync`; they take complete requests from a bounded queue, so a slow or
//! hostile client never holds one, and a full queue is answered 503 at once. Checks run in the
//! order of §8: method and path (405/404), declared size (413, before anything of the body is
//! read and without `100 Continue`), the body itself (413 past the limit, 408 past the
//! deadline), then ingest (401 for a bad signature). A panic while handling one request answers
//! 500 and rebuilds that worker's context; it never reaches another request.
//!
//! An adapter over the use-cases, like `cmd/`: it calls `ops`, `db` and `domain`, and nothing in
//! `ops` names it. This file is the lifecycle: [`run`] (SIGTERM and SIGINT), [`Shim`] (bind, open
//! the workers' contexts, start, stop) and the acceptor. `connection` is one client connection
//! and the checks in order, `head` the pure checks on a request head, `socket` the client socket
//! (write timeout, lingering close), `reply` the answer, `workers` the pool, `shared` the limits
//! and the queue, [`routes`] what each route answers, [`metrics`] the `/metrics` document.
//!
//! Deliberately absent: TLS and public exposure (a reverse proxy's job; the default address is
//! loopback), HTTP/2, any route beyond these five, any decision about a delivery (that is
//! `ops::ingest`).

pub mod metrics;
pub mod routes;

mod connection;
mod head;
mod reply;
mod shared;
mod socket;
mod workers;

pub use shared::{BODY_DEADLINE, BODY_LIMIT, IDLE_TIMEOUT, STOP_GRACE, WORKERS, WRITE_TIMEOUT};

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::{SigSet, Signal};
use tokio::sync::{Semaphore, watch};

use crate::config::Config;

use self::shared::{MAX_CONNECTIONS, Msg, QUEUE_DEPTH, Shared};
use self::workers::Worker;

/// Serve until SIGTERM or SIGINT, then stop accepting, finish the requests in hand and return.
/// `on_listening` is told the bound address (the real port when `listen` asks for port 0).
pub fn run(config: &Config, listen: &str, on_listening: impl FnOnce(SocketAddr)) -> Result<()> {
    // Blocked before any thread exists, so every thread inherits the mask and the signals wait
    // for `sigwait` below instead of running the process-wide actions `lib::run` installed
    // (which would end the process at once). Children get a clean mask from std.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals
        .thread_block()
        .context("blocking SIGTERM and SIGINT")?;
    let shim = Shim::start(config, listen)?;
    on_listening(shim.addr);
    let signal = signals.wait().context("waiting for a signal")?;
    tracing::info!(%signal, "stopping");
    shim.stop();
    Ok(())
}

/// A running server: the network thread, the worker pool and what they share.
pub struct Shim {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    network: JoinHandle<()>,
    workers: Vec<JoinHandle<()>>,
    queue: Arc<Mutex<Receiver<Msg>>>,
}

impl Shim {
    /// Bind `listen`, open one context per worker (so a database problem fails the start, not
    /// the first delivery) and start the network thread and the workers.
    pub fn start(config: &Config, listen: &str) -> Result<Shim> {
        let listener = TcpListener::bind(listen).with_context(|| {
            format!("cannot listen on `{listen}`; pick a free address with --listen")
        })?;
        let addr = listener.local_addr().context("reading the bound address")?;
        listener
            .set_nonblocking(true)
            .context("making the listening socket non-blocking")?;
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "listening on a non-loopback address; put a reverse proxy with TLS in front");
        }
        let mut ctxs = Vec::with_capacity(WORKERS);
        for _ in 0..WORKERS {
            ctxs.push(workers::worker_ctx(config)?);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .context("starting the network runtime of orch serve")?;
        let (jobs, queue) = mpsc::sync_channel(QUEUE_DEPTH);
        let queue = Arc::new(Mutex::new(queue));
        let shared = Arc::new(Shared {
            jobs,
            stopping: AtomicBool::new(false),
        });
        let mut workers = Vec::with_capacity(WORKERS);
        for (i, ctx) in ctxs.into_iter().enumerate() {
            let mut w = Worker::new(config.clone(), ctx);
            let queue = queue.clone();
            workers.push(
                thread::Builder::new()
                    .name(format!("serve-worker-{i}"))
                    .spawn(move || w.work(&queue))
                    .context("starting a serve worker")?,
            );
        }
        let (stop, stopped) = watch::channel(false);
        let sh = shared.clone();
        let network = thread::Builder::new()
            .name("serve-net".into())
            .spawn(move || runtime.block_on(accept(listener, sh, stopped)))
            .context("starting the serve network thread")?;
        Ok(Shim {
            addr,
            shared,
            stop,
            network,
            workers,
            queue,
        })
    }

    /// Stop accepting, let the exchanges in flight finish (at most [`STOP_GRACE`]) while the
    /// workers still answer them, then stop the workers once they are done with their request.
    pub fn stop(self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = self.stop.send(true);
        let _ = self.network.join();
        for _ in &self.workers {
            let _ = self.shared.jobs.send(Msg::Stop);
        }
        for w in self.workers {
            let _ = w.join();
        }
        // Requests still queued behind the stops (only after the grace ran out) go with the
        // queue; their connections are already gone.
        drop(self.queue);
    }
}

/// The network side: accept until the stop, serve each connection on its own task, then wait
/// for the connections to finish (each closes once its exchange in flight is answered).
async fn accept(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot watch the listening socket; orch serve accepts nothing");
            let _ = stop.wait_for(|stopping| *stopping).await;
            return;
        }
    };
    let builder = connection::builder();
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => break,
            got = listener.accept() => match got {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of descriptors or memory: back off instead of spinning; anything else
                    // (a client that reset before we accepted) concerns one connection only.
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) {
                        tracing::warn!(error = %e, "cannot accept a connection; retrying shortly");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                tokio::spawn(connection::serve(
                    stream,
                    builder.clone(),
                    shared.clone(),
                    stop.clone(),
                    slot,
                ));
            }
            Err(_) => {
                tokio::spawn(connection::refuse(stream));
            }
        }
    }
    // Nothing listens from here on.
    drop(listener);
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    if tokio::time::timeout(STOP_GRACE, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            "exchanges still in flight after {}s; closing them",
            STOP_GRACE.as_secs()
        );
    }
}
