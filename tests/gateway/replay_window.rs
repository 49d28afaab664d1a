//! The replay log's window in time (src/hub/log.rs, docs/PROTOCOL.md,
//! "Cursors"): with the defaults (pod watches on, 10 000 changes, 120 s,
//! 64 MiB), a WebSocket reader away for 60 s while the members change at
//! about 200 changes/s (on a loaded machine, longer, until 12 000 changes
//! or 110 s) — more changes than the count alone kept — resumes
//! from its cursor with every change it missed and no snapshot. The real
//! `kube-pulse serve` over three simulated members; the load bounded in
//! count and time.

use std::time::{Duration, Instant};

use futures::StreamExt;
use pulse_testkit::fleet::{Fleet, MEMBERS, app};
use pulse_testkit::load::heavy;
use pulse_testkit::mirror::{Conn, Mirror, Reader, Via};

/// Generous bound for one wait on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(120);
/// Deployments per member.
const APPS: usize = 10;
/// How long the reader is away.
const AWAY: Duration = Duration::from_secs(60);
/// The longest it is away, whatever the machine's load.
const MOST_AWAY: Duration = Duration::from_secs(110);
/// The rate aimed at while it is away.
const RATE: f64 = 200.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_away_60_s_at_200_changes_per_second_resumes_without_snapshots() {
    let _one = heavy().await;
    let fleet = Fleet::start(APPS, "", &[]).await;
    let mut conn = Conn::open(&fleet.url, Via::Ws, None, None).await;
    let mut mirror = Mirror::default();
    while !mirror.synced {
        let message = conn.next_within(WAIT).await.expect("initial snapshots");
        mirror.apply(&message);
    }
    drop(conn);
    let cursor = mirror.cursor.clone().expect("a cursor");

    // Away for 60 s while Deployments are scaled at a pace that keeps the
    // hub's changes near 200 a second (each scale makes about 20).
    let changes = || fleet.metric("kube_pulse_hub_changes_total");
    let before = changes().await;
    let away = Instant::now();
    // At least 60 s and 12 000 changes (a loaded machine takes longer),
    // at most 110 s: within the log's 120 s.
    let mut scales_per_second = 10usize;
    let mut made_scales = 0usize;
    loop {
        let slice = tokio::time::Instant::now() + Duration::from_secs(1);
        // Round robin over the 30 Deployments, 1 → 10 → 1 … by rounds.
        let batch: Vec<(&str, String, i32)> = (made_scales..made_scales + scales_per_second)
            .map(|n| {
                let member = MEMBERS[n % MEMBERS.len()];
                let i = (n / MEMBERS.len()) % APPS;
                let round = n / (MEMBERS.len() * APPS);
                (member, app(i), if round.is_multiple_of(2) { 10 } else { 1 })
            })
            .collect();
        made_scales += batch.len();
        futures::stream::iter(batch)
            .for_each_concurrent(8, |(member, name, replicas)| {
                let fleet = &fleet;
                async move { fleet.scale(member, &name, replicas).await }
            })
            .await;
        tokio::time::sleep_until(slice).await;
        let made = changes().await - before;
        let elapsed = away.elapsed();
        let enough = elapsed >= AWAY && made >= RATE * AWAY.as_secs_f64();
        if enough || elapsed >= MOST_AWAY {
            break;
        }
        let due = RATE * elapsed.as_secs_f64();
        scales_per_second = if made < due {
            (scales_per_second + 2).min(40)
        } else {
            scales_per_second.saturating_sub(2).max(2)
        };
    }
    let away_for = away.elapsed();
    let missed = changes().await - before;
    let kept = fleet.metric("kube_pulse_replay_log_size").await;
    let bytes = fleet.metric("kube_pulse_replay_log_bytes").await;
    eprintln!(
        "away {away_for:?}: {missed} changes ({:.0}/s); the log keeps {kept} changes in {:.1} MiB",
        missed / away_for.as_secs_f64(),
        bytes / f64::from(1 << 20)
    );
    assert!(
        missed > 10_000.0,
        "{missed} changes: fewer than the count bound alone kept, so this proves nothing"
    );
    assert!(bytes <= f64::from(64 << 20), "{bytes} bytes");

    // Back with its cursor: every change it missed, and no snapshot.
    mirror.resubscribe();
    let mut conn = Conn::open(&fleet.url, Via::Ws, Some(&cursor), None).await;
    let mut replayed = 0usize;
    let mut snapshots = Vec::new();
    while !mirror.synced {
        let message = conn.next_within(WAIT).await.expect("the replay");
        if message["type"] == "snapshot" {
            snapshots.push(message["topic"].clone());
        }
        replayed += 1;
        mirror.apply(&message);
    }
    assert_eq!(
        mirror.resumed,
        Some(true),
        "the cursor was in the replay log"
    );
    assert!(snapshots.is_empty(), "snapshots on resume: {snapshots:?}");
    assert!(mirror.gaps.is_empty(), "revision gaps: {:?}", mirror.gaps);
    let reader = Reader::continue_with(conn, mirror);
    fleet.until_running().await;
    let deadline = Instant::now() + WAIT;
    loop {
        let truth = fleet.rest().await;
        let wrong = reader.mirror.lock().differences(&truth);
        if wrong.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "documents differ from REST: {wrong:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mirror = reader.mirror.lock();
    assert!(mirror.gaps.is_empty(), "revision gaps: {:?}", mirror.gaps);
    assert_eq!(mirror.late_snapshots, 0, "snapshots after the replay");
    eprintln!("resumed: {replayed} messages replayed, no snapshot; every document equal to REST");
}
