//! One client connection of `orch serve`: hyper's HTTP/1.1 server on the socket (heads read
//! under [`IDLE_TIMEOUT`], at most [`HEAD_LIMIT`] bytes and [`MAX_HEADERS`] fields, else 431;
//! keep-alive; a graceful close when the stop begins), and [`exchange`], which runs the checks of
//! design §8 in order on each request: method and path (404/405), declared size (413 from
//! `Content-Length` alone, before any body byte is read, so hyper never sends `100 Continue`),
//! then the body itself under [`BODY_DEADLINE`] (408) and [`BODY_LIMIT`] (413), and only then
//! the worker pool (401 for a bad signature comes from `ops::ingest` there).
//!
//! It never touches the database (the workers do) and never holds a worker while it waits on
//! the client. `/health` is answered here.

use std::convert::Infallible;
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Body, Bytes, Incoming};
use hyper::header::{CONNECTION, CONTENT_LENGTH, EXPECT, HeaderName, TRANSFER_ENCODING};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::head::{self, Framing, framing};
use super::reply::Reply;
use super::routes::{self, Route, Routing, route};
use super::shared::{
    BODY_DEADLINE, BODY_LIMIT, HEAD_LIMIT, IDLE_TIMEOUT, MAX_HEADERS, Shared, dispatch,
};
use super::socket::Socket;

/// The HTTP/1.1 server settings every connection is served with.
pub(super) fn builder() -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        // Also the idle timeout: hyper starts this timer again while it waits for the next
        // request on a kept-alive connection.
        .header_read_timeout(IDLE_TIMEOUT)
        .max_header_size(HEAD_LIMIT)
        .max_buf_size(HEAD_LIMIT)
        .max_headers(MAX_HEADERS)
        .keep_alive(true)
        // A client may shut its sending side once the request is out and still read the answer.
        .half_close(true)
        .title_case_headers(true);
    b
}

/// Serve one client connection until it closes, idles out, breaks, or the stop (`stop` turning
/// true) lets its exchange in flight finish. `_slot` counts it among the open connections.
pub(super) async fn serve(
    stream: TcpStream,
    builder: http1::Builder,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let peer = stream.peer_addr().ok();
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(respond(req, &shared).await) }
    });
    let conn = builder.serve_connection(TokioIo::new(Socket::new(stream)), service);
    tokio::pin!(conn);
    let stopping = async {
        // A sender gone is a stop too.
        let _ = stop.wait_for(|stopping| *stopping).await;
    };
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = stopping => {
            // An idle connection closes now; one in the middle of an exchange finishes it.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        // Each concerns this connection only. A malformed or oversized head (hyper answered 400
        // or 431) is worth a line; a head not sent in time is mostly an idle keep-alive
        // connection closing, and a client gone is ordinary.
        if e.is_parse() || e.is_parse_too_large() {
            tracing::info!(?peer, error = %chain(&e), "bad request head");
        } else {
            tracing::debug!(?peer, error = %chain(&e), "connection closed");
        }
    }
}

/// Answer 503 on a connection over the limit and close it, without reading anything.
pub(super) async fn refuse(mut stream: TcpStream) {
    const TEXT: &str = "too many connections; retry shortly\n";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n{TEXT}",
        TEXT.len()
    );
    let write = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), write).await;
}

/// One request/response exchange: the answer, logged, with the `Connection` header telling
/// whether the connection stays open.
async fn respond(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let method = req.method().clone();
    // The request target as sent (origin form, or the absolute form `route` refuses).
    let target = req.uri().to_string();
    let keep = head::keep_alive(
        req.version() == Version::HTTP_11,
        &str_values(&values(&req, &CONNECTION)),
    );
    let reply = exchange(req, shared).await;
    let ms = started.elapsed().as_millis() as u64;
    let status = reply.status;
    if status >= 500 {
        tracing::warn!(%method, path = %target, status, ms, "request");
    } else {
        tracing::info!(%method, path = %target, status, ms, "request");
    }
    reply.into_response(keep && !shared.stopping.load(Ordering::SeqCst))
}

/// The checks of §8 in order, the body, and the work, done here (`/health`) or by a worker.
async fn exchange(req: Request<Incoming>, shared: &Shared) -> Reply {
    // A body left unread makes the connection unusable for a next request.
    let unread = !req.body().is_end_stream();
    let route = match route(req.method().as_str(), &req.uri().to_string()) {
        Routing::Found(r) => r,
        Routing::NotFound => return Reply::text(404, "not found").closing(unread),
        Routing::WrongMethod { allow } => {
            let mut r = Reply::text(405, "method not allowed").closing(unread);
            r.allow = Some(allow);
            return r;
        }
    };
    match route {
        Route::Health => return routes::health().closing(unread),
        Route::Queue | Route::Metrics | Route::MetricsJson => {
            return dispatch(shared, route, Vec::new(), Vec::new())
                .await
                .closing(unread);
        }
        Route::Webhook(_) => {}
    }
    let framing = framing(
        &str_values(&values(&req, &CONTENT_LENGTH)),
        &str_values(&values(&req, &TRANSFER_ENCODING)),
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
    let expect = values(&req, &EXPECT);
    if req.version() >= Version::HTTP_11
        && !expect.is_empty()
        && framing != Framing::Empty
        && !head::expectation(&str_values(&expect))
    {
        return Reply::text(417, "unsupported Expect").closing(true);
    }
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    // Reading is what makes hyper send `100 Continue` to a client that asked for it: only now,
    // with the declared size known to be acceptable.
    let read = Limited::new(req.into_body(), BODY_LIMIT).collect();
    let body = match tokio::time::timeout(BODY_DEADLINE, read).await {
        Ok(Ok(b)) => b.to_bytes().to_vec(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return too_large(),
        Ok(Err(e)) => {
            return Reply::text(
                400,
                &format!("cannot read the request body: {}", chain(e.as_ref())),
            )
            .closing(true);
        }
        Err(_) => {
            return Reply::text(
                408,
                &format!(
                    "request body not received within {}s",
                    BODY_DEADLINE.as_secs()
                ),
            )
            .closing(true);
        }
    };
    dispatch(shared, route, headers, body).await
}

fn too_large() -> Reply {
    Reply::text(
        413,
        &format!("request body over the limit of {BODY_LIMIT} bytes"),
    )
    .closing(true)
}

/// Every value of header `name`, as text (bytes that are not UTF-8 replaced, never dropped).
fn values(req: &Request<Incoming>, name: &HeaderName) -> Vec<String> {
    req.headers()
        .get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

fn str_values(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// An error and its causes, `: `-separated (hyper's own text names only the kind).
fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
