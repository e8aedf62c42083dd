//! A client socket of `orch serve` as hyper sees it: a `TcpStream` with the two things hyper does
//! not do itself. A write that makes no progress for [`WRITE_TIMEOUT`] fails, so a client that
//! stops reading gives up its connection; and a socket closed while the client is still sending
//! (an answer given without reading the whole body: 413, 408, 417…) first sends its end and
//! reads the rest away for a moment, because closing with unread data makes the kernel send a
//! reset, which can destroy the answer before the client has read it.
//!
//! It knows nothing of HTTP; the deadlines on reading a request are hyper's (the head) and the
//! exchange's (the body).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::shared::{BODY_LIMIT, WRITE_TIMEOUT};

/// How long a closed connection keeps reading what the client still sends.
const LINGER: Duration = Duration::from_secs(2);

/// The stream and the deadline of a write in progress.
pub(super) struct Socket {
    /// `None` only once dropped.
    stream: Option<TcpStream>,
    write_deadline: Option<Pin<Box<Sleep>>>,
}

impl Socket {
    pub(super) fn new(stream: TcpStream) -> Socket {
        Socket {
            stream: Some(stream),
            write_deadline: None,
        }
    }

    fn stream(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match self.stream.as_mut() {
            Some(s) => Ok(Pin::new(s)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// After a write returned `Pending`: fail it once the client has not taken a byte for
    /// [`WRITE_TIMEOUT`].
    fn write_pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let deadline = self
            .write_deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_TIMEOUT)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read the answer in time",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn written<T>(&mut self, got: io::Result<T>) -> Poll<io::Result<T>> {
        self.write_deadline = None;
        Poll::Ready(got)
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.stream()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.stream()?.poll_write(cx, buf) {
            Poll::Ready(got) => self.written(got),
            Poll::Pending => self.write_pending(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.stream()?.poll_write_vectored(cx, bufs) {
            Poll::Ready(got) => self.written(got),
            Poll::Pending => self.write_pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream()?.poll_shutdown(cx)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            linger(stream);
        }
    }
}

/// Close `stream`, gently when the client is still sending: nothing waiting to be read closes
/// at once (the kernel then sends an ordinary FIN); otherwise a task sends our FIN and reads
/// and discards for up to [`LINGER`] before the socket is closed.
fn linger(stream: TcpStream) {
    let mut probe = [0u8; 1];
    match stream.try_read(&mut probe) {
        Ok(1..) => {}
        // Closed by the client, nothing pending, or broken: a plain close is right.
        Ok(0) | Err(_) => return,
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut stream = stream;
        let _ = stream.shutdown().await;
        let until = Instant::now() + LINGER;
        let mut sink = [0u8; 16 * 1024];
        let mut total = 0usize;
        while total < 4 * BODY_LIMIT {
            match tokio::time::timeout_at(until, stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => total += n,
                _ => break,
            }
        }
    });
}
