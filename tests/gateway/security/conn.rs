//! Connections against the real binary (issue 17, items 3 and 9): slowloris
//! over plain HTTP and TLS, descriptor pressure under a low `ulimit -n`,
//! the idle timeout beside a live SSE stream, and per-client limits behind
//! a trusted reverse proxy. Loopback only; every wait is bounded.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pulse_testkit::binary::terminate;
use pulse_testkit::http::metric;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// `kube-pulse demo` (one member, no scenario) on 127.0.0.1:0 with `extra`
/// flags, optionally under `ulimit -n fd_limit`; returns it and its base URL.
fn demo(extra: &[&str], fd_limit: Option<u32>) -> (Child, String) {
    demo_logging_to(extra, fd_limit, Stdio::null())
}

/// [`demo`] with its stderr (`RUST_LOG=warn`) going to `stderr`.
fn demo_logging_to(extra: &[&str], fd_limit: Option<u32>, stderr: Stdio) -> (Child, String) {
    let binary = env!("CARGO_BIN_EXE_kube-pulse");
    let args = pulse_testkit::binary::demo(extra);
    let mut command = match fd_limit {
        Some(n) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("ulimit -n {n}; exec \"$0\" \"$@\""))
                .arg(binary)
                .args(&args);
            c
        }
        None => {
            let mut c = Command::new(binary);
            c.args(&args);
            c
        }
    };
    let mut child = command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("binary starts");
    let url = listening_url(&mut child);
    (child, url)
}

/// The `http://…` or `https://…` URL the binary prints once it listens.
fn listening_url(child: &mut Child) -> String {
    use std::io::{BufRead, BufReader};
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("listening on ") {
                let url = line[at + "listening on ".len()..]
                    .trim()
                    .trim_end_matches('/');
                let _ = tx.send(url.to_string());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the binary prints the address it listens on")
}

fn addr_of(url: &str) -> SocketAddr {
    url.split("://").nth(1).unwrap().parse().unwrap()
}

/// A TCP connection to `addr` from the loopback address `from`.
async fn connect_from(from: [u8; 4], addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(addr).await
}

/// Whether the peer closes `stream` (EOF or reset) within `within`,
/// discarding whatever it sends first.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// `GET /livez` on a new connection from `from`: the status, or why not.
async fn livez_from(from: [u8; 4], addr: SocketAddr) -> Result<u16, String> {
    let attempt = async {
        let mut stream = connect_from(from, addr).await.map_err(|e| e.to_string())?;
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&response);
        text.split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status in {text:?}"))
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .unwrap_or_else(|_| Err("no answer within 10 s".into()))
}

const PARTIAL_HEAD: &[u8] = b"GET /livez HTTP/1.1\r\nHost: localhost\r\nX-Slow: ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed_after_the_header_timeout() {
    let (mut child, url) = demo(&["--header-read-timeout", "2"], None);
    let addr = addr_of(&url);
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(PARTIAL_HEAD).await.unwrap();
        clients.push(tokio::spawn(async move {
            closed_within(&mut stream, Duration::from_secs(30)).await
        }));
    }
    let mut closed = 0;
    for client in clients {
        closed += usize::from(client.await.unwrap());
    }
    let took = started.elapsed();
    eprintln!("{closed} of 200 slowloris connections closed within {took:?}");
    assert_eq!(closed, 200, "every slowloris connection is closed");
    assert!(
        took >= Duration::from_millis(1500),
        "closed by the timeout, not at once: {took:?}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(
        metric(
            &url,
            "kube_pulse_tcp_closed_total{reason=\"header_timeout\"}"
        )
        .await
            >= 200.0
    );
    assert_eq!(livez_from([127, 0, 0, 1], addr).await, Ok(200));
    assert!(terminate(&mut child).success());
}

/// A self-signed certificate for `localhost`, written into `dir`.
fn certificate(
    dir: &std::path::Path,
) -> (String, String, rustls::pki_types::CertificateDer<'static>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (
        cert_path.display().to_string(),
        key_path.display().to_string(),
        cert.der().clone(),
    )
}

/// Completes a TLS handshake (ALPN `alpn`) with a blocking socket, sends
/// `partial`, and says whether the server closes it within `within`.
fn tls_slowloris(
    addr: SocketAddr,
    trusted: rustls::pki_types::CertificateDer<'static>,
    alpn: &[u8],
    partial: &[u8],
    within: Duration,
) -> Result<bool, String> {
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted).map_err(|e| e.to_string())?;
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let socket = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, socket);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    if tls.conn.alpn_protocol() != Some(alpn) {
        return Err("ALPN was not agreed".into());
    }
    tls.write_all(partial).map_err(|e| e.to_string())?;
    tls.flush().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match tls.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return Ok(true),
        }
    }
    Ok(false)
}

