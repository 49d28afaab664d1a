//! Compressed streams with real clients against the real binary:
//! Python's `websockets` negotiates `permessage-deflate` and rebuilds every
//! document equal to REST (and an operation that inflates past the limit
//! closes its socket with 1009); the frames carry RSV1 on the wire; curl
//! `--compressed` reads a gzip SSE stream to the same documents, and its
//! trailer is valid when the gateway stops. docs/PROTOCOL.md "Compression".

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use pulse_testkit::binary::{demo, spawn_binary, terminate, wait_for_url};
use pulse_testkit::docs::Replica;
use pulse_testkit::helm::test_venv;
use pulse_testkit::http::rest_docs;
use pulse_testkit::mirror::differences;
use pulse_testkit::poll::eventually;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// The tests' Python with `websockets`, or None outside CI (where a
/// missing one fails the test: scripts/test.sh installs it).
fn python_with_websockets() -> Option<std::path::PathBuf> {
    let python = test_venv().join("bin").join("python3");
    let ok = Command::new(&python)
        .args(["-c", "import websockets"])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    pulse_testkit::missing(&format!(
        "websockets is not installed in the tests' virtualenv {}; scripts/test.sh installs it",
        test_venv().display()
    ));
    None
}

/// The Python client (tests/clients/compressed_ws.py) in `mode`, with its
/// stdout lines as JSON.
struct PyClient {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<Value>,
}

impl PyClient {
    fn start(python: &std::path::Path, url: &str, mode: &str) -> Self {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/compressed_ws.py"
        );
        let mut child = Command::new(python)
            .args([script, url, mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str(&line).expect("the client prints JSON"));
            }
        });
        let stdin = child.stdin.take().unwrap();
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(WAIT)
            .expect("the Python client answers")
    }
}

impl Drop for PyClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_websockets_negotiates_deflate_and_rebuilds_rest() {
    let Some(python) = python_with_websockets() else {
        return;
    };
    let mut gateway = spawn_binary(&demo(&[]));
    let url = wait_for_url(&mut gateway);

    let mut client = PyClient::start(&python, &url, "mirror");
    assert_eq!(
        client.next()["extensions"],
        serde_json::json!(["permessage-deflate"])
    );
    eventually(WAIT, "the compressed mirror equal to REST", || {
        writeln!(client.stdin, "dump").unwrap();
        let answer = client.next();
        let url = url.clone();
        async move {
            assert!(answer.get("error").is_none(), "{answer}");
            let held: BTreeMap<String, Value> =
                serde_json::from_value(answer["docs"].clone()).unwrap();
            let truth = rest_docs(&url).await;
            let equal = truth.len() > 4 && differences(&held, &truth).is_empty();
            (answer["synced"] == true && equal).then_some(())
        }
    })
    .await;
    drop(client);

    // An operation a few hundred bytes long that inflates to 200 KB.
    let bomb = PyClient::start(&python, &url, "bomb");
    assert_eq!(
        bomb.next()["extensions"],
        serde_json::json!(["permessage-deflate"])
    );
    let closed = bomb.next();
    assert_eq!(closed["closed"], 1009, "{closed}");

    // Off by flag: the same client gets no extension, and works.
    assert!(terminate(&mut gateway).success());
    let mut plain = spawn_binary(&demo(&["--compression", "none"]));
    let url = wait_for_url(&mut plain);
    let mut client = PyClient::start(&python, &url, "mirror");
    assert_eq!(client.next()["extensions"], serde_json::json!([]));
    writeln!(client.stdin, "dump").unwrap();
    assert!(client.next()["docs"].is_object());
    assert!(terminate(&mut plain).success());
}

/// A WebSocket handshake offering `permessage-deflate` over a plain TCP
/// socket: the response head.
async fn handshake(stream: &mut tokio::net::TcpStream, host: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "GET /api/v1/ws HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(stream.read_u8().await.unwrap());
    }
    String::from_utf8(head).unwrap()
}

