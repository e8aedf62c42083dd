//! `orch serve`: the minimal webhook shim of SPEC §8. `POST /webhook/plane` and
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
//! Deliberately absent: TLS and public exposure (a reverse proxy's job; the default address is
//! loopback), any route beyond these five, any decision about a delivery (that is `ops::ingest`).

pub mod http;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{SigSet, Signal};
use serde::Serialize;

use crate::Ctx;
use crate::config::Config;
use crate::db;
use crate::domain::stage::Stage;
use crate::domain::time::rfc3339;
use crate::ops::ingest::{self, Source};
use crate::ops::queue;

use self::http::{Conn, Framing, Head, ReadError, Reply, framing, internal_error};

/// Requests handled against the database at once; each worker holds one SQLite connection.
pub const WORKERS: usize = 8;
/// The largest webhook body accepted (SPEC §8).
pub const BODY_LIMIT: usize = 1 << 20;
/// How long a client may take to send a whole body once its head is in.
pub const BODY_DEADLINE: Duration = Duration::from_secs(10);
/// How long an idle keep-alive connection is kept, and how long a client may take to send a
/// request head.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait of one socket write: a client that stops reading gives up its connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Open client connections; past this a new one is answered 503 and closed.
const MAX_CONNECTIONS: usize = 256;
/// Complete requests waiting for a worker; past this a request is answered 503.
const QUEUE_DEPTH: usize = 64;
/// A connection thread only parses and copies bytes.
const CONNECTION_STACK: usize = 256 * 1024;

/// What a request asks for, once its method and path are known to be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Webhook(Source),
    Health,
    Queue,
    Metrics,
}

/// The first check of §8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    Found(Route),
    /// A served path asked with another method; `allow` is the `Allow` header.
    WrongMethod {
        allow: &'static str,
    },
    NotFound,
}

/// Route by method and path; the query string is ignored.
pub fn route(method: &str, target: &str) -> Routing {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let (route, post) = match path {
        "/webhook/plane" => (Route::Webhook(Source::Plane), true),
        "/webhook/gitea" => (Route::Webhook(Source::Gitea), true),
        "/health" => (Route::Health, false),
        "/queue" => (Route::Queue, false),
        "/metrics" => (Route::Metrics, false),
        _ => return Routing::NotFound,
    };
    match (post, method) {
        (true, "POST") | (false, "GET" | "HEAD") => Routing::Found(route),
        (true, _) => Routing::WrongMethod { allow: "POST" },
        (false, _) => Routing::WrongMethod { allow: "GET, HEAD" },
    }
}

/// The `GET /metrics` document.
#[derive(Debug, Serialize)]
pub struct Metrics {
    pub schema_version: u32,
    pub generated_at: String,
    /// Every non-terminal stage, with the age of the longest-waiting task in it.
    pub stages: BTreeMap<&'static str, StageMetric>,
    pub queue: QueueMetric,
    pub agents: Vec<AgentMetric>,
    pub cost: CostMetric,
}

#[derive(Debug, Serialize)]
pub struct StageMetric {
    pub count: u64,
    /// `null` when the stage is empty.
    pub oldest_age_s: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct QueueMetric {
    pub queued: u64,
    pub running: u64,
    pub done_24h: u64,
    pub failed_24h: u64,
}

#[derive(Debug, Serialize)]
pub struct AgentMetric {
    pub job_id: i64,
    pub work_item: String,
    pub role: &'static str,
    /// The agent's process group leader, or the supervisor's pid before the agent started.
    pub pid: Option<i64>,
    pub supervisor_pid: Option<i64>,
    pub runtime_s: i64,
}

#[derive(Debug, Serialize)]
pub struct CostMetric {
    pub total_usd: f64,
    pub last_24h_usd: f64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

/// Build the `/metrics` document in one read transaction.
pub fn metrics(ctx: &Ctx) -> Result<Metrics> {
    let now = ctx.now;
    let since = now - 86_400;
    ctx.db.read(|c| {
        let mut stages: BTreeMap<&'static str, StageMetric> = Stage::ALL
            .iter()
            .filter(|s| !s.is_terminal())
            .map(|s| {
                (
                    s.as_str(),
                    StageMetric {
                        count: 0,
                        oldest_age_s: None,
                    },
                )
            })
            .collect();
        for s in db::metrics::stages(c)? {
            stages.insert(
                s.stage.as_str(),
                StageMetric {
                    count: s.count,
                    oldest_age_s: Some((now - s.oldest_entered_at).max(0)),
                },
            );
        }
        let jobs = db::metrics::job_counts(c, since)?;
        let agents = db::metrics::running(c)?
            .into_iter()
            .map(|a| AgentMetric {
                job_id: a.job_id,
                work_item: a.work_item,
                role: a.role.as_str(),
                pid: a.agent_pid.or(a.supervisor_pid),
                supervisor_pid: a.supervisor_pid,
                runtime_s: a.started_at.map(|t| (now - t).max(0)).unwrap_or(0),
            })
            .collect();
        let cost = db::metrics::cost(c, since)?;
        Ok(Metrics {
            schema_version: 1,
            generated_at: rfc3339(now),
            stages,
            queue: QueueMetric {
                queued: jobs.queued,
                running: jobs.running,
                done_24h: jobs.done_since,
                failed_24h: jobs.failed_since,
            },
            agents,
            cost: CostMetric {
                total_usd: cost.total_usd,
                last_24h_usd: cost.since_usd,
                tokens_in: cost.tokens_in,
                tokens_out: cost.tokens_out,
            },
        })
    })
}

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

/// What connection threads, workers and the acceptor share.
struct Shared {
    jobs: SyncSender<Msg>,
    stopping: AtomicBool,
    /// Open client connections.
    connections: AtomicUsize,
    /// Exchanges between a parsed head and a written answer.
    in_flight: AtomicUsize,
}

enum Msg {
    Job(Job),
    Stop,
}

/// A complete request for a worker, and where its answer goes.
struct Job {
    route: Route,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    reply: SyncSender<Reply>,
}

/// Counts itself in for as long as it lives.
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(n: &'a AtomicUsize) -> Counted<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        Counted(n)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
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
            ctxs.push(Ctx::with_config(config.clone(), false)?);
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
            let mut w = Worker {
                config: config.clone(),
                ctx: Some(ctx),
            };
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
                connection(stream, &sh);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start a connection thread");
        }
    }
}

