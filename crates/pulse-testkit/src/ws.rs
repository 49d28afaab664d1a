//! WebSocket clients of the gateway: connecting, sending operations and
//! reading messages.

use std::time::Duration;

/// A WebSocket client connection.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends one JSON operation.
pub async fn ws_send(ws: &mut Ws, value: serde_json::Value) {
    use futures::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        value.to_string().into(),
    ))
    .await
    .unwrap();
}

/// The next JSON text message (skipping pings, the per-subscription
/// lifecycle messages `subscribed` and `stopped` and subscriptions'
/// heartbeats, which [`ws_next_any`] returns), or the close frame's code.
pub async fn ws_next(ws: &mut Ws) -> Result<serde_json::Value, Option<u16>> {
    loop {
        let m = ws_next_any(ws).await?;
        // A subscription's heartbeat carries `asOf`; a ping's answer does not.
        let heartbeat = m["type"] == "heartbeat" && m.get("asOf").is_some();
        if m["type"] != "subscribed" && m["type"] != "stopped" && !heartbeat {
            return Ok(m);
        }
    }
}

/// The next JSON text message (skipping pings), or the close frame's code.
pub async fn ws_next_any(ws: &mut Ws) -> Result<serde_json::Value, Option<u16>> {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("a message within the deadline");
        match message {
            Some(Ok(Message::Text(text))) => return Ok(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => return Err(frame.map(|f| u16::from(f.code))),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return Err(None),
        }
    }
}

/// Messages up to and including `synced`.
pub async fn ws_until_synced(ws: &mut Ws) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    loop {
        let m = ws_next(ws).await.expect("messages until synced");
        let done = m["type"] == "synced";
        out.push(m);
        if done {
            return out;
        }
    }
}

/// A WebSocket client whose socket has a receive buffer of about
/// `recv_buffer` bytes (set before connecting, so the window stays small).
pub async fn ws_connect_small(url: &str, recv_buffer: u32) -> Ws {
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(recv_buffer).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let ws_url = format!("{}/api/v1/ws", url.replace("http://", "ws://"));
    tokio_tungstenite::client_async(ws_url, tokio_tungstenite::MaybeTlsStream::Plain(stream))
        .await
        .expect("websocket connects")
        .0
}

/// A WebSocket client of `{url}/api/v1/ws` with `Authorization: Bearer {token}`.
pub async fn ws_connect_with_token(url: &str, token: &str) -> Ws {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("{}/api/v1/ws", url.replace("http://", "ws://"))
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connects")
        .0
}

/// A WebSocket client of `{url}/api/v1/ws`.
pub async fn ws_connect(url: &str) -> Ws {
    let ws_url = format!("{}/api/v1/ws", url.replace("http://", "ws://"));
    tokio_tungstenite::connect_async(ws_url)
        .await
        .expect("websocket connects")
        .0
}
