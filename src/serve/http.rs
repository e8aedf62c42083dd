//! The HTTP/1.1 wire of `orch serve`: request heads (parsed by `httparse`), body framing
//! (`Content-Length` or chunked) read under a deadline and a size limit, and responses encoded
//! in one write. A connection is any [`Wire`], so the parsing is tested on scripted streams.
//!
//! It knows nothing of routes, workers or the database (that is `serve`), and offers only
//! what a webhook receiver needs: no multipart, no compression, no trailers kept, no upgrades.
//!
//! It is written here rather than taken from tiny_http (0.12) because of three behaviours
//! measured there: no read timeout on idle or stalled connections (a listener timeout also
//! bounds its `accept`, which then stops for good), a new connection arriving in a burst can wait
//! behind busy keep-alive connections for their whole life, and a body left unread is drained on
//! the thread that answered, so a client that never sends it holds that thread.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::domain::time::{Ts, rfc3339};

/// The largest request head (request line and headers).
pub const HEAD_LIMIT: usize = 16 * 1024;
/// The most header fields in one head.
pub const MAX_HEADERS: usize = 64;

/// How the body of a request is delimited, or why it is refused, from the head alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Empty,
    /// `Content-Length` within the limit.
    Length(usize),
    /// `Transfer-Encoding: chunked`: only reading tells the size.
    Chunked,
    /// `Content-Length` over the limit: 413 without touching the body.
    TooLarge,
    /// A transfer coding other than chunked (501).
    Unsupported,
    /// A head that does not say where the body ends (400).
    Invalid(&'static str),
}

/// The second check of §8. `content_length` and `transfer_encoding` hold every value sent.
pub fn framing(content_length: &[&str], transfer_encoding: &[&str], limit: usize) -> Framing {
    if !transfer_encoding.is_empty() {
        // Both framings at once is how requests are smuggled past proxies (RFC 9112 §6.1).
        if !content_length.is_empty() {
            return Framing::Invalid("both Content-Length and Transfer-Encoding");
        }
        let codings: Vec<String> = transfer_encoding
            .iter()
            .flat_map(|v| v.split(','))
            .map(|c| c.trim().to_ascii_lowercase())
            .collect();
        return if codings == ["chunked"] {
            Framing::Chunked
        } else {
            Framing::Unsupported
        };
    }
    let Some(first) = content_length.first() else {
        return Framing::Empty;
    };
    if content_length.iter().any(|v| v.trim() != first.trim()) {
        return Framing::Invalid("conflicting Content-Length headers");
    }
    let v = first.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Framing::Invalid("Content-Length is not a number");
    }
    match v.parse::<u64>() {
        Ok(0) => Framing::Empty,
        Ok(n) if n <= limit as u64 => Framing::Length(n as usize),
        // All digits but too large even for u64 is still a size over the limit.
        Ok(_) | Err(_) => Framing::TooLarge,
    }
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct Head {
    pub method: String,
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<(String, String)>,
}

impl Head {
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Whether the client lets the connection stay open after this exchange.
    pub fn keep_alive(&self) -> bool {
        match self.minor {
            0 => self.has_token("Connection", "keep-alive"),
            _ => !self.has_token("Connection", "close"),
        }
    }

    /// Whether the head announces a body (which may still be unread).
    pub fn has_body(&self) -> bool {
        !matches!(
            framing(
                &self.values("Content-Length"),
                &self.values("Transfer-Encoding"),
                usize::MAX
            ),
            Framing::Empty
        )
    }
}

/// A byte stream whose reads can be bounded in time (a `TcpStream`; a fake in tests).
pub trait Wire: Read + Write {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Wire for TcpStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
}

