//! The tasks API (`HTTP ──▶ [api] ──▶ Tasks`): create, list, read, cancel,
//! and status reports from external executors. Errors are the crate's
//! `{code, message}` bodies, naming the field at fault. Callers see the
//! tasks of apps they may read (others are 404) and need the write grant of
//! the app's cluster/namespace to act (403).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch};
use axum::{Extension, Json};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::auth::{Auth, Principal};
use crate::error::{Error, Result};
use crate::tasks::{StatusReport, Task, TaskFilter, TaskRequest, Tasks};

/// What the handlers share.
#[derive(Clone)]
struct Api {
    tasks: Arc<Tasks>,
    auth: Arc<Auth>,
}

/// The task routes (behind `auth::require`, which supplies the principal);
/// bodies must be JSON (`crate::http::guard::require_json`, 415 otherwise).
pub fn router(tasks: Arc<Tasks>, auth: Arc<Auth>) -> Router {
    Router::new()
        .route("/api/v1/tasks", get(list).post(create))
        .route("/api/v1/tasks/{id}", get(one).delete(cancel))
        .route("/api/v1/tasks/{id}/status", patch(report))
        .route_layer(axum::middleware::from_fn(crate::http::guard::require_json))
        .with_state(Api { tasks, auth })
}

fn visible(principal: &Principal, task: &Task) -> bool {
    principal
        .read
        .allows(&task.target.cluster, Some(&task.target.namespace))
}

/// The task, if the principal may see it (404 otherwise, as if it did not exist).
async fn visible_task(api: &Api, principal: &Principal, id: &str) -> Result<Task> {
    let task = api.tasks.get(id).await?;
    if visible(principal, &task) {
        Ok(task)
    } else {
        Err(Error::NotFound(format!("task {id:?} does not exist")))
    }
}

async fn may_act(api: &Api, principal: &Principal, task: &Task) -> Result<(), Response> {
    api.auth
        .can_write(principal, &task.target.cluster, &task.target.namespace)
        .await
        .map_err(IntoResponse::into_response)
}

/// Parses a JSON body into a 400 that names the field at fault.
fn body<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    if bytes.is_empty() {
        return Err(Error::BadRequest(format!(
            "{what}: the body must be a JSON object"
        )));
    }
    let mut json = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        Error::BadRequest(if path == "." {
            format!("{what}: {inner}")
        } else {
            format!("{what}: field `{path}`: {inner}")
        })
    })
}

fn task_json(task: &Task) -> Value {
    serde_json::to_value(task).expect("tasks always serialize")
}

async fn create(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    bytes: Bytes,
) -> Result<Response> {
    let request: TaskRequest = body(&bytes, "invalid task")?;
    if let Err(e) = api
        .auth
        .can_write(&principal, &request.cluster, &request.namespace)
        .await
    {
        return Ok(e.into_response());
    }
    let task = api.tasks.create(request).await?;
    let location = format!("/api/v1/tasks/{}", task.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(task_json(&task)),
    )
        .into_response())
}

fn enum_param<T: DeserializeOwned>(name: &str, value: &str, allowed: &str) -> Result<T> {
    serde_json::from_value(Value::String(value.into())).map_err(|_| {
        Error::BadRequest(format!(
            "query parameter {name}: {value:?} is not one of {allowed}"
        ))
    })
}

async fn list(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>> {
    let mut q = crate::http::query::query(q, &["cluster", "namespace", "app", "status", "type"])?;
    let filter = TaskFilter {
        cluster: q.remove("cluster"),
        namespace: q.remove("namespace"),
        app: q.remove("app"),
        status: q
            .get("status")
            .map(|s| {
                enum_param(
                    "status",
                    s,
                    "Pending, Running, Succeeded, Failed, Cancelled",
                )
            })
            .transpose()?,
        kind: q
            .get("type")
            .map(|s| enum_param("type", s, "Create, Start, Stop, Delete, Update"))
            .transpose()?,
    };
    let items: Vec<Value> = api
        .tasks
        .list(&filter)
        .await?
        .iter()
        .filter(|t| visible(&principal, t))
        .map(task_json)
        .collect();
    Ok(Json(json!({ "items": items })))
}

async fn one(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<Value>> {
    Ok(Json(task_json(&visible_task(&api, &principal, &id).await?)))
}

async fn cancel(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response> {
    let task = visible_task(&api, &principal, &id).await?;
    if let Err(denied) = may_act(&api, &principal, &task).await {
        return Ok(denied);
    }
    Ok(Json(task_json(&api.tasks.cancel(&id).await?)).into_response())
}

async fn report(
    State(api): State<Api>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response> {
    // 404 before 400: a report for a task that does not exist is about the task.
    let task = visible_task(&api, &principal, &id).await?;
    if let Err(denied) = may_act(&api, &principal, &task).await {
        return Ok(denied);
    }
    let report: StatusReport = body(&bytes, "invalid status report")?;
    Ok(Json(task_json(&api.tasks.report(&id, report).await?)).into_response())
}
