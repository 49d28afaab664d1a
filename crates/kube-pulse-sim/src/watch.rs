//! Watch streams: newline-delimited JSON events over a chunked response, as
//! the apiserver's watch cache serves them.
//!
//! Each watch is one task that replays the window (or sends the current state
//! as ADDED events), then forwards committed changes, bookmarks, a 410 ERROR
//! when the window is compacted under it, and ends at `timeoutSeconds`.
//! The stall fault makes it go silent; the refuse fault cuts its connection.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use super::media::Output;
use super::object::namespace_of;
use super::params::Params;
use super::resources::ResourceDef;
use super::selector::Selection;
use super::shared::Shared;
use super::status::{ApiError, ApiResult};
use super::store::{EventType, StoredEvent};
use super::table::IncludeObject;

/// How many encoded events may wait for a slow client before the watch blocks.
const CLIENT_BUFFER: usize = 256;

/// Parameters of one watch request.
#[derive(Debug, Clone)]
pub(crate) struct WatchOptions {
    pub resource_version: Option<u64>,
    pub selection: Selection,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Option<Duration>,
    /// How objects are sent: themselves, as one-row `Table`s (kubectl's
    /// `get -w`) or as `PartialObjectMetadata` (a metadata watcher).
    pub output: Output,
    /// What a table row carries of its object (`includeObject`).
    pub include: IncludeObject,
}

impl WatchOptions {
    /// The options of a watch of `kind` from its query parameters; without
    /// `watch_list` (the WatchList feature), `sendInitialEvents` is dropped
    /// as an apiserver without the feature drops it.
    pub(crate) fn from_params(params: &Params, kind: &str, watch_list: bool) -> ApiResult<Self> {
        let send_initial_events = params.bool("sendInitialEvents")? && watch_list;
        let bookmarks = params.bool("allowWatchBookmarks")?;
        let rv_match = params.str("resourceVersionMatch");
        if send_initial_events {
            if rv_match != Some("NotOlderThan") {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !bookmarks {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
                ));
            }
        } else if rv_match.is_some() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        Ok(Self {
            resource_version: params.resource_version()?,
            selection: params.selection(kind)?,
            bookmarks,
            send_initial_events,
            timeout: params.u64("timeoutSeconds")?.map(Duration::from_secs),
            output: Output::Object,
            include: params.include_object()?,
        })
    }
}

/// One watch event as the apiserver writes it: `type` before `object`
/// (Go's field order). Clients decode an event in one pass only in this
/// order: serde's adjacently tagged `WatchEvent` (kube-rs) buffers a whole
/// object that comes before its tag.
#[derive(serde::Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    object: &'a Value,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(&Line { kind, object }).expect("JSON values always encode");
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// A bookmark; a metadata watch gets it as a `PartialObjectMetadata`, as
/// its objects.
fn bookmark(def: &ResourceDef, output: Output, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let object = json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": metadata});
    match output {
        Output::Metadata => line("BOOKMARK", &super::media::partial(&object)),
        _ => line("BOOKMARK", &object),
    }
}

/// What a watch with this namespace and selection sees of a committed event:
/// moves into the selection become ADDED and moves out of it DELETED.
pub(crate) fn translate(
    event: &StoredEvent,
    namespace: Option<&str>,
    selection: &Selection,
) -> Option<(EventType, Arc<Value>)> {
    let visible =
        |o: &Value| namespace.is_none_or(|ns| namespace_of(o) == ns) && selection.matches(o);
    let now = visible(&event.object);
    match event.kind {
        EventType::Added | EventType::Deleted => now.then(|| (event.kind, event.object.clone())),
        EventType::Modified => {
            let before = event.prev.as_deref().is_some_and(visible);
            match (before, now) {
                (true, true) => Some((EventType::Modified, event.object.clone())),
                (false, true) => Some((EventType::Added, event.object.clone())),
                (true, false) => Some((EventType::Deleted, event.object.clone())),
                (false, false) => None,
            }
        }
    }
}

