//! The one fake HTTP server of the tests: HTTP/1.1 on `127.0.0.1:0` in the test process, one
//! thread per connection, every answer `Connection: close` (with the headers a handler adds; or
//! none at all, for a service that accepts and hangs). A handler decides each answer; the
//! server logs every request that reached it and can fail on demand: answer 503 to everything,
//! or stop listening so connections are refused (and come back on the same port).
//!
//! The stateful service fakes (Plane, Gitea, Telegram in [`super::fakes`]) are handlers over it,
//! and so is a scripted endpoint for smoke checks ([`Server::scripted`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The path without its query.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or("")
    }
}

/// One answer.
pub struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// Extra response headers (`Retry-After`, rate-limit headers), in order.
    headers: Vec<(String, String)>,
    /// Never answer: hold the connection open, reading nothing more, until the client gives up
    /// or the server stops (a service that accepts and then hangs).
    hang: bool,
}

impl Reply {
    /// `value` as JSON (`null` is an empty body).
    pub fn json(status: u16, value: &Value) -> Reply {
        let body = if value.is_null() {
            Vec::new()
        } else {
            value.to_string().into_bytes()
        };
        Reply {
            status,
            content_type: "application/json",
            body,
            headers: Vec::new(),
            hang: false,
        }
    }

    pub fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain",
            body: body.as_bytes().to_vec(),
            headers: Vec::new(),
            hang: false,
        }
    }

    /// A server-sent event stream (`text/event-stream`), sent whole.
    pub fn event_stream(body: String) -> Reply {
        Reply {
            status: 200,
            content_type: "text/event-stream",
            body: body.into_bytes(),
            headers: Vec::new(),
            hang: false,
        }
    }

    /// An answer that never comes: the connection stays open and silent.
    pub fn hang() -> Reply {
        Reply {
            hang: true,
            ..Reply::text(200, "")
        }
    }

    /// The same answer with one more response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// How the fake answers right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Up,
    /// Every request gets `503 Service Unavailable`.
    Unavailable,
    /// Nothing listens: connections are refused.
    Refusing,
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

pub struct Server {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
    /// Every request that reached the handler (not the 503s), in order.
    log: Arc<Mutex<Vec<Request>>>,
    accept: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Server {
    pub fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a fake");
        let addr = listener.local_addr().unwrap();
        let s = Server {
            addr,
            mode: Arc::new(Mutex::new(Mode::Up)),
            stop: Arc::new(AtomicBool::new(false)),
            handler: Arc::new(handler),
            log: Arc::new(Mutex::new(Vec::new())),
            accept: Mutex::new(None),
        };
        s.serve(listener);
        s
    }

    /// A server whose handler answers `(status, JSON)`.
    pub fn json(handler: impl Fn(&Request) -> (u16, Value) + Send + Sync + 'static) -> Server {
        Server::start(move |r| {
            let (status, value) = handler(r);
            Reply::json(status, &value)
        })
    }

    /// Each request gets the next of `answers` as `text/plain` (the last one repeats): a
    /// stateful endpoint, so a retry that should not happen would get a different answer.
    pub fn scripted(answers: &[(u16, &str)]) -> Server {
        let answers: Vec<(u16, String)> =
            answers.iter().map(|(s, b)| (*s, b.to_string())).collect();
        assert!(!answers.is_empty(), "a scripted fake needs an answer");
        let next = AtomicUsize::new(0);
        Server::start(move |_| {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let (status, body) = &answers[i.min(answers.len() - 1)];
            Reply::text(*status, body)
        })
    }

    fn serve(&self, listener: TcpListener) {
        let stop = self.stop.clone();
        stop.store(false, Ordering::SeqCst);
        let mode = self.mode.clone();
        let handler = self.handler.clone();
        let log = self.log.clone();
        let t = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (mode, handler, log, stop) =
                    (mode.clone(), handler.clone(), log.clone(), stop.clone());
                std::thread::spawn(move || {
                    let _ = handle(conn, &mode, &*handler, &log, &stop);
                });
            }
        });
        *self.accept.lock().unwrap() = Some(t);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }

    /// Switch how the fake answers; `Refusing` closes the port, leaving it reopens it.
    pub fn set_mode(&self, m: Mode) {
        let was = std::mem::replace(&mut *self.mode.lock().unwrap(), m);
        match (was == Mode::Refusing, m == Mode::Refusing) {
            (false, true) => {
                self.stop.store(true, Ordering::SeqCst);
                // Wake the accept loop so it sees the flag and drops the listener.
                let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2));
                if let Some(t) = self.accept.lock().unwrap().take() {
                    t.join().unwrap();
                }
            }
            (true, false) => {
                let mut listener = None;
                let mut error = None;
                let bound = super::poll(Duration::from_secs(5), Duration::from_millis(50), || {
                    match TcpListener::bind(self.addr) {
                        Ok(l) => listener = Some(l),
                        Err(e) => error = Some(e),
                    }
                    listener.is_some()
                });
                assert!(bound, "cannot listen on {} again: {error:?}", self.addr);
                self.serve(listener.unwrap());
            }
            _ => {}
        }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }

    /// How many requests reached the handler.
    pub fn hits(&self) -> usize {
        self.log.lock().unwrap().len()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.mode() != Mode::Refusing {
            self.set_mode(Mode::Refusing);
        }
    }
}

fn handle(
    conn: TcpStream,
    mode: &Mutex<Mode>,
    handler: &Handler,
    log: &Mutex<Vec<Request>>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(());
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len.min(4 << 20)];
    reader.read_exact(&mut body)?;
    let req = Request {
        method,
        path,
        headers,
        body,
    };
    let reply = if *mode.lock().unwrap() == Mode::Unavailable {
        Reply::json(503, &json!({"error": "unavailable"}))
    } else {
        log.lock().unwrap().push(req.clone());
        handler(&req)
    };
    if reply.hang {
        // Hold the connection until the client closes it (a read returns) or the fake stops.
        conn.set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut byte = [0u8; 1];
        let mut c = &conn;
        while !stop.load(Ordering::SeqCst) {
            match c.read(&mut byte) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(_) => break,
            }
        }
        return Ok(());
    }
    let reason = match reply.status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        423 => "Locked",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Site Overloaded",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = conn;
    out.write_all(head.as_bytes())?;
    out.write_all(&reply.body)?;
    out.flush()
}
