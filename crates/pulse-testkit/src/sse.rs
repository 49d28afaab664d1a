//! Server-Sent Events: a minimal reader of a gateway's event stream.

use std::time::Duration;

/// One Server-Sent Event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    /// `id:`, empty when absent.
    pub id: String,
    /// `event:`, `message` when absent.
    pub event: String,
    /// `data:`, one JSON line.
    pub data: serde_json::Value,
}

/// A minimal SSE reader over a streaming HTTP response.
pub struct SseReader {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
    /// Comment lines read so far.
    pub comments: usize,
    /// `heartbeat` events read so far: [`SseReader::next`] skips them.
    pub heartbeats: usize,
    /// The last `heartbeat` event's data (`at`, `asOf`).
    pub last_heartbeat: Option<serde_json::Value>,
}

impl std::fmt::Debug for SseReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseReader")
            .field("buffer", &self.buffer)
            .field("comments", &self.comments)
            .field("heartbeats", &self.heartbeats)
            .finish_non_exhaustive()
    }
}

impl SseReader {
    /// Opens `GET {url}` (with an optional Last-Event-ID) and checks the SSE headers.
    pub async fn open(url: &str, last_event_id: Option<&str>) -> Self {
        Self::open_request(url, last_event_id, None).await
    }

    /// Opens `GET {url}` with a bearer token.
    pub async fn open_with_token(url: &str, token: &str) -> Self {
        Self::open_request(url, None, Some(token)).await
    }

    async fn open_request(url: &str, last_event_id: Option<&str>, token: Option<&str>) -> Self {
        let client = reqwest::Client::new();
        let mut request = client.get(url);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{url}");
        let headers = response.headers();
        assert_eq!(headers["content-type"], "text/event-stream");
        assert_eq!(headers["cache-control"], "no-cache");
        assert_eq!(headers["x-accel-buffering"], "no");
        Self {
            stream: Box::pin(response.bytes_stream()),
            buffer: String::new(),
            comments: 0,
            heartbeats: 0,
            last_heartbeat: None,
        }
    }

    /// The next event, None when the stream ended; panics after `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<SseEvent> {
        self.next_or_quiet(within)
            .await
            .expect("an SSE event within the deadline")
    }

    /// The next event if one arrives within `quiet` (None: none did);
    /// Some(None) when the stream ended. `heartbeat` events are counted
    /// and kept in `last_heartbeat`, not returned.
    pub async fn next_or_quiet(&mut self, quiet: Duration) -> Option<Option<SseEvent>> {
        self.read(quiet, false).await
    }

    /// [`SseReader::next_or_quiet`], returning heartbeat events too when
    /// `heartbeats`.
    async fn read(&mut self, quiet: Duration, heartbeats: bool) -> Option<Option<SseEvent>> {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + quiet;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent {
                    id: String::new(),
                    event: "message".into(),
                    data: serde_json::Value::Null,
                };
                let mut is_event = false;
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        event.id = v.into();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event.event = v.into();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        event.data = serde_json::from_str(v).expect("data is one JSON line");
                        is_event = true;
                    } else if line.starts_with(':') {
                        self.comments += 1;
                    }
                }
                if is_event && event.event == "heartbeat" && event.id.is_empty() {
                    self.heartbeats += 1;
                    self.last_heartbeat = Some(event.data.clone());
                    if heartbeats {
                        return Some(Some(event));
                    }
                } else if is_event {
                    return Some(Some(event));
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .ok()?;
            match chunk {
                Some(Ok(bytes)) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                _ => return Some(None),
            }
        }
    }

    /// The next `heartbeat` event's data (events before it are dropped);
    /// panics after `within`.
    pub async fn next_heartbeat(&mut self, within: Duration) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.read(left, true).await {
                None => panic!("no heartbeat within {within:?}"),
                Some(None) => panic!("the stream ended before a heartbeat"),
                Some(Some(event)) if event.event == "heartbeat" => return event.data,
                Some(Some(_)) => {}
            }
        }
    }

    /// The next event (`heartbeat` events are counted, not returned);
    /// panics after 20 s or when the stream ends.
    pub async fn next(&mut self) -> SseEvent {
        self.next_within(Duration::from_secs(20))
            .await
            .expect("the stream goes on")
    }

    /// Events up to and including `synced`.
    pub async fn until_synced(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        loop {
            let e = self.next().await;
            let done = e.event == "synced";
            events.push(e);
            if done {
                return events;
            }
        }
    }
}
