//! `orch serve` end to end: the real binary on `127.0.0.1:0` in a temp world, driven over raw TCP
//! so every byte on the wire (a `100 Continue` that must not appear, a connection that must
//! close) can be checked. Covers the order of checks of SPEC §8, signed and unsigned deliveries,
//! `/queue` and `/metrics`, slow and hostile clients, and a clean stop on SIGTERM/SIGINT.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::webhooks::{PLANE_PROJECT, plane_issue, sign};
use crate::support::{World, poll, webhooks};
use serde_json::{Value, json};

const PLANE_VAR: &str = "ORCH_TEST_SERVE_PLANE_SECRET";
const PLANE_SECRET: &str = "serve-plane-secret";

/// A world whose repo `shop` is Plane project `PLANE_PROJECT`, its tracker secret in
/// `PLANE_VAR`.
fn world() -> World {
    let w = World::with_repo_extra(&format!("plane_project: {PLANE_PROJECT}"));
    w.append_config(&format!(
        "tracker:\n  kind: plane\n  webhook_secret_env: {PLANE_VAR}\n"
    ));
    w
}

/// A running `orch serve`, killed on drop if a test failed before stopping it.
struct Server {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn start(w: &World) -> Server {
        let mut child = w
            .orch_cmd(&["serve", "--listen", "127.0.0.1:0"])
            .env(PLANE_VAR, PLANE_SECRET)
            .env("ORCH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("orch serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut addr = None;
        for line in lines.by_ref() {
            let line = line.unwrap();
            stderr.lock().unwrap().push_str(&format!("{line}\n"));
            if let Some(a) = line.strip_prefix("listening on ") {
                addr = Some(a.trim().parse().expect("a socket address"));
                break;
            }
        }
        let addr = addr.unwrap_or_else(|| {
            let _ = child.kill();
            panic!(
                "no `listening on` line; stderr:\n{}",
                stderr.lock().unwrap()
            )
        });
        // Keep draining stderr so the server never blocks on a full pipe.
        let sink = stderr.clone();
        thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Server {
            child,
            addr,
            stderr,
        }
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Send `signal`, wait for the exit (at most `within`), return the exit code.
    fn stop(&mut self, signal: nix::sys::signal::Signal, within: Duration) -> i32 {
        self.signal(signal);
        self.exit_code(signal, within)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    /// Wait for the exit that `signal` asked for (at most `within`); the exit code.
    fn exit_code(&mut self, signal: nix::sys::signal::Signal, within: Duration) -> i32 {
        let mut code = None;
        let exited = poll(within, Duration::from_millis(20), || {
            code = self
                .child
                .try_wait()
                .unwrap()
                .map(|s| s.code().unwrap_or(-1));
            code.is_some()
        });
        assert!(
            exited,
            "orch serve still running {within:?} after {signal}; log:\n{}",
            self.log()
        );
        code.unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One parsed response.
#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Read one response (head and `Content-Length` body) from `r`.
fn read_response(r: &mut BufReader<TcpStream>) -> Resp {
    let mut line = String::new();
    r.read_line(&mut line).expect("a status line");
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':').expect("a header line");
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    Resp {
        status,
        headers,
        body,
    }
}

/// Send `raw` on a fresh connection and read one response.
fn raw(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = connect(addr);
    s.write_all(raw).unwrap();
    read_response(&mut BufReader::new(s))
}

fn get(addr: SocketAddr, path: &str) -> Resp {
    raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

fn post(addr: SocketAddr, path: &str, headers: &[(&str, String)], body: &[u8]) -> Resp {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(addr, &bytes)
}

/// Plane's issue payload moving issue `seq` to `state`.
fn issue(seq: u64, state: &str) -> Vec<u8> {
    plane_issue(seq, state, "Add a health endpoint", &[])
}

/// The headers of a Plane delivery signed with the secret the server knows.
fn signed_headers(delivery: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    webhooks::signed_headers("plane", delivery, "issue", PLANE_SECRET, body)
}

/// Whether the server has closed `s` (EOF within a few seconds, nothing else sent).
fn closed_by_server(s: &mut BufReader<TcpStream>) -> bool {
    s.get_ref()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).is_ok() && rest.is_empty()
}

#[test]
fn health_unknown_paths_and_wrong_methods_are_answered_in_order() {
    let w = world();
    let s = Server::start(&w);
    let r = get(s.addr, "/health");
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"), "{r:?}");

    let r = get(s.addr, "/nope");
    assert_eq!(r.status, 404, "{r:?}");

    let r = get(s.addr, "/webhook/plane");
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.header("Allow"), Some("POST"));
    let r = post(s.addr, "/metrics", &[], b"{}");
    assert_eq!(r.status, 405, "{r:?}");
    assert_eq!(r.header("Allow"), Some("GET, HEAD"));

    // Method and path come before size: an oversize POST to an unknown path is a 404.
    let r = raw(
        s.addr,
        b"POST /nope HTTP/1.1\r\nHost: t\r\nContent-Length: 2097152\r\nExpect: 100-continue\r\n\r\n",
    );
    assert_eq!(r.status, 404, "{r:?}");
}

#[test]
fn a_declared_oversize_body_gets_413_without_100_continue_and_the_connection_closes() {
    let w = world();
    let s = Server::start(&w);
    let mut c = connect(s.addr);
    c.write_all(
        b"POST /webhook/plane HTTP/1.1\r\nHost: t\r\nContent-Length: 2097152\r\n\
          Expect: 100-continue\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let mut first = String::new();
    r.read_line(&mut first).unwrap();
    assert!(
        first.starts_with("HTTP/1.1 413 "),
        "the first thing sent must be the 413, not `100 Continue`: {first:?}"
    );
    // Read the rest of the 413 and check the server hangs up without ever sending a 100.
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    let rest = String::from_utf8_lossy(&rest);
    assert!(!rest.contains("100 Continue"), "{rest}");
    assert!(rest.contains("Connection: close"), "{rest}");
    assert!(rest.contains("over the limit"), "{rest}");

    // Nothing was stored, nothing got hurt.
    assert_eq!(w.sql("SELECT count(*) FROM events"), "0");
    assert_eq!(get(s.addr, "/health").status, 200);
}

#[test]
fn a_chunked_body_over_the_limit_gets_413_once_it_passes_the_limit() {
    let w = world();
    let s = Server::start(&w);
    // No size in the head: the body is read until it passes 1 MiB, then refused.
    let mut c = connect(s.addr);
    c.write_all(b"POST /webhook/plane HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    let chunk = vec![b'x'; 256 * 1024];
    for _ in 0..5 {
        // The server may stop reading (and answer) before the last chunk is out.
        let _ = c.write_all(format!("{:x}\r\n", chunk.len()).as_bytes());
        let _ = c.write_all(&chunk);
        let _ = c.write_all(b"\r\n");
    }
    let mut r = BufReader::new(c);
    let resp = read_response(&mut r);
    assert_eq!(resp.status, 413, "{resp:?}");
    assert!(resp.text().contains("over the limit"), "{}", resp.text());
    assert_eq!(resp.header("Connection"), Some("close"));

    // The same body within the limit, in the same chunks, is read and goes to ingest (an
    // unsigned delivery: 401), so the 413 above came from the size alone.
    let mut c = connect(s.addr);
    c.write_all(
        b"POST /webhook/plane HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    for _ in 0..4 {
        c.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .unwrap();
        c.write_all(&chunk).unwrap();
        c.write_all(b"\r\n").unwrap();
    }
    c.write_all(b"0\r\n\r\n").unwrap();
    let resp = read_response(&mut BufReader::new(c));
    assert_eq!(resp.status, 401, "{resp:?}");

    assert_eq!(w.sql("SELECT outcome FROM events"), "rejected");
    assert_eq!(get(s.addr, "/health").status, 200);
}

/// Whether the server closes `s` within `within` without sending anything.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).is_ok() && rest.is_empty()
}

#[test]
fn a_head_not_sent_in_time_and_an_idle_connection_are_closed_after_5s() {
    let w = world();
    let s = Server::start(&w);
    let t = Instant::now();
    // Half a head, then nothing.
    let mut half = connect(s.addr);
    half.write_all(b"POST /webhook/plane HTTP/1.1\r\nHost: t\r\nContent-Le")
        .unwrap();
    // One exchange, then an idle keep-alive connection.
    let mut idle = connect(s.addr);
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut idle = BufReader::new(idle);
    let r = read_response(&mut idle);
    assert_eq!(
        (r.status, r.header("Connection")),
        (200, Some("keep-alive"))
    );

    assert!(
        closed_within(&mut half, Duration::from_secs(15)),
        "half a head must be dropped without an answer"
    );
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(4500) && took < Duration::from_secs(10),
        "the head deadline is 5 s: {took:?}"
    );
    assert!(closed_within(idle.get_mut(), Duration::from_secs(10)));
    // Neither hurt anyone.
    assert_eq!(get(s.addr, "/health").status, 200);
}

#[test]
fn sigterm_lets_a_request_in_flight_finish_and_exits_0() {
    let w = world();
    let mut s = Server::start(&w);
    let body = issue(11, "In Progress");
    // `100 Continue` tells that the exchange is under way: the head is in and the server waits
    // for the body.
    let mut c = connect(s.addr);
    let mut head =
        "POST /webhook/plane HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n".to_string();
    for (n, v) in signed_headers("in-flight", &body) {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    c.write_all(head.as_bytes()).unwrap();
    let mut r = BufReader::new(c);
    assert_eq!(read_response(&mut r).status, 100);

    s.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        poll(Duration::from_secs(10), Duration::from_millis(20), || s
            .log()
            .contains("stopping")),
        "the stop has begun; log:\n{}",
        s.log()
    );
    // Nothing new is accepted once the stop has begun.
    assert!(
        poll(Duration::from_secs(5), Duration::from_millis(20), || {
            TcpStream::connect(s.addr).is_err()
        }),
        "still listening during the stop"
    );
    r.get_mut().write_all(&body).unwrap();
    let done = read_response(&mut r);
    assert_eq!(done.status, 200, "{done:?}");
    assert!(done.text().starts_with("ignored"), "{}", done.text());
    assert_eq!(done.header("Connection"), Some("close"));

    let code = s.exit_code(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(10));
    assert_eq!(code, 0, "log:\n{}", s.log());
    assert_eq!(
        w.sql("SELECT delivery_id || ' ' || outcome FROM events"),
        "in-flight ignored"
    );
}

#[test]
fn deliveries_run_the_ingest_path_unsigned_401_signed_creates_the_task() {
    let w = world();
    let s = Server::start(&w);
    let body = issue(7, "To Analyse");

    let r = post(
        s.addr,
        "/webhook/plane",
        &[("X-Plane-Delivery", "u-1".into())],
        &body,
    );
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.text().starts_with("rejected: "), "{}", r.text());
    let r = post(
        s.addr,
        "/webhook/plane",
        &[
            ("X-Plane-Delivery", "f-1".into()),
            ("X-Plane-Signature", sign("not-the-secret", &body)),
        ],
        &body,
    );
    assert_eq!(r.status, 401, "{r:?}");
    let tasks = w.ok(&["task", "list", "--json"], 0).json();
    assert_eq!(
        tasks["tasks"],
        json!([]),
        "no task from a rejected delivery"
    );

    // Expect: 100-continue with an acceptable size: the 100 comes, then the answer.
    let mut c = connect(s.addr);
    let mut head =
        "POST /webhook/plane HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n".to_string();
    for (n, v) in signed_headers("d-7", &body) {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    c.write_all(head.as_bytes()).unwrap();
    let mut r = BufReader::new(c);
    let cont = read_response(&mut r);
    assert_eq!(cont.status, 100, "{cont:?}");
    r.get_mut().write_all(&body).unwrap();
    let done = read_response(&mut r);
    assert!(matches!(done.status, 200 | 202), "{done:?}");
    assert!(done.text().starts_with("processed"), "{}", done.text());

    let tasks = w.ok(&["task", "list", "--json"], 0).json();
    let list = tasks["tasks"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{tasks:#}");
    assert_eq!(list[0]["work_item"], "SHOP-7");

    // The same delivery again is a duplicate; every delivery has its inbox row.
    let r = post(
        s.addr,
        "/webhook/plane",
        &signed_headers("d-7", &body),
        &body,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text().starts_with("duplicate"), "{}", r.text());
    assert_eq!(
        w.sql("SELECT outcome FROM events ORDER BY id"),
        "rejected\nrejected\nprocessed\nduplicate"
    );

    // /queue is the `orch queue --json` document; /metrics sees the new task and its job.
    let q = get(s.addr, "/queue");
    assert_eq!(q.status, 200);
    assert_eq!(q.header("Content-Type"), Some("application/json"));
    let q = q.json();
    let cli = w.ok(&["queue", "--json"], 0).json();
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&q), keys(&cli));
    assert_eq!(q["schema_version"], 1);
    assert_eq!(q["queued"][0]["work_item"], "SHOP-7", "{q:#}");
    assert_eq!(q["tasks"], cli["tasks"]);

    // /metrics answers the Prometheus text format; the JSON document moved to /metrics.json.
    let p = get(s.addr, "/metrics");
    assert_eq!(p.status, 200);
    assert_eq!(
        p.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = p.text();
    assert!(text.contains("# TYPE orch_tasks gauge"), "{text}");
    assert!(text.contains("orch_tasks{stage=\"analysis\"} 1"), "{text}");
    assert!(text.contains("orch_jobs{status=\"queued\"} 1"), "{text}");
    let m = get(s.addr, "/metrics.json").json();
    assert_eq!(m["schema_version"], 1, "{m:#}");
    assert!(m["generated_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(m["stages"]["analysis"]["count"], 1, "{m:#}");
    assert!(m["stages"]["analysis"]["oldest_age_s"].as_i64().unwrap() >= 0);
    assert_eq!(m["stages"]["development"]["count"], 0);
    assert_eq!(m["queue"]["queued"], 1, "{m:#}");
    assert_eq!(m["queue"]["running"], 0);
    assert_eq!(m["agents"], json!([]));
    assert_eq!(m["cost"]["total_usd"], 0.0);
}

#[test]
fn malformed_requests_get_4xx_and_leave_the_server_serving() {
    let w = world();
    let s = Server::start(&w);
    let cases: &[(&[u8], u16)] = &[
        (b"HELLO\r\n\r\n", 400),
        (b"GET /health HTTP/9.9\r\n\r\n", 400),
        (
            b"POST /webhook/plane HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
            400,
        ),
        (
            b"POST /webhook/plane HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
            400,
        ),
        // RFC 9112 §6.1: a coding list that does not end in chunked cannot be framed (400);
        // one that does but holds another coding is not supported (501).
        (
            b"POST /webhook/plane HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            400,
        ),
        (
            b"POST /webhook/plane HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            501,
        ),
        (
            b"POST /webhook/plane HTTP/1.1\r\nContent-Length: 2\r\nExpect: magic\r\n\r\nhi",
            417,
        ),
        (
            b"POST /webhook/plane HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
        ),
    ];
    for (req, want) in cases {
        let r = raw(s.addr, req);
        assert_eq!(r.status, *want, "{}: {r:?}", String::from_utf8_lossy(req));
    }
    // Content-Length and Transfer-Encoding together: the body is read as chunked alone and
    // the connection is closed after the answer (RFC 9112 §6.1), so no second request can be
    // smuggled in behind a length a proxy believed.
    let mut c = connect(s.addr);
    c.write_all(
        b"POST /webhook/plane HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\
          Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: t\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let resp = read_response(&mut r);
    assert_eq!(resp.status, 401, "an empty, unsigned body: {resp:?}");
    assert!(
        resp.header("Connection").unwrap_or("").contains("close"),
        "{resp:?}"
    );
    assert!(
        closed_by_server(&mut r),
        "the pipelined GET must not be answered"
    );

    let huge = format!(
        "GET /health HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    assert_eq!(raw(s.addr, huge.as_bytes()).status, 431);
    // A client that connects and sends half a body, then goes away, hurts nobody.
    let mut c = connect(s.addr);
    c.write_all(b"POST /webhook/plane HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc")
        .unwrap();
    drop(c);

    // Keep-alive and pipelining on one connection still work after all that.
    let mut c = connect(s.addr);
    c.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    assert_eq!(read_response(&mut r).status, 200);
    let second = read_response(&mut r);
    assert_eq!(second.status, 404);
    assert_eq!(second.header("Connection"), Some("keep-alive"));
    r.get_mut()
        .write_all(b"HEAD /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut head = String::new();
    r.read_to_string(&mut head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head:?}");
    assert!(head.contains("Content-Length: 3"), "{head}");
}

/// Send a head declaring a 100-byte body, then one byte a second until the server answers;
/// returns the answer (or panics after `limit`).
fn drip(addr: SocketAddr, limit: Duration) -> Resp {
    let mut c = connect(addr);
    c.write_all(b"POST /webhook/plane HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    loop {
        let _ = c.write_all(b"x");
        let mut buf = [0u8; 1024];
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
        if got.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
        assert!(started.elapsed() < limit, "no answer to a slow client");
    }
    let mut r = BufReader::new(std::io::Cursor::new(got));
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Resp {
        status,
        headers: Vec::new(),
        body: Vec::new(),
    }
}

#[test]
fn slow_clients_hold_no_worker_and_time_out_with_408() {
    let w = world();
    let s = Server::start(&w);
    let addr = s.addr;
    // More slow clients than workers: if a slow body held a worker, nothing else would run.
    let slow: Vec<_> = (0..10)
        .map(|_| thread::spawn(move || drip(addr, Duration::from_secs(20))))
        .collect();
    thread::sleep(Duration::from_millis(300));

    let fast: Vec<_> = (0..20)
        .map(|_| {
            thread::spawn(move || {
                let t = Instant::now();
                let r = get(addr, "/health");
                (r.status, t.elapsed())
            })
        })
        .collect();
    for f in fast {
        let (status, took) = f.join().unwrap();
        assert_eq!(status, 200);
        assert!(took < Duration::from_secs(2), "/health took {took:?}");
    }
    // Work that needs a worker is answered promptly too.
    let t = Instant::now();
    let m = get(addr, "/metrics");
    assert_eq!(m.status, 200);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let body = issue(9, "In Progress");
    let t = Instant::now();
    let r = post(
        addr,
        "/webhook/plane",
        &signed_headers("slow-test", &body),
        &body,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    for h in slow {
        assert_eq!(h.join().unwrap().status, 408);
    }
}

#[test]
fn a_slow_client_gets_408_and_its_connection_closed() {
    let w = world();
    let s = Server::start(&w);
    let mut c = connect(s.addr);
    c.write_all(b"POST /webhook/plane HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nab")
        .unwrap();
    let t = Instant::now();
    let mut r = BufReader::new(c);
    let resp = read_response(&mut r);
    assert_eq!(resp.status, 408, "{resp:?}");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(13),
        "the body deadline is 10 s: {took:?}"
    );
    assert!(closed_by_server(&mut r));
}

#[test]
fn sigterm_and_sigint_stop_the_server_cleanly() {
    let w = world();
    for signal in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let mut s = Server::start(&w);
        // An idle keep-alive connection must not hold the stop up.
        let mut idle = connect(s.addr);
        idle.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut idle = BufReader::new(idle);
        assert_eq!(read_response(&mut idle).status, 200);
        let code = s.stop(signal, Duration::from_secs(5));
        assert_eq!(code, 0, "{signal}: log:\n{}", s.log());
        assert!(
            TcpStream::connect(s.addr).is_err(),
            "nothing listens after the stop"
        );
    }
}

#[test]
fn a_taken_address_is_an_error_naming_it() {
    let w = world();
    let s = Server::start(&w);
    let r = w.orch(&["serve", "--listen", &s.addr.to_string()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(&format!("cannot listen on `{}`", s.addr)),
        "{r:?}"
    );
}
