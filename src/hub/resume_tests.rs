//! Every cursor a subscription hands out is safe to resume from: a client
//! holding what it received up to a delivery, resuming from that delivery's
//! cursor (a new subscription's replay), ends with exactly the
//! hub's documents, with no revision gap and no revision going back, even
//! while the subscription is behind and its missed topics come back as
//! snapshots one by one, and across removals and re-creations.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

/// A client's copy: topic → (rev, doc), applied by the protocol's rules.
type Copy = BTreeMap<String, (u64, Value)>;

/// A field of the message a change goes out as (`doc`, `patch`): what a
/// client receives, live or replayed from the log.
fn sent(change: &Change, field: &str) -> Value {
    let json = change
        .encoded
        .json
        .get()
        .expect("published changes are encoded");
    let message: Value = serde_json::from_slice(json).unwrap();
    message[field].clone()
}

fn apply_change(copy: &mut Copy, change: &Change) -> Result<(), String> {
    let topic = change.topic.to_string();
    let held = copy.get(&topic).map(|(rev, _)| *rev);
    match change.kind {
        ChangeKind::Snapshot => {
            if held.is_none_or(|h| change.rev > h) {
                copy.insert(topic, (change.rev, sent(change, "doc")));
            }
        }
        ChangeKind::Patch => match held {
            Some(h) if change.rev <= h => {}
            Some(h) if change.rev == h + 1 => {
                let entry = copy.get_mut(&topic).unwrap();
                json_patch::merge(&mut entry.1, &sent(change, "patch"));
                entry.0 = change.rev;
            }
            other => {
                return Err(format!(
                    "{topic}: patch to rev {} on {other:?}: a gap",
                    change.rev
                ));
            }
        },
        ChangeKind::Removed => {
            if held.is_some_and(|h| change.rev > h) {
                copy.remove(&topic);
            }
        }
    }
    Ok(())
}

fn apply(copy: &mut Copy, delivery: &Delivery) -> Result<(), String> {
    match delivery {
        Delivery::Change(change) => apply_change(copy, change),
        Delivery::Resync { topic, current } => {
            match current {
                Some(doc) => copy.insert(topic.to_string(), (doc.rev, (*doc.doc).clone())),
                None => copy.remove(topic.as_str()),
            };
            Ok(())
        }
    }
}

fn truth(hub: &Hub) -> Copy {
    hub.list(&[Pattern::parse("**").unwrap()])
        .into_iter()
        .map(|d| (d.topic.to_string(), (d.rev, (*d.doc).clone())))
        .collect()
}

/// Resumes `copy` from `resume` as a reconnecting client would: a new
/// subscription's collapsed replay, applied by the protocol's rules.
fn resumed(hub: &Arc<Hub>, mut copy: Copy, resume: u64) -> Result<Copy, String> {
    let sub = hub.subscribe(vec![Pattern::parse("**").unwrap()]);
    let replayed = sub
        .replay_since(resume)
        .ok_or_else(|| format!("cursor {resume} cannot be resumed"))?;
    for r in replayed {
        match r {
            Replayed::Change(change) => apply_change(&mut copy, &change)?,
            Replayed::Doc(doc) => {
                let held = copy.get(doc.topic.as_str()).map(|(rev, _)| *rev);
                if held.is_some_and(|h| h > doc.rev) {
                    return Err(format!(
                        "{}: replayed rev {} is older than held {held:?}",
                        doc.topic, doc.rev
                    ));
                }
                copy.insert(doc.topic.to_string(), (doc.rev, (*doc.doc).clone()));
            }
            Replayed::Removed { topic, .. } => {
                copy.remove(topic.as_str());
            }
        }
    }
    Ok(copy)
}

