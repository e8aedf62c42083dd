//! Tests of the HTTP/1.1 wire on scripted streams: framing from the head, pipelined and split
//! requests, chunked bodies, deadlines, bad heads, and response encoding.

use super::*;
use std::collections::VecDeque;

#[test]
fn frames_the_body_from_the_head() {
    let limit = 1 << 20;
    let cases: &[(&[&str], &[&str], Framing)] = &[
        (&[], &[], Framing::Empty),
        (&["0"], &[], Framing::Empty),
        (&["12"], &[], Framing::Length(12)),
        (&["1048576"], &[], Framing::Length(1048576)),
        (&["1048577"], &[], Framing::TooLarge),
        (&["2097152"], &[], Framing::TooLarge),
        (&["99999999999999999999999"], &[], Framing::TooLarge),
        (&["12", " 12"], &[], Framing::Length(12)),
        (
            &["12", "13"],
            &[],
            Framing::Invalid("conflicting Content-Length headers"),
        ),
        (
            &["-1"],
            &[],
            Framing::Invalid("Content-Length is not a number"),
        ),
        (
            &["1e3"],
            &[],
            Framing::Invalid("Content-Length is not a number"),
        ),
        (
            &[""],
            &[],
            Framing::Invalid("Content-Length is not a number"),
        ),
        (&[], &["chunked"], Framing::Chunked),
        (&[], &[" Chunked "], Framing::Chunked),
        (&[], &["gzip, chunked"], Framing::Unsupported),
        (&[], &["identity"], Framing::Unsupported),
        (
            &["5"],
            &["chunked"],
            Framing::Invalid("both Content-Length and Transfer-Encoding"),
        ),
    ];
    for (cl, te, want) in cases {
        assert_eq!(framing(cl, te, limit), *want, "{cl:?} {te:?}");
    }
}

/// Gives its input in the given pieces, one per read; an empty piece is a read timeout, and
/// an empty last piece stalls for ever.
struct Fake {
    pieces: VecDeque<Vec<u8>>,
    written: Vec<u8>,
}

impl Fake {
    fn new(pieces: &[&[u8]]) -> Conn<Fake> {
        Conn::new(Fake {
            pieces: pieces.iter().map(|p| p.to_vec()).collect(),
            written: Vec::new(),
        })
    }
}

impl Read for Fake {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.pieces.pop_front() {
            None => Ok(0),
            Some(p) if p.is_empty() => {
                if self.pieces.is_empty() {
                    self.pieces.push_back(p);
                }
                Err(io::ErrorKind::WouldBlock.into())
            }
            Some(mut p) => {
                let n = p.len().min(buf.len());
                buf[..n].copy_from_slice(&p[..n]);
                if n < p.len() {
                    self.pieces.push_front(p.split_off(n));
                }
                Ok(n)
            }
        }
    }
}

impl Write for Fake {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.written.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Wire for Fake {
    fn set_read_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn soon() -> Instant {
    Instant::now() + Duration::from_millis(50)
}

#[test]
fn reads_pipelined_requests_split_anywhere() {
    let mut c = Fake::new(&[
        b"POST /webhook/plane HTTP/1.1\r\nContent-Le",
        b"ngth: 5\r\nX-A: 1\r\n\r\nhel",
        b"",
        b"loGET /health HTTP/1.0\r\n\r\n",
    ]);
    let h = c.read_head(later()).unwrap().unwrap();
    assert_eq!(
        (h.method.as_str(), h.target.as_str(), h.minor),
        ("POST", "/webhook/plane", 1)
    );
    assert_eq!(h.values("content-length"), ["5"]);
    assert!(h.keep_alive());
    let body = c.read_body(Framing::Length(5), 100, later()).unwrap();
    assert_eq!(body, b"hello");
    let h = c.read_head(later()).unwrap().unwrap();
    assert_eq!((h.method.as_str(), h.minor), ("GET", 0));
    assert!(!h.keep_alive(), "HTTP/1.0 closes unless asked");
    assert!(c.read_head(later()).unwrap().is_none());
}

#[test]
fn decodes_chunked_bodies_within_the_limit() {
    let mut c = Fake::new(&[b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"]);
    assert_eq!(
        c.read_body(Framing::Chunked, 100, later()).unwrap(),
        b"hello world"
    );
    let mut c = Fake::new(&[b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"]);
    assert!(matches!(
        c.read_body(Framing::Chunked, 10, later()),
        Err(ReadError::TooLarge)
    ));
    for bad in [
        &b"zz\r\nhello\r\n0\r\n\r\n"[..],
        b"5\r\nhelloXX0\r\n\r\n",
        b"fffffffffffffffff\r\n",
        b"\r\n",
    ] {
        let mut c = Fake::new(&[bad]);
        assert!(
            matches!(
                c.read_body(Framing::Chunked, 100, later()),
                Err(ReadError::Malformed(_) | ReadError::TooLarge)
            ),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn a_body_cut_short_or_late_is_refused() {
    let mut c = Fake::new(&[b"abc"]);
    assert!(matches!(
        c.read_body(Framing::Length(5), 100, later()),
        Err(ReadError::Closed)
    ));
    let mut c = Fake::new(&[b"ab", b"", b"c", b""]);
    assert!(matches!(
        c.read_body(Framing::Length(5), 100, soon()),
        Err(ReadError::TimedOut)
    ));
}

#[test]
fn bad_heads_are_told_apart_from_a_quiet_close() {
    assert!(Fake::new(&[]).read_head(later()).unwrap().is_none());
    // An idle keep-alive connection ends quietly at the deadline.
    assert!(Fake::new(&[b""]).read_head(soon()).unwrap().is_none());
    assert!(matches!(
        Fake::new(&[b"NOT HTTP AT ALL\r\n\r\n"]).read_head(later()),
        Err(ReadError::Malformed(_))
    ));
    let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(HEAD_LIMIT + 1));
    assert!(matches!(
        Fake::new(&[huge.as_bytes()]).read_head(later()),
        Err(ReadError::TooLarge)
    ));
    let many: String = (0..MAX_HEADERS + 1)
        .map(|i| format!("X-{i}: 1\r\n"))
        .collect();
    let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
    assert!(matches!(
        Fake::new(&[many.as_bytes()]).read_head(later()),
        Err(ReadError::TooLarge)
    ));
    // A head that stops halfway is a timeout, not a quiet end.
    assert!(matches!(
        Fake::new(&[b"GET /health HT", b""]).read_head(soon()),
        Err(ReadError::TimedOut)
    ));
}

#[test]
fn encodes_a_response() {
    let mut r = Reply::text(405, "method not allowed");
    r.allow = Some("POST");
    let text = String::from_utf8(r.encode(false, true, 784_111_777)).unwrap();
    assert_eq!(
        text,
        "HTTP/1.1 405 Method Not Allowed\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
         Content-Type: text/plain; charset=utf-8\r\nContent-Length: 19\r\n\
         Connection: keep-alive\r\nAllow: POST\r\n\r\nmethod not allowed\n"
    );
    let head_only = String::from_utf8(Reply::text(200, "ok").encode(true, false, 0)).unwrap();
    assert!(
        head_only.ends_with("Content-Length: 3\r\nConnection: close\r\n\r\n"),
        "{head_only}"
    );
}

#[test]
fn http_dates() {
    assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    assert_eq!(http_date(1_796_022_819), "Mon, 30 Nov 2026 07:13:39 GMT");
}