/// Starts a watch and returns the streaming response.
pub(crate) fn serve(
    shared: Arc<Shared>,
    def: ResourceDef,
    namespace: Option<String>,
    options: WatchOptions,
) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(CLIENT_BUFFER);
    let start = shared
        .store
        .watch(&def, options.resource_version, options.send_initial_events);
    match start {
        Ok(start) => {
            tokio::spawn(async move {
                let _guard = shared.stats.watch_opened();
                run(&shared, &def, namespace.as_deref(), &options, start, &tx).await;
            });
        }
        Err(err) => {
            // The apiserver answers 200 and reports an expired version in-stream.
            let _ = tx.try_send(line("ERROR", &err.to_status()));
        }
    }
    let body = Body::from_stream(futures::StreamExt::map(
        ReceiverStream::new(rx),
        Ok::<_, Infallible>,
    ));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Why a watch loop stopped sending.
enum End {
    ClientGone,
    Stopped,
}

/// Sends one line of a watch of `def`, first waiting out a stall fault or
/// a silent-watch fault naming the resource.
async fn send(
    shared: &Shared,
    def: &ResourceDef,
    tx: &mpsc::Sender<Bytes>,
    bytes: Bytes,
) -> Result<(), End> {
    let mut faults = shared.faults.subscribe();
    loop {
        let silent = {
            let f = faults.borrow_and_update();
            f.stall || (!f.silent_watches.is_empty() && f.silent_watches.contains(&def.stats_key()))
        };
        if !silent {
            break;
        }
        tokio::select! {
            changed = faults.changed() => if changed.is_err() { return Err(End::Stopped) },
            _ = shared.shutdown.cancelled() => return Err(End::Stopped),
            _ = tx.closed() => return Err(End::ClientGone),
        }
    }
    tx.send(bytes).await.map_err(|_| End::ClientGone)
}

/// Encodes an object event in the output the client asked for.
fn object_line(kind: &str, obj: &Value, def: &ResourceDef, options: &WatchOptions) -> Bytes {
    match options.output {
        Output::Table => {
            let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion").cloned().unwrap_or_default()});
            line(
                kind,
                &super::table::table(def, &[obj], meta, chrono::Utc::now(), options.include),
            )
        }
        Output::Metadata => line(kind, &super::media::partial(obj)),
        Output::Object | Output::MetadataList => line(kind, obj),
    }
}

