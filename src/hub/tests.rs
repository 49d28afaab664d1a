//! The hub as a whole: revisions and patches, the replay log's bounds,
//! changes from other replicas, and subscriptions fed through their queues.

use super::*;
use serde_json::{Value, json};

fn patterns(p: &[&str]) -> Vec<Pattern> {
    p.iter().map(|s| Pattern::parse(s).unwrap()).collect()
}

#[test]
fn revisions_patches_and_no_op_puts() {
    let hub = Hub::new(HubConfig::default());
    let first = hub
        .put("clusters/a", json!({"phase": "Pending", "n": 1}))
        .unwrap();
    assert_eq!(
        (first.kind, first.rev, first.seq),
        (ChangeKind::Snapshot, 1, 1)
    );
    assert!(
        hub.put("clusters/a", json!({"phase": "Pending", "n": 1}))
            .is_none()
    );
    let second = hub
        .put("clusters/a", json!({"phase": "Healthy", "n": 1}))
        .unwrap();
    assert_eq!(
        (second.kind, second.rev, second.seq),
        (ChangeKind::Patch, 2, 2)
    );
    assert_eq!(*second.patch.clone().unwrap(), json!({"phase": "Healthy"}));
    let removed = hub.remove("clusters/a").unwrap();
    assert_eq!((removed.kind, removed.rev), (ChangeKind::Removed, 3));
    assert!(hub.get("clusters/a").is_none());
    assert!(hub.remove("clusters/a").is_none());
}

#[test]
fn revisions_continue_across_a_removal_while_it_is_in_the_log() {
    let hub = Hub::new(HubConfig {
        log_size: 4,
        log_age: std::time::Duration::ZERO,
        subscriber_queue: 8,
        ..HubConfig::default()
    });
    hub.put("clusters/a", json!({"n": 1}));
    hub.put("clusters/a", json!({"n": 2}));
    assert_eq!(hub.remove("clusters/a").unwrap().rev, 3);
    let again = hub.put("clusters/a", json!({"n": 1})).unwrap();
    assert_eq!((again.kind, again.rev), (ChangeKind::Snapshot, 4));
    hub.remove("clusters/a");
    for i in 0..4 {
        hub.put("clusters/b", json!({"i": i}));
    }
    assert!(
        hub.inner.lock().removed.is_empty(),
        "a removal that left the log is forgotten"
    );
    assert_eq!(hub.put("clusters/a", json!({"n": 1})).unwrap().rev, 1);
}

#[test]
fn remote_changes_keep_the_owners_revisions() {
    let hub = Hub::new(HubConfig::default());
    let first = hub
        .apply_remote("clusters/a", 7, Some(json!({"n": 1, "x": null})))
        .unwrap();
    assert_eq!(
        (first.kind, first.rev, first.remote),
        (ChangeKind::Snapshot, 7, true)
    );
    assert_eq!(*hub.get("clusters/a").unwrap().doc, json!({"n": 1}));
    assert!(
        hub.apply_remote("clusters/a", 7, Some(json!({"n": 1})))
            .is_none(),
        "the same document at the same revision is not published twice"
    );
    let next = hub
        .apply_remote("clusters/a", 8, Some(json!({"n": 2})))
        .unwrap();
    assert_eq!((next.kind, next.rev), (ChangeKind::Patch, 8));
    assert_eq!(*next.patch.clone().unwrap(), json!({"n": 2}));
    let gap = hub
        .apply_remote("clusters/a", 10, Some(json!({"n": 3})))
        .unwrap();
    assert_eq!(
        (gap.kind, gap.rev),
        (ChangeKind::Snapshot, 10),
        "after a gap in revisions, a patch would not apply"
    );
    let older = hub
        .apply_remote("clusters/a", 3, Some(json!({"n": 3})))
        .unwrap();
    assert_eq!(
        (older.kind, older.rev),
        (ChangeKind::Snapshot, 3),
        "a revision that does not follow replaces the document"
    );
    // A local change continues from the remote revision.
    let local = hub.put("clusters/a", json!({"n": 4})).unwrap();
    assert_eq!(
        (local.kind, local.rev, local.remote),
        (ChangeKind::Patch, 4, false)
    );
    let removed = hub.apply_remote("clusters/a", 5, None).unwrap();
    assert_eq!((removed.kind, removed.rev), (ChangeKind::Removed, 5));
    assert!(hub.get("clusters/a").is_none());
    assert!(hub.apply_remote("clusters/a", 6, None).is_none());
}