/// Why reading from a client stopped.
#[derive(Debug)]
pub enum ReadError {
    TimedOut,
    /// The client closed its side before the message was complete.
    Closed,
    TooLarge,
    Malformed(&'static str),
    Io(io::Error),
}

/// One client connection: the stream and the bytes read but not yet consumed (a pipelined next
/// request may already be among them).
pub struct Conn<S: Wire> {
    stream: S,
    buf: Vec<u8>,
    pos: usize,
}

impl<S: Wire> Conn<S> {
    pub fn new(stream: S) -> Conn<S> {
        Conn {
            stream,
            buf: Vec::with_capacity(4096),
            pos: 0,
        }
    }

    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Read more bytes into the buffer, waiting no later than `deadline`.
    fn fill(&mut self, deadline: Instant) -> Result<(), ReadError> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(ReadError::TimedOut);
            }
            // A zero timeout means "block forever" to the OS; never pass one.
            let wait = (deadline - now).max(Duration::from_millis(1));
            self.stream
                .set_read_timeout(Some(wait))
                .map_err(ReadError::Io)?;
            let old = self.buf.len();
            self.buf.resize(old + 16 * 1024, 0);
            let got = self.stream.read(&mut self.buf[old..]);
            self.buf.truncate(old + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(0) => return Err(ReadError::Closed),
                Ok(_) => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// The next request head; `None` when the client closed or idled out between requests.
    pub fn read_head(&mut self, deadline: Instant) -> Result<Option<Head>, ReadError> {
        loop {
            if !self.pending().is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let mut req = httparse::Request::new(&mut headers);
                match req.parse(self.pending()) {
                    Ok(httparse::Status::Complete(n)) if n > HEAD_LIMIT => {
                        return Err(ReadError::TooLarge);
                    }
                    Ok(httparse::Status::Complete(n)) => {
                        let head = Head {
                            method: req.method.unwrap_or("").to_string(),
                            target: req.path.unwrap_or("").to_string(),
                            minor: req.version.unwrap_or(1),
                            headers: req
                                .headers
                                .iter()
                                .map(|h| {
                                    (
                                        h.name.to_string(),
                                        String::from_utf8_lossy(h.value).into_owned(),
                                    )
                                })
                                .collect(),
                        };
                        self.consume(n);
                        return Ok(Some(head));
                    }
                    Ok(httparse::Status::Partial) if self.pending().len() > HEAD_LIMIT => {
                        return Err(ReadError::TooLarge);
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(httparse::Error::TooManyHeaders) => return Err(ReadError::TooLarge),
                    Err(_) => return Err(ReadError::Malformed("malformed request head")),
                }
            }
            match self.fill(deadline) {
                Ok(()) => {}
                // Nothing of a next request yet: an ordinary end of a connection.
                Err(ReadError::TimedOut | ReadError::Closed | ReadError::Io(_))
                    if self.pending().is_empty() =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Exactly `n` bytes.
    fn take_exact(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        while self.pending().len() < n {
            self.fill(deadline)?;
        }
        let out = self.pending()[..n].to_vec();
        self.consume(n);
        Ok(out)
    }

    /// One CRLF-terminated line without its terminator, at most `max` bytes long.
    fn take_line(&mut self, max: usize, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        loop {
            if let Some(i) = self.pending().windows(2).position(|w| w == b"\r\n") {
                let line = self.pending()[..i].to_vec();
                self.consume(i + 2);
                return Ok(line);
            }
            if self.pending().len() > max {
                return Err(ReadError::Malformed("chunk line too long"));
            }
            self.fill(deadline)?;
        }
    }

    /// The body as `framing` delimits it, at most `limit` bytes, complete before `deadline`.
    pub fn read_body(
        &mut self,
        framing: Framing,
        limit: usize,
        deadline: Instant,
    ) -> Result<Vec<u8>, ReadError> {
        match framing {
            Framing::Empty => Ok(Vec::new()),
            Framing::Length(n) if n > limit => Err(ReadError::TooLarge),
            Framing::Length(n) => self.take_exact(n, deadline),
            Framing::Chunked => self.read_chunked(limit, deadline),
            Framing::TooLarge => Err(ReadError::TooLarge),
            Framing::Unsupported | Framing::Invalid(_) => {
                Err(ReadError::Malformed("unreadable body framing"))
            }
        }
    }

    fn read_chunked(&mut self, limit: usize, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line = self.take_line(1024, deadline)?;
            let size = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| l.split(';').next())
                .map(str::trim)
                .filter(|s| !s.is_empty() && s.len() <= 16)
                .and_then(|s| usize::from_str_radix(s, 16).ok())
                .ok_or(ReadError::Malformed("bad chunk size"))?;
            if size == 0 {
                // Trailer fields, ignored, up to the empty line.
                let mut trailers = 0;
                loop {
                    let t = self.take_line(HEAD_LIMIT, deadline)?;
                    if t.is_empty() {
                        return Ok(body);
                    }
                    trailers += t.len();
                    if trailers > HEAD_LIMIT {
                        return Err(ReadError::Malformed("trailer section too long"));
                    }
                }
            }
            if size > limit - body.len() {
                return Err(ReadError::TooLarge);
            }
            body.extend(self.take_exact(size, deadline)?);
            if self.take_exact(2, deadline)? != b"\r\n" {
                return Err(ReadError::Malformed("chunk not followed by CRLF"));
            }
        }
    }

    /// Write `bytes` and flush.
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// The stream, once the connection is done with.
    pub fn into_inner(self) -> S {
        self.stream
    }
}

/// An answer, before it is written.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub json: bool,
    /// The `Allow` header of a 405.
    pub allow: Option<&'static str>,
    /// Send `Retry-After: 1` (a 503 for a full queue).
    pub retry_after: bool,
    /// The exchange left the connection unusable (a body not read to its end, broken framing).
    pub close: bool,
}

impl Reply {
    /// A short plain-text answer (a newline is added).
    pub fn text(status: u16, text: &str) -> Reply {
        let mut body = text.as_bytes().to_vec();
        body.push(b'\n');
        Reply {
            status,
            body,
            json: false,
            allow: None,
            retry_after: false,
            close: false,
        }
    }

