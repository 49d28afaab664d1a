//! Custom workloads read through health rules, end to end: a gateway over
//! a simulated member that serves KusionStack CollaSets, OpenKruise
//! CloneSets and Argo Rollouts (their CRDs and controllers,
//! kube-pulse-sim's `workloads.rs`). An app of each kind goes through a
//! scale-up, a rollout stuck on crash-looping pods, a rollback and a stop,
//! driven by tasks over HTTP as a UI would, acting through real kube-rs;
//! the app documents and the objects on the member are checked after
//! each. A member without the CRDs shows nothing of them.

use std::time::Duration;

use kube::Api;
use kube::api::{ApiResource, DynamicObject};
use kube_pulse::gateway::Gateway;
use kube_pulse_sim::pods::ImageFault;
use kube_pulse_sim::workloads::by_kind;
use kube_pulse_sim::{ConvergeConfig, SimCluster, WorkloadSeed, workload_manifest};
use pulse_testkit::gateway::{doc_where, start_gateway};
use pulse_testkit::http::http;
use pulse_testkit::sim::sim_with;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const CRASH: &str = "registry.example/crash:1";

/// (kind, app) of the three custom workloads, all in namespace `shop`.
const APPS: [(&str, &str); 3] = [
    ("CollaSet", "api"),
    ("CloneSet", "search"),
    ("Rollout", "checkout"),
];

struct Env {
    sim: SimCluster,
    gateway: Gateway,
    url: String,
    shutdown: CancellationToken,
}

fn image(app: &str) -> String {
    format!("registry.example/{app}:1")
}

impl Env {
    async fn start() -> Self {
        let shutdown = CancellationToken::new();
        let sim = sim_with(|c| {
            c.name = "a".into();
            c.workload_crds = true;
            c.converge = ConvergeConfig {
                tick: Duration::from_millis(100),
                pods_per_tick: 1,
            };
        })
        .await;
        sim.set_image_faults([(CRASH, ImageFault::Crash)]);
        for (kind, app) in APPS {
            let mut manifest = workload_manifest(&WorkloadSeed {
                kind: kind.into(),
                namespace: "shop".into(),
                name: app.into(),
                replicas: 2,
                image: image(app),
            });
            // A short progress deadline where the kind has one.
            if kind != "CollaSet" {
                manifest["spec"]["progressDeadlineSeconds"] = json!(3);
            }
            sim.apply(&manifest).unwrap();
        }
        let (url, gateway) = start_gateway(&[&sim], |_| {}, &shutdown).await;
        let env = Self {
            sim,
            gateway,
            url,
            shutdown,
        };
        for (_, app) in APPS {
            env.app_where(app, |d| d["phase"] == "Running" && d["ready"] == 2)
                .await;
        }
        env
    }

    async fn app_where(&self, app: &str, check: impl Fn(&Value) -> bool) -> Value {
        doc_where(
            self.gateway.hub(),
            &format!("apps/a/shop/{app}"),
            WAIT,
            check,
        )
        .await
    }