#[test]
fn replay_log_is_bounded() {
    let hub = Hub::new(HubConfig {
        log_size: 3,
        log_age: std::time::Duration::ZERO,
        subscriber_queue: 8,
        ..HubConfig::default()
    });
    for i in 0..5 {
        hub.put("t/x", json!({"i": i}));
    }
    assert_eq!(hub.changes_since(2).unwrap().len(), 3);
    assert!(hub.changes_since(1).is_none(), "seq 2 fell out of the log");
    assert_eq!(hub.changes_since(5).unwrap().len(), 0);
    assert!(hub.changes_since(9).is_none(), "a future cursor is unknown");
}

#[test]
fn replay_log_keeps_its_time_window_beyond_its_count() {
    let hub = Hub::new(HubConfig {
        log_size: 2,
        log_age: std::time::Duration::from_millis(300),
        subscriber_queue: 8,
        ..HubConfig::default()
    });
    for i in 0..50 {
        hub.put("apps/a/s/w", json!({"i": i}));
    }
    // All 50 within the window: every one is kept, whatever the count.
    assert!(
        hub.changes_since(0).is_some(),
        "the window kept every change"
    );
    assert_eq!(hub.stats().log_len, 50);
    std::thread::sleep(std::time::Duration::from_millis(400));
    hub.put("apps/a/s/w", json!({"i": 50}));
    // Older than the window: down to the count.
    assert_eq!(hub.stats().log_len, 2);
    assert!(hub.changes_since(0).is_none());
}

#[test]
fn replay_log_is_bounded_in_bytes() {
    let budget = 64 * 1024;
    let hub = Hub::new(HubConfig {
        log_size: 10_000,
        log_bytes: budget,
        subscriber_queue: 8,
        ..HubConfig::default()
    });
    for i in 0..100 {
        let pad = format!("{i:04}").repeat(1024);
        hub.put(
            &format!("apps/a/shop/w{}", i % 5),
            json!({"i": i, "pad": pad}),
        );
    }
    let stats = hub.stats();
    assert!(stats.log_bytes <= budget, "{stats:?}");
    assert!(stats.log_bytes > budget - 5 * 1024, "{stats:?}");
    assert!((10..20).contains(&stats.log_len), "{stats:?}");
    let kept = hub.inner.lock().log.iter().map(|(_, b)| b).sum::<usize>();
    assert_eq!(kept, stats.log_bytes);
    // The oldest changes went first: the log holds the newest ones, in order.
    let oldest = stats.seq - stats.log_len as u64;
    let replay = hub.changes_since(oldest).expect("the oldest kept change");
    let seqs: Vec<u64> = replay.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (oldest + 1..=stats.seq).collect::<Vec<_>>());
    assert!(hub.changes_since(oldest - 1).is_none(), "evicted by bytes");
}

