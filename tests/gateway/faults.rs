//! The fault suite (issue "lose nothing"): the real `kube-pulse serve`
//! binary over three simulated members on loopback, and clients that
//! rebuild every document from the wire (snapshots, merge patches,
//! removals) over WebSocket and SSE and compare it with REST, through
//! catch-up snapshots and resumes, member outages, a failing resource,
//! gateway restarts with a reconnect storm, stalled readers and removed
//! apps. docs/RELIABILITY.md lists what each test shows and the figures of
//! a run.

use pulse_testkit::fleet::{Fleet, app};
use pulse_testkit::load::heavy;
use pulse_testkit::mirror::{Conn, Mirror, Reader, Via, synced_readers};
use std::time::{Duration, Instant};

/// Bound of every wait in this suite.
const WAIT: Duration = Duration::from_secs(30);

/// Waits (bounded) until every reader's document of each topic has equalled
/// the gateway's REST answer at least once during the wait (documents that
/// change every probe under load are compared as they pass, not all in one
/// instant), no reader holds a topic REST does not, and no reader saw a
/// revision gap; panics naming what differs.
async fn all_agree_with_rest(fleet: &Fleet, readers: &[&Reader]) {
    let deadline = Instant::now() + WAIT;
    let mut agreed: Vec<std::collections::BTreeSet<String>> =
        vec![Default::default(); readers.len()];
    loop {
        let truth = fleet.rest().await;
        // Messages already sent but not yet read.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut wrong = Vec::new();
        let mut example = None;
        for (i, reader) in readers.iter().enumerate() {
            let mirror = reader.mirror.lock();
            assert!(
                mirror.gaps.is_empty(),
                "reader {i} saw revision gaps on {:?}",
                mirror.gaps
            );
            let differences = mirror.differences(&truth);
            agreed[i].extend(truth.keys().filter(|t| !differences.contains(*t)).cloned());
            let outstanding: Vec<String> = differences
                .into_iter()
                .filter(|t| !truth.contains_key(t) || !agreed[i].contains(t))
                .collect();
            if let Some(topic) = outstanding.first()
                && example.is_none()
            {
                example = Some(format!(
                    "{topic}: reader {:?}, REST {:?}",
                    mirror.docs.get(topic),
                    truth.get(topic)
                ));
            }
            if !outstanding.is_empty() {
                wrong.push((i, outstanding));
            }
        }
        if wrong.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            let (i, topics) = &wrong[0];
            let log = fleet.log();
            panic!(
                "{} of {} readers disagree with REST after {WAIT:?}; reader {i}: {} topics, e.g. {:?}\n{}\ngateway log (end):\n{}",
                wrong.len(),
                readers.len(),
                topics.len(),
                &topics[..topics.len().min(5)],
                example.unwrap_or_default(),
                &log[log.len().saturating_sub(4000)..]
            );
        }
    }
}

