//! The agents' NATS users (deploy/nats/nats-config.yaml's example entry,
//! the chart's `nats.agents`, docs/AGENT-DEPLOY.md): a real `nats-server`
//! with the component's nats.conf and two agent users inserted by
//! `manifests::nats_conf_with_agents`. An agent publishes into the agents'
//! stream on its own subjects and gets JetStream's ack on its own inbox
//! prefix; it cannot publish as another agent, on the replicas' stream or
//! bucket, nor delete the stream; the replicas' user makes the agents'
//! stream and a consumer on it, and sends an agent task requests it
//! answers. Loopback only, every wait bounded.
//!
//! Needs `nats-server` (scripts/test.sh installs it). Without it the tests
//! say so and pass, unless `CI` is set: then they fail.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, context::ContextBuilder, stream};
use futures::StreamExt;
use pulse_testkit::manifests::nats_conf_with_agents;
use pulse_testkit::nats::{Nats, task_bucket_stream};

use super::nats_auth::{PASSWORD, deployed_conf, locked_nats_with};

/// Bound of one connection attempt, one request or one ack; a refused
/// publish or request is dropped by the server, so its ack times out.
const WAIT: Duration = Duration::from_secs(3);

/// An agent's client: its nkey seed, its inbox prefix `_INBOX_{member}`
/// (what `kube-pulse agent` sets).
async fn agent(nats: &Nats, member: &str, pair: &nkeys::KeyPair) -> async_nats::Client {
    let options = async_nats::ConnectOptions::with_nkey(pair.seed().unwrap())
        .custom_inbox_prefix(format!("_INBOX_{member}"))
        .request_timeout(Some(WAIT));
    tokio::time::timeout(Duration::from_secs(30), options.connect(&nats.url))
        .await
        .expect("an answer within the bound")
        .unwrap_or_else(|e| panic!("agent {member} logs in: {e}"))
}

/// The replicas' client: their user and password, requests bounded by [`WAIT`].
async fn replicas_user(nats: &Nats) -> async_nats::Client {
    async_nats::ConnectOptions::new()
        .user_and_password("kube-pulse".into(), PASSWORD.into())
        .request_timeout(Some(WAIT))
        .connect(&nats.url)
        .await
        .unwrap()
}

/// JetStream over `client`, its requests and acks bounded by [`WAIT`].
fn jetstream(client: async_nats::Client) -> jetstream::Context {
    ContextBuilder::new()
        .timeout(WAIT)
        .ack_timeout(WAIT)
        .build(client)
}