#[test]
fn a_logged_change_keeps_its_message_not_its_documents() {
    let hub = Hub::new(HubConfig::default());
    let pad = "x".repeat(4096);
    let first = hub.put("apps/a/s/w", json!({"n": 1, "pad": pad})).unwrap();
    let second = hub.put("apps/a/s/w", json!({"n": 2, "pad": pad})).unwrap();
    let target = json!({"cluster": "a", "namespace": "s"});
    hub.put("tasks/1", json!({"target": target, "progress": 1}));
    let task = hub
        .put("tasks/1", json!({"target": target, "progress": 2}))
        .unwrap();
    assert!(
        second.doc.is_some() && second.patch.is_some(),
        "live changes are whole"
    );
    let logged = hub.changes_since(0).unwrap();
    assert_eq!(logged.len(), 4);
    for (live, kept) in [&first, &second].into_iter().zip(&logged) {
        assert_eq!(
            (kept.seq, kept.rev, kept.kind),
            (live.seq, live.rev, live.kind)
        );
        assert!(kept.doc.is_none() && kept.patch.is_none(), "{kept:?}");
        assert_eq!(kept.encoded.json.get(), live.encoded.json.get());
        assert!(kept.encoded.sse.get().is_none());
    }
    let message: Value = serde_json::from_slice(logged[1].encoded.json.get().unwrap()).unwrap();
    assert_eq!(message["patch"], json!({"n": 2}));
    assert_eq!(message["cursor"], json!(second.cursor));
    // Who may see a task depends on its document: the log keeps it.
    assert_eq!(logged[3].doc, task.doc);
    let stats = hub.stats();
    assert!(stats.log_bytes < 2 * 4096 + 4 * 1024, "{stats:?}");
}

#[tokio::test]
async fn subscriptions_get_snapshot_then_matching_changes_once() {
    let hub = Hub::new(HubConfig::default());
    hub.put("clusters/a", json!({"p": 1}));
    hub.put("apps/a/shop/web", json!({"p": 1}));
    let mut sub = hub.subscribe(patterns(&["clusters/*", "clusters/**"]));
    assert_eq!(sub.snapshot().len(), 1);
    hub.put("apps/a/shop/web", json!({"p": 2}));
    hub.put("clusters/a", json!({"p": 2}));
    match sub.next().await {
        Delivery::Change(c) => assert_eq!((c.topic.as_str(), c.rev), ("clusters/a", 2)),
        other => panic!("{other:?}"),
    }
    assert!(
        sub.try_next().is_none(),
        "overlapping patterns deliver once"
    );
    assert_eq!(hub.stats().subscriptions, 1);
    assert_eq!((hub.stats().index_entries, hub.stats().index_nodes), (2, 2));
    drop(sub);
    assert_eq!(hub.stats().subscriptions, 0);
    assert_eq!((hub.stats().index_entries, hub.stats().index_nodes), (0, 0));
}

#[tokio::test]
async fn a_batch_takes_what_was_queued_behind_the_first_change() {
    let hub = Hub::new(HubConfig::default());
    let mut sub = hub.subscribe(patterns(&["**"]));
    hub.put("apps/a/b/c", json!({"i": 1}));
    hub.put("apps/a/b/c", json!({"i": 2}));
    let rev = |d: Option<Delivery>| match d {
        Some(Delivery::Change(c)) => Some(c.rev),
        other => panic!("{other:?}"),
    };
    assert_eq!(rev(Some(sub.next().await)), Some(1));
    assert_eq!(rev(sub.try_next_queued()), Some(2));
    assert!(sub.try_next_queued().is_none(), "the queue is empty");
    // A change queued after the last one was taken is not looked for
    // (the batch is written without it), but the next poll gets it.
    hub.put("apps/a/b/c", json!({"i": 3}));
    assert!(sub.try_next_queued().is_none());
    assert_eq!(rev(Some(sub.next().await)), Some(3));
    // A resync that is due is part of the batch.
    let hub = Hub::new(HubConfig {
        subscriber_queue: 1,
        ..HubConfig::default()
    });
    let mut sub = hub.subscribe(patterns(&["**"]));
    for i in 0..3 {
        hub.put("apps/a/b/c", json!({"i": i}));
    }
    assert_eq!(rev(Some(sub.next().await)), Some(1));
    assert!(matches!(
        sub.try_next_queued(),
        Some(Delivery::Resync { current: Some(d), .. }) if d.rev == 3
    ));
    assert!(sub.try_next_queued().is_none());
}

