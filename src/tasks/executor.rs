//! The built-in executor: acts on the member cluster through kube-rs, then
//! follows the app document the watches keep current until the task
//! succeeds, fails, times out or is cancelled
//! (`executor ──kube-rs──▶ member ──watch──▶ engine ──▶ hub ──▶ executor`),
//! writing each revision of the task through the board.
//!
//! What each type does:
//! - Stop: scales every workload of the app to 0 and remembers its replica
//!   count in the [`REPLICAS_ANNOTATION`] annotation.
//! - Start: scales each workload to `replicas`, else to the remembered
//!   count, else to its current count when above 0, else to 1.
//! - Update: sets the image of each workload's first container and/or its
//!   replicas (a strategic merge patch, as `kubectl set image` sends).
//! - Delete: deletes the app's workloads, then its namespace when no other
//!   app lives there (so apps sharing a namespace are never taken along).
//! - Create: creates the namespace if needed and a Deployment named after
//!   the app, labelled with the app label.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use serde::{Deserialize, Serialize};

use super::board::Board;
use super::model::{Task, TaskStatus, TaskStatus::*, TaskType};
use super::progress::{self, AppView, Plan, Verdict, WorkloadTarget};
use super::reach::{Failure, Reaches, failure};
use crate::hub::{Hub, Pattern};
use crate::pipeline::Access;
use crate::status::rules::HealthRules;

/// Where Stop remembers a workload's replica count for Start.
pub(super) const REPLICAS_ANNOTATION: &str = "kube-pulse.io/replicas-before-stop";

/// What is left of a task's deadline (`timeoutSeconds` from its creation):
/// a task taken over from another replica keeps its deadline.
fn remaining(task: &Task) -> Duration {
    let timeout = i64::try_from(task.timeout_seconds)
        .ok()
        .and_then(chrono::Duration::try_seconds)
        .unwrap_or(chrono::Duration::MAX);
    let Some(end) = task.created.checked_add_signed(timeout) else {
        return Duration::MAX;
    };
    (end - Utc::now()).to_std().unwrap_or(Duration::ZERO)
}

/// Runs one built-in task to its end, acting through `access`: the
/// member's apiserver, or its agent.
pub(super) async fn run(
    board: Arc<Board>,
    task: Task,
    access: Access,
    (app_label, rules): (&str, &HealthRules),
    token: CancellationToken,
) {
    let topic = task.target.topic();
    let Ok(pattern) = Pattern::parse(&topic) else {
        finish(
            &board,
            &task.id,
            Failed,
            "InvalidTarget",
            format!("{topic:?} is not a topic"),
        )
        .await;
        return;
    };
    // Subscribed before acting, so no change the action causes is missed.
    let mut changes = board.hub.subscribe(vec![pattern]);
    let deadline = tokio::time::Instant::now() + remaining(&task);
    let started = board
        .write(&task.id, |t| {
            t.advance(
                Running,
                None,
                None,
                Some("acting on the cluster".into()),
                Utc::now(),
            )
            .map_err(crate::Error::Conflict)
        })
        .await;
    if started.is_err() {
        return; // cancelled before it began
    }
    let baseline = AppView::read(&board.hub, &topic).unwrap_or_default();
    let acted = tokio::select! {
        _ = token.cancelled() => return,
        acted = act_through(&board, &access, &task, &baseline, (app_label, rules)) => acted,
    };
    let plan = match acted {
        Ok(plan) => plan,
        Err((reason, message)) => {
            finish(&board, &task.id, Failed, &reason, message).await;
            return;
        }
    };
    tracing::debug!(task = %task.id, ?plan, "acted; following progress");
    loop {
        let verdict = progress::evaluate(&plan, AppView::read(&board.hub, &topic).as_ref());
        match verdict {
            Verdict::Progress(p, message) => {
                let written = board
                    .write(&task.id, |t| {
                        if !t.status.is_active() {
                            return Err(crate::Error::Conflict("finished".into()));
                        }
                        if p <= t.progress && message == t.message {
                            return Ok(t.clone());
                        }
                        t.advance(
                            Running,
                            Some(p.max(t.progress)),
                            None,
                            Some(message.clone()),
                            Utc::now(),
                        )
                        .map_err(crate::Error::Conflict)
                    })
                    .await;
                if let Err(e) = written {
                    // Ended elsewhere, or the store is away: a task still
                    // active is taken up again by this replica's follower.
                    tracing::debug!(task = %task.id, cause = %e, "progress not written; this executor ends");
                    return;
                }
            }
            Verdict::Succeeded(message) => {
                finish(&board, &task.id, Succeeded, "", message).await;
                return;
            }
            Verdict::Failed { reason, message } => {
                finish(&board, &task.id, Failed, &reason, message).await;
                return;
            }
        }
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep_until(deadline) => {
                let last = board.get(&task.id).await.map(|t| t.message).unwrap_or_default();
                let message = format!("not done within {}s; last: {last}", task.timeout_seconds);
                finish(&board, &task.id, Failed, "DeadlineExceeded", message).await;
                return;
            }
            _ = changes.next() => {}
        }
    }
}