/// `GET path` over TLS (HTTP/1.1) with a blocking socket: the whole answer.
fn tls_get(
    addr: SocketAddr,
    trusted: rustls::pki_types::CertificateDer<'static>,
    path: &str,
) -> String {
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted).unwrap();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let socket = std::net::TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, socket);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (mut answer, mut buf) = (Vec::new(), [0u8; 8192]);
    // Until the server closes (an unclean TLS close counts as the end too).
    while let Ok(n) = tls.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_slowloris_is_closed_after_the_handshake_too() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, der) = certificate(dir.path());
    let (mut child, url) = demo(
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--header-read-timeout",
            "2",
            "--tls-handshake-timeout",
            "1",
        ],
        None,
    );
    assert!(url.starts_with("https://"), "{url}");
    let addr = addr_of(&url);
    let started = Instant::now();
    let mut clients = Vec::new();
    for i in 0..40 {
        let der = der.clone();
        // Most speak HTTP/1.1 by ALPN; some HTTP/2, sending only the preface.
        let (alpn, partial): (&'static [u8], &'static [u8]) = if i % 4 == 0 {
            (b"h2", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        } else {
            (b"http/1.1", PARTIAL_HEAD)
        };
        clients.push(tokio::task::spawn_blocking(move || {
            tls_slowloris(addr, der, alpn, partial, Duration::from_secs(30))
        }));
    }
    for client in clients {
        assert_eq!(client.await.unwrap(), Ok(true), "the server closes it");
    }
    let took = started.elapsed();
    eprintln!("40 TLS slowloris connections closed within {took:?}");
    assert!(
        took >= Duration::from_millis(1500),
        "closed by the timeout, not at once: {took:?}"
    );
    assert!(took < Duration::from_secs(30), "{took:?}");

    // A client that opens TCP and never starts the handshake is closed by
    // the handshake timeout (1 s, shorter than the header timeout here).
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(30)).await);
    let metrics = tokio::task::spawn_blocking(move || tls_get(addr, der, "/metrics"))
        .await
        .unwrap();
    assert!(
        metrics.contains("kube_pulse_tcp_closed_total{reason=\"handshake_timeout\"} 1"),
        "{metrics}"
    );
    assert!(terminate(&mut child).success());
}