/// Answer 503 on a fresh connection and close it, without reading anything.
fn refuse(mut stream: TcpStream, why: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let bytes = Reply::busy(why).encode(false, false, crate::now());
    let _ = stream.write_all(&bytes);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Serve one client connection until it closes, idles out, or an exchange leaves it unusable.
fn connection(stream: TcpStream, shared: &Shared) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let mut conn = Conn::new(stream);
    loop {
        let head = match conn.read_head(Instant::now() + IDLE_TIMEOUT) {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(e) => {
                let reply = match e {
                    ReadError::TooLarge => Reply::text(431, "request head too large"),
                    ReadError::TimedOut => Reply::text(408, "request head not received in time"),
                    ReadError::Malformed(why) => Reply::text(400, why),
                    ReadError::Closed | ReadError::Io(_) => return,
                };
                tracing::info!(?peer, status = reply.status, "bad request head");
                let _ = conn.write_all(&reply.encode(false, false, crate::now()));
                linger_close(conn.into_inner());
                return;
            }
        };
        let _busy = Counted::new(&shared.in_flight);
        let started = Instant::now();
        let reply = exchange(&mut conn, &head, shared);
        let keep = !reply.close && head.keep_alive() && !shared.stopping.load(Ordering::SeqCst);
        let written = conn.write_all(&reply.encode(head.method == "HEAD", keep, crate::now()));
        let ms = started.elapsed().as_millis() as u64;
        if reply.status >= 500 {
            tracing::warn!(method = %head.method, path = %head.target, status = reply.status, ms, "request");
        } else {
            tracing::info!(method = %head.method, path = %head.target, status = reply.status, ms, "request");
        }
        if written.is_err() {
            return;
        }
        if !keep {
            if reply.close {
                linger_close(conn.into_inner());
            } else {
                let _ = conn.into_inner().shutdown(Shutdown::Both);
            }
            return;
        }
    }
}

/// Close after an answer that left part of the request unread: send our end first, then read
/// and discard what the client is still sending for a moment, so that closing with unread
/// data (which makes the kernel send a reset) does not destroy the answer before the client
/// reads it.
fn linger_close(mut stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(250)));
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut sink = [0u8; 16 * 1024];
    let mut total = 0usize;
    while Instant::now() < deadline && total < 4 * BODY_LIMIT {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
}

/// One request/response exchange after the head is in: the checks of §8 in order, the body, and
/// the work, done here (`/health`) or by a worker.
fn exchange(conn: &mut Conn<TcpStream>, head: &Head, shared: &Shared) -> Reply {
    let unread = head.has_body();
    let route = match route(&head.method, &head.target) {
        Routing::Found(r) => r,
        Routing::NotFound => return Reply::text(404, "not found").closing(unread),
        Routing::WrongMethod { allow } => {
            let mut r = Reply::text(405, "method not allowed").closing(unread);
            r.allow = Some(allow);
            return r;
        }
    };
    match route {
        Route::Health => return Reply::text(200, "ok").closing(unread),
        Route::Queue | Route::Metrics => {
            return dispatch(shared, route, Vec::new(), Vec::new()).closing(unread);
        }
        Route::Webhook(_) => {}
    }
    let framing = framing(
        &head.values("Content-Length"),
        &head.values("Transfer-Encoding"),
        BODY_LIMIT,
    );
    match framing {
        Framing::TooLarge => return too_large(),
        Framing::Invalid(why) => return Reply::text(400, why).closing(true),
        Framing::Unsupported => {
            return Reply::text(501, "unsupported Transfer-Encoding").closing(true);
        }
        Framing::Empty | Framing::Length(_) | Framing::Chunked => {}
    }
    let expect = head.values("Expect");
    if head.minor >= 1 && !expect.is_empty() && framing != Framing::Empty {
        if !expect
            .iter()
            .all(|e| e.trim().eq_ignore_ascii_case("100-continue"))
        {
            return Reply::text(417, "unsupported Expect").closing(true);
        }
        // Only now, with the declared size known to be acceptable, is the client told to send.
        if conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_err() {
            return Reply::text(400, "client gone").closing(true);
        }
    }
    let body = match conn.read_body(framing, BODY_LIMIT, Instant::now() + BODY_DEADLINE) {
        Ok(b) => b,
        Err(ReadError::TooLarge) => return too_large(),
        Err(ReadError::TimedOut) => {
            return Reply::text(
                408,
                &format!(
                    "request body not received within {}s",
                    BODY_DEADLINE.as_secs()
                ),
            )
            .closing(true);
        }
        Err(ReadError::Malformed(why)) => return Reply::text(400, why).closing(true),
        Err(ReadError::Closed) => {
            return Reply::text(400, "request body ended early").closing(true);
        }
        Err(ReadError::Io(e)) => {
            return Reply::text(400, &format!("cannot read the request body: {e}")).closing(true);
        }
    };
    dispatch(shared, route, head.headers.clone(), body)
}

