//! The tasks API (`HTTP ──▶ [api] ──▶ Tasks`): create, list, read, cancel,
//! and status reports from external executors. Errors are the crate's
//! `{code, message}` bodies, naming the field at fault.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{StatusReport, TaskFilter, TaskRequest, Tasks};
use crate::error::{Error, Result};

/// The task routes.
pub fn router(tasks: Arc<Tasks>) -> Router {
    Router::new()
        .route("/api/v1/tasks", get(list).post(create))
        .route("/api/v1/tasks/{id}", get(one).delete(cancel))
        .route("/api/v1/tasks/{id}/status", patch(report))
        .with_state(tasks)
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

fn task_json(task: &super::Task) -> Value {
    serde_json::to_value(task).expect("tasks always serialize")
}

async fn create(State(tasks): State<Arc<Tasks>>, bytes: Bytes) -> Result<Response> {
    let request: TaskRequest = body(&bytes, "invalid task")?;
    let task = tasks.create(request).await?;
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

async fn list(State(tasks): State<Arc<Tasks>>, RawQuery(q): RawQuery) -> Result<Json<Value>> {
    let mut q = crate::rest::query(q, &["cluster", "namespace", "app", "status", "type"])?;
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
    let items: Vec<Value> = tasks.list(&filter).await?.iter().map(task_json).collect();
    Ok(Json(json!({ "items": items })))
}

async fn one(State(tasks): State<Arc<Tasks>>, Path(id): Path<String>) -> Result<Json<Value>> {
    Ok(Json(task_json(&tasks.get(&id).await?)))
}

async fn cancel(State(tasks): State<Arc<Tasks>>, Path(id): Path<String>) -> Result<Json<Value>> {
    Ok(Json(task_json(&tasks.cancel(&id).await?)))
}

async fn report(
    State(tasks): State<Arc<Tasks>>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>> {
    // 404 before 400: a report for a task that does not exist is about the task.
    tasks.get(&id).await?;
    let report: StatusReport = body(&bytes, "invalid status report")?;
    Ok(Json(task_json(&tasks.report(&id, report).await?)))
}