#[test]
fn every_cursor_of_a_lagging_subscription_is_safe_to_resume_from() {
    let hub = Hub::new(HubConfig {
        log_size: 100_000,
        subscriber_queue: 3,
        ..HubConfig::default()
    });
    let topics = [
        "apps/a/s/w0",
        "apps/a/s/w1",
        "apps/a/s/w2",
        "clusters/a",
        "clusters/b",
    ];
    let mut sub = hub.subscribe(vec![Pattern::parse("**").unwrap()]);
    let mut copy = Copy::new();
    let mut state = 7u64;
    let mut checked = 0;
    let mut behind = 0;
    for step in 0..600u64 {
        // A deterministic mix of puts and removals at a rate the reader
        // cannot keep up with, then a few reads.
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let topic = topics[(state >> 33) as usize % topics.len()];
        if (state >> 20).is_multiple_of(13) {
            hub.remove(topic);
        } else {
            hub.put(topic, json!({"step": step, "half": step / 2}));
        }
        if !step.is_multiple_of(3) {
            continue;
        }
        let Some(delivery) = sub.try_next() else {
            continue;
        };
        apply(&mut copy, &delivery).unwrap_or_else(|e| panic!("step {step}: {e}"));
        let resume = sub.resume_seq();
        if let Delivery::Change(change) = &delivery
            && change.seq != resume
        {
            behind += 1;
        }
        // Cut here and resume from this delivery's cursor.
        let after = resumed(&hub, copy.clone(), resume)
            .unwrap_or_else(|e| panic!("step {step}, resume from {resume}: {e}"));
        assert_eq!(after, truth(&hub), "step {step}, resume from {resume}");
        // Revisions of a topic only grow, across removals too.
        for (topic, (rev, _)) in &copy {
            assert!(truth(&hub).get(topic).is_none_or(|(now, _)| now >= rev));
        }
        checked += 1;
    }
    while let Some(delivery) = sub.try_next() {
        apply(&mut copy, &delivery).unwrap();
        let after = resumed(&hub, copy.clone(), sub.resume_seq()).unwrap();
        assert_eq!(after, truth(&hub));
    }
    assert_eq!(
        copy,
        truth(&hub),
        "the subscription itself ends with the truth"
    );
    assert!(checked > 100, "{checked} cuts checked");
    assert!(behind > 0, "the subscription fell behind and caught up");
    assert!(hub.stats().lag_events > 0);
}

/// A log bounded by bytes still replays exactly: every cut whose cursor is
/// still in the log resumes to the hub's documents; older ones are refused.
#[test]
fn a_resume_from_a_cursor_still_in_a_byte_bounded_log_is_exact() {
    let hub = Hub::new(HubConfig {
        log_size: 100_000,
        log_bytes: 48 * 1024,
        subscriber_queue: 100_000,
        ..HubConfig::default()
    });
    let topics = ["apps/a/s/w0", "apps/a/s/w1", "apps/a/s/w2", "clusters/a"];
    let mut sub = hub.subscribe(vec![Pattern::parse("**").unwrap()]);
    let mut copy = Copy::new();
    let mut cuts = Vec::new();
    for step in 0..300u64 {
        let topic = topics[(step * 7 % 11) as usize % topics.len()];
        if step % 17 == 16 {
            hub.remove(topic);
        } else {
            let pad = "p".repeat(200 + (step as usize * 37) % 900);
            hub.put(
                topic,
                json!({"step": step, "pad": pad, "list": [step, step / 2]}),
            );
        }
        while let Some(delivery) = sub.try_next() {
            apply(&mut copy, &delivery).unwrap();
        }
        cuts.push((copy.clone(), sub.resume_seq()));
    }
    assert_eq!(copy, truth(&hub));
    let stats = hub.stats();
    assert!(
        stats.log_bytes <= 48 * 1024 && stats.log_len < 300,
        "{stats:?}"
    );
    let oldest = stats.seq - stats.log_len as u64;
    let (mut exact, mut refused) = (0, 0);
    for (held, resume) in cuts {
        if resume >= oldest {
            let after = resumed(&hub, held, resume)
                .unwrap_or_else(|e| panic!("resume from {resume} (log from {oldest}): {e}"));
            assert_eq!(after, truth(&hub), "resume from {resume}");
            exact += 1;
        } else {
            let sub = hub.subscribe(vec![Pattern::parse("**").unwrap()]);
            assert!(sub.replay_since(resume).is_none(), "{resume} left the log");
            refused += 1;
        }
    }
    assert!(
        exact > 10 && refused > 10,
        "{exact} exact, {refused} refused"
    );
}

/// A replica in [`a_cursor_resumes_exactly_on_another_replica`]: the hub
/// its engine puts the documents of the member it owns into (`origin`),
/// its changes not yet in the stream, the hub it serves from what the
/// stream brings, and how far its consumer has read the stream.
struct Replica {
    name: &'static str,
    cluster: &'static str,
    origin: Arc<Hub>,
    hub: Arc<Hub>,
    outbox: std::collections::VecDeque<(String, u64, Option<Value>)>,
    read: usize,
}