async fn run(
    shared: &Arc<Shared>,
    def: &ResourceDef,
    namespace: Option<&str>,
    options: &WatchOptions,
    start: super::store::WatchStart,
    tx: &mpsc::Sender<Bytes>,
) {
    let result: Result<(), End> = async {
        let visible = |o: &Value| namespace.is_none_or(|ns| namespace_of(o) == ns) && options.selection.matches(o);
        for obj in start.initial.iter().filter(|o| visible(o)) {
            send(shared, def, tx, object_line("ADDED", obj, def, options)).await?;
        }
        if options.send_initial_events {
            send(shared, def, tx, bookmark(def, options.output, start.resource_version, true)).await?;
        }
        let mut last_rv = start.resource_version;
        for event in &start.backlog {
            if let Some((kind, obj)) = translate(event, namespace, &options.selection) {
                send(shared, def, tx, object_line(kind.as_str(), &obj, def, options)).await?;
            }
        }
        let mut receiver = start.receiver;
        let mut expiry = shared.store.expiry_signal();
        expiry.borrow_and_update();
        let mut closes = shared.close_watches.subscribe();
        closes.borrow_and_update();
        let timeout = tokio::time::sleep(options.timeout.unwrap_or(Duration::from_secs(1800)));
        tokio::pin!(timeout);
        let mut bookmarks = tokio::time::interval(shared.bookmark_interval);
        bookmarks.reset();
        loop {
            tokio::select! {
                _ = shared.shutdown.cancelled() => return Err(End::Stopped),
                _ = tx.closed() => return Err(End::ClientGone),
                _ = closes.changed() => return Err(End::Stopped),
                _ = expiry.changed() => {
                    let status = ApiError::expired(format!("too old resource version: {last_rv} ({})", shared.store.window_floor(def) + 1));
                    return send(shared, def, tx, line("ERROR", &status.to_status())).await;
                }
                _ = &mut timeout => {
                    if options.bookmarks {
                        send(shared, def, tx, bookmark(def, options.output, last_rv, false)).await?;
                    }
                    return Ok(());
                }
                _ = bookmarks.tick(), if options.bookmarks => {
                    send(shared, def, tx, bookmark(def, options.output, last_rv, false)).await?;
                }
                received = receiver.recv() => match received {
                    Ok(event) => {
                        if event.rv <= last_rv {
                            continue;
                        }
                        last_rv = event.rv;
                        if let Some((kind, obj)) = translate(&event, namespace, &options.selection) {
                            send(shared, def, tx, object_line(kind.as_str(), &obj, def, options)).await?;
                        }
                    }
                    // Too slow to keep up: end the watch, as the apiserver does; the
                    // client re-watches from its last resourceVersion.
                    Err(broadcast::error::RecvError::Lagged(_)) => return Err(End::Stopped),
                    Err(broadcast::error::RecvError::Closed) => return Err(End::Stopped),
                }
            }
        }
    }
    .await;
    if let Err(End::ClientGone) = result {
        tracing::trace!(resource = %def.group_resource(), "watch client went away");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::LabelSelector;

    fn event(kind: EventType, prev: Option<Value>, now: Value) -> StoredEvent {
        StoredEvent {
            rv: 10,
            table: "/configmaps".into(),
            kind,
            object: Arc::new(now),
            prev: prev.map(Arc::new),
        }
    }

    fn cm(ns: &str, app: &str) -> Value {
        json!({"metadata": {"name": "a", "namespace": ns, "labels": {"app": app}}})
    }

    #[test]
    fn an_event_line_has_its_type_before_its_object() {
        let line = line("MODIFIED", &json!({"metadata": {"name": "a"}}));
        assert_eq!(
            &line[..],
            b"{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"a\"}}}\n"
        );
    }

    #[test]
    fn translate_follows_selection_moves() {
        let web = Selection {
            labels: LabelSelector::parse("app=web").unwrap(),
            ..Default::default()
        };
        let cases = [
            (
                event(EventType::Added, None, cm("shop", "web")),
                None,
                Some(EventType::Added),
            ),
            (event(EventType::Added, None, cm("shop", "db")), None, None),
            (
                event(EventType::Added, None, cm("other", "web")),
                Some("shop"),
                None,
            ),
            (
                event(
                    EventType::Modified,
                    Some(cm("shop", "web")),
                    cm("shop", "web"),
                ),
                None,
                Some(EventType::Modified),
            ),
            (
                event(
                    EventType::Modified,
                    Some(cm("shop", "db")),
                    cm("shop", "web"),
                ),
                None,
                Some(EventType::Added),
            ),
            (
                event(
                    EventType::Modified,
                    Some(cm("shop", "web")),
                    cm("shop", "db"),
                ),
                None,
                Some(EventType::Deleted),
            ),
            (
                event(
                    EventType::Modified,
                    Some(cm("shop", "db")),
                    cm("shop", "db"),
                ),
                None,
                None,
            ),
            (
                event(
                    EventType::Deleted,
                    Some(cm("shop", "web")),
                    cm("shop", "web"),
                ),
                Some("shop"),
                Some(EventType::Deleted),
            ),
        ];
        for (i, (ev, ns, want)) in cases.iter().enumerate() {
            assert_eq!(translate(ev, *ns, &web).map(|(k, _)| k), *want, "case {i}");
        }
    }

    #[test]
    fn options_validate_streaming_lists() {
        let parse =
            |q: &str| WatchOptions::from_params(&Params::parse(Some(q)).unwrap(), "Pod", true);
        assert!(parse("watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan").is_ok());
        assert_eq!(
            parse("watch=true&sendInitialEvents=true&allowWatchBookmarks=true")
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse("watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse("watch=true&resourceVersionMatch=Exact")
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            parse("watch=true&timeoutSeconds=abc").unwrap_err().code,
            400
        );
        assert_eq!(parse("watch=true&resourceVersion=x").unwrap_err().code, 400);
        assert_eq!(
            parse("watch=true&allowWatchBookmarks=maybe")
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            parse("watch=true&labelSelector=a+in+b").unwrap_err().code,
            400
        );
        // Without the WatchList feature the streaming list's parameter is
        // dropped: its resourceVersionMatch is refused, as by such an apiserver.
        let old = WatchOptions::from_params(
            &Params::parse(Some(
                "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
            ))
            .unwrap(),
            "Pod",
            false,
        )
        .unwrap_err();
        assert_eq!((old.code, old.reason), (422, "Invalid"));
    }
}