/// A server frame: (RSV1, opcode, payload).
async fn read_frame(stream: &mut tokio::net::TcpStream) -> (bool, u8, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let b0 = stream.read_u8().await.unwrap();
    let b1 = stream.read_u8().await.unwrap();
    assert_eq!(b1 & 0x80, 0, "server frames are not masked");
    let len = match b1 & 0x7f {
        126 => u64::from(stream.read_u16().await.unwrap()),
        127 => stream.read_u64().await.unwrap(),
        n => u64::from(n),
    };
    let mut payload = vec![0; len as usize];
    stream.read_exact(&mut payload).await.unwrap();
    assert!(b0 & 0x80 != 0, "one frame per message");
    (b0 & 0x40 != 0, b0 & 0x0f, payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_frames_carry_rsv1_and_inflate_to_the_messages() {
    use tokio::io::AsyncWriteExt;
    let mut gateway = spawn_binary(&demo(&[]));
    let url = wait_for_url(&mut gateway);
    let host = url.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let head = handshake(&mut stream, &host).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains(
            "sec-websocket-extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"
        ),
        "{head}"
    );
    // A plain (uncompressed) operation: allowed with the extension agreed.
    let op = br#"{"op":"subscribe","id":"s","topics":["clusters/**","apps/**"]}"#;
    let mut frame = vec![0x81, 0x80 | op.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(op);
    stream.write_all(&frame).await.unwrap();
    let (mut compressed, mut plain) = (0, 0);
    // The receiver's inflater, with context across messages as RFC 7692 allows.
    let mut inflater = flate2::Decompress::new(false);
    loop {
        let (rsv1, opcode, mut payload) = read_frame(&mut stream).await;
        assert_eq!(opcode, 1, "text frames");
        let text = if rsv1 {
            compressed += 1;
            payload.extend_from_slice(&[0, 0, 0xff, 0xff]);
            let mut out = Vec::with_capacity(payload.len() * 20 + 1024);
            inflater
                .decompress_vec(&payload, &mut out, flate2::FlushDecompress::Sync)
                .unwrap();
            out
        } else {
            plain += 1;
            payload
        };
        let message: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(message["sub"], "s", "{message}");
        if message["type"] == "synced" {
            break;
        }
    }
    // Snapshots are long enough to compress; `subscribed` is not.
    assert!(compressed >= 3, "{compressed} compressed, {plain} plain");
    assert!(plain >= 1, "{compressed} compressed, {plain} plain");
    assert!(terminate(&mut gateway).success());
}

/// SSE events read from curl's stdout into a replica, in a thread.
fn read_events(stdout: impl Read + Send + 'static, replica: Arc<Mutex<Replica>>) {
    std::thread::spawn(move || {
        let mut data = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(d) = line.strip_prefix("data: ") {
                data = d.to_string();
            } else if line.is_empty() && !data.is_empty() {
                let message: Value = serde_json::from_str(&std::mem::take(&mut data)).unwrap();
                replica.lock().unwrap().apply(&message);
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_compressed_reads_gzip_sse_to_rest_and_a_valid_trailer() {
    let dir = tempfile::tempdir().unwrap();
    let headers = dir.path().join("headers");
    let mut gateway = spawn_binary(&demo(&["--heartbeat-seconds", "1"]));
    let url = wait_for_url(&mut gateway);
    let stream = format!("{url}/api/v1/events?topic=clusters/**&topic=apps/**");
    let mut curl = Command::new("curl")
        .args(["-sS", "-N", "--compressed", "-D"])
        .arg(&headers)
        .arg(&stream)
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl runs");
    let replica = Arc::new(Mutex::new(Replica::default()));
    read_events(curl.stdout.take().unwrap(), replica.clone());
    eventually(WAIT, "the gzip stream's documents equal to REST", || {
        let held: BTreeMap<String, Value> = replica
            .lock()
            .unwrap()
            .docs
            .iter()
            .map(|(t, (_, d))| (t.clone(), d.clone()))
            .collect();
        let url = url.clone();
        async move {
            let truth = rest_docs(&url).await;
            (truth.len() > 4 && differences(&held, &truth).is_empty()).then_some(())
        }
    })
    .await;
    let head = std::fs::read_to_string(&headers)
        .unwrap()
        .to_ascii_lowercase();
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert!(head.contains("vary: accept-encoding\r\n"), "{head}");

    // Without Accept-Encoding the same stream is plain.
    let plain = Command::new("curl")
        .args(["-sS", "-N", "--max-time", "2", "-D", "-", "-o", "/dev/null"])
        .arg(&stream)
        .output()
        .unwrap();
    let plain_head = String::from_utf8_lossy(&plain.stdout).to_ascii_lowercase();
    assert!(plain_head.starts_with("http/1.1 200"), "{plain_head}");
    assert!(!plain_head.contains("content-encoding"), "{plain_head}");

    // The gateway stops: the stream ends with gzip's trailer, which curl
    // checks (a bad CRC or a cut stream is an error exit).
    assert!(terminate(&mut gateway).success());
    let status = curl.wait().unwrap();
    assert!(status.success(), "curl read a whole gzip stream: {status}");
}