    /// A 200 with `value` as pretty JSON.
    pub fn json<T: Serialize>(value: &T) -> Reply {
        match serde_json::to_vec_pretty(value) {
            Ok(mut body) => {
                body.push(b'\n');
                Reply {
                    status: 200,
                    body,
                    json: true,
                    allow: None,
                    retry_after: false,
                    close: false,
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a JSON answer");
                internal_error()
            }
        }
    }

    /// Mark the connection for closing after this answer when `close`.
    pub fn closing(mut self, close: bool) -> Reply {
        self.close |= close;
        self
    }

    /// A 503 that tells the client to retry shortly.
    pub fn busy(text: &str) -> Reply {
        let mut r = Reply::text(503, text);
        r.retry_after = true;
        r
    }

    /// The whole response, ready for one write.
    pub fn encode(&self, head_only: bool, keep_alive: bool, now: Ts) -> Vec<u8> {
        let mut out = Vec::with_capacity(192 + self.body.len());
        let ctype = if self.json {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        out.extend_from_slice(
            format!(
                "HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: {}\r\n",
                self.status,
                reason_phrase(self.status),
                http_date(now),
                self.body.len(),
                if keep_alive { "keep-alive" } else { "close" },
            )
            .as_bytes(),
        );
        if let Some(allow) = self.allow {
            out.extend_from_slice(format!("Allow: {allow}\r\n").as_bytes());
        }
        if self.retry_after {
            out.extend_from_slice(b"Retry-After: 1\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// A 500 that points at the log, where the error chain is.
pub fn internal_error() -> Reply {
    Reply::text(500, "internal error; see the orch serve log")
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7).
pub fn http_date(ts: Ts) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // `rfc3339` gives `YYYY-MM-DDTHH:MM:SSZ`; 1970-01-01 was a Thursday.
    let iso = rfc3339(ts);
    let weekday = DAYS[(ts.div_euclid(86_400) + 4).rem_euclid(7) as usize];
    let month = iso
        .get(5..7)
        .and_then(|m| m.parse::<usize>().ok())
        .and_then(|m| MONTHS.get(m.wrapping_sub(1)))
        .copied()
        .unwrap_or("Jan");
    format!(
        "{weekday}, {} {month} {} {} GMT",
        iso.get(8..10).unwrap_or("01"),
        iso.get(0..4).unwrap_or("1970"),
        iso.get(11..19).unwrap_or("00:00:00"),
    )
}

#[cfg(test)]
mod tests;