/// A stream message: topic, revision, publishing replica, document.
type Streamed = (String, u64, &'static str, Option<Value>);

impl Replica {
    fn new(name: &'static str, cluster: &'static str) -> Self {
        let config = HubConfig {
            log_size: 100_000,
            subscriber_queue: 8,
            ..HubConfig::default()
        };
        let hub = Hub::new(config);
        hub.follow_stream("s1");
        Self {
            name,
            cluster,
            origin: Hub::new(config),
            hub,
            outbox: Default::default(),
            read: 0,
        }
    }

    /// The owner changes one of its topics, to be published later.
    fn change(&mut self, state: u64, step: u64) {
        let topics = ["clusters/{c}", "apps/{c}/s/w0", "apps/{c}/s/w1"];
        let topic = topics[(state >> 40) as usize % topics.len()].replace("{c}", self.cluster);
        let change = if (state >> 20).is_multiple_of(9) && topic.starts_with("apps/") {
            self.origin.remove(&topic)
        } else {
            self.origin
                .put(&topic, json!({"step": step, "by": self.name}))
        };
        if let Some(c) = change {
            self.outbox
                .push_back((topic, c.rev, c.doc.as_deref().cloned()));
        }
    }

    fn flush_one(&mut self, stream: &mut Vec<Streamed>) {
        if let Some((topic, rev, doc)) = self.outbox.pop_front() {
            stream.push((topic, rev, self.name, doc));
        }
    }

    /// Reads the next message of the stream into the served hub, as
    /// `stream.rs` does (its own changes come back this way too).
    fn consume_one(&mut self, stream: &[Streamed]) {
        let Some((topic, rev, _, doc)) = stream.get(self.read) else {
            return;
        };
        self.read += 1;
        self.hub
            .apply_streamed(self.read as u64, true, topic, *rev, doc.clone());
    }
}

fn apply_replayed(copy: &mut Copy, replayed: Vec<Replayed<'_>>) -> Result<(), String> {
    for r in replayed {
        match r {
            Replayed::Change(change) => apply_change(copy, &change)?,
            Replayed::Doc(doc) => {
                copy.insert(doc.topic.to_string(), (doc.rev, (*doc.doc).clone()));
            }
            Replayed::Removed { topic, .. } => {
                copy.remove(topic.as_str());
            }
        }
    }
    Ok(())
}

/// Two replicas, each owning one member, share a stream whose messages
/// arrive late and interleaved. A client of replica A cut anywhere resumes
/// on replica B from the cursor of its last delivery (only its stream part
/// means anything there): B's replay applies by the protocol's rules with
/// no revision gap, and, following B from then on, the client ends with
/// exactly B's documents, which are A's.
#[test]
fn a_cursor_resumes_exactly_on_another_replica() {
    for seed in [11, 12, 13, 14, 15] {
        resume_elsewhere(seed);
    }
}

fn resume_elsewhere(seed: u64) {
    let mut a = Replica::new("a", "x");
    let mut b = Replica::new("b", "y");
    let mut stream: Vec<Streamed> = Vec::new();
    let all = || vec![Pattern::parse("**").unwrap()];
    let mut client = a.hub.subscribe(all());
    let mut copy = Copy::new();
    // Clients that moved to B: their subscription there and their copy.
    let mut moved: Vec<(Subscription, Copy)> = Vec::new();
    let mut state = seed;
    let (mut replayed_changes, mut resumed) = (0, 0);
    for step in 0..1_500u64 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match (state >> 33) % 10 {
            0..=1 => a.change(state, step),
            2..=3 => b.change(state, step),
            4 => a.flush_one(&mut stream),
            5 => b.flush_one(&mut stream),
            6 => a.consume_one(&stream),
            7 => b.consume_one(&stream),
            _ => {
                let Some(delivery) = client.try_next() else {
                    continue;
                };
                apply(&mut copy, &delivery)
                    .unwrap_or_else(|e| panic!("seed {seed}, step {step}: {e}"));
                if !step.is_multiple_of(7) {
                    continue;
                }
                // Cut: resume on B from this delivery's cursor.
                let cursor =
                    crate::protocol::Cursor::parse(&a.hub.cursor(client.resume_seq())).unwrap();
                assert_ne!(cursor.epoch, b.hub.epoch());
                let stream_cursor = cursor.stream.expect("a cursor with a stream position");
                let mut sub = b.hub.subscribe(all());
                let replay = sub.replay_from_stream(&stream_cursor).unwrap_or_else(|| {
                    panic!("seed {seed}, step {step}: {stream_cursor:?} not resumable")
                });
                replayed_changes += replay.len();
                let mut moved_copy = copy.clone();
                apply_replayed(&mut moved_copy, replay).unwrap_or_else(|e| {
                    panic!("seed {seed}, step {step}, from {stream_cursor:?}: {e}")
                });
                sub.skip_streamed_through(stream_cursor.position);
                moved.push((sub, moved_copy));
                resumed += 1;
            }
        }
        for (i, (sub, copy)) in moved.iter_mut().enumerate() {
            while let Some(delivery) = sub.try_next() {
                apply(copy, &delivery)
                    .unwrap_or_else(|e| panic!("seed {seed}, step {step}, client {i}: {e}"));
            }
        }
    }
    // Everything published and read everywhere.
    while !a.outbox.is_empty() || !b.outbox.is_empty() {
        a.flush_one(&mut stream);
        b.flush_one(&mut stream);
    }
    while a.read < stream.len() || b.read < stream.len() {
        a.consume_one(&stream);
        b.consume_one(&stream);
    }
    assert_eq!(truth(&a.hub), truth(&b.hub), "the replicas agree");
    for (i, (sub, copy)) in moved.iter_mut().enumerate() {
        while let Some(delivery) = sub.try_next() {
            apply(copy, &delivery).unwrap();
        }
        assert_eq!(*copy, truth(&b.hub), "seed {seed}: client moved at cut {i}");
    }
    assert!(resumed > 10, "seed {seed}: {resumed} cuts resumed");
    assert!(replayed_changes > 0);
}