/// Item 1: subscribers that fell behind get the topics they missed as
/// catch-up snapshots; one that hangs up right after the first of them and
/// resumes from its cursor (what `EventSource` and the JS client do) must
/// end with every document, with no revision gap, like the readers that
/// kept up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_a_catch_up_snapshot_loses_nothing() {
    let _one = heavy().await;
    // The default write timeout (60 s) is long enough that the stalled
    // readers are not closed as slow consumers while the changes pile up.
    let fleet = Fleet::start(50, "", &[]).await;
    let live = synced_readers(&fleet.url, 20, WAIT).await;
    // Four readers with a small receive buffer stop reading after synced.
    let mut stalled = Vec::new();
    for via in [Via::Ws, Via::Sse, Via::Ws, Via::Sse] {
        let mut conn = Conn::open(&fleet.url, via, None, Some(4096)).await;
        let mut mirror = Mirror::default();
        while !mirror.synced {
            let message = conn.next_within(WAIT).await.expect("initial snapshots");
            mirror.apply(&message);
        }
        stalled.push((via, conn, mirror));
    }
    let before = fleet.metric("kube_pulse_hub_changes_total").await;
    let burst = Instant::now();
    // Scale every Deployment up and down until the stalled subscriptions'
    // queues (1 024 changes) overflowed (`/metrics` counts the changes
    // turned into later snapshots).
    let mut round = 0;
    let changes = loop {
        fleet.scale_all(if round % 2 == 0 { 12 } else { 2 }).await;
        round += 1;
        let changes = fleet.metric("kube_pulse_hub_changes_total").await - before;
        let collapsed = fleet.metric("kube_pulse_lagged_changes_total").await > 0.0;
        if collapsed || burst.elapsed() > Duration::from_secs(30) {
            break changes;
        }
    };
    // The queued changes still flow while the controllers converge.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // They read again, each up to the first snapshot after synced, hang up
    // there and resume from that snapshot's cursor.
    let cut: Vec<_> = stalled
        .into_iter()
        .map(|(via, mut conn, mut mirror)| {
            tokio::spawn(async move {
                while let Ok(message) = conn.next_within(Duration::from_secs(3)).await {
                    mirror.apply(&message);
                    if message["type"] == "snapshot" {
                        break;
                    }
                }
                (via, mirror)
            })
        })
        .collect();
    let mut resumed = Vec::new();
    let mut catch_up = 0;
    for task in cut {
        let (via, mut mirror) = task.await.unwrap();
        catch_up += mirror.late_snapshots;
        let cursor = mirror.cursor.clone().expect("a cursor");
        mirror.resubscribe();
        let conn = Conn::open(&fleet.url, via, Some(&cursor), None).await;
        resumed.push(Reader::continue_with(conn, mirror));
    }
    assert!(
        catch_up > 0,
        "no stalled reader got a catch-up snapshot ({changes} changes while they stalled): the fault was not reproduced"
    );
    fleet.until_running().await;
    let all: Vec<&Reader> = live.iter().chain(&resumed).collect();
    all_agree_with_rest(&fleet, &all).await;
    for reader in &resumed {
        assert_eq!(
            reader.mirror.lock().resumed,
            Some(true),
            "the cursor was still in the replay log"
        );
    }
    eprintln!(
        "catch-up resume: {changes} changes while 4 readers stalled, {catch_up} catch-up snapshots before the cuts, {} readers agree with REST",
        all.len()
    );
}

