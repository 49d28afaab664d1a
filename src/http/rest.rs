//! The REST read side: snapshots of clusters, sync states and apps, and the
//! transition history of any topic (`hub ──▶ [REST]`). Every answer holds
//! only what the caller's principal may see; what it may not see is 404,
//! exactly as if it did not exist.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json};
use serde_json::Value;

use crate::auth::Principal;
use crate::error::{Error, Result};
use crate::http::query::query;
use crate::hub::{Hub, Pattern};
use crate::protocol::rest::{History, ItemList};
use crate::protocol::topic;

fn segment(name: &str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && !value.contains(['/', '*'])
        && !value.chars().any(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(Error::BadRequest(format!(
            "{name} {value:?} is not a valid name"
        )))
    }
}

/// The documents under `pattern` the caller may see, as a list body.
fn items(hub: &Hub, who: &Principal, pattern: &str) -> Json<ItemList<Arc<Value>>> {
    let pattern = Pattern::parse(pattern).expect("built-in patterns parse");
    let items = hub
        .list(&[pattern])
        .into_iter()
        .filter(|d| who.can_see(&d.topic, Some(&d.doc)))
        .map(|d| d.doc)
        .collect();
    Json(ItemList { items })
}

fn one(hub: &Hub, who: &Principal, topic: &str, what: &str) -> Result<Arc<Value>> {
    hub.get(topic)
        .filter(|d| who.can_see(&d.topic, Some(&d.doc)))
        .map(|d| d.doc)
        .ok_or_else(|| Error::NotFound(format!("{what} does not exist")))
}

/// The read routes, over the hub.
pub fn router(hub: Arc<Hub>) -> Router {
    Router::new()
        .route("/api/v1/clusters", get(clusters))
        .route("/api/v1/clusters/{name}", get(cluster))
        .route("/api/v1/clusters/{name}/sync", get(cluster_sync))
        .route("/api/v1/apps", get(apps))
        .route("/api/v1/apps/{cluster}/{namespace}/{app}", get(app))
        .route("/api/v1/history", get(history))
        .with_state(hub)
}

async fn clusters(
    State(hub): State<Arc<Hub>>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
) -> Result<Json<ItemList<Arc<Value>>>> {
    query(q, &[])?;
    Ok(items(&hub, &who, "clusters/*"))
}

async fn cluster(
    State(hub): State<Arc<Hub>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Arc<Value>>> {
    query(q, &[])?;
    segment("cluster", &name)?;
    Ok(Json(one(
        &hub,
        &who,
        &topic::cluster(&name),
        &format!("cluster {name:?}"),
    )?))
}

async fn cluster_sync(
    State(hub): State<Arc<Hub>>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<ItemList<Arc<Value>>>> {
    query(q, &[])?;
    segment("cluster", &name)?;
    one(
        &hub,
        &who,
        &topic::cluster(&name),
        &format!("cluster {name:?}"),
    )?;
    Ok(items(&hub, &who, &format!("clusters/{name}/sync/**")))
}

async fn apps(
    State(hub): State<Arc<Hub>>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
) -> Result<Json<ItemList<Arc<Value>>>> {
    let q = query(q, &["cluster", "namespace"])?;
    let cluster = match q.get("cluster") {
        Some(c) => {
            segment("cluster", c)?;
            one(&hub, &who, &topic::cluster(c), &format!("cluster {c:?}"))?;
            c.as_str()
        }
        None => "*",
    };
    let namespace = match q.get("namespace") {
        Some(ns) => {
            segment("namespace", ns)?;
            ns.as_str()
        }
        None => "*",
    };
    Ok(items(&hub, &who, &format!("apps/{cluster}/{namespace}/*")))
}

async fn app(
    State(hub): State<Arc<Hub>>,
    Extension(who): Extension<Principal>,
    Path((cluster, namespace, app)): Path<(String, String, String)>,
    RawQuery(q): RawQuery,
) -> Result<Json<Arc<Value>>> {
    query(q, &[])?;
    segment("cluster", &cluster)?;
    segment("namespace", &namespace)?;
    segment("app", &app)?;
    let what = format!("app {cluster}/{namespace}/{app}");
    Ok(Json(one(
        &hub,
        &who,
        &topic::app(&cluster, &namespace, &app),
        &what,
    )?))
}

async fn history(
    State(hub): State<Arc<Hub>>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
) -> Response {
    let result = (|| {
        let q = query(q, &["topic"])?;
        let topic = q.get("topic").ok_or_else(|| {
            Error::BadPattern("the topic parameter is required, e.g. ?topic=clusters/prod".into())
        })?;
        let pattern = Pattern::parse(topic).map_err(Error::BadPattern)?;
        if !pattern.is_exact() {
            return Err(Error::BadPattern(format!(
                "topic {topic:?} must name one topic, without wildcards"
            )));
        }
        let doc = hub
            .get(topic)
            .filter(|d| who.can_see(&d.topic, Some(&d.doc)))
            .ok_or_else(|| Error::NotFound(format!("topic {topic:?} does not exist")))?;
        Ok(doc)
    })();
    match result {
        Ok(doc) => Json(History {
            topic: &doc.topic,
            rev: doc.rev,
            phase: doc.doc.get("phase"),
            since: doc.doc.get("since"),
            history: crate::status::lifecycle::transitions(&doc.doc),
        })
        .into_response(),
        Err(e) => e.into_response(),
    }
}
