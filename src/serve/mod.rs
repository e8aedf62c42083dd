//! `orch serve`: the minimal webhook shim of design §8. `POST /webhook/plane` and
//! `POST /webhook/gitea` run the same ingest code path as `orch ingest`, in-process; `GET /health`,
//! `GET /queue` (the `orch queue --json` document) and `GET /metrics` read the state.
//!
//! Two kinds of threads. A connection thread per client does all the waiting on the network:
//! it reads a request head (parsed by `httparse`) and body under deadlines, answers what needs no
//! database, and writes the answer. A fixed pool of [`WORKERS`] threads does the database work,
//! each with its own `Ctx` because a SQLite connection is not `Sync`; they take complete requests
//! from a bounded queue, so a slow or hostile client never holds one, and a full queue is answered
//! 503 at once. Checks run in the order of §8: method and path (405/404), declared size (413,
//! before anything of the body is read and without `100 Continue`), the body itself (413 past the
//! limit, 408 past the deadline), then ingest (401 for a bad signature). A panic while handling
//! one request answers 500 and rebuilds that worker's context; it never reaches another request.
//!
//! An adapter over the use-cases, like `cmd/`: it calls `ops`, `db` and `domain`, and nothing in
//! `ops` names it. This file is the lifecycle: [`run`] (SIGTERM and SIGINT), [`Shim`] (bind, open
//! the workers' contexts, start, stop) and the acceptor. `connection` is a connection thread and
//! the checks in order, `workers` the queue and the pool, [`routes`] what each route answers,
//! [`metrics`] the `/metrics` document, and [`http`] the HTTP/1.1 wire.
//!
//! Deliberately absent: TLS and public exposure (a reverse proxy's job; the default address is
//! loopback), any route beyond these five, any decision about a delivery (that is `ops::ingest`).

pub mod http;
pub mod metrics;
pub mod routes;

mod connection;
mod shared;
mod workers;

pub use shared::{BODY_DEADLINE, BODY_LIMIT, IDLE_TIMEOUT, WORKERS, WRITE_TIMEOUT};

use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{SigSet, Signal};

use crate::config::Config;

use self::http::Reply;
use self::shared::{CONNECTION_STACK, Counted, MAX_CONNECTIONS, Msg, QUEUE_DEPTH, Shared};
use self::workers::Worker;

/// Serve until SIGTERM or SIGINT, then stop accepting, finish the requests in hand and return.
/// `on_listening` is told the bound address (the real port when `listen` asks for port 0).
pub fn run(config: &Config, listen: &str, on_listening: impl FnOnce(SocketAddr)) -> Result<()> {
    // Blocked before any thread exists, so every thread inherits the mask and the signals wait
    // for `sigwait` below instead of killing the process. Children get a clean mask from std.
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

/// A running server: the acceptor, the worker pool and what they share.
pub struct Shim {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: JoinHandle<()>,
    workers: Vec<JoinHandle<()>>,
    queue: Arc<Mutex<Receiver<Msg>>>,
}

impl Shim {
    /// Bind `listen`, open one context per worker (so a database problem fails the start, not
    /// the first delivery) and start the acceptor and the workers.
    pub fn start(config: &Config, listen: &str) -> Result<Shim> {
        let listener = TcpListener::bind(listen).with_context(|| {
            format!("cannot listen on `{listen}`; pick a free address with --listen")
        })?;
        let addr = listener.local_addr().context("reading the bound address")?;
        if !addr.ip().is_loopback() {
            tracing::warn!(%addr, "listening on a non-loopback address; put a reverse proxy with TLS in front");
        }
        let mut ctxs = Vec::with_capacity(WORKERS);
        for _ in 0..WORKERS {
            ctxs.push(workers::worker_ctx(config)?);
        }
        let (jobs, queue) = mpsc::sync_channel(QUEUE_DEPTH);
        let queue = Arc::new(Mutex::new(queue));
        let shared = Arc::new(Shared {
            jobs,
            stopping: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
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
        let sh = shared.clone();
        let acceptor = thread::Builder::new()
            .name("serve-accept".into())
            .spawn(move || accept(listener, sh))
            .context("starting the serve acceptor")?;
        Ok(Shim {
            addr,
            shared,
            acceptor,
            workers,
            queue,
        })
    }

    /// Stop accepting, let the workers finish what is queued, give the connections in the middle
    /// of an exchange a moment to write their answers, and return.
    pub fn stop(self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the acceptor out of `accept`.
        let wake = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => {
                SocketAddr::from((Ipv4Addr::LOCALHOST, a.port()))
            }
            SocketAddr::V6(a) if a.ip().is_unspecified() => {
                SocketAddr::from((Ipv6Addr::LOCALHOST, a.port()))
            }
            a => a,
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
        let _ = self.acceptor.join();
        for _ in &self.workers {
            let _ = self.shared.jobs.send(Msg::Stop);
        }
        for w in self.workers {
            let _ = w.join();
        }
        // Requests queued behind the stops are dropped with the queue: their connections answer
        // 503.
        drop(self.queue);
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.shared.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
    }
}

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                if shared.stopping.load(Ordering::SeqCst) {
                    return;
                }
                // Out of descriptors or memory: back off instead of spinning; anything else
                // (a client that reset before we accepted) concerns one connection only.
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                ) {
                    tracing::warn!(error = %e, "cannot accept a connection; retrying shortly");
                    thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
        };
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        if shared.connections.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            refuse(stream, "too many connections; retry shortly");
            continue;
        }
        let sh = shared.clone();
        let spawned = thread::Builder::new()
            .name("serve-conn".into())
            .stack_size(CONNECTION_STACK)
            .spawn(move || {
                let _open = Counted::new(&sh.connections);
                connection::connection(stream, &sh);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a connection thread");
        }
    }
}

/// Answer 503 on a fresh connection and close it, without reading anything.
fn refuse(mut stream: TcpStream, why: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let bytes = Reply::busy(why).encode(false, false, crate::ctx::now());
    let _ = stream.write_all(&bytes);
    let _ = stream.shutdown(Shutdown::Both);
}