/// Opens `count` idle connections from `from`, probing `/livez` from
/// 127.0.0.1 and 127.0.0.2 after every 20; returns the connections kept
/// and every probe's answer.
async fn flood_and_probe(
    addr: SocketAddr,
    from: [u8; 4],
    count: usize,
) -> (Vec<TcpStream>, Vec<Result<u16, String>>) {
    let (mut held, mut probes) = (Vec::new(), Vec::new());
    for i in 0..count {
        // The gateway may refuse or shed: either way it must stay up.
        if let Ok(Ok(stream)) =
            tokio::time::timeout(Duration::from_secs(5), connect_from(from, addr)).await
        {
            held.push(stream);
        }
        if i % 20 == 19 {
            probes.push(livez_from([127, 0, 0, 1], addr).await);
            probes.push(livez_from([127, 0, 0, 2], addr).await);
        }
    }
    (held, probes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_ip_never_starve_livez_under_a_low_fd_limit() {
    // Default limits: the descriptor-derived ceiling (256 - 64 - 16 = 176)
    // binds before the per-IP cap; 400 connections go past it and past the
    // descriptor limit itself.
    let (mut child, url) = demo(&[], Some(256));
    let addr = addr_of(&url);
    let (held, probes) = flood_and_probe(addr, [127, 0, 0, 1], 400).await;
    assert_eq!(probes.len(), 40);
    let ok = probes.iter().filter(|p| **p == Ok(200)).count();
    let shed = metric(&url, "kube_pulse_tcp_closed_total{reason=\"shed\"}").await;
    eprintln!(
        "{ok} of {} /livez probes answered 200 beside 400 idle connections; {shed} shed",
        probes.len()
    );
    assert!(probes.iter().all(|p| *p == Ok(200)), "{probes:?}");
    assert!(shed > 0.0);
    assert!(metric(&url, "kube_pulse_tcp_connections ").await <= 180.0);
    drop(held);
    assert!(terminate(&mut child).success());

    // A per-IP cap below the ceiling: one address recycles its own idle
    // connections; with all of them busy (streams), it is refused and
    // another address is not.
    let (mut child, url) = demo(&["--max-sockets-per-ip", "40"], Some(256));
    let addr = addr_of(&url);
    let (held, probes) = flood_and_probe(addr, [127, 0, 0, 3], 200).await;
    assert!(probes.iter().all(|p| *p == Ok(200)), "{probes:?}");
    drop(held);
    let mut streams = Vec::new();
    for _ in 0..40 {
        let mut s = connect_from([127, 0, 0, 4], addr).await.unwrap();
        s.write_all(b"GET /api/v1/events?topic=clusters/* HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        streams.push(s);
    }
    let mut refused = connect_from([127, 0, 0, 4], addr).await.unwrap();
    assert!(
        closed_within(&mut refused, Duration::from_secs(10)).await,
        "over its cap with nothing idle"
    );
    assert_eq!(livez_from([127, 0, 0, 5], addr).await, Ok(200));
    assert!(metric(&url, "kube_pulse_tcp_refused_total{reason=\"per_ip\"}").await >= 1.0);
    assert!(terminate(&mut child).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_backs_off_when_descriptors_run_out() {
    // A ceiling above the descriptor limit: accept itself fails (EMFILE).
    let log = tempfile::NamedTempFile::new().unwrap();
    let (mut child, url) = demo_logging_to(
        &["--max-sockets", "100000"],
        Some(256),
        Stdio::from(log.reopen().unwrap()),
    );
    let addr = addr_of(&url);
    let mut held = Vec::new();
    for _ in 0..400 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(5), connect_from([127, 0, 0, 1], addr)).await
        {
            held.push(s);
        }
    }
    // Each failed accept sheds an idle connection, so the backlog drains
    // and a probe gets its turn (bounded: 12 tries of up to 10 s).
    let mut answered = None;
    for _ in 0..12 {
        if let Ok(status) = livez_from([127, 0, 0, 2], addr).await {
            answered = Some(status);
            break;
        }
    }
    assert_eq!(
        answered,
        Some(200),
        "/livez answers once the backlog drained"
    );
    let exhausted = metric(
        &url,
        "kube_pulse_accept_errors_total{reason=\"fd_exhausted\"}",
    )
    .await;
    drop(held);
    assert!(terminate(&mut child).success());
    let logged = std::fs::read_to_string(log.path()).unwrap();
    let lines = logged.matches("accepting a connection failed").count();
    eprintln!("{exhausted} failed accepts (EMFILE), {lines} logged");
    assert!(exhausted >= 10.0, "{exhausted}");
    assert!(
        (1..=4).contains(&lines),
        "logged at most once per 10 s: {lines}\n{logged}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_close_and_streams_stay() {
    let (mut child, url) = demo(
        &["--idle-timeout", "2", "--header-read-timeout", "60"],
        None,
    );
    let addr = addr_of(&url);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /api/v1/events?topic=clusters/* HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut keep_alive = TcpStream::connect(addr).await.unwrap();
    keep_alive
        .write_all(b"GET /livez HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), keep_alive.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    let idle_from = Instant::now();
    assert!(
        closed_within(&mut keep_alive, Duration::from_secs(20)).await,
        "the idle connection is closed"
    );
    let idled = idle_from.elapsed();
    assert!(
        idled >= Duration::from_millis(1500),
        "not before the idle timeout: {idled:?}"
    );
    // The stream on the other connection outlives three idle timeouts.
    let until = idle_from + Duration::from_secs(7);
    let left = until.saturating_duration_since(Instant::now());
    assert!(
        !closed_within(&mut stream, left).await,
        "the SSE stream stays open"
    );
    assert!(metric(&url, "kube_pulse_tcp_closed_total{reason=\"idle_timeout\"}").await >= 1.0);
    assert!(terminate(&mut child).success());
}

/// Opens an SSE session as the browser `forwarded_for` behind the proxy
/// (this test); the response (held open) or its status.
async fn session_as(url: &str, forwarded_for: &str) -> Result<reqwest::Response, u16> {
    let response = reqwest::Client::new()
        .get(format!("{url}/api/v1/events?topic=clusters/*"))
        .header("x-forwarded-for", forwarded_for)
        .send()
        .await
        .unwrap();
    match response.status().as_u16() {
        200 => Ok(response),
        status => Err(status),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_behind_a_trusted_proxy_get_their_own_limits() {
    // Behind the proxy (loopback is trusted): each browser has its own
    // per-IP session limit, and the proxy is not held to the per-IP
    // connection cap (4 streams over a cap of 3).
    let (mut child, url) = demo(
        &[
            "--trusted-proxy",
            "127.0.0.0/8",
            "--max-connections-per-ip",
            "2",
            "--max-sockets-per-ip",
            "3",
        ],
        None,
    );
    let mut held = Vec::new();
    for browser in ["198.51.100.1", "198.51.100.2"] {
        for _ in 0..2 {
            held.push(
                session_as(&url, &format!("203.0.113.9, {browser}"))
                    .await
                    .expect("within its own limit"),
            );
        }
    }
    for browser in ["198.51.100.1", "198.51.100.2"] {
        assert_eq!(
            session_as(&url, browser).await.err(),
            Some(429),
            "{browser} is at its limit"
        );
    }
    // A malformed header from the trusted proxy counts as the proxy itself.
    let fallback = session_as(&url, "not-an-address")
        .await
        .expect("the proxy's own limit");
    assert_eq!(livez_from([127, 0, 0, 1], addr_of(&url)).await, Ok(200));
    drop((held, fallback));
    assert!(terminate(&mut child).success());

    // Without a trusted proxy, or from a peer outside the trusted blocks,
    // the header is ignored: both "browsers" share the peer's limit.
    for extra in [&[][..], &["--trusted-proxy", "10.0.0.0/8"][..]] {
        let mut args = vec!["--max-connections-per-ip", "2"];
        args.extend_from_slice(extra);
        let (mut child, url) = demo(&args, None);
        let first = session_as(&url, "198.51.100.1").await.expect("first");
        let second = session_as(&url, "198.51.100.2").await.expect("second");
        assert_eq!(
            session_as(&url, "198.51.100.3").await.err(),
            Some(429),
            "{extra:?}"
        );
        drop((first, second));
        assert!(terminate(&mut child).success());
    }
}