    /// Runs a task on `app` to its end; returns the task and the progress values seen.
    async fn task(&self, app: &str, body: Value) -> (Value, Vec<u64>) {
        let mut body = body;
        body["cluster"] = json!("a");
        body["namespace"] = json!("shop");
        body["app"] = json!(app);
        let response = http()
            .post(format!("{}/api/v1/tasks", self.url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        let task: Value = response.json().await.unwrap();
        let topic = format!("tasks/{}", task["id"].as_str().unwrap());
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut progress: Vec<u64> = Vec::new();
        loop {
            if let Some(doc) = self.gateway.hub().get(&topic).map(|d| (*d.doc).clone()) {
                let p = doc["progress"].as_u64().unwrap_or(0);
                if progress.last() != Some(&p) {
                    progress.push(p);
                }
                if !matches!(doc["status"].as_str(), Some("Pending" | "Running")) {
                    return (doc, progress);
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{body}: {progress:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The workload object `app` of `kind` on the member.
    async fn object(&self, kind: &str, app: &str) -> DynamicObject {
        let k = by_kind(kind).unwrap();
        let resource = ApiResource {
            group: k.group.into(),
            version: k.version.into(),
            api_version: k.api_version(),
            kind: k.kind.into(),
            plural: k.plural.into(),
        };
        let client = kube::Client::try_from(self.sim.kube_config()).unwrap();
        Api::<DynamicObject>::namespaced_with(client, "shop", &resource)
            .get(app)
            .await
            .unwrap()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.gateway.stop().await;
    }
}

fn workload<'d>(doc: &'d Value, kind: &str, app: &str) -> &'d Value {
    &doc["workloads"][format!("{kind}/{app}")]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_custom_kind_scales_gets_stuck_rolls_back_and_stops() {
    let env = Env::start().await;
    for (kind, app) in APPS {
        let doc = env.app_where(app, |_| true).await;
        let w = workload(&doc, kind, app);
        assert_eq!(
            (w["kind"].as_str(), w["health"].as_str()),
            (Some(kind), Some("Current")),
            "{doc:#}"
        );
        assert_eq!(w["images"], json!([image(app)]), "{doc:#}");
        assert_eq!(
            doc["pods"]["total"], 2,
            "{kind}: the pods it owns are the app's: {doc:#}"
        );

        // Scale-up: through /scale where the CRD declares it, else a patch.
        let (task, progress) = env
            .task(app, json!({"type": "Update", "replicas": 3}))
            .await;
        assert_eq!(task["status"], "Succeeded", "{kind}: {task:#}");
        assert!(progress.windows(2).all(|p| p[0] <= p[1]), "{progress:?}");
        let doc = env
            .app_where(app, |d| d["phase"] == "Running" && d["ready"] == 3)
            .await;
        assert_eq!(doc["expected"], 3);
        let obj = env.object(kind, app).await;
        assert_eq!(obj.data["spec"]["replicas"], 3, "{kind}");
        // Through /scale where the CRD declares it (not CollaSet's).
        let k = by_kind(kind).unwrap();
        let scaled = env
            .sim
            .stats()
            .count(&format!("{}/{}", k.group, k.plural), "scale");
        assert_eq!(scaled > 0, k.scale, "{kind}: {scaled} /scale requests");

        // A rollout stuck on crash-looping pods: the old pods keep serving.
        let update = json!({"type": "Update", "image": CRASH, "timeoutSeconds": 5});
        let (task, _) = env.task(app, update).await;
        assert_eq!(task["status"], "Failed", "{kind}: {task:#}");
        let stuck = env
            .app_where(app, |d| {
                let w = workload(d, kind, app);
                let crash = d["pods"]["problems"]
                    .as_array()
                    .is_some_and(|p| p.iter().any(|p| p["reason"] == "CrashLoopBackOff"));
                crash
                    && match kind {
                        // No progress deadline: the rollout waits.
                        "CollaSet" => w["health"] == "InProgress",
                        _ => w["health"] == "Failed" && d["phase"] == "Degraded",
                    }
            })
            .await;
        let w = workload(&stuck, kind, app);
        match kind {
            // The new pods exist (updated) but crash; the old ones stay.
            "CollaSet" => assert_eq!(
                w["message"], "3 old replicas pending termination",
                "{stuck:#}"
            ),
            "CloneSet" => assert!(
                w["message"]
                    .as_str()
                    .unwrap()
                    .contains("has timed out progressing"),
                "{stuck:#}"
            ),
            _ => assert!(
                w["message"]
                    .as_str()
                    .unwrap()
                    .contains("has timed out progressing."),
                "{stuck:#}"
            ),
        }
        if kind != "CollaSet" {
            assert_eq!(stuck["reason"], "CrashLoopBackOff", "{stuck:#}");
            assert!(
                stuck["message"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("{kind} {app}:")),
                "{stuck:#}"
            );
        }
        assert_eq!(stuck["ready"], 3, "{kind}: the old pods serve: {stuck:#}");

        // Rollback: the image before.
        let (task, _) = env
            .task(app, json!({"type": "Update", "image": image(app)}))
            .await;
        assert_eq!(task["status"], "Succeeded", "{kind}: {task:#}");
        let doc = env
            .app_where(app, |d| {
                d["phase"] == "Running" && workload(d, kind, app)["health"] == "Current"
            })
            .await;
        assert_eq!(workload(&doc, kind, app)["images"], json!([image(app)]));
        assert_eq!(
            doc["pods"]["problems"].as_array().map_or(0, Vec::len),
            0,
            "{doc:#}"
        );

        // Stop: 0 replicas, the count remembered for Start.
        let (task, _) = env.task(app, json!({"type": "Stop"})).await;
        assert_eq!(task["status"], "Succeeded", "{kind}: {task:#}");
        let doc = env.app_where(app, |d| d["phase"] == "Stopped").await;
        assert_eq!(doc["reason"], "ScaledToZero", "{doc:#}");
        let obj = env.object(kind, app).await;
        assert_eq!(obj.data["spec"]["replicas"], 0, "{kind}");
        assert_eq!(
            obj.metadata
                .annotations
                .unwrap_or_default()
                .get("kube-pulse.io/replicas-before-stop")
                .map(String::as_str),
            Some("3"),
            "{kind}"
        );
    }
    env.stop().await;
}

#[tokio::test]
async fn a_member_without_the_crds_shows_nothing_of_them() {
    let shutdown = CancellationToken::new();
    let bare = sim_with(|c| c.name = "bare".into()).await;
    let served = sim_with(|c| {
        c.name = "served".into();
        c.workload_crds = true;
    })
    .await;
    let (_, gateway) = start_gateway(&[&bare, &served], |_| {}, &shutdown).await;
    let resources = [
        "apps.kusionstack.io/v1alpha1/collasets",
        "apps.kruise.io/v1alpha1/clonesets",
        "argoproj.io/v1alpha1/rollouts",
    ];
    // The member that serves them syncs each kind.
    for resource in resources {
        let topic = format!("clusters/served/sync/{resource}");
        let doc = doc_where(gateway.hub(), &topic, WAIT, |d| d["phase"] == "Syncing").await;
        assert!(doc["kind"].is_string(), "{doc:#}");
    }
    // The other, once its own resources sync, has no document for them.
    doc_where(
        gateway.hub(),
        "clusters/bare/sync/apps/v1/deployments",
        WAIT,
        |d| d["phase"] == "Syncing",
    )
    .await;
    for resource in resources {
        let topic = format!("clusters/bare/sync/{resource}");
        assert!(gateway.hub().get(&topic).is_none(), "{topic}");
    }
    let cluster = doc_where(gateway.hub(), "clusters/bare", WAIT, |_| true).await;
    assert_eq!(
        cluster["resources"]["notServed"],
        Value::Null,
        "{cluster:#}"
    );
    shutdown.cancel();
    gateway.stop().await;
}