/// An external task's deadline: fails it unless it ended in time.
pub(super) async fn expire(board: &Board, task: &Task, token: CancellationToken) {
    tokio::select! {
        _ = token.cancelled() => {}
        _ = tokio::time::sleep(remaining(task)) => {
            let message = format!("no final report within {}s", task.timeout_seconds);
            finish(board, &task.id, Failed, "DeadlineExceeded", message).await;
        }
    }
}

/// Ends a task (unless it already ended, e.g. cancelled meanwhile).
pub(super) async fn finish(
    board: &Board,
    id: &str,
    status: TaskStatus,
    reason: &str,
    message: String,
) {
    let reason = (!reason.is_empty()).then(|| reason.to_string());
    let ended = board
        .write(id, |t| {
            t.advance(
                status,
                None,
                reason.clone(),
                Some(message.clone()),
                Utc::now(),
            )
            .map_err(crate::Error::Conflict)
        })
        .await;
    match ended {
        Ok(t) => {
            tracing::info!(task = %id, status = %t.summary(), detail = %t.message, "task finished")
        }
        Err(e) => tracing::debug!(task = %id, cause = %e, "task had already ended"),
    }
}

fn pods(w: &progress::WorkloadState) -> i32 {
    w.replicas.max(w.ready)
}

/// What a replica asks a push member's agent to do: the task. The agent
/// reads the app as it is, and whether another app shares its namespace,
/// from its own documents, never from the request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    task: Task,
    app_label: String,
}

/// Acts for `task` through `access`: on the cluster itself, or by asking
/// its agent, which answers with the plan.
async fn act_through(
    board: &Board,
    access: &Access,
    task: &Task,
    baseline: &AppView,
    (app_label, rules): (&str, &HealthRules),
) -> Result<Plan, Failure> {
    match access {
        Access::Direct(client) => {
            let shared = namespace_is_shared(&board.hub, task);
            act(client, task, baseline, (app_label, rules), shared).await
        }
        Access::Agent(agent) => {
            let order = Order {
                task: task.clone(),
                app_label: app_label.to_string(),
            };
            let order = serde_json::to_value(&order).expect("an order serializes");
            let answer = agent.act(order).await?;
            serde_json::from_value(answer).map_err(|e| {
                (
                    "AgentAnswer".to_string(),
                    format!("the member's agent answered with no plan: {e}"),
                )
            })
        }
    }
}

/// An agent's side of [`act_through`]: does what a replica's `order` says
/// on `member` with `client`, from the app as the agent's own `hub` shows
/// it, and answers with the plan. An order for an app of another member,
/// or with names no app has, is refused.
pub async fn act_for_hub(
    member: &str,
    client: &kube::Client,
    hub: &Hub,
    rules: &HealthRules,
    order: Value,
) -> Result<Value, (String, String)> {
    let bad = |message: String| ("BadOrder".to_string(), message);
    let order: Order = serde_json::from_value(order)
        .map_err(|e| bad(format!("the request is not a task order: {e}")))?;
    let target = &order.task.target;
    if target.cluster != member {
        return Err(bad(format!(
            "the task is for member {:?}, this agent's is {member:?}",
            target.cluster
        )));
    }
    if !crate::names::valid_name(&target.namespace) || !crate::names::valid_segment(&target.app) {
        return Err(bad(format!("{target} names no app")));
    }
    let baseline = AppView::read(hub, &target.topic()).unwrap_or_default();
    let shared = namespace_is_shared(hub, &order.task);
    let reading = (order.app_label.as_str(), rules);
    let plan = act(client, &order.task, &baseline, reading, shared).await?;
    Ok(serde_json::to_value(plan).expect("a plan serializes"))
}

