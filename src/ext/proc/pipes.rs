//! The byte-moving side of a supervised run. Each helper runs on its own thread: the output
//! pumps (each chunk to the log sink, the stream's ring buffer, the combined ring and, for
//! stdout, the line scan that finds the end marker) and the stdin feeder. They wait in one
//! place only, `ready`: a `poll` on their pipe and on the supervisor's wake pipe, so the
//! supervisor stops them at any moment by hanging the wake pipe up. Our ends of the pipes are
//! nonblocking so that a read or write never waits anywhere else.
//!
//! Deliberately not here: deciding when a run ends, and signalling anyone (`supervised.rs`).
//! One of the two `unsafe` blocks of `src/` is here: the `libc::poll` in `ready`.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::process::ChildStdin;
use std::sync::mpsc::Sender;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use nix::fcntl::{FcntlArg, OFlag, fcntl};

use super::cmd::tail;

/// Lines kept in each tail of a supervised run.
pub const TAIL_KEEP_LINES: usize = 200;

/// Bytes kept in each tail of a supervised run; the tail strings are cut to this size as well.
pub const TAIL_KEEP_BYTES: usize = 64 * 1024;

/// The longest stdout line checked against `Spec::end_marker`. A longer line is checked (and
/// reported as the result line) by its first this-many bytes, so output without newlines cannot
/// grow memory.
pub const MARKER_LINE_CAP: usize = 1024 * 1024;

/// Recognises the stdout line that means a supervised run is done (see `Spec::end_marker`).
pub type EndMarker = Box<dyn Fn(&str) -> bool + Send>;

/// What the helper threads tell the supervisor.
pub(super) enum Event {
    /// The leader has exited; it is a zombie until the supervisor reaps it, so its group id
    /// cannot be handed to anyone else in the meantime.
    LeaderExited,
    /// The end marker was seen (the line is in `Shared::result_line`).
    Marker,
    /// One output stream is finished.
    Closed,
}

/// Size of one read from a child's pipe.
const READ_CHUNK: usize = 64 * 1024;

/// State the output pumps share with the supervisor.
pub(super) struct Shared {
    pub(super) last_output: Mutex<Instant>,
    pub(super) combined: Mutex<Ring>,
    pub(super) result_line: Mutex<Option<String>>,
}

/// Reads one output stream until it ends or the supervisor says stop: every chunk goes to the
/// log, the stream's tail and the combined tail; stdout lines are checked for the end marker.
pub(super) fn pump(
    mut pipe: impl Read + AsFd,
    wake: &impl AsFd,
    shared: &Shared,
    mut log: Option<LogSink>,
    mut scan: Option<LineScan>,
    events: &Sender<Event>,
) -> Ring {
    set_nonblocking(pipe.as_fd());
    let mut ring = Ring::default();
    let mut buf = vec![0; READ_CHUNK];
    while ready(pipe.as_fd(), libc::POLLIN, wake.as_fd()) {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, "reading a supervised child's output");
                break;
            }
        };
        let chunk = &buf[..n];
        *lock(&shared.last_output) = Instant::now();
        if let Some(log) = &mut log {
            log.append(chunk);
        }
        ring.push(chunk);
        lock(&shared.combined).push(chunk);
        if let Some(line) = scan.as_mut().and_then(|s| s.feed(chunk)) {
            marker_found(shared, line, events);
        }
    }
    // A marker printed without a final newline still counts.
    if let Some(line) = scan.as_mut().and_then(LineScan::finish) {
        marker_found(shared, line, events);
    }
    let _ = events.send(Event::Closed);
    ring
}

fn marker_found(shared: &Shared, line: String, events: &Sender<Event>) {
    lock(&shared.result_line).get_or_insert(line);
    let _ = events.send(Event::Marker);
}

/// Writes `bytes` to the child's stdin, then closes it (by dropping the pipe). A child that exits
/// or closes its stdin without reading everything is not an error: its exit says whether that
/// mattered.
pub(super) fn feed(pipe: ChildStdin, bytes: &[u8], wake: &impl AsFd) {
    let mut pipe = pipe;
    set_nonblocking(pipe.as_fd());
    let mut rest = bytes;
    while !rest.is_empty() && ready(pipe.as_fd(), libc::POLLOUT, wake.as_fd()) {
        match pipe.write(rest) {
            Ok(0) => break,
            Ok(n) => rest = &rest[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
}

/// Waits until `fd` is ready for `events`, or has hung up or failed (which the next read or write
/// reports). Returns false once `wake` hangs up: the supervisor telling its helpers to stop.
fn ready(fd: BorrowedFd<'_>, events: libc::c_short, wake: BorrowedFd<'_>) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is an initialised array of exactly `fds.len()` pollfd structs that lives
        // across the call, and both descriptors are borrowed, so they stay open during it.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            tracing::warn!(error = %e, "cannot poll a supervised child's pipe");
            return false;
        }
        if fds[1].revents != 0 {
            return false;
        }
        if fds[0].revents != 0 {
            return true;
        }
    }
}

/// Our end of a pipe never blocks, so a helper only ever waits in `ready`, where the supervisor
/// can stop it. If this fails the helper still works; it may just be stopped later.
fn set_nonblocking(fd: BorrowedFd<'_>) {
    let result = fcntl(fd, FcntlArg::F_GETFL).and_then(|flags| {
        let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
        fcntl(fd, FcntlArg::F_SETFL(flags))
    });
    if let Err(e) = result {
        tracing::debug!(error = %e, "cannot make a pipe non-blocking");
    }
}

