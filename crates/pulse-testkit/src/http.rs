//! Plain HTTP against a gateway: JSON reads, readiness checks, metrics and
//! every document its REST API serves.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// A plain HTTP client for raw requests (20 s timeout).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// GETs `url` and returns the body as text (any status).
pub async fn get_text(url: &str) -> String {
    http().get(url).send().await.unwrap().text().await.unwrap()
}

/// GETs `url` and parses the JSON answer (any status).
pub async fn get_json(url: &str) -> Value {
    http().get(url).send().await.unwrap().json().await.unwrap()
}

/// `GET {base}/readyz/{check}`: its status code and body.
pub async fn readiness(base: &str, check: &str) -> (u16, String) {
    let response = http()
        .get(format!("{base}/readyz/{check}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The sum of the samples of metric `name` (a name, or a name with its
/// labels, `kube_pulse_x_total{reason="y"}`) in the Prometheus text `text`: 0 when absent.
pub(crate) fn metric_in(text: &str, name: &str) -> f64 {
    let name = name.trim_end();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of the samples of metric `name` ([`metric_in`]) in `{base}/metrics`: 0 when absent.
pub async fn metric(base: &str, name: &str) -> f64 {
    metric_in(&get_text(&format!("{base}/metrics")).await, name)
}

/// `GET {url}{path}`: the document, None on 404.
pub async fn rest(url: &str, path: &str) -> Option<Value> {
    let response = http().get(format!("{url}{path}")).send().await.unwrap();
    if response.status() == 404 {
        return None;
    }
    assert_eq!(response.status(), 200, "{path}");
    Some(response.json().await.unwrap())
}

/// Every document REST on `url` serves, by topic: each cluster, its sync
/// documents and every app (what a subscriber to `clusters/**` and
/// `apps/**` rebuilds).
pub async fn rest_docs(url: &str) -> BTreeMap<String, Value> {
    let http = http();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{url}{path}");
        async move {
            let body: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
            body["items"].as_array().cloned().unwrap_or_default()
        }
    };
    let mut docs = BTreeMap::new();
    for cluster in get("/api/v1/clusters".into()).await {
        let name = cluster["name"].as_str().unwrap().to_string();
        for sync in get(format!("/api/v1/clusters/{name}/sync")).await {
            let resource = &sync["resource"];
            let group = resource["group"]
                .as_str()
                .filter(|g| !g.is_empty())
                .unwrap_or("core");
            let topic = format!(
                "clusters/{name}/sync/{group}/{}/{}",
                resource["version"].as_str().unwrap(),
                resource["resource"].as_str().unwrap()
            );
            docs.insert(topic, sync);
        }
        docs.insert(format!("clusters/{name}"), cluster);
    }
    for app in get("/api/v1/apps".into()).await {
        let topic = format!(
            "apps/{}/{}/{}",
            app["cluster"].as_str().unwrap(),
            app["namespace"].as_str().unwrap(),
            app["app"].as_str().unwrap()
        );
        docs.insert(topic, app);
    }
    docs
}

/// Creates a task through `POST {url}/api/v1/tasks` with `request`,
/// Every app document `GET {url}/api/v1/apps` serves to `token`, with its
/// topic (`apps/{cluster}/{namespace}/{app}`), in topic order.
pub async fn rest_apps(url: &str, token: &str) -> Vec<(String, Value)> {
    let response = http()
        .get(format!("{url}/api/v1/apps"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let mut apps: Vec<(String, Value)> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap();
            let topic = format!("apps/{}/{}/{}", s("cluster"), s("namespace"), s("app"));
            (topic, a.clone())
        })
        .collect();
    apps.sort_by(|a, b| a.0.cmp(&b.0));
    apps
}

/// asserting 201; the task's id.
pub async fn create_task(url: &str, request: Value) -> String {
    let created = http()
        .post(format!("{url}/api/v1/tasks"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201, "{request}");
    let task: Value = created.json().await.unwrap();
    task["id"].as_str().unwrap().to_string()
}