/// Does the work on the cluster and returns what the watches should show.
async fn act(
    client: &kube::Client,
    task: &Task,
    baseline: &AppView,
    (app_label, rules): (&str, &HealthRules),
    shared: bool,
) -> Result<Plan, Failure> {
    let ns = &task.target.namespace;
    let mut targets = Vec::new();
    let mut reaches = Reaches::new(client, rules, ns);
    match task.kind {
        TaskType::Stop => {
            for w in baseline.workloads.values() {
                let reach = reaches.of(&w.kind).await?;
                let obj = reach.api.get(&w.name).await.map_err(|e| failure(&e))?;
                let remember = reach
                    .replicas(&obj)
                    .filter(|r| *r > 0)
                    .map(|r| json!({REPLICAS_ANNOTATION: r.to_string()}));
                reach.set_replicas(&w.name, 0, remember).await?;
                targets.push(target(w, Some(0)));
            }
            Ok(Plan::Stop { workloads: targets })
        }
        TaskType::Start => {
            for w in baseline.workloads.values() {
                let reach = reaches.of(&w.kind).await?;
                let obj = reach.api.get(&w.name).await.map_err(|e| failure(&e))?;
                let remembered = obj
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(REPLICAS_ANNOTATION))
                    .and_then(|v| v.parse::<i32>().ok())
                    .filter(|r| *r > 0);
                let replicas = task
                    .replicas
                    .or(remembered)
                    .or(reach.replicas(&obj).filter(|r| *r > 0))
                    .unwrap_or(1);
                let forget = json!({REPLICAS_ANNOTATION: null});
                reach.set_replicas(&w.name, replicas, Some(forget)).await?;
                targets.push(target(w, Some(replicas)));
            }
            Ok(Plan::Start {
                workloads: targets,
                created: false,
            })
        }
        TaskType::Update => {
            for w in baseline.workloads.values() {
                let reach = reaches.of(&w.kind).await?;
                if let Some(image) = &task.image {
                    let obj = reach.api.get(&w.name).await.map_err(|e| failure(&e))?;
                    let container = reach.first_container(&obj).ok_or_else(|| {
                        (
                            "NoContainer".to_string(),
                            format!("{} {} has no container to update", w.kind, w.name),
                        )
                    })?;
                    reach.set_image(&obj, container, image).await?;
                }
                if let Some(replicas) = task.replicas {
                    reach.set_replicas(&w.name, replicas, None).await?;
                }
                targets.push(target(w, task.replicas));
            }
            Ok(Plan::Update {
                workloads: targets,
                image: task.image.clone(),
            })
        }
        TaskType::Delete => {
            for w in baseline.workloads.values() {
                let reach = reaches.of(&w.kind).await?;
                match reach.api.delete(&w.name, &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(failure(&e)),
                }
                targets.push(target(w, None));
            }
            if !shared {
                let namespaces: Api<Namespace> = Api::all(client.clone());
                match namespaces.delete(ns, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(failure(&e)),
                }
            }
            Ok(Plan::Delete {
                workloads: targets,
                namespace: !shared,
            })
        }
        TaskType::Create => {
            let replicas = task.replicas.unwrap_or(1);
            create(client, task, app_label, replicas).await?;
            Ok(Plan::Start {
                workloads: vec![WorkloadTarget {
                    kind: "Deployment".into(),
                    name: task.target.app.clone(),
                    replicas: Some(replicas),
                    from: 0,
                }],
                created: true,
            })
        }
    }
}

fn target(w: &progress::WorkloadState, replicas: Option<i32>) -> WorkloadTarget {
    WorkloadTarget {
        kind: w.kind.clone(),
        name: w.name.clone(),
        replicas,
        from: pods(w),
    }
}

/// Whether another app has workloads in the task's namespace.
fn namespace_is_shared(hub: &Hub, task: &Task) -> bool {
    let t = &task.target;
    let pattern = Pattern::parse(&format!("apps/{}/{}/*", t.cluster, t.namespace))
        .expect("validated names make a pattern");
    hub.list(&[pattern]).iter().any(|d| {
        d.doc.get("app").and_then(Value::as_str) != Some(t.app.as_str())
            && d.doc
                .get("workloads")
                .and_then(Value::as_object)
                .is_some_and(|w| !w.is_empty())
    })
}

async fn create(
    client: &kube::Client,
    task: &Task,
    app_label: &str,
    replicas: i32,
) -> Result<(), Failure> {
    let t = &task.target;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": t.namespace}}))
        .expect("a valid Namespace");
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(failure(&e)),
    }
    let labels = json!({ app_label: t.app });
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": t.app, "namespace": t.namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": t.app, "image": task.image}]},
            },
        },
    }))
    .expect("a valid Deployment");
    Api::<Deployment>::namespaced(client.clone(), &t.namespace)
        .create(&PostParams::default(), &deployment)
        .await
        .map_err(|e| failure(&e))?;
    Ok(())
}