/// Messages in `name`, as the replicas' user reads them.
async fn messages(js: &jetstream::Context, name: &str) -> u64 {
    let mut stream = js.get_stream(name).await.unwrap();
    stream.info().await.unwrap().state.messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_publishes_only_as_itself_and_answers_the_hub() {
    let (a, b) = (nkeys::KeyPair::new_user(), nkeys::KeyPair::new_user());
    let conf = nats_conf_with_agents(
        &deployed_conf(),
        &[("a", &a.public_key()), ("b", &b.public_key())],
    );
    let Some(nats) = locked_nats_with(&conf).await else {
        return;
    };

    // The replicas' user makes the agents' stream, and its own stream and
    // bucket (to see that agents cannot write into them).
    let hub = replicas_user(&nats).await;
    let hub_js = jetstream(hub.clone());
    hub_js
        .create_or_update_stream(stream::Config {
            name: "KUBE_PULSE_AGENTS".into(),
            subjects: vec!["kube-pulse.agents.>".into()],
            ..Default::default()
        })
        .await
        .expect("the replicas' user creates the agents' stream");
    hub_js
        .create_or_update_stream(stream::Config {
            name: "KUBE_PULSE".into(),
            subjects: vec!["kube-pulse.topics.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    hub_js
        .get_or_create_stream(task_bucket_stream())
        .await
        .unwrap();

    // Agent a publishes on its own subjects; the ack comes on _INBOX_a.
    let agent_a = agent(&nats, "a", &a).await;
    let a_js = jetstream(agent_a.clone());
    let ack = a_js
        .publish("kube-pulse.agents.a.docs.x", "{\"doc\":1}".into())
        .await
        .unwrap()
        .await
        .expect("agent a's publish is acked on its inbox");
    assert_eq!(ack.stream, "KUBE_PULSE_AGENTS");

    // … and nowhere else.
    for subject in [
        "kube-pulse.agents.b.docs.x",
        "kube-pulse.topics.clusters.x",
        "$KV.KUBE_PULSE_TASKS.t1",
    ] {
        let acked = match a_js.publish(subject, "{}".into()).await {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        };
        assert!(!acked, "agent a published on {subject}");
    }
    let deleted = a_js.delete_stream("KUBE_PULSE_AGENTS").await;
    assert!(deleted.is_err(), "agent a deleted the agents' stream");
    let info = a_js.get_stream("KUBE_PULSE_AGENTS").await;
    assert!(info.is_err(), "agent a read the JetStream API");
    // With another's inbox prefix an agent gets no answer: its acks are
    // delivered where it may not subscribe.
    let posing = async_nats::ConnectOptions::with_nkey(a.seed().unwrap())
        .custom_inbox_prefix("_INBOX_b")
        .connect(&nats.url)
        .await
        .unwrap();
    let posed = match jetstream(posing)
        .publish("kube-pulse.agents.a.docs.y", "{}".into())
        .await
    {
        Ok(ack) => ack.await.is_ok(),
        Err(_) => false,
    };
    assert!(!posed, "agent a received an ack on b's inbox");
    assert_eq!(messages(&hub_js, "KUBE_PULSE").await, 0);
    assert_eq!(messages(&hub_js, "KV_KUBE_PULSE_TASKS").await, 0);

    // Agent b publishes on its own subjects too.
    let agent_b = agent(&nats, "b", &b).await;
    jetstream(agent_b.clone())
        .publish("kube-pulse.agents.b.heartbeat", "{}".into())
        .await
        .unwrap()
        .await
        .expect("agent b's publish is acked");
    // a's first document, a's second (its ack went to b's inbox, the
    // stream has it) and b's heartbeat; nothing a tried as b.
    assert_eq!(messages(&hub_js, "KUBE_PULSE_AGENTS").await, 3);

    // The replicas read the agents' stream through a consumer, as the
    // relay reads its own (no acks).
    let agents_stream = hub_js.get_stream("KUBE_PULSE_AGENTS").await.unwrap();
    let consumer = agents_stream
        .create_consumer(consumer::pull::Config {
            filter_subject: "kube-pulse.agents.>".into(),
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .expect("the replicas' user creates a consumer on the agents' stream");
    let mut read = consumer
        .stream()
        .expires(WAIT)
        .messages()
        .await
        .expect("the replicas' user pulls from it");
    let mut subjects = Vec::new();
    while subjects.len() < 3 {
        let next = tokio::time::timeout(Duration::from_secs(30), read.next())
            .await
            .expect("a message within the bound")
            .expect("the consumer goes on")
            .expect("a message");
        subjects.push(next.subject.to_string());
    }
    subjects.sort();
    assert_eq!(
        subjects,
        [
            "kube-pulse.agents.a.docs.x",
            "kube-pulse.agents.a.docs.y",
            "kube-pulse.agents.b.heartbeat"
        ]
    );

    // Task requests: each agent answers its own; a's subscription to b's
    // requests is refused, so a request to b while b listens elsewhere
    // finds nobody.
    let mut own = agent_a.subscribe("kube-pulse.agentctl.a.>").await.unwrap();
    let mut others = agent_a.subscribe("kube-pulse.agentctl.b.>").await.unwrap();
    agent_a.flush().await.unwrap();
    // Agent a answers every request it gets; the hub asks until one is
    // answered (each ask bounded), so a request lost on a loaded machine
    // is asked again rather than waited for forever.
    let answering = async {
        while let Some(request) = own.next().await {
            let reply = request.reply.expect("a reply subject");
            agent_a.publish(reply, "done".into()).await.unwrap();
            agent_a.flush().await.unwrap();
        }
    };
    let asking = async {
        for _ in 0..10 {
            let ask = hub.request("kube-pulse.agentctl.a.act", "{\"type\":\"Stop\"}".into());
            if let Ok(Ok(answer)) = tokio::time::timeout(Duration::from_secs(5), ask).await {
                return answer;
            }
        }
        panic!("agent a never answered the hub's request");
    };
    let answer = tokio::select! {
        answer = asking => answer,
        () = answering => panic!("agent a's subscription ended"),
    };
    assert_eq!(answer.payload.as_ref(), b"done");
    let to_b = hub.request("kube-pulse.agentctl.b.act", "{}".into()).await;
    assert!(to_b.is_err(), "a request to b was answered: {to_b:?}");
    let stolen = tokio::time::timeout(Duration::from_millis(500), others.next()).await;
    assert!(stolen.is_err(), "agent a received b's request");
    // An agent cannot send another one requests.
    let sent = async_nats::ConnectOptions::with_nkey(b.seed().unwrap())
        .custom_inbox_prefix("_INBOX_b")
        .request_timeout(Some(WAIT))
        .connect(&nats.url)
        .await
        .unwrap()
        .request("kube-pulse.agentctl.a.act", "{}".into())
        .await;
    assert!(sent.is_err(), "agent b sent a a request: {sent:?}");
    let received = tokio::time::timeout(Duration::from_millis(500), own.next()).await;
    assert!(received.is_err(), "agent a received b's request");
}

/// JetStream sends a publish's acknowledgement to the publisher's reply
/// subject from inside the account, past the publisher's permissions: an
/// agent naming the JetStream API there asks it to purge or delete with
/// the acknowledgement (`{"stream": …, "seq": N}`) as the request. The
/// streams a replica makes, and the agents' stream as the replicas make it,
/// refuse purges and deletes through the API, so nothing goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_acknowledgements_sent_to_the_jetstream_api_purge_and_delete_nothing() {
    let a = nkeys::KeyPair::new_user();
    let conf = nats_conf_with_agents(&deployed_conf(), &[("a", &a.public_key())]);
    let Some(nats) = locked_nats_with(&conf).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let settings = super::nats_auth::replicas_settings(&nats, dir.path());
    let host = pulse_testkit::sim::sim().await;
    let member = pulse_testkit::sim::sim_with(|c| {
        c.name = "m".into();
        c.workloads = vec![pulse_testkit::scale::seed()];
    })
    .await;
    let r1 = pulse_testkit::scale::replica_on(
        "r1",
        &host,
        &[&member],
        settings.clone(),
        pulse_testkit::scale::LEASE,
        |_| {},
    )
    .await;
    pulse_testkit::poll::eventually(pulse_testkit::scale::WITHIN, "the app is served", || {
        pulse_testkit::http::rest(&r1.url, "/api/v1/apps/m/shop/web")
    })
    .await;
    // Something in each: the member's documents, a task (an external
    // executor's, active until someone reports on it), an agent's report.
    let stop = serde_json::json!({"type": "Stop", "cluster": "m", "namespace": "shop", "app": "web", "executor": "external"});
    pulse_testkit::http::create_task(&r1.url, stop.clone()).await;
    let hub = replicas_user(&nats).await;
    let hub_js = jetstream(hub);
    hub_js
        .create_or_update_stream(kube_pulse::scale::agents::stream_config("KUBE_PULSE", 1))
        .await
        .expect("the agents' stream as the replicas make it");
    let a_js = jetstream(agent(&nats, "a", &a).await);
    a_js.publish("kube-pulse.agents.a.docs.x", "{}".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let streams = ["KUBE_PULSE", "KV_KUBE_PULSE_TASKS", "KUBE_PULSE_AGENTS"];
    let counts = pulse_testkit::poll::eventually(
        pulse_testkit::scale::WITHIN,
        "documents and the task in their streams",
        || async {
            let mut counts = Vec::new();
            for name in streams {
                counts.push(messages(&hub_js, name).await);
            }
            counts.iter().all(|n| *n > 0).then_some(counts)
        },
    )
    .await;

    let client = agent(&nats, "a", &a).await;
    let mut targets: Vec<String> = streams
        .iter()
        .flat_map(|name| {
            ["STREAM.PURGE", "STREAM.MSG.DELETE"].map(|api| format!("$JS.API.{api}.{name}"))
        })
        .collect();
    // And over the app's claim in the bucket: an unsealed value there.
    targets.push("$KV.KUBE_PULSE_TASKS.app.m.shop.web".into());
    for target in targets {
        client
            .publish_with_reply("kube-pulse.agents.a.docs.x", target, "{}".into())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (name, before) in streams.iter().zip(&counts) {
        let after = messages(&hub_js, name).await;
        assert!(
            after >= *before,
            "{name}: {before} messages before, {after} after"
        );
    }
    let tasks = pulse_testkit::http::rest(&r1.url, "/api/v1/tasks")
        .await
        .unwrap();
    assert_eq!(tasks["items"].as_array().map(Vec::len), Some(1), "{tasks}");
    // The claim overwritten, the app still has its active task, on the
    // replica that made it and on one started since (which knows the task
    // from the bucket only).
    let r2 = pulse_testkit::scale::replica_on(
        "r2",
        &host,
        &[&member],
        settings,
        pulse_testkit::scale::LEASE,
        |_| {},
    )
    .await;
    pulse_testkit::poll::eventually(
        pulse_testkit::scale::WITHIN,
        "r2 lists the task",
        || async {
            let tasks = pulse_testkit::http::rest(&r2.url, "/api/v1/tasks").await?;
            (tasks["items"].as_array()?.len() == 1).then_some(())
        },
    )
    .await;
    for replica in [&r1, &r2] {
        let second = pulse_testkit::http::http()
            .post(format!("{}/api/v1/tasks", replica.url))
            .json(&stop)
            .send()
            .await
            .unwrap();
        assert_eq!(second.status(), 409, "{}", second.text().await.unwrap());
    }
}
