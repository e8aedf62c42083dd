//! What the network side and the workers of `orch serve` share: the limits, the stop flag, and
//! the bounded queue between an exchange and the worker pool (`dispatch` hands a complete
//! request over and waits for its answer without blocking the network thread).

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::Duration;

use tokio::sync::oneshot;

use super::reply::Reply;
use super::routes::Route;

/// Requests handled against the database at once; each worker holds one SQLite connection.
pub const WORKERS: usize = 8;
/// The largest webhook body accepted (design §8).
pub const BODY_LIMIT: usize = 1 << 20;
/// How long a client may take to send a whole body once its head is in.
pub const BODY_DEADLINE: Duration = Duration::from_secs(10);
/// How long a client may take to send a request head, and so how long an idle keep-alive
/// connection is kept (the wait for the next head is the same timer).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait of one socket write: a client that stops reading gives up its connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection waits for a worker's answer before it answers 503 itself.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stop waits for the exchanges in flight before it drops them.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// The largest request head (request line and headers); past it, 431.
pub(super) const HEAD_LIMIT: usize = 16 * 1024;
/// The most header fields in one head; past it, 431.
pub(super) const MAX_HEADERS: usize = 64;
/// Open client connections; past this a new one is answered 503 and closed.
pub(super) const MAX_CONNECTIONS: usize = 256;
/// Complete requests waiting for a worker; past this a request is answered 503.
pub(super) const QUEUE_DEPTH: usize = 64;

/// What the exchanges and the workers share.
pub(super) struct Shared {
    pub(super) jobs: SyncSender<Msg>,
    /// Set when the stop begins: answers from then on close their connection.
    pub(super) stopping: AtomicBool,
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
    pub(super) reply: oneshot::Sender<Reply>,
}

/// Hand a complete request to the worker pool and wait for its answer.
pub(super) async fn dispatch(
    shared: &Shared,
    route: Route,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Reply {
    let (reply, answer) = oneshot::channel();
    let job = Job {
        route,
        headers,
        body,
        reply,
    };
    match shared.jobs.try_send(Msg::Job(job)) {
        // A worker stuck behind a busy repo must not hold the connection for ever: the sender
        // is told to try again (its redelivery is a duplicate if this one ends up accepted).
        Ok(()) => match tokio::time::timeout(REPLY_TIMEOUT, answer).await {
            Ok(Ok(r)) => r,
            Err(_) => Reply::busy("the delivery is still being processed; retry later"),
            Ok(Err(_)) => Reply::busy("orch serve is stopping; retry shortly"),
        },
        Err(TrySendError::Full(_)) => Reply::busy("all workers are busy; retry shortly"),
        Err(TrySendError::Disconnected(_)) => Reply::busy("orch serve is stopping; retry shortly"),
    }
}
