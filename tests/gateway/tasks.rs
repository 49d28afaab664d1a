//! Tasks end to end: a gateway over a simulated member cluster, driven over
//! HTTP like a UI would, acting through real kube-rs. Transitional states and
//! progress are read the way subscribers read them (SSE), and the effects on
//! the cluster are checked with kube-rs.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube_pulse::gateway::Gateway;
use kube_pulse::tasks::TaskSettings;
use kube_pulse_sim::{ConvergeConfig, SimCluster};
use pulse_testkit::docs::Replica;
use pulse_testkit::gateway::{doc_where, start_gateway};
use pulse_testkit::http::{get_json, http};
use pulse_testkit::poll::eventually;
use pulse_testkit::sim::{sim_with, workload};
use pulse_testkit::sse::SseReader;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const BROKEN: &str = "registry.example/broken:1";

/// A member `a` with shop/web (4), shop/db (StatefulSet, 1) and
/// analytics/ingest (2), and the whole gateway on loopback.
struct Env {
    sim: SimCluster,
    gateway: Gateway,
    url: String,
    shutdown: CancellationToken,
}

impl Env {
    async fn start() -> Self {
        Self::start_with(TaskSettings::default()).await
    }

    async fn start_with(settings: TaskSettings) -> Self {
        let shutdown = CancellationToken::new();
        let sim = sim_with(|c| {
            c.name = "a".into();
            c.converge = ConvergeConfig {
                tick: Duration::from_millis(100),
                pods_per_tick: 1,
            };
            c.workloads = vec![
                workload("Deployment", "shop", "web", 4),
                workload("StatefulSet", "shop", "db", 1),
                workload("Deployment", "analytics", "ingest", 2),
            ];
        })
        .await;
        sim.set_failing_images([BROKEN]);
        let (url, gateway) = start_gateway(&[&sim], |c| c.tasks = settings, &shutdown).await;
        for app in ["shop/web", "shop/db", "analytics/ingest"] {
            doc_where(gateway.hub(), &format!("apps/a/{app}"), WAIT, |d| {
                d["phase"] == "Running"
            })
            .await;
        }
        Self {
            sim,
            gateway,
            url,
            shutdown,
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = http().request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// Creates a task, asserting 201; returns it.
    async fn task(&self, body: Value) -> Value {
        let (status, task) = self
            .send(reqwest::Method::POST, "/api/v1/tasks", Some(body))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{task}");
        task
    }

    fn hub(&self) -> &kube_pulse::hub::Hub {
        self.gateway.hub()
    }

    async fn deployment(&self, namespace: &str, name: &str) -> Deployment {
        Api::<Deployment>::namespaced(self.client(), namespace)
            .get(name)
            .await
            .unwrap()
    }

    fn client(&self) -> kube::Client {
        kube::Client::try_from(self.sim.kube_config()).unwrap()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.gateway.stop().await;
    }
}

/// What a subscriber saw of one task and its app.
#[derive(Debug, Default)]
struct Seen {
    /// Distinct app `state`s in order, from the first that shows the task.
    states: Vec<String>,
    /// Task progress values in order.
    progress: Vec<u64>,
    task: Value,
    app: Value,
}

/// Reads an SSE stream of `apps/{app}` and `tasks/{id}` until the task
/// finishes and the app shows no task.
async fn follow(sse: &mut SseReader, replica: &mut Replica, app: &str, id: &str) -> Seen {
    let mut seen = Seen::default();
    let app_topic = format!("apps/{app}");
    let task_topic = format!("tasks/{id}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let event = sse
            .next_within(left)
            .await
            .unwrap_or_else(|| panic!("task {id} did not finish; saw {seen:#?}"));
        replica.apply(&event.data);
        if let Some((_, doc)) = replica.docs.get(&app_topic) {
            let state = doc["state"].as_str().unwrap_or("").to_string();
            let shows_task = doc["task"]["id"] == id;
            if (shows_task || !seen.states.is_empty()) && seen.states.last() != Some(&state) {
                seen.states.push(state);
            }
            seen.app = doc.clone();
        }
        if let Some((_, doc)) = replica.docs.get(&task_topic) {
            let p = doc["progress"].as_u64().unwrap();
            if seen.progress.last() != Some(&p) {
                seen.progress.push(p);
            }
            seen.task = doc.clone();
        }
        let finished = !matches!(
            seen.task["status"].as_str(),
            Some("Pending" | "Running") | None
        );
        if finished && seen.app["task"].is_null() && !seen.app.is_null() {
            return seen;
        }
    }
}

async fn subscribe(env: &Env, app: &str) -> (SseReader, Replica) {
    let url = format!("{}/api/v1/events?topic=apps/{app}&topic=tasks/*", env.url);
    let mut sse = SseReader::open(&url, None).await;
    let mut replica = Replica::default();
    for e in sse.until_synced().await {
        replica.apply(&e.data);
    }
    (sse, replica)
}

fn rising(progress: &[u64]) -> bool {
    progress.windows(2).all(|w| w[0] <= w[1])
}

/// The task succeeded, its app showed `state` first, and progress rose
/// through at least one value strictly between 0 and 100.
fn assert_succeeded_through(seen: &Seen, state: &str) {
    assert_eq!(seen.task["status"], "Succeeded", "{:#?}", seen.task);
    assert_eq!(
        seen.states.first().map(String::as_str),
        Some(state),
        "{seen:?}"
    );
    assert!(rising(&seen.progress), "{:?}", seen.progress);
    assert!(
        seen.progress.iter().any(|p| *p > 0 && *p < 100),
        "{:?}",
        seen.progress
    );
}

/// Runs a task to its end as a subscriber sees it.
async fn run(env: &Env, app: &str, body: Value) -> Seen {
    let (mut sse, mut replica) = subscribe(env, app).await;
    let task = env.task(body).await;
    let id = task["id"].as_str().unwrap();
    follow(&mut sse, &mut replica, app, id).await
}

#[tokio::test]
async fn stop_then_start_show_transitional_states_and_rising_progress() {
    let env = Env::start().await;
    let (mut sse, mut replica) = subscribe(&env, "a/shop/web").await;
    let task = env
        .task(json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"}))
        .await;
    assert_eq!(task["status"], "Pending");
    assert_eq!(task["state"], "Stopping");
    assert_eq!(
        task["target"],
        json!({"cluster": "a", "namespace": "shop", "app": "web"})
    );
    let id = task["id"].as_str().unwrap().to_string();

    // One active task per app.
    let (status, err) = env
        .send(
            reqwest::Method::POST,
            "/api/v1/tasks",
            Some(json!({"type": "Start", "cluster": "a", "namespace": "shop", "app": "web"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    assert_eq!(err["code"], "conflict");
    assert!(err["message"].as_str().unwrap().contains(&id), "{err}");

    let seen = follow(&mut sse, &mut replica, "a/shop/web", &id).await;
    assert_succeeded_through(&seen, "Stopping");
    assert_eq!(
        seen.states.last().map(String::as_str),
        Some("Stopped"),
        "{seen:?}"
    );
    assert_eq!(seen.progress.last(), Some(&100));
    assert_eq!(seen.app["phase"], "Stopped");
    let web = env.deployment("shop", "web").await;
    assert_eq!(web.spec.replicas, Some(0));
    assert_eq!(
        web.metadata.annotations.unwrap()["kube-pulse.io/replicas-before-stop"],
        "4"
    );

    // Start brings back the remembered 4 replicas.
    let seen = run(
        &env,
        "a/shop/web",
        json!({"type": "Start", "cluster": "a", "namespace": "shop", "app": "web"}),
    )
    .await;
    assert_succeeded_through(&seen, "Starting");
    assert_eq!(
        (seen.app["state"].as_str(), seen.app["ready"].as_i64()),
        (Some("Running"), Some(4))
    );
    let web = env.deployment("shop", "web").await;
    assert!(
        !web.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("kube-pulse.io/replicas-before-stop")
    );

    // The finished tasks are listed and readable.
    let (status, list) = env
        .send(
            reqwest::Method::GET,
            "/api/v1/tasks?app=web&status=Succeeded",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let types: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Stop", "Start"]);
    let (status, one) = env
        .send(reqwest::Method::GET, &format!("/api/v1/tasks/{id}"), None)
        .await;
    assert_eq!(
        (status, one["status"].as_str()),
        (StatusCode::OK, Some("Succeeded"))
    );
    env.stop().await;
}

#[tokio::test]
async fn update_rolls_out_and_a_failing_image_fails_the_task_in_panic() {
    let env = Env::start().await;
    let seen = run(
        &env,
        "a/shop/web",
        json!({"type": "Update", "cluster": "a", "namespace": "shop", "app": "web", "image": "registry.example/web:2"}),
    )
    .await;
    assert_succeeded_through(&seen, "Updating");
    assert_eq!(seen.app["state"], "Running");
    assert_eq!(
        seen.app["workloads"]["Deployment/web"]["images"],
        json!(["registry.example/web:2"])
    );

    // A Recreate Deployment rolled to an image that never gets ready: no
    // replica serves, the rollout times out, the app panics.
    let patch = json!({"spec": {"strategy": {"type": "Recreate", "rollingUpdate": null}, "progressDeadlineSeconds": 1}});
    Api::<Deployment>::namespaced(env.client(), "analytics")
        .patch(
            "ingest",
            &Default::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let seen = run(
        &env,
        "a/analytics/ingest",
        json!({"type": "Update", "cluster": "a", "namespace": "analytics", "app": "ingest", "image": BROKEN}),
    )
    .await;
    assert_eq!(seen.task["status"], "Failed", "{:#?}", seen.task);
    assert_eq!(seen.task["reason"], "ProgressDeadlineExceeded");
    assert!(
        seen.task["message"]
            .as_str()
            .unwrap()
            .contains("timed out progressing"),
        "{}",
        seen.task
    );
    assert!(seen.task["progress"].as_u64().unwrap() < 100);
    assert_eq!(
        (seen.app["phase"].as_str(), seen.app["state"].as_str()),
        (Some("Panic"), Some("Panic"))
    );
    env.stop().await;
}

#[tokio::test]
async fn delete_takes_only_a_namespace_of_its_own_and_create_brings_an_app_back() {
    let env = Env::start().await;
    // shop holds three apps: deleting web removes its workloads only.
    let seen = run(
        &env,
        "a/shop/web",
        json!({"type": "Delete", "cluster": "a", "namespace": "shop", "app": "web"}),
    )
    .await;
    assert_eq!(seen.task["status"], "Succeeded", "{:#?}", seen.task);
    assert_eq!(seen.states.first().map(String::as_str), Some("Deleting"));
    assert_eq!(
        (seen.app["phase"].as_str(), seen.app["reason"].as_str()),
        (Some("Stopped"), Some("NoWorkloads"))
    );
    let namespaces: Api<Namespace> = Api::all(env.client());
    assert!(namespaces.get_opt("shop").await.unwrap().is_some());
    doc_where(env.hub(), "apps/a/shop/db", WAIT, |d| {
        d["phase"] == "Running"
    })
    .await;

    // analytics holds only ingest: the namespace goes too.
    let seen = run(
        &env,
        "a/analytics/ingest",
        json!({"type": "Delete", "cluster": "a", "namespace": "analytics", "app": "ingest"}),
    )
    .await;
    assert_succeeded_through(&seen, "Deleting");
    assert_eq!(seen.app["state"], "NotExisted");
    assert!(namespaces.get_opt("analytics").await.unwrap().is_none());

    // Create makes the namespace and a Deployment.
    let seen = run(
        &env,
        "a/analytics/ingest",
        json!({"type": "Create", "cluster": "a", "namespace": "analytics", "app": "ingest", "image": "registry.example/ingest:4", "replicas": 3}),
    )
    .await;
    assert_succeeded_through(&seen, "Starting");
    assert_eq!(
        (seen.app["state"].as_str(), seen.app["ready"].as_i64()),
        (Some("Running"), Some(3))
    );
    let (status, err) = env
        .send(
            reqwest::Method::POST,
            "/api/v1/tasks",
            Some(json!({"type": "Create", "cluster": "a", "namespace": "analytics", "app": "ingest", "image": "x:1"})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");
    env.stop().await;
}

#[tokio::test]
async fn cancel_deadline_and_forbidden_end_tasks_with_a_reason() {
    let env = Env::start().await;
    // Cancel: the app leaves its transitional state at once.
    let task = env
        .task(json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"}))
        .await;
    let id = task["id"].as_str().unwrap();
    let (status, cancelled) = env
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/tasks/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(
        (cancelled["status"].as_str(), cancelled["reason"].as_str()),
        (Some("Cancelled"), Some("Cancelled"))
    );
    doc_where(env.hub(), "apps/a/shop/web", WAIT, |d| d["task"].is_null()).await;
    let (status, again) = env
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/tasks/{id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert!(
        again["message"]
            .as_str()
            .unwrap()
            .contains("already finished"),
        "{again}"
    );

    // Deadline: a rolling update to a broken image never completes.
    doc_where(env.hub(), "apps/a/shop/db", WAIT, |d| d["task"].is_null()).await;
    let seen = run(
        &env,
        "a/shop/db",
        json!({"type": "Update", "cluster": "a", "namespace": "shop", "app": "db", "image": BROKEN, "timeoutSeconds": 2}),
    )
    .await;
    assert_eq!(
        (seen.task["status"].as_str(), seen.task["reason"].as_str()),
        (Some("Failed"), Some("DeadlineExceeded")),
        "{:#?}",
        seen.task
    );
    assert!(
        seen.task["message"]
            .as_str()
            .unwrap()
            .starts_with("not done within 2s"),
        "{}",
        seen.task
    );

    // Forbidden: the member refuses the write.
    env.sim.set_deny(["apps/deployments:patch"]);
    let seen = run(
        &env,
        "a/analytics/ingest",
        json!({"type": "Stop", "cluster": "a", "namespace": "analytics", "app": "ingest"}),
    )
    .await;
    assert_eq!(
        (seen.task["status"].as_str(), seen.task["reason"].as_str()),
        (Some("Failed"), Some("Forbidden")),
        "{:#?}",
        seen.task
    );
    assert_eq!(seen.app["state"], "Running");
    env.stop().await;
}

#[tokio::test]
async fn an_external_executor_reports_progress_onto_the_app_topic() {
    let env = Env::start().await;
    let (mut sse, mut replica) = subscribe(&env, "a/shop/web").await;
    let task = env
        .task(json!({"type": "Update", "cluster": "a", "namespace": "shop", "app": "web", "image": "registry.example/web:9", "executor": "external"}))
        .await;
    assert_eq!(task["executor"], "external");
    let id = task["id"].as_str().unwrap().to_string();
    let status_path = format!("/api/v1/tasks/{id}/status");
    let report = |body: Value| env.send(reqwest::Method::PATCH, &status_path, Some(body));

    let (status, body) =
        report(json!({"status": "Running", "progress": 30, "message": "pulling"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let app = doc_where(env.hub(), "apps/a/shop/web", WAIT, |d| {
        d["task"]["progress"] == 30
    })
    .await;
    assert_eq!(
        (app["state"].as_str(), app["task"]["id"].as_str()),
        (Some("Updating"), Some(id.as_str()))
    );

    let cases = [
        (
            json!({"status": "Running", "progress": 20}),
            StatusCode::BAD_REQUEST,
            "backwards",
        ),
        (
            json!({"status": "Running", "progress": 130}),
            StatusCode::BAD_REQUEST,
            "field `progress`: 130",
        ),
        (
            json!({"status": "Running", "progress": 100}),
            StatusCode::BAD_REQUEST,
            "reserved for status Succeeded",
        ),
        (
            json!({"status": "Done"}),
            StatusCode::BAD_REQUEST,
            "unknown variant `Done`",
        ),
        (
            json!({"progress": 50}),
            StatusCode::BAD_REQUEST,
            "missing field `status`",
        ),
        (
            json!({"status": "Running", "eta": 5}),
            StatusCode::BAD_REQUEST,
            "unknown field `eta`",
        ),
    ];
    for (body, want, text) in cases {
        let (status, err) = report(body.clone()).await;
        assert_eq!(status, want, "{body}: {err}");
        assert!(
            err["message"].as_str().unwrap().contains(text),
            "{body}: {err}"
        );
    }
    let (status, _) = report(json!({"status": "Running", "progress": 80})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, done) =
        report(json!({"status": "Succeeded", "message": "rolled out elsewhere"})).await;
    assert_eq!(
        (status, done["progress"].as_u64()),
        (StatusCode::OK, Some(100))
    );
    let seen = follow(&mut sse, &mut replica, "a/shop/web", &id).await;
    assert_eq!(seen.progress, [0, 30, 80, 100]);
    assert_eq!(seen.states, ["Updating", "Running"]);
    let (status, err) = report(json!({"status": "Running", "progress": 90})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("Succeeded and cannot become Running"),
        "{err}"
    );

    // Built-in tasks take no reports.
    let builtin = env
        .task(json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"}))
        .await;
    let (status, err) = env
        .send(
            reqwest::Method::PATCH,
            &format!("/api/v1/tasks/{}/status", builtin["id"].as_str().unwrap()),
            Some(json!({"status": "Running", "progress": 50})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{err}");

    // An external executor that never reports does not hold its app forever.
    let lost = env
        .task(json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "db", "executor": "external", "timeoutSeconds": 1}))
        .await;
    let lost_url = format!("{}/api/v1/tasks/{}", env.url, lost["id"].as_str().unwrap());
    eventually(WAIT, "the external task expires", || {
        let lost_url = lost_url.clone();
        async move {
            let t = get_json(&lost_url).await;
            (t["status"] == "Failed" && t["reason"] == "DeadlineExceeded").then_some(())
        }
    })
    .await;
    doc_where(env.hub(), "apps/a/shop/db", WAIT, |d| {
        d["task"].is_null() && d["state"] == "Running"
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn bad_task_requests_get_clear_errors() {
    let env = Env::start().await;
    let ok = json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"});
    let with = |patch: Value| {
        let mut v = ok.clone();
        json_patch::merge(&mut v, &patch);
        v
    };
    let cases = [
        (
            with(json!({"type": "Explode"})),
            StatusCode::BAD_REQUEST,
            "unknown variant `Explode`",
        ),
        (
            with(json!({"cluster": null})),
            StatusCode::BAD_REQUEST,
            "missing field `cluster`",
        ),
        (
            with(json!({"replicas": "3"})),
            StatusCode::BAD_REQUEST,
            "field `replicas`: invalid type",
        ),
        (
            with(json!({"namespace": "Shop"})),
            StatusCode::BAD_REQUEST,
            "field `namespace`",
        ),
        (
            with(json!({"cluster": "zz"})),
            StatusCode::NOT_FOUND,
            "\"zz\" is not a member cluster",
        ),
        (
            with(json!({"app": "nope"})),
            StatusCode::NOT_FOUND,
            "app a/shop/nope does not exist",
        ),
        (
            with(json!({"type": "Start", "namespace": "ghost"})),
            StatusCode::NOT_FOUND,
            "does not exist",
        ),
        (json!([1, 2]), StatusCode::BAD_REQUEST, "invalid task"),
    ];
    for (body, want, text) in cases {
        let (status, err) = env
            .send(reqwest::Method::POST, "/api/v1/tasks", Some(body.clone()))
            .await;
        assert_eq!(status, want, "{body}: {err}");
        assert!(
            err["message"].as_str().unwrap().contains(text),
            "{body}: {err}"
        );
    }
    let raw = http()
        .post(format!("{}/api/v1/tasks", env.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), StatusCode::BAD_REQUEST);
    // A JSON body needs a JSON content type (issue 17: no cross-site forms).
    let untyped = http()
        .post(format!("{}/api/v1/tasks", env.url))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(untyped.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let gets = [
        ("/api/v1/tasks?status=Bogus", StatusCode::BAD_REQUEST),
        ("/api/v1/tasks?colour=red", StatusCode::BAD_REQUEST),
        ("/api/v1/tasks/nope", StatusCode::NOT_FOUND),
    ];
    for (path, want) in gets {
        let (status, err) = env.send(reqwest::Method::GET, path, None).await;
        assert_eq!(status, want, "{path}: {err}");
        assert!(err["code"].is_string(), "{path}: {err}");
    }
    let (status, _) = env
        .send(reqwest::Method::DELETE, "/api/v1/tasks/nope", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = env
        .send(
            reqwest::Method::PATCH,
            "/api/v1/tasks/nope/status",
            Some(json!({"status": "Running"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Nothing above created a task, and the gateway is still ready.
    let (_, list) = env.send(reqwest::Method::GET, "/api/v1/tasks", None).await;
    assert_eq!(list["items"], json!([]));
    let ready = http()
        .get(format!("{}/readyz/Server", env.url))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    env.stop().await;
}

#[tokio::test]
async fn finished_tasks_leave_the_store_and_their_topic_after_the_retention() {
    let env = Env::start_with(TaskSettings {
        retention: Duration::from_secs(1),
        ..TaskSettings::default()
    })
    .await;
    let task = env
        .task(json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "db", "executor": "external"}))
        .await;
    let id = task["id"].as_str().unwrap();
    let topic = format!("tasks/{id}");
    let path = format!("/api/v1/tasks/{id}");
    // Active tasks are kept however old they are.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(env.hub().get(&topic).is_some());
    let (status, _) = env
        .send(
            reqwest::Method::PATCH,
            &format!("{path}/status"),
            Some(json!({"status": "Failed", "reason": "ImagePullFailed"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    eventually(
        Duration::from_secs(10),
        "the finished task is purged",
        || async {
            let (status, _) = env.send(reqwest::Method::GET, &path, None).await;
            (status == StatusCode::NOT_FOUND && env.hub().get(&topic).is_none()).then_some(())
        },
    )
    .await;
    env.stop().await;
}

/// A full store makes room by dropping its oldest finished task; that
/// task's topic goes with it (a subscriber reads `removed`, REST and a new
/// subscription agree), as after the retention.
#[tokio::test]
async fn a_task_that_makes_room_in_a_full_store_leaves_its_topic() {
    let env = Env::start_with(TaskSettings {
        capacity: 2,
        ..TaskSettings::default()
    })
    .await;
    let external = |namespace: &str, app: &str| json!({"type": "Stop", "cluster": "a", "namespace": namespace, "app": app, "executor": "external"});
    let first = env.task(external("shop", "db")).await;
    let first = first["id"].as_str().unwrap().to_string();
    let (status, _) = env
        .send(
            reqwest::Method::PATCH,
            &format!("/api/v1/tasks/{first}/status"),
            Some(json!({"status": "Succeeded"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut sse = SseReader::open(&format!("{}/api/v1/events?topic=tasks/*", env.url), None).await;
    let snapshots = sse.until_synced().await;
    assert!(
        snapshots
            .iter()
            .any(|e| e.data["topic"] == format!("tasks/{first}")),
        "{snapshots:?}"
    );
    env.task(external("shop", "web")).await;
    env.task(external("analytics", "ingest")).await;
    let topic = format!("tasks/{first}");
    let removed = loop {
        let event = sse.next().await;
        if event.event == "removed" {
            break event;
        }
    };
    assert_eq!(removed.data["topic"], topic.as_str(), "{:?}", removed.data);
    assert!(env.hub().get(&topic).is_none());
    let (status, _) = env
        .send(
            reqwest::Method::GET,
            &format!("/api/v1/tasks/{first}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    env.stop().await;
}

#[tokio::test]
async fn tasks_on_a_removed_member_fail_and_new_ones_are_refused() {
    let env = Env::start().await;
    // No room for more pods: scaling web up cannot finish, the task runs on.
    env.sim.set_pod_capacity(Some(7));
    let builtin = env
        .task(json!({"type": "Update", "cluster": "a", "namespace": "shop", "app": "web", "replicas": 10}))
        .await;
    let external = env
        .task(json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "db", "executor": "external"}))
        .await;
    for task in [&builtin, &external] {
        let id = task["id"].as_str().unwrap();
        let (_, now) = env
            .send(reqwest::Method::GET, &format!("/api/v1/tasks/{id}"), None)
            .await;
        assert!(
            matches!(now["status"].as_str(), Some("Pending" | "Running")),
            "{now}"
        );
    }

    assert!(env.gateway.pipeline().remove_member("a").await);
    assert!(!env.gateway.pipeline().remove_member("a").await);
    for task in [&builtin, &external] {
        let id = task["id"].as_str().unwrap();
        let path = format!("/api/v1/tasks/{id}");
        let ended = eventually(WAIT, "the task fails", || async {
            let (_, now) = env.send(reqwest::Method::GET, &path, None).await;
            (now["status"] == "Failed").then_some(now)
        })
        .await;
        assert_eq!(ended["reason"], "MemberRemoved", "{ended}");
        assert_eq!(
            ended["message"],
            "member cluster a was removed from the configuration"
        );
    }
    let (status, body) = env
        .send(
            reqwest::Method::POST,
            "/api/v1/tasks",
            Some(json!({"type": "Stop", "cluster": "a", "namespace": "shop", "app": "web"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("\"a\" is not a member cluster"),
        "{body}"
    );
    // Its topics go too (the engine removes them after the stopped source's last observation).
    eventually(WAIT, "a's topics removed", || async {
        let topics = env
            .hub()
            .list(&[kube_pulse::hub::Pattern::parse("**").unwrap()]);
        // What is left: tasks, and the summaries (which count nothing of a).
        topics
            .iter()
            .all(|d| {
                let topic = d.topic.to_string();
                topic.starts_with("tasks/") || topic.starts_with("summary/")
            })
            .then_some(())
    })
    .await;
    env.stop().await;
}
