//! Issue 17 items 6 and 10 against the binary: sessions of a JWT inside
//! its leeway cost no CPU while they wait for their re-check, base paths
//! with dot segments are refused, and a cursor from the future is named
//! as such.

use std::process::Command;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use pulse_testkit::binary::{spawn_binary, terminate, wait_for_url};
use pulse_testkit::sse::SseReader;
use serde_json::json;

/// CPU seconds (user + system) the process `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses).
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let hz = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    ticks
        / String::from_utf8_lossy(&hz.stdout)
            .trim()
            .parse::<f64>()
            .unwrap()
}

/// CPU seconds per second the process uses over `window`.
async fn cpu_rate(pid: u32, window: Duration) -> f64 {
    let before = cpu_seconds(pid);
    tokio::time::sleep(window).await;
    (cpu_seconds(pid) - before) / window.as_secs_f64()
}

/// 100 sessions of a token past `exp` but inside the 30 s leeway: each
/// re-checks once, when the leeway ends, instead of in a busy loop (which
/// cost 0.5 s of CPU per second for 100 sessions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_of_a_jwt_inside_its_leeway_do_not_spin() {
    let dir = tempfile::tempdir().unwrap();
    let secret = b"a-very-long-shared-secret-of-32-bytes-or-more";
    let secret_path = dir.path().join("hs256");
    std::fs::write(&secret_path, secret).unwrap();
    let mut child = spawn_binary(&[
        "demo",
        "--listen",
        "127.0.0.1:0",
        "--no-scenario",
        "--auth",
        "jwt",
        "--jwt-hs256-secret-file",
        secret_path.to_str().unwrap(),
        "--jwt-leeway",
        "30",
    ]);
    let url = wait_for_url(&mut child);
    let pid = child.id();
    let exp = chrono::Utc::now().timestamp() - 5;
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": "dave", "exp": exp, "pulse": {"read": ["*"]}}),
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap();
    // The demo settles first (its members converge), then a baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cpu_rate(pid, Duration::from_secs(3)).await;
    let mut streams = Vec::new();
    for _ in 0..100 {
        let mut sse =
            SseReader::open_with_token(&format!("{url}/api/v1/events?topic=clusters/*"), &token)
                .await;
        sse.until_synced().await;
        streams.push(sse);
    }
    let with_sessions = cpu_rate(pid, Duration::from_secs(3)).await;
    eprintln!(
        "CPU: {idle:.3} s/s idle, {with_sessions:.3} s/s with 100 sessions waiting for their re-check"
    );
    assert!(
        with_sessions - idle < 0.2,
        "100 sessions inside the leeway cost {with_sessions:.3} s of CPU per second (idle {idle:.3})"
    );
    drop(streams);
    terminate(&mut child);
}

/// `--base-path` with `.` or `..` segments is refused before anything
/// starts, with the reason.
#[test]
fn base_paths_with_dot_segments_are_refused() {
    for bad in ["/a/../b", "/..", "/a/./b"] {
        let out = Command::new(env!("CARGO_BIN_EXE_kube-pulse"))
            .args(["demo", "--listen", "127.0.0.1:0", "--base-path", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("other than . and .."), "{bad}: {stderr}");
    }
}

/// A cursor of this gateway that is ahead of it gets fresh snapshots and
/// the reason says so (not "older than the replay log").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_from_the_future_is_named_as_such() {
    let mut child = spawn_binary(&["demo", "--listen", "127.0.0.1:0", "--no-scenario"]);
    let url = wait_for_url(&mut child);
    let events = format!("{url}/api/v1/events?topic=clusters/*");
    let mut sse = SseReader::open(&events, None).await;
    let synced = sse.until_synced().await.pop().unwrap();
    let cursor = synced.data["cursor"].as_str().unwrap().to_string();
    let epoch = cursor.rsplit_once('-').unwrap().0;
    let future = format!("{epoch}-999999999");
    let mut resumed = SseReader::open(&events, Some(&future)).await;
    let synced = resumed.until_synced().await.pop().unwrap();
    assert_eq!(synced.data["resumed"], false);
    let reason = synced.data["reason"].as_str().unwrap();
    assert!(reason.contains("ahead of this gateway"), "{reason}");
    terminate(&mut child);
}