fn too_large() -> Reply {
    Reply::text(
        413,
        &format!("request body over the limit of {BODY_LIMIT} bytes"),
    )
    .closing(true)
}

/// Hand a complete request to the worker pool and wait for its answer.
fn dispatch(shared: &Shared, route: Route, headers: Vec<(String, String)>, body: Vec<u8>) -> Reply {
    let (reply, answer) = mpsc::sync_channel(1);
    let job = Job {
        route,
        headers,
        body,
        reply,
    };
    match shared.jobs.try_send(Msg::Job(job)) {
        Ok(()) => answer
            .recv()
            .unwrap_or_else(|_| Reply::busy("orch serve is stopping; retry shortly")),
        Err(TrySendError::Full(_)) => Reply::busy("all workers are busy; retry shortly"),
        Err(TrySendError::Disconnected(_)) => Reply::busy("orch serve is stopping; retry shortly"),
    }
}

struct Worker {
    config: Config,
    /// `None` after a failed rebuild; the next request tries again.
    ctx: Option<Ctx>,
}

impl Worker {
    fn work(&mut self, queue: &Mutex<Receiver<Msg>>) {
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
            Route::Queue => self.with_ctx(|ctx| Ok(Reply::json(&queue::snapshot(ctx, None)?))),
            Route::Metrics => self.with_ctx(|ctx| Ok(Reply::json(&metrics(ctx)?))),
            Route::Webhook(source) => self.with_ctx(|ctx| {
                let got = ingest::ingest(ctx, source, &job.headers, &job.body)?;
                let status = match got.http_status {
                    s @ 200..=599 => s,
                    other => {
                        tracing::error!(
                            status = other,
                            "ingest answered an impossible HTTP status"
                        );
                        500
                    }
                };
                let text = if got.reason.is_empty() {
                    got.outcome.as_str().to_string()
                } else {
                    format!("{}: {}", got.outcome.as_str(), got.reason)
                };
                Ok(Reply::text(status, &text))
            }),
            Route::Health => Reply::text(200, "ok"),
        }
    }

    /// Run `f` with this worker's context, its clock set to now; build the context again when
    /// an earlier failure dropped it.
    fn with_ctx(&mut self, f: impl FnOnce(&Ctx) -> Result<Reply>) -> Reply {
        if self.ctx.is_none() {
            match Ctx::with_config(self.config.clone(), false) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_method_and_path() {
        use Routing::*;
        let cases = [
            (
                "POST",
                "/webhook/plane",
                Found(Route::Webhook(Source::Plane)),
            ),
            (
                "POST",
                "/webhook/gitea",
                Found(Route::Webhook(Source::Gitea)),
            ),
            (
                "POST",
                "/webhook/gitea?x=1",
                Found(Route::Webhook(Source::Gitea)),
            ),
            ("GET", "/health", Found(Route::Health)),
            ("HEAD", "/health", Found(Route::Health)),
            ("GET", "/queue", Found(Route::Queue)),
            ("GET", "/metrics?pretty", Found(Route::Metrics)),
            ("GET", "/webhook/plane", WrongMethod { allow: "POST" }),
            ("PUT", "/webhook/gitea", WrongMethod { allow: "POST" }),
            ("POST", "/health", WrongMethod { allow: "GET, HEAD" }),
            ("DELETE", "/queue", WrongMethod { allow: "GET, HEAD" }),
            ("POST", "/webhook/jira", NotFound),
            ("POST", "/webhook/plane/", NotFound),
            ("POST", "http://x/webhook/plane", NotFound),
            ("GET", "/", NotFound),
            ("GET", "", NotFound),
            ("GET", "/../health", NotFound),
            ("GET", "/HEALTH", NotFound),
        ];
        for (method, target, want) in cases {
            assert_eq!(route(method, target), want, "{method} {target}");
        }
    }
}
