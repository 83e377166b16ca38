//! Closing a connection so that the client reads its answer: nginx's lingering close.
//!
//! A server that answers before it has read the whole request (a refusal over a connection cap, a `413` or a
//! `503` decided from the head) and then closes its socket with request bytes still unread makes the kernel send a
//! reset, and so does a closed socket that receives more of the body. A reset can destroy the answer before the
//! client reads it, and fails a client still writing its body (`Can not write request body`): it never learns it
//! was told to come back. So a connection is closed by ending the sending side (the client reads the answer, then
//! end of stream), then reading and discarding what the client still sends until it closes, within a bound in
//! bytes and in time so that a client that never closes costs little.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
    sync::oneshot,
};

/// How much a lingering close reads and discards at most, and for how long.
#[derive(Debug, Clone, Copy)]
pub(super) struct Linger {
    pub(super) max_bytes: usize,
    pub(super) max_time: Duration,
}

/// A served connection (hyper's) after its last answer: the client may still be sending a body the answer did
/// not need (a `413` or `503` decided from the head). 4 MiB covers four times the largest body the default
/// limits accept; 2 s covers a client's round trip from writing to reading.
pub(super) const SERVED: Linger = Linger { max_bytes: 4 * 1024 * 1024, max_time: Duration::from_secs(2) };

/// Ends the sending side of `stream`, then reads and discards what the client sends until it closes (at most
/// `limit.max_bytes` within `limit.max_time`), then closes. A client that has already closed costs one read.
pub(super) async fn close(mut stream: TcpStream, limit: Linger) {
    let _ = tokio::time::timeout(limit.max_time, async {
        stream.shutdown().await?;
        discard(&mut stream, limit.max_bytes).await
    })
    .await;
}

/// Reads and discards until end of stream or `max_bytes`.
pub(super) async fn discard(stream: &mut TcpStream, max_bytes: usize) -> io::Result<()> {
    let mut buffer = [0_u8; 4096];
    let mut discarded = 0;
    while discarded < max_bytes {
        match stream.read(&mut buffer).await? {
            0 => break,
            n => discarded += n,
        }
    }
    Ok(())
}

/// The stream hyper serves, handed back when hyper drops it, so that the accept loop can close it with
/// [`close`] (hyper closes a connection whose request body it did not read at once).
#[derive(Debug)]
pub(super) struct Returning {
    stream: Option<TcpStream>,
    back: Option<oneshot::Sender<TcpStream>>,
}

impl Returning {
    /// `stream` for hyper, and where it comes back once hyper is done with it.
    pub(super) fn new(stream: TcpStream) -> (Self, oneshot::Receiver<TcpStream>) {
        let (back, returned) = oneshot::channel();
        (Self { stream: Some(stream), back: Some(back) }, returned)
    }

    fn stream(&mut self) -> io::Result<&mut TcpStream> {
        self.stream.as_mut().ok_or_else(|| io::ErrorKind::NotConnected.into())
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let (Some(stream), Some(back)) = (self.stream.take(), self.back.take()) {
            // The receiver is gone only if the connection's task is: the stream is then closed here.
            let _ = back.send(stream);
        }
    }
}

impl AsyncRead for Returning {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_read(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}

impl AsyncWrite for Returning {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_write(cx, buf),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_flush(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(stream) => Pin::new(stream).poll_shutdown(cx),
            Err(error) => Poll::Ready(Err(error)),
        }
    }
}
