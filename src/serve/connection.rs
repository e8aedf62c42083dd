//! One client connection of `orch serve`, on its own thread: read a request head, run the checks
//! of design §8 in order (method and path 404/405, declared size 413 before any body byte is read
//! and without `100 Continue`, then the body itself: 413 past the limit, 408 past the deadline),
//! answer what needs no database (`/health`), hand the rest to the worker pool, and write the
//! answer; keep-alive until the client closes or idles out.
//!
//! It never touches the database (the workers do) and never holds a worker while it waits on
//! the client.

use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::http::{Conn, Framing, Head, ReadError, Reply, framing};
use super::routes::{self, Route, Routing, route};
use super::shared::{
    BODY_DEADLINE, BODY_LIMIT, Counted, IDLE_TIMEOUT, Shared, WRITE_TIMEOUT, dispatch,
};

/// Serve one client connection until it closes, idles out, or an exchange leaves it unusable.
pub(super) fn connection(stream: TcpStream, shared: &Shared) {
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
                let _ = conn.write_all(&reply.encode(false, false, crate::ctx::now()));
                linger_close(conn.into_inner());
                return;
            }
        };
        let _busy = Counted::new(&shared.in_flight);
        let started = Instant::now();
        let reply = exchange(&mut conn, &head, shared);
        let keep = !reply.close && head.keep_alive() && !shared.stopping.load(Ordering::SeqCst);
        let written = conn.write_all(&reply.encode(head.method == "HEAD", keep, crate::ctx::now()));
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
        Route::Health => return routes::health().closing(unread),
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