/// Item 2: once a member that refused connections answers again, its
/// documents are fresh within seconds (not after the backoff built up
/// during the outage), and no sync document claims `Syncing` meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_are_fresh_soon_after_a_member_recovers() {
    let _one = heavy().await;
    let fleet = Fleet::start(3, "", &[]).await;
    let reader = synced_readers(&fleet.url, 1, WAIT).await.remove(0);
    let b = fleet.sim("b");
    b.set_faults(kube_pulse_sim::Faults {
        refuse: true,
        ..Default::default()
    });
    let outage = Instant::now();
    let phase = |topic: &str| {
        let mirror = reader.mirror.lock();
        mirror.docs.get(topic).map(|(_, d)| d["phase"].clone())
    };
    while phase("clusters/b") != Some("Unhealthy".into()) {
        assert!(outage.elapsed() < WAIT, "b never turned Unhealthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // 12 s of outage: the watches' backoff grows past 6 s meanwhile.
    let mut syncing_during_outage = Vec::new();
    while outage.elapsed() < Duration::from_secs(12) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mirror = reader.mirror.lock();
        syncing_during_outage.extend(
            mirror
                .docs
                .iter()
                .filter(|(t, d)| t.starts_with("clusters/b/sync/") && d.1["phase"] == "Syncing")
                .map(|(t, _)| t.clone()),
        );
    }
    assert!(
        syncing_during_outage.is_empty(),
        "sync documents claimed Syncing while b refused connections: {syncing_during_outage:?}"
    );
    b.heal();
    let healed = Instant::now();
    fleet.scale("b", &app(0), 3).await;
    let topic = format!("apps/b/shop/{}", app(0));
    loop {
        let expected = reader
            .mirror
            .lock()
            .docs
            .get(&topic)
            .map(|(_, d)| d["expected"].clone());
        if expected == Some(3.into()) {
            break;
        }
        assert!(
            healed.elapsed() < WAIT,
            "{topic} never showed the scale made after healing"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fresh = healed.elapsed();
    let all_syncing = || {
        let mirror = reader.mirror.lock();
        let syncs: Vec<_> = mirror
            .docs
            .iter()
            .filter(|(t, _)| t.starts_with("clusters/b/sync/"))
            .collect();
        !syncs.is_empty() && syncs.iter().all(|(_, d)| d.1["phase"] == "Syncing")
    };
    while !all_syncing() {
        assert!(healed.elapsed() < WAIT, "b's syncs never recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let syncing = healed.elapsed();
    eprintln!(
        "after a 12 s outage: a change made at healing shown after {fresh:?}, every sync Syncing after {syncing:?}"
    );
    // The promise is 2 s (probe every 1 s here); the bound leaves room for
    // a loaded 2-core machine, well below the 10–25 s of a leftover backoff.
    assert!(
        fresh < Duration::from_secs(5),
        "documents stale {fresh:?} after the member answered again"
    );
    all_agree_with_rest(&fleet, &[&reader]).await;
}

/// Item 3: a resource that keeps failing keeps its cluster Degraded
/// through every retry: no Healthy in between, no new transitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_that_keeps_failing_does_not_make_its_cluster_flap() {
    let _one = heavy().await;
    let fleet = Fleet::start(2, "", &[]).await;
    let reader = synced_readers(&fleet.url, 1, WAIT).await.remove(0);
    let b = fleet.sim("b");
    b.set_deny(["apps/deployments"]);
    b.close_watches();
    let cluster = |reader: &Reader| {
        let mirror = reader.mirror.lock();
        mirror
            .docs
            .get("clusters/b")
            .map(|(_, d)| d.clone())
            .unwrap()
    };
    let start = Instant::now();
    while cluster(&reader)["phase"] != "Degraded" {
        assert!(
            start.elapsed() < WAIT,
            "b never turned Degraded: {}",
            cluster(&reader)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let transitions = |doc: &serde_json::Value| {
        doc["history"]
            .as_object()
            .map(|h| {
                h.keys()
                    .filter_map(|k| k.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0)
    };
    let first = transitions(&cluster(&reader));
    // 8 s of retries (the backoff starts at 0.8 s): sampled every 20 ms.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(8) {
        let doc = cluster(&reader);
        assert_eq!(
            doc["phase"], "Degraded",
            "b left Degraded while deployments stay denied: {doc}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let doc = cluster(&reader);
    assert_eq!(
        transitions(&doc),
        first,
        "new transitions while one resource kept failing: {}",
        doc["history"]
    );
    b.set_deny(Vec::<String>::new());
    while cluster(&reader)["phase"] != "Healthy" {
        assert!(
            watched.elapsed() < WAIT,
            "b never healed: {}",
            cluster(&reader)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    all_agree_with_rest(&fleet, &[&reader]).await;
}

/// Item 4: the replay log stays within its byte bound, which `/metrics`
/// reports, while changes keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_log_stays_within_its_byte_bound() {
    let _one = heavy().await;
    const BOUND: f64 = 256.0 * 1024.0;
    let fleet = Fleet::start(10, "", &["--replay-log-bytes", "262144"]).await;
    let churn = fleet.churn(60, Duration::from_secs(6));
    let sample = async {
        let mut most: f64 = 0.0;
        for _ in 0..40 {
            let bytes = fleet.metric("kube_pulse_replay_log_bytes").await;
            assert!(
                bytes <= BOUND,
                "replay log holds {bytes} bytes, bound {BOUND}"
            );
            most = most.max(bytes);
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        most
    };
    let (_, most) = tokio::join!(churn, sample);
    fleet.until_running().await;
    let bytes = fleet.metric("kube_pulse_replay_log_bytes").await;
    let size = fleet.metric("kube_pulse_replay_log_size").await;
    let changes = fleet.metric("kube_pulse_hub_changes_total").await;
    assert!(bytes <= BOUND && size > 0.0);
    assert!(
        size < changes,
        "the byte bound evicted nothing ({size} of {changes} changes kept): raise the load"
    );
    eprintln!(
        "replay log: {size} of {changes} changes kept in {bytes} bytes (most {most}), {:.0} bytes per change; gateway RSS {} MiB",
        bytes / size,
        fleet.rss() / (1 << 20)
    );
}

/// Items 5 and 7: on SIGTERM every WebSocket reads 1001, and the storm of
/// clients reconnecting to the restarted gateway with their old cursors
/// (another process's) gets fresh snapshots and ends with every document,
/// without those of a member taken out of the configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_closes_sockets_with_1001_and_a_reconnect_storm_rebuilds_the_new_state() {
    let _one = heavy().await;
    const CLIENTS: usize = 200;
    // The clients stand for 200 browsers but share one loopback address:
    // the per-address subscribe rate (100/s) would spread the storm over 2 s.
    let mut fleet = Fleet::start(5, "", &["--max-subscribes-per-client", "1000"]).await;
    let mut conns = Vec::new();
    for i in 0..CLIENTS {
        let via = if i % 2 == 0 { Via::Ws } else { Via::Sse };
        let mut conn = Conn::open(&fleet.url, via, None, None).await;
        let mut mirror = Mirror::default();
        while !mirror.synced {
            mirror.apply(&conn.next_within(WAIT).await.expect("initial snapshots"));
        }
        conns.push((via, conn, mirror));
    }
    // Changes in flight while the gateway stops; the new process runs
    // without member c, taken out of the configuration.
    fleet.churn(50, Duration::from_secs(1)).await;
    fleet.configure(&["a", "b"]);
    let status = fleet.restart();
    assert!(status.success(), "serve exits 0 on SIGTERM: {status:?}");
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    let mut resumed = Vec::new();
    for (via, mut conn, mut mirror) in conns {
        let end = loop {
            match conn.next_within(Duration::from_secs(5)).await {
                Ok(message) => mirror.apply(&message),
                Err(code) => break code,
            }
        };
        if via == Via::Ws {
            *codes.entry(format!("{end:?}")).or_default() += 1;
        }
        resumed.push((via, mirror));
    }
    assert_eq!(
        codes,
        [(format!("{:?}", Some(1001)), CLIENTS / 2)].into(),
        "close codes the sockets read on SIGTERM"
    );
    // All reconnect at once, each with the last cursor it saw.
    let storm = Instant::now();
    let url = fleet.url.clone();
    let tasks: Vec<_> = resumed
        .into_iter()
        .map(|(via, mut mirror)| {
            let url = url.clone();
            tokio::spawn(async move {
                let cursor = mirror.cursor.clone().unwrap();
                mirror.resubscribe();
                Reader::continue_with(Conn::open(&url, via, Some(&cursor), None).await, mirror)
            })
        })
        .collect();
    let mut readers = Vec::new();
    for task in tasks {
        readers.push(task.await.unwrap());
    }
    while !readers.iter().all(Reader::synced) {
        assert!(
            storm.elapsed() < WAIT,
            "the storm did not sync within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let synced = storm.elapsed();
    for reader in &readers {
        assert_eq!(
            reader.mirror.lock().resumed,
            Some(false),
            "a cursor of the previous process gets fresh snapshots"
        );
    }
    let rest = fleet.rest().await;
    assert!(
        rest.keys()
            .all(|t| !t.starts_with("clusters/c") && !t.starts_with("apps/c/")),
        "member c is gone from the configuration, its topics too"
    );
    all_agree_with_rest(&fleet, &readers.iter().collect::<Vec<_>>()).await;
    eprintln!("restart: {CLIENTS} clients reconnected and synced in {synced:?}");
}

/// Items 5 and 6: a client that stops reading is closed within the write
/// timeout (`--write-timeout 3` here) once the little the gateway holds
/// for it is full; a WebSocket that reads again within the close grace
/// (5 s for a 4008) then reads 4008.
async fn a_stalled_reader_is_closed(via: Via) {
    const WRITE_TIMEOUT: u64 = 3;
    /// The gateway's close grace of a 4008 (`SLOW_CONSUMER_CLOSE_GRACE`):
    /// how long its close frame waits for the client to make room for it.
    const CLOSE_GRACE: Duration = Duration::from_secs(5);
    let fleet = Fleet::start(10, "", &["--write-timeout", &WRITE_TIMEOUT.to_string()]).await;
    let mut conn = Conn::open(&fleet.url, via, None, Some(4096)).await;
    let mut mirror = Mirror::default();
    while !mirror.synced {
        mirror.apply(&conn.next_within(WAIT).await.expect("initial snapshots"));
    }
    let stalled = Instant::now();
    let closes = fleet.watch_metric("kube_pulse_slow_consumer_closes_total", 1.0, WAIT);
    let reached = tokio::select! {
        reached = closes => reached.expect("the watch answers"),
        _ = fleet.churn(40, WAIT) => panic!("no slow-consumer close while changes kept coming"),
    };
    let reached =
        reached.unwrap_or_else(|| panic!("the stalled reader is still open after {WAIT:?}"));
    let closed = reached.at - stalled;
    conn.widen_receive_buffer();
    let reading = Instant::now();
    let mut read = 0usize;
    let end = loop {
        match conn.next_within(Duration::from_secs(5)).await {
            Ok(_) => read += 1,
            Err(code) => break code,
        }
    };
    // The close frame follows what is buffered for the client, within the
    // grace; a client back later than that may find the socket gone
    // without it. The gateway decided after the last poll that saw the
    // socket open had started, so a client back within the grace of that
    // poll (less a second for the gateway to notice the room, on a starved
    // machine) is owed the close code. Under CPU starvation the test itself
    // can be back later, however the gateway writes (its runtime also
    // serves the simulators and the churn); then the close code is not
    // asserted, only that the socket ended.
    let back = reading - reached.below_at;
    let owed = back + Duration::from_secs(1) <= CLOSE_GRACE;
    if via == Via::Ws && owed {
        assert_eq!(
            end,
            Some(4008),
            "the close code after {read} buffered messages, read in {:?}, reading from {back:?} after the close at the earliest",
            reading.elapsed(),
        );
    }
    eprintln!(
        "stalled {via:?} reader closed {closed:?} after it stopped reading ({read} messages were buffered for it; back {back:?} after the close at the earliest, end {end:?}{})",
        if via == Via::Ws && !owed {
            ": past the close grace, the code is not asserted"
        } else {
            ""
        }
    );
    // Filling what the gateway holds for it takes a few seconds at 40
    // scales/s; then the write timeout runs.
    assert!(
        closed < Duration::from_secs(WRITE_TIMEOUT + 8),
        "closed {closed:?} after stopping: more than the write timeout ({WRITE_TIMEOUT} s) after filling its buffers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_websocket_is_closed_with_4008() {
    let _one = heavy().await;
    a_stalled_reader_is_closed(Via::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_sse_stream_is_closed() {
    let _one = heavy().await;
    a_stalled_reader_is_closed(Via::Sse).await;
}

/// Item 7: apps whose workloads are deleted, and every app of a member
/// replaced by a different cluster at the same address, are `removed`
/// after the retention; subscribers and REST agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_apps_and_a_replaced_member_are_removed() {
    let _one = heavy().await;
    let mut fleet = Fleet::start(3, "appRetentionSeconds: 1\n", &[]).await;
    let readers = synced_readers(&fleet.url, 4, WAIT).await;
    let api: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(fleet.sim("b").client(), "shop");
    api.delete(&app(1), &Default::default()).await.unwrap();
    // Member c is replaced by another cluster on the same address.
    let old = fleet.sims.remove(2);
    let addr = old.addr();
    old.shutdown().await;
    let replacement = pulse_testkit::sim::sim_with(|c| {
        c.name = "c".into();
        c.listen = addr;
        c.workloads = vec![kube_pulse_sim::WorkloadSeed {
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "other".into(),
            replicas: 1,
            image: "registry.example/other:1".into(),
        }];
    })
    .await;
    fleet.sims.push(replacement);
    let gone: Vec<String> = std::iter::once(format!("apps/b/shop/{}", app(1)))
        .chain((0..3).map(|i| format!("apps/c/shop/{}", app(i))))
        .collect();
    let start = Instant::now();
    loop {
        let done = readers.iter().all(|r| {
            let mirror = r.mirror.lock();
            gone.iter()
                .all(|t| mirror.removed.contains(t) && !mirror.docs.contains_key(t))
                && mirror.docs.contains_key("apps/c/shop/other")
        });
        if done {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "not every reader got `removed` for {gone:?} and the replacement's app: {:?}",
            readers[0].mirror.lock().docs.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("gone apps removed {:?} after the deletion", start.elapsed());
    let rest = fleet.rest().await;
    for topic in &gone {
        assert!(!rest.contains_key(topic), "REST still has {topic}");
    }
    all_agree_with_rest(&fleet, &readers.iter().collect::<Vec<_>>()).await;
}

/// API errors and relists on one member (500, 401, 403 on the apps group,
/// then every watch expired with 410) while the others change: every
/// subscriber ends with the true state, and the member's errors showed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_relists_end_with_the_true_state() {
    let _one = heavy().await;
    let fleet = Fleet::start(3, "", &[]).await;
    let readers = synced_readers(&fleet.url, 4, WAIT).await;
    let b = fleet.sim("b");
    let mut reasons = std::collections::BTreeSet::new();
    for (status, prefix) in [(500, None), (401, None), (403, Some("/apis/apps"))] {
        b.set_faults(kube_pulse_sim::Faults {
            status: Some(status),
            status_path_prefix: prefix.map(str::to_string),
            ..Default::default()
        });
        b.close_watches();
        fleet.scale("a", &app(status as usize % 3), 2).await;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            if let Some((_, doc)) = readers[0].mirror.lock().docs.get("clusters/b") {
                reasons.insert(format!("{} ({})", doc["phase"], doc["reason"]));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    b.heal();
    b.expire_watches();
    fleet.scale("b", &app(0), 3).await;
    fleet.until_running().await;
    all_agree_with_rest(&fleet, &readers.iter().collect::<Vec<_>>()).await;
    // The 403s' retries back off (0.8 s doubling): b turns Healthy at the
    // next one after healing.
    let healed = Instant::now();
    loop {
        let b_doc = fleet.rest().await["clusters/b"].clone();
        if b_doc["phase"] == "Healthy" {
            break;
        }
        assert!(
            healed.elapsed() < WAIT,
            "b not Healthy after healing: {b_doc}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    all_agree_with_rest(&fleet, &readers.iter().collect::<Vec<_>>()).await;
    assert!(
        reasons.iter().any(|r| r.contains("Unauthorized")),
        "the 401s showed on the cluster: {reasons:?}"
    );
    eprintln!("member b under 500, 401, 403: cluster showed {reasons:?}");
}