/// A position the replay log no longer covers, or of another stream, is
/// not resumed; one it covers is, with only what came after it.
#[test]
fn a_stream_position_is_resumed_only_while_the_log_covers_it() {
    let hub = Hub::new(HubConfig {
        log_size: 4,
        log_age: std::time::Duration::ZERO,
        subscriber_queue: 8,
        ..HubConfig::default()
    });
    hub.follow_stream("s1");
    for seq in 1..=10u64 {
        hub.apply_streamed(seq, true, "clusters/a", seq, Some(json!({"n": seq})));
    }
    let sub = hub.subscribe(vec![Pattern::parse("**").unwrap()]);
    let at = |id: &str, position| crate::protocol::StreamCursor {
        id: id.into(),
        position,
    };
    let replay = sub.replay_from_stream(&at("s1", 8)).unwrap();
    let revs: Vec<u64> = replay
        .iter()
        .map(|r| match r {
            Replayed::Change(c) => c.rev,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(revs, [9, 10]);
    assert!(
        sub.replay_from_stream(&at("s1", 6)).is_some(),
        "7 to 10 are logged"
    );
    assert!(
        sub.replay_from_stream(&at("s1", 5)).is_none(),
        "6 left the log"
    );
    assert!(
        sub.replay_from_stream(&at("s2", 9)).is_none(),
        "another stream"
    );
    assert!(
        hub.cursor(hub.seq()).ends_with(".s1-10"),
        "{}",
        hub.cursor(hub.seq())
    );
}

/// A stream made again is read from its start before the hub knows where
/// it is in it (position 0): what other replicas' messages change then
/// reaches every subscriber, one that resumed from a stream cursor too.
#[test]
fn changes_read_before_a_new_stream_is_placed_reach_subscribers() {
    let hub = Hub::new(HubConfig::default());
    hub.follow_stream("s1");
    hub.apply_streamed(
        1,
        true,
        "apps/a/shop/web",
        1,
        Some(json!({"state": "Stopped"})),
    );
    let mut fresh = hub.subscribe(vec![Pattern::parse("apps/**").unwrap()]);
    let mut resumed = hub.subscribe(vec![Pattern::parse("apps/**").unwrap()]);
    resumed.skip_streamed_through(1);
    // Deleted and made again: the first pass over the new stream.
    hub.follow_stream("s2");
    hub.apply_streamed(
        1,
        false,
        "apps/a/shop/web",
        2,
        Some(json!({"state": "Running"})),
    );
    for sub in [&mut fresh, &mut resumed] {
        match sub.try_next() {
            Some(Delivery::Change(change)) => assert_eq!(change.rev, 2),
            other => panic!("the change made at position 0 was not delivered: {other:?}"),
        }
    }
}
