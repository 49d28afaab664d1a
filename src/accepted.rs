//! An accepted TCP connection as the plain listener hands it on
//! (`listener → [accepted] → hyper → a WebSocket upgrade`): the socket with
//! what still counts it as the server's connection, and the bytes already
//! read from it put back in front ([`Prefixed`]). A WebSocket session takes
//! the socket back from hyper after its upgrade ([`Accepted::take`]) to
//! share it with the publishers that write its changes themselves
//! (`transports::ws::direct`).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// An accepted socket, counted as a connection of the server (for shutdown,
/// and against its IP and the ceiling) until it is dropped.
pub(crate) struct Accepted {
    pub(crate) io: TcpStream,
    /// What counts the connection, released when the socket is dropped.
    _counted: Box<dyn Send + Sync>,
}

impl Accepted {
    pub(crate) fn new(io: TcpStream, counted: Box<dyn Send + Sync>) -> Self {
        Self {
            io,
            _counted: counted,
        }
    }

    /// The socket under a WebSocket upgrade of the plain listener, with
    /// what was read from it and not yet parsed (the start of the client's
    /// first frames); the upgrade back as it was when its connection is not
    /// one of these (TLS).
    pub(crate) fn take(
        upgraded: hyper::upgrade::Upgraded,
    ) -> Result<(Arc<Accepted>, Bytes), hyper::upgrade::Upgraded> {
        let parts = upgraded.downcast::<TokioIo<Prefixed<Accepted>>>()?;
        let Prefixed { prefix, io } = parts.io.into_inner();
        // hyper filled its buffer from the prefix, then the socket: what it
        // holds comes before what is left of the prefix.
        let unread = match prefix {
            Some(rest) if parts.read_buf.is_empty() => rest,
            Some(rest) => [&parts.read_buf[..], &rest[..]].concat().into(),
            None => parts.read_buf,
        };
        Ok((Arc::new(io), unread))
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

crate::write_through::write_through!(Accepted);

/// A socket with bytes already read from it put back in front: hyper reads
/// `prefix` first, then the socket. The prefix is freed once read.
pub(crate) struct Prefixed<I> {
    prefix: Option<Bytes>,
    io: I,
}

impl<I> Prefixed<I> {
    pub(crate) fn new(prefix: Bytes, io: I) -> Self {
        Self {
            prefix: Some(prefix).filter(|p| !p.is_empty()),
            io,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(prefix) = &mut this.prefix {
            let n = prefix.len().min(buf.remaining());
            buf.put_slice(&prefix[..n]);
            prefix.advance(n);
            if prefix.is_empty() {
                this.prefix = None;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

crate::write_through::write_through!(Prefixed<I>, [I: AsyncWrite + Unpin]);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn hyper_reads_the_prefix_then_the_socket() {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(b" world").await.unwrap();
        drop(client);
        let mut io = Prefixed::new(Bytes::from_static(b"hello"), server);
        let mut all = String::new();
        io.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }
}
