//! A WebSocket's direct path (`hub publish → [ws::direct] → client`). On
//! the plain listener a session's socket is shared between its task and
//! the publishers ([`Shared`]): while the task is parked with nothing of
//! its own to write, a publisher writes each change's frame to the socket
//! itself, one `send` per change and subscriber, instead of waking the
//! task to do it ([`crate::hub::Direct`]). A frame the socket takes only in
//! part is finished by the task before anything else ([`Outlet::poll_rest`]);
//! one it does not take at all stays queued for the task, which is woken
//! and goes on as before (its write timeout, a slow consumer's close).
//!
//! The task takes the path back whenever it runs (`wire::Wire::poll_event`),
//! so frames of its own (replies, pings, pongs, `subscribed`, heartbeats,
//! compressed or shaped messages) never meet a publisher's on the socket.

use std::io::{ErrorKind, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::super::session;
use crate::accepted::Accepted;
use crate::auth::Principal;
use crate::hub::{Change, Delivered, Direct};
use crate::metrics::Metrics;

/// The session task's side of a shared socket: reads (after what hyper had
/// read ahead) and its own writes, through the socket's readiness.
pub(crate) struct Shared {
    socket: Arc<Accepted>,
    /// Read from the socket before the upgrade and not yet parsed.
    unread: Option<Bytes>,
}

impl Shared {
    pub(crate) fn new(socket: Arc<Accepted>, unread: Bytes) -> Self {
        Self {
            socket,
            unread: Some(unread).filter(|b| !b.is_empty()),
        }
    }
}

impl AsyncRead for Shared {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if let Some(unread) = &mut this.unread {
            let n = unread.len().min(buf.remaining());
            buf.put_slice(&unread[..n]);
            unread.advance(n);
            if unread.is_empty() {
                this.unread = None;
            }
            return Poll::Ready(Ok(()));
        }
        let tcp = &this.socket.io;
        loop {
            ready!(tcp.poll_read_ready(cx))?;
            match tcp.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Shared {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        poll_write_with(&self.socket, cx, |tcp| tcp.try_write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        poll_write_with(&self.socket, cx, |tcp| tcp.try_write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let shut = socket2::SockRef::from(&self.socket.io).shutdown(std::net::Shutdown::Write);
        Poll::Ready(match shut {
            Err(e) if e.kind() == ErrorKind::NotConnected => Ok(()),
            other => other,
        })
    }
}

/// One write as soon as the socket takes it.
fn poll_write_with(
    socket: &Accepted,
    cx: &mut Context<'_>,
    mut write: impl FnMut(&tokio::net::TcpStream) -> std::io::Result<usize>,
) -> Poll<std::io::Result<usize>> {
    loop {
        ready!(socket.io.poll_write_ready(cx))?;
        match write(&socket.io) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            done => return Poll::Ready(done),
        }
    }
}

/// The socket as publishers write to it, with the rest of a frame one of
/// them wrote in part.
pub(super) struct Outlet {
    socket: Arc<Accepted>,
    metrics: Arc<Metrics>,
    rest: Mutex<Option<Bytes>>,
}

impl Outlet {
    pub(super) fn new(socket: Arc<Accepted>, metrics: Arc<Metrics>) -> Self {
        Self {
            socket,
            metrics,
            rest: Mutex::new(None),
        }
    }

    /// Writes the rest of a frame a publisher wrote in part: ready once
    /// none is left (true when there was some), pending while the socket
    /// does not take it. The task calls it before writing anything itself.
    pub(super) fn poll_rest(&self, cx: &mut Context<'_>) -> Poll<std::io::Result<bool>> {
        let mut rest = self.rest.lock();
        let had = rest.is_some();
        while let Some(bytes) = rest.as_mut() {
            let written = ready!(poll_write_with(&self.socket, cx, |tcp| tcp.try_write(bytes)))?;
            if written == 0 {
                return Poll::Ready(Err(ErrorKind::WriteZero.into()));
            }
            bytes.advance(written);
            if bytes.is_empty() {
                *rest = None;
            }
        }
        Poll::Ready(Ok(had))
    }
}

/// One subscription's direct path: its id and who may see what.
pub(super) struct SubOutlet {
    pub(super) outlet: Arc<Outlet>,
    pub(super) prefix: Box<[u8]>,
    pub(super) principal: Arc<Principal>,
}

impl Direct for SubOutlet {
    fn deliver(&self, change: &Arc<Change>) -> Delivered {
        if !self.principal.can_see(&change.topic, change.doc.as_deref()) {
            return Delivered::Done;
        }
        let mut rest = self.outlet.rest.lock();
        // Another subscription's frame is half written: the task's turn.
        if rest.is_some() {
            return Delivered::Blocked;
        }
        let (frame, header) = session::ws_frame(change, &self.prefix);
        let written = match self.outlet.socket.io.try_write(&frame) {
            Ok(n) => n,
            // Would block, or failed: the task meets it on its own write.
            Err(_) => return Delivered::Blocked,
        };
        let metrics = &self.outlet.metrics;
        metrics.observe_delivery(Some(change.at), chrono::Utc::now());
        metrics.sent(1, frame.len() - header);
        if written < frame.len() {
            *rest = Some(frame.slice(written..));
            return Delivered::Handed;
        }
        Delivered::Done
    }
}