#[tokio::test]
async fn a_waiting_reader_gets_the_queue_then_the_resync() {
    let hub = Hub::new(HubConfig {
        log_size: 100,
        subscriber_queue: 1,
        ..HubConfig::default()
    });
    let mut sub = hub.subscribe(patterns(&["**"]));
    let reader = tokio::spawn(async move {
        let first = sub.next().await;
        let second = sub.next().await;
        (first, second)
    });
    tokio::task::yield_now().await;
    for i in 0..5 {
        hub.put("apps/a/b/c", json!({"i": i}));
    }
    let (first, second) = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
        .await
        .expect("the queued change wakes the reader")
        .unwrap();
    assert!(
        matches!(&first, Delivery::Change(c) if c.rev == 1),
        "{first:?}"
    );
    assert!(
        matches!(&second, Delivery::Resync { current: Some(d), .. } if d.rev == 5),
        "{second:?}"
    );
}

#[test]
fn a_full_queue_turns_into_a_resync_of_the_latest_state() {
    let hub = Hub::new(HubConfig {
        log_size: 100,
        subscriber_queue: 2,
        ..HubConfig::default()
    });
    let mut sub = hub.subscribe(patterns(&["**"]));
    for i in 0..10 {
        hub.put("apps/a/b/c", json!({"i": i}));
    }
    hub.put("clusters/z", json!({"ok": true}));
    // All of it is ready at once: the queued changes, then the resyncs.
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(sub.try_next().expect("ready without waiting"));
    }
    assert!(sub.try_next().is_none(), "nothing more is queued");
    assert!(matches!(&got[0], Delivery::Change(c) if c.rev == 1));
    assert!(matches!(&got[1], Delivery::Change(c) if c.rev == 2));
    let resyncs: Vec<(String, u64)> = got[2..]
        .iter()
        .map(|d| match d {
            Delivery::Resync { topic, current } => {
                (topic.to_string(), current.as_ref().unwrap().rev)
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        resyncs,
        [
            ("apps/a/b/c".to_string(), 10),
            ("clusters/z".to_string(), 1)
        ]
    );
    assert!(hub.stats().lag_events >= 9);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn document() -> impl Strategy<Value = Value> {
        prop::collection::btree_map("[a-e]", json_value(), 0..5)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        /// Applying every published patch, in order, to the first snapshot
        /// gives exactly the hub's current document after each change.
        #[test]
        fn patches_compose_to_the_current_document(docs in prop::collection::vec(document(), 1..12)) {
            let hub = Hub::new(HubConfig::default());
            let mut replica: Option<Value> = None;
            for doc in docs {
                let Some(change) = hub.put("t/x", doc) else { continue };
                match change.kind {
                    ChangeKind::Snapshot => replica = Some((*change.doc.clone().unwrap()).clone()),
                    ChangeKind::Patch => json_patch::merge(replica.as_mut().unwrap(), change.patch.as_ref().unwrap()),
                    ChangeKind::Removed => unreachable!(),
                }
                prop_assert_eq!(replica.as_ref().unwrap(), &*hub.get("t/x").unwrap().doc);
            }
        }
    }
}

#[test]
fn changes_come_out_in_order_whether_held_inline_or_behind() {
    let hub = Hub::new(HubConfig::default());
    let made: Vec<std::sync::Arc<Change>> = (0..50)
        .map(|i| {
            hub.put("apps/a/b/c", serde_json::json!({ "i": i }))
                .unwrap()
        })
        .collect();
    let mut changes = queue::Changes::default();
    assert!(changes.is_empty() && changes.pop_front().is_none());
    // One at a time: the buffer behind is never used.
    for c in &made[..3] {
        changes.push_back(c.clone());
        assert_eq!(changes.len(), 1);
        assert_eq!(changes.pop_front().unwrap().seq, c.seq);
        assert!(changes.is_empty());
    }
    assert_eq!(changes.buffered_capacity(), 0);
    // A burst longer than what is kept: in order, and the buffer freed.
    for c in &made {
        changes.push_back(c.clone());
    }
    assert_eq!(changes.len(), made.len());
    let seqs: Vec<u64> = std::iter::from_fn(|| changes.pop_front())
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, made.iter().map(|c| c.seq).collect::<Vec<_>>());
    assert!(changes.is_empty());
    assert_eq!(
        changes.buffered_capacity(),
        0,
        "a burst's buffer is given back"
    );
}
