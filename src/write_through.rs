//! `AsyncWrite` for an I/O wrapper that changes only how it reads (a
//! connection counted while open, bytes read ahead put back, a client's
//! compressed messages inflated): every write goes to its `io` field.

/// Implements `tokio::io::AsyncWrite` for `$ty` by passing each call to its
/// `io` field; `[$gen]` are the impl's generic parameters, e.g.
/// `write_through!(Prefixed<I>, [I: AsyncWrite + Unpin])`.
macro_rules! write_through {
    ($ty:ty $(, [$($gen:tt)*])?) => {
        impl $(<$($gen)*>)? tokio::io::AsyncWrite for $ty {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut self.get_mut().io), cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                tokio::io::AsyncWrite::poll_write_vectored(
                    std::pin::Pin::new(&mut self.get_mut().io),
                    cx,
                    bufs,
                )
            }

            fn is_write_vectored(&self) -> bool {
                tokio::io::AsyncWrite::is_write_vectored(&self.io)
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut self.get_mut().io), cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut self.get_mut().io), cx)
            }
        }
    };
}

pub(crate) use write_through;
