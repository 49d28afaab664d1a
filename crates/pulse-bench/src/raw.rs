//! The raw baseline: the least a push server can do. Every connection on
//! `port` is an SSE stream (or, on `/ws`, a WebSocket); each body POSTed to
//! `control-port /publish` is encoded once and written to every connection
//! by plain tokio tasks. No topics, no state, no resume.

use std::sync::Arc;

use bytes::Bytes;
use futures::SinkExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

/// One message, pre-encoded for both transports.
#[derive(Clone)]
struct Frame {
    sse: Bytes,
    text: tokio_tungstenite::tungstenite::Utf8Bytes,
}

pub(crate) async fn run(port: u16, control: u16) -> anyhow::Result<()> {
    let (tx, _) = broadcast::channel::<Frame>(4096);
    let tx = Arc::new(tx);
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let control = TcpListener::bind(("127.0.0.1", control)).await?;
    let publisher = tx.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = control.accept().await {
            let tx = publisher.clone();
            tokio::spawn(publish(socket, tx));
        }
    });
    loop {
        let (socket, _) = listener.accept().await?;
        let rx = tx.subscribe();
        tokio::spawn(serve(socket, rx));
    }
}

/// Reads `POST /publish` requests (keep-alive) and broadcasts their bodies.
async fn publish(mut socket: TcpStream, tx: Arc<broadcast::Sender<Frame>>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 8192];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + length {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf[end + 4..end + 4 + length].to_vec();
        buf.drain(..end + 4 + length);
        let text = String::from_utf8_lossy(&body).to_string();
        let frame = Frame {
            sse: Bytes::from(format!("event: patch\ndata: {text}\n\n")),
            text: text.into(),
        };
        let _ = tx.send(frame);
        if socket
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn serve(mut socket: TcpStream, mut rx: broadcast::Receiver<Frame>) {
    let mut peek = [0u8; 16];
    let Ok(n) = socket.peek(&mut peek).await else {
        return;
    };
    if peek[..n].starts_with(b"GET /ws") {
        let Ok(mut ws) = tokio_tungstenite::accept_async(socket).await else {
            return;
        };
        while let Ok(frame) = rx.recv().await {
            let message = tokio_tungstenite::tungstenite::Message::Text(frame.text);
            if ws.send(message).await.is_err() {
                return;
            }
        }
        return;
    }
    // Read the request head, answer with a stream, then forward frames.
    let mut head = Vec::new();
    let mut chunk = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let response =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n";
    if socket.write_all(response).await.is_err() {
        return;
    }
    loop {
        match rx.recv().await {
            Ok(frame) => {
                if socket.write_all(&frame.sse).await.is_err() {
                    return;
                }
            }
            // A slow reader skips what it missed, like every server here.
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