pub(super) fn open_log(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::ext::sys::private_dir(dir, 0o750).map_err(std::io::Error::other)?;
    }
    // A log may hold what a child printed: not for every local user, whatever the umask.
    std::os::unix::fs::OpenOptionsExt::mode(OpenOptions::new().create(true).append(true), 0o640)
        .open(path)
}

/// One stream's handle on the run log. A failed write is reported once and ends logging for the
/// stream; the run itself goes on.
pub(super) struct LogSink {
    file: Option<File>,
    path: PathBuf,
}

impl LogSink {
    pub(super) fn new(file: File, path: PathBuf) -> Self {
        LogSink {
            file: Some(file),
            path,
        }
    }

    fn append(&mut self, chunk: &[u8]) {
        if let Some(file) = &mut self.file
            && let Err(e) = file.write_all(chunk)
        {
            tracing::warn!(log = %self.path.display(), error = %e, "cannot append to a run log; the rest of this stream is not logged");
            self.file = None;
        }
    }
}

pub(super) fn join_ring(handle: Option<JoinHandle<Ring>>) -> Ring {
    // A pump that panicked (say, in the caller's end marker) leaves an empty tail, not a panic.
    handle.and_then(|h| h.join().ok()).unwrap_or_default()
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The last [`TAIL_KEEP_BYTES`] bytes of a stream.
#[derive(Default)]
pub(super) struct Ring {
    bytes: VecDeque<u8>,
}

impl Ring {
    fn push(&mut self, chunk: &[u8]) {
        let chunk = &chunk[chunk.len().saturating_sub(TAIL_KEEP_BYTES)..];
        let excess = (self.bytes.len() + chunk.len()).saturating_sub(TAIL_KEEP_BYTES);
        self.bytes.drain(..excess);
        self.bytes.extend(chunk);
    }

    /// The last [`TAIL_KEEP_LINES`] lines, lossily decoded and cut to [`TAIL_KEEP_BYTES`] bytes
    /// (invalid bytes decode to three-byte replacement characters, so the text can outgrow them).
    pub(super) fn text(&mut self) -> String {
        let text = tail(self.bytes.make_contiguous(), TAIL_KEEP_LINES);
        if text.len() <= TAIL_KEEP_BYTES {
            return text;
        }
        let mut cut = text.len() - TAIL_KEEP_BYTES;
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text[cut..].to_string()
    }
}

/// Splits stdout into lines (each kept to [`MARKER_LINE_CAP`] bytes) and finds the first one the
/// end marker recognises.
pub(super) struct LineScan {
    is_end: EndMarker,
    line: Vec<u8>,
    found: bool,
}

impl LineScan {
    pub(super) fn new(is_end: EndMarker) -> Self {
        LineScan {
            is_end,
            line: Vec::new(),
            found: false,
        }
    }

    /// Takes the next chunk of stdout; returns the marker line if it completes in this chunk.
    fn feed(&mut self, chunk: &[u8]) -> Option<String> {
        if self.found {
            return None;
        }
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            let (body, complete) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            let room = MARKER_LINE_CAP.saturating_sub(self.line.len());
            self.line.extend_from_slice(&body[..body.len().min(room)]);
            if complete {
                let found = self.check();
                self.line.clear();
                if found.is_some() {
                    return found;
                }
            }
        }
        None
    }

    /// At the end of the stream: checks a last line that had no newline.
    fn finish(&mut self) -> Option<String> {
        if self.found || self.line.is_empty() {
            return None;
        }
        let found = self.check();
        self.line.clear();
        found
    }

    fn check(&mut self) -> Option<String> {
        let text = String::from_utf8_lossy(&self.line);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        if (self.is_end)(text) {
            self.found = true;
            Some(text.to_string())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_last_bytes() {
        let mut ring = Ring::default();
        ring.push(b"abc");
        ring.push(&vec![b'y'; TAIL_KEEP_BYTES - 1]);
        assert_eq!(ring.bytes.len(), TAIL_KEEP_BYTES);
        assert_eq!(ring.bytes.front(), Some(&b'c'));
        ring.push(&vec![b'z'; 3 * TAIL_KEEP_BYTES]);
        assert_eq!(ring.bytes.len(), TAIL_KEEP_BYTES);
        assert!(ring.bytes.iter().all(|&b| b == b'z'));
        // Invalid bytes decode to wider replacement characters; the text stays within bounds.
        ring.push(&vec![0xff; TAIL_KEEP_BYTES]);
        let text = ring.text();
        assert!(text.len() <= TAIL_KEEP_BYTES && text.starts_with('\u{fffd}'));
    }

    #[test]
    fn line_scan_finds_the_marker_across_chunks_and_caps_lines() {
        let mut scan = LineScan::new(Box::new(|l: &str| l == "DONE"));
        assert_eq!(scan.feed(b"noise\nDO"), None);
        assert_eq!(scan.feed(b"NE\nDONE\n"), Some("DONE".to_string()));
        assert_eq!(scan.feed(b"DONE\n"), None, "only the first marker counts");

        let mut scan = LineScan::new(Box::new(|l: &str| l.starts_with("xx")));
        assert_eq!(scan.feed(&vec![b'x'; 2 * MARKER_LINE_CAP]), None);
        assert_eq!(scan.line.len(), MARKER_LINE_CAP);
        let line = scan.feed(b"xx\n").unwrap();
        assert_eq!(line.len(), MARKER_LINE_CAP);

        let mut scan = LineScan::new(Box::new(|l: &str| l == "last"));
        assert_eq!(scan.feed(b"first\nlast"), None);
        assert_eq!(scan.finish(), Some("last".to_string()));
    }
}
