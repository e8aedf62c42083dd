//! What the acceptor, the connection threads and the workers of `orch serve` share: the limits,
//! the counters, and the bounded queue between a connection thread and the worker pool
//! (`dispatch` hands a complete request over and waits for its answer).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::time::Duration;

use super::http::Reply;
use super::routes::Route;

/// Requests handled against the database at once; each worker holds one SQLite connection.
pub const WORKERS: usize = 8;
/// The largest webhook body accepted (design §8).
pub const BODY_LIMIT: usize = 1 << 20;
/// How long a client may take to send a whole body once its head is in.
pub const BODY_DEADLINE: Duration = Duration::from_secs(10);
/// How long an idle keep-alive connection is kept, and how long a client may take to send a
/// request head.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait of one socket write: a client that stops reading gives up its connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection waits for a worker's answer before it answers 503 itself.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Open client connections; past this a new one is answered 503 and closed.
pub(super) const MAX_CONNECTIONS: usize = 256;
/// Complete requests waiting for a worker; past this a request is answered 503.
pub(super) const QUEUE_DEPTH: usize = 64;
/// A connection thread only parses and copies bytes.
pub(super) const CONNECTION_STACK: usize = 256 * 1024;

/// What connection threads, workers and the acceptor share.
pub(super) struct Shared {
    pub(super) jobs: SyncSender<Msg>,
    pub(super) stopping: AtomicBool,
    /// Open client connections.
    pub(super) connections: AtomicUsize,
    /// Exchanges between a parsed head and a written answer.
    pub(super) in_flight: AtomicUsize,
}

/// Counts itself in for as long as it lives.
pub(super) struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    pub(super) fn new(n: &'a AtomicUsize) -> Counted<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        Counted(n)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the queue carries.
pub(super) enum Msg {
    Job(Job),
    Stop,
}

/// A complete request for a worker, and where its answer goes.
pub(super) struct Job {
    pub(super) route: Route,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
    pub(super) reply: SyncSender<Reply>,
}

/// Hand a complete request to the worker pool and wait for its answer.
pub(super) fn dispatch(
    shared: &Shared,
    route: Route,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Reply {
    let (reply, answer) = mpsc::sync_channel(1);
    let job = Job {
        route,
        headers,
        body,
        reply,
    };
    match shared.jobs.try_send(Msg::Job(job)) {
        // A worker stuck behind a busy repo must not hold the connection for ever: the sender
        // is told to try again (its redelivery is a duplicate if this one ends up accepted).
        Ok(()) => match answer.recv_timeout(REPLY_TIMEOUT) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                Reply::busy("the delivery is still being processed; retry later")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Reply::busy("orch serve is stopping; retry shortly")
            }
        },
        Err(TrySendError::Full(_)) => Reply::busy("all workers are busy; retry shortly"),
        Err(TrySendError::Disconnected(_)) => Reply::busy("orch serve is stopping; retry shortly"),
    }
}
