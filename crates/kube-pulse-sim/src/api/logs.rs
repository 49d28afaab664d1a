//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`, what `kubectl logs`
//! reads. The simulator runs no process, so a container's log is what its
//! simulated kubelet knows of it, one line each: started (with its image),
//! the last termination before a restart, and the end of a terminated
//! container. The refusals are the apiserver's: a container waiting to
//! start, no previous instance, a container the pod does not have.

use std::sync::Arc;

use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::params::Params;
use crate::shared::Shared;
use crate::status::{ApiError, ApiResult};

/// The namespace and pod of a log path, if it is one.
pub(super) fn log_target(path: &str) -> Option<(&str, &str)> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segments.as_slice() {
        ["api", "v1", "namespaces", ns, "pods", pod, "log"] => Some((ns, pod)),
        _ => None,
    }
}

/// The log of one container of a pod (`container`, or the pod's only
/// one), as text; with `previous`, of the instance before its last restart.
pub(super) fn log(
    shared: &Arc<Shared>,
    method: &Method,
    (namespace, pod): (&str, &str),
    query: Option<&str>,
) -> ApiResult<Response> {
    let def = shared
        .store
        .catalog()
        .find("", "v1", "pods")
        .cloned()
        .ok_or_else(|| ApiError::no_route("pods/log"))?;
    if method != Method::GET {
        return Err(ApiError::method_not_allowed("pods/log"));
    }
    shared.stats.record(def.stats_key(), "log");
    if shared.is_denied(&def, "get") {
        return Err(ApiError::forbidden("get", &def, Some(namespace)));
    }
    let params = Params::parse(query)?;
    let previous = params.bool("previous")?;
    let object = shared.store.get(&def, Some(namespace), pod)?;
    let names: Vec<&str> = object["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    let container = match (params.str("container"), names.as_slice()) {
        (Some(name), _) if names.contains(&name) => name,
        (Some(name), _) => {
            return Err(ApiError::bad_request(format!(
                "container {name} is not valid for pod {pod}"
            )));
        }
        (None, [only]) => only,
        (None, _) => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod}, choose one of: [{}]",
                names.join(" ")
            )));
        }
    };
    let status = object["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == container)
        .cloned()
        .unwrap_or(Value::Null);
    let text = lines(pod, container, &status, previous)?;
    let mut response = (StatusCode::OK, text).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(response)
}

/// The log's lines from a container's status.
fn lines(pod: &str, container: &str, status: &Value, previous: bool) -> ApiResult<String> {
    let image = status["image"].as_str().unwrap_or("?");
    let ended = |t: &Value| {
        format!(
            "{} container {container} exited with code {} ({})\n",
            t["finishedAt"].as_str().unwrap_or(""),
            t["exitCode"].as_i64().unwrap_or(0),
            t["reason"].as_str().unwrap_or("Completed"),
        )
    };
    if previous {
        let last = &status["lastState"]["terminated"];
        if !last.is_object() {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod}\" not found"
            )));
        }
        let started = last["startedAt"].as_str().unwrap_or("");
        return Ok(format!(
            "{started} container {container} started (image {image}; simulated: no process runs)\n{}",
            ended(last)
        ));
    }
    let state = &status["state"];
    if let Some(waiting) = state.get("waiting").filter(|w| w.is_object()) {
        let reason = waiting["reason"].as_str().unwrap_or("ContainerCreating");
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{pod}\" is waiting to start: {reason}"
        )));
    }
    let (started, end) = match (state.get("running"), state.get("terminated")) {
        (Some(running), _) if running.is_object() => (&running["startedAt"], None),
        (_, Some(terminated)) if terminated.is_object() => {
            (&terminated["startedAt"], Some(ended(terminated)))
        }
        _ => {
            return Err(ApiError::bad_request(format!(
                "container \"{container}\" in pod \"{pod}\" is waiting to start: ContainerCreating"
            )));
        }
    };
    let restarts = status["restartCount"].as_i64().unwrap_or(0);
    let mut text = format!(
        "{} container {container} started (image {image}; simulated: no process runs)\n",
        started.as_str().unwrap_or("")
    );
    if restarts > 0 {
        text.push_str(&format!(
            "{} restarts before this one (kubectl logs --previous shows the last)\n",
            restarts
        ));
    }
    text.push_str(&end.unwrap_or_default());
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_containers_state_makes_its_log_or_the_apiservers_refusal() {
        let running = json!({"image": "web:1", "restartCount": 2,
            "state": {"running": {"startedAt": "2026-12-07T10:00:00Z"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                "startedAt": "2026-12-07T09:00:00Z", "finishedAt": "2026-12-07T09:59:00Z"}}});
        let waiting =
            json!({"image": "web:2", "state": {"waiting": {"reason": "ImagePullBackOff"}}});
        // (status, previous, the text or the refusal's words)
        let cases = [
            (
                &running,
                false,
                Ok("2026-12-07T10:00:00Z container web started (image web:1"),
            ),
            (&running, false, Ok("2 restarts before this one")),
            (
                &running,
                true,
                Ok("2026-12-07T09:59:00Z container web exited with code 137 (OOMKilled)"),
            ),
            (
                &waiting,
                false,
                Err("is waiting to start: ImagePullBackOff"),
            ),
            (
                &waiting,
                true,
                Err("previous terminated container \"web\" in pod \"p\" not found"),
            ),
            (
                &Value::Null,
                false,
                Err("is waiting to start: ContainerCreating"),
            ),
        ];
        for (status, previous, want) in cases {
            match (lines("p", "web", status, previous), want) {
                (Ok(text), Ok(want)) => assert!(text.contains(want), "{text}"),
                (Err(e), Err(want)) => assert!(e.message.contains(want), "{}", e.message),
                (got, want) => panic!("{status} {previous}: {got:?}, expected {want:?}"),
            }
        }
    }

    #[test]
    fn only_a_pods_log_path_is_a_log_target() {
        assert_eq!(
            log_target("/api/v1/namespaces/shop/pods/web-1/log"),
            Some(("shop", "web-1"))
        );
        assert_eq!(log_target("/api/v1/namespaces/shop/pods/web-1"), None);
        assert_eq!(log_target("/api/v1/namespaces/shop/services/web/log"), None);
    }
}
