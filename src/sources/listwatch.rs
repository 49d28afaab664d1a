//! One resource's list-then-watch, as kube-runtime's `watcher` does it
//! (streamed or paged initial state, resumed watches, a relist on 410 and
//! on a resourceVersion ahead of the member's store, `relist.rs`),
//! with what that watcher keeps to itself: its bookmarks. A watch whose
//! member has shown it sends periodic bookmarks (one is enough; the one
//! that ends a streamed initial state does not count) is held to them: no
//! event and no bookmark for [`SilenceBound`] means the stream stalled
//! while its connection stayed up, and it is restarted from a fresh list
//! with a [`Fault::Silent`] for the sync to show meanwhile. A watch that
//! never brought a bookmark (a member that sends none) is not judged by
//! them: like kube-runtime, it is resumed after 295 s without anything.
//! (`watch.rs ──Api──▶ [listwatch] ──Event──▶ watch.rs`)

use std::collections::VecDeque;
use std::fmt::Debug;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// How long a watch that sends bookmarks may stay without an event or a
/// bookmark: two and a half times the apiserver's bookmark period (its
/// watch cache sends one to every watch that allows them about once a
/// minute), so a slow bookmark is not taken for a stall.
pub(super) const DEFAULT_SILENCE: Duration = Duration::from_secs(150);

/// How long a watch without bookmarks may stay without an event before it
/// is resumed (kube-runtime's 290 s request timeout and its margin).
const IDLE_RESUME: Duration = Duration::from_secs(295);

/// The annotation of the bookmark that ends a streamed initial state.
const INITIAL_END: &str = "k8s.io/initial-events-end";

/// A watch the member ends this soon after it opened is not one that ran
/// its course (an apiserver ends a watch at its timeout, minutes later):
/// its end is a failure, so that the watch is opened again after a
/// backoff, not at once and forever.
const ENDED_AT_ONCE: Duration = Duration::from_secs(1);

/// The failure of a watch the member ended at once.
fn ended_at_once() -> watcher::Error {
    let message = format!(
        "the member ended the watch within {} s of opening it",
        ENDED_AT_ONCE.as_secs()
    );
    watcher::Error::WatchError(
        kube::core::Status::failure(&message, "WatchEnded")
            .with_code(502)
            .boxed(),
    )
}

/// Why a step of the list-watch failed.
#[derive(Debug)]
pub(crate) enum Fault {
    /// As kube-runtime's watcher says it.
    Watch(watcher::Error),
    /// Nothing, not even a bookmark, for this long on a watch that sends
    /// bookmarks: restarted from a fresh list.
    Silent(Duration),
}

/// The settings of one list-watch.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) config: watcher::Config,
    /// Stream the initial state inside the watch (else list in pages).
    pub(crate) streaming: bool,
    /// The silence a watch that sends bookmarks is allowed.
    pub(crate) silence: Duration,
}

enum State<K> {
    Empty,
    Page {
        continue_token: Option<String>,
        objects: VecDeque<K>,
        resource_version: Option<String>,
    },
    Streaming(BoxStream<'static, kube::Result<WatchEvent<K>>>),
    Listed(String),
    Watching {
        resource_version: String,
        stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    },
}

struct Context<K: Clone> {
    api: Api<K>,
    settings: Settings,
    /// The member sent a bookmark on this resource's watch at least once.
    proven: bool,
    /// When the watch being read was opened.
    opened: tokio::time::Instant,
}

impl<K> Context<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    fn watch_params(&self, initial: bool) -> WatchParams {
        let c = &self.settings.config;
        WatchParams {
            label_selector: c.label_selector.clone(),
            field_selector: c.field_selector.clone(),
            timeout: c.timeout,
            bookmarks: true,
            send_initial_events: initial,
        }
    }

    fn list_params(&self, continue_token: Option<String>) -> ListParams {
        let c = &self.settings.config;
        ListParams {
            label_selector: c.label_selector.clone(),
            field_selector: c.field_selector.clone(),
            limit: Some(c.page_size.unwrap_or(500)),
            continue_token,
            ..ListParams::default()
        }
    }

    /// The next item of `stream` within the silence this watch is allowed:
    /// Err(how long) when it stayed silent that long.
    async fn next(
        &self,
        stream: &mut BoxStream<'static, kube::Result<WatchEvent<K>>>,
    ) -> Result<Option<kube::Result<WatchEvent<K>>>, Duration> {
        let bound = if self.proven {
            self.settings.silence
        } else {
            IDLE_RESUME
        };
        tokio::time::timeout(bound, stream.next())
            .await
            .map_err(|_| bound)
    }

    /// One step: maybe an item, and the next state.
    #[allow(clippy::too_many_lines)]
    async fn step(&mut self, state: State<K>) -> (Option<Result<Event<K>, Fault>>, State<K>) {
        let failed = |e| Some(Err(Fault::Watch(e)));
        match state {
            State::Empty if self.settings.streaming => {
                match self.api.watch(&self.watch_params(true), "0").await {
                    Ok(stream) => {
                        self.opened = tokio::time::Instant::now();
                        (Some(Ok(Event::Init)), State::Streaming(stream.boxed()))
                    }
                    Err(e) => (failed(watcher::Error::WatchStartFailed(e)), State::Empty),
                }
            }
            State::Empty => (
                Some(Ok(Event::Init)),
                State::Page {
                    continue_token: None,
                    objects: VecDeque::new(),
                    resource_version: None,
                },
            ),
            State::Page {
                continue_token,
                mut objects,
                resource_version,
            } => {
                if let Some(next) = objects.pop_front() {
                    let state = State::Page {
                        continue_token,
                        objects,
                        resource_version,
                    };
                    return (Some(Ok(Event::InitApply(next))), state);
                }
                if continue_token.is_none()
                    && let Some(rv) = resource_version
                {
                    return (Some(Ok(Event::InitDone)), State::Listed(rv));
                }
                match self.api.list(&self.list_params(continue_token)).await {
                    Ok(list) => {
                        let rv = list.metadata.resource_version.filter(|s| !s.is_empty());
                        let token = list.metadata.continue_.filter(|s| !s.is_empty());
                        if rv.is_none() && token.is_none() {
                            return (failed(watcher::Error::NoResourceVersion), State::Empty);
                        }
                        let state = State::Page {
                            continue_token: token,
                            objects: list.items.into(),
                            resource_version: rv,
                        };
                        (None, state)
                    }
                    Err(e) => (failed(watcher::Error::InitialListFailed(e)), State::Empty),
                }
            }
            State::Streaming(mut stream) => match self.next(&mut stream).await {
                Err(silent) => (Some(Err(Fault::Silent(silent))), State::Empty),
                Ok(Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)))) => {
                    (Some(Ok(Event::InitApply(obj))), State::Streaming(stream))
                }
                // Impossible in an initial state (the API concepts say so).
                Ok(Some(Ok(WatchEvent::Deleted(_)))) => (None, State::Streaming(stream)),
                Ok(Some(Ok(WatchEvent::Bookmark(bookmark)))) => {
                    // The bookmark that ends the initial state proves
                    // nothing of the periodic ones.
                    if !bookmark.metadata.annotations.contains_key(INITIAL_END) {
                        self.proven = true;
                    }
                    if bookmark.metadata.annotations.contains_key(INITIAL_END) {
                        let state = State::Watching {
                            resource_version: bookmark.metadata.resource_version,
                            stream,
                        };
                        (Some(Ok(Event::InitDone)), state)
                    } else {
                        (None, State::Streaming(stream))
                    }
                }
                Ok(Some(Ok(WatchEvent::Error(status)))) => {
                    let next = if status.code == 410 || crate::relist::is_too_large(&status) {
                        State::Empty
                    } else {
                        State::Streaming(stream)
                    };
                    (failed(watcher::Error::WatchError(status.boxed())), next)
                }
                Ok(Some(Err(e))) => (
                    failed(watcher::Error::WatchFailed(e)),
                    State::Streaming(stream),
                ),
                Ok(None) if self.opened.elapsed() < ENDED_AT_ONCE => {
                    (failed(ended_at_once()), State::Empty)
                }
                Ok(None) => (None, State::Empty),
            },
            State::Listed(resource_version) => {
                match self
                    .api
                    .watch(&self.watch_params(false), &resource_version)
                    .await
                {
                    Ok(stream) => {
                        self.opened = tokio::time::Instant::now();
                        let state = State::Watching {
                            resource_version,
                            stream: stream.boxed(),
                        };
                        (None, state)
                    }
                    Err(e) => {
                        let error = watcher::Error::WatchStartFailed(e);
                        // Ahead of the member's store (one restored or
                        // re-installed): only a new list catches up.
                        let next = if crate::relist::needs_relist(&error) {
                            State::Empty
                        } else {
                            State::Listed(resource_version)
                        };
                        (failed(error), next)
                    }
                }
            }
            State::Watching {
                resource_version,
                mut stream,
            } => match self.next(&mut stream).await {
                Err(silent) if self.proven => (Some(Err(Fault::Silent(silent))), State::Empty),
                // Nothing for a long while, and no bookmarks to tell: resumed.
                Err(_) => (None, State::Listed(resource_version)),
                Ok(Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)))) => {
                    changed(Event::Apply, obj, stream)
                }
                Ok(Some(Ok(WatchEvent::Deleted(obj)))) => changed(Event::Delete, obj, stream),
                Ok(Some(Ok(WatchEvent::Bookmark(bookmark)))) => {
                    self.proven = true;
                    let state = State::Watching {
                        resource_version: bookmark.metadata.resource_version,
                        stream,
                    };
                    (None, state)
                }
                Ok(Some(Ok(WatchEvent::Error(status)))) => {
                    let next = if status.code == 410 || crate::relist::is_too_large(&status) {
                        State::Empty
                    } else {
                        State::Watching {
                            resource_version,
                            stream,
                        }
                    };
                    (failed(watcher::Error::WatchError(status.boxed())), next)
                }
                Ok(Some(Err(e))) => {
                    let state = State::Watching {
                        resource_version,
                        stream,
                    };
                    (failed(watcher::Error::WatchFailed(e)), state)
                }
                Ok(None) if self.opened.elapsed() < ENDED_AT_ONCE => {
                    (failed(ended_at_once()), State::Listed(resource_version))
                }
                Ok(None) => (None, State::Listed(resource_version)),
            },
        }
    }
}

/// An object changed while watching: the event, the watch going on from
/// its resourceVersion (an object without one cannot be resumed from).
fn changed<K: Resource + 'static>(
    event: fn(K) -> Event<K>,
    obj: K,
    stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
) -> (Option<Result<Event<K>, Fault>>, State<K>) {
    let rv = obj.resource_version().unwrap_or_default();
    if rv.is_empty() {
        return (
            Some(Err(Fault::Watch(watcher::Error::NoResourceVersion))),
            State::Empty,
        );
    }
    let state = State::Watching {
        resource_version: rv,
        stream,
    };
    (Some(Ok(event(obj))), state)
}

/// The list-watch of `api`: `Event`s as kube-runtime's watcher yields them,
/// and faults, forever (a failed step is retried by the next poll; the
/// caller decides when to stop polling and start over).
pub(crate) fn list_watch<K>(
    api: Api<K>,
    settings: Settings,
) -> BoxStream<'static, Result<Event<K>, Fault>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let context = Context {
        api,
        settings,
        proven: false,
        opened: tokio::time::Instant::now(),
    };
    futures::stream::unfold(
        (context, State::Empty),
        |(mut context, mut state)| async move {
            loop {
                let (item, next) = context.step(state).await;
                state = next;
                if let Some(item) = item {
                    return Some((item, (context, state)));
                }
            }
        },
    )
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A member that lists (empty, at resourceVersion 5) and ends every
    /// watch at once with an empty answer.
    async fn ending_member() -> kube::Client {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 8192];
                    let n = socket.read(&mut request).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&request[..n]);
                    let body = if head.contains("watch=true") {
                        String::new()
                    } else {
                        r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}"#.to_string()
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// Streamed or paged, a watch the member ends at once is a failure
    /// (backed off by the caller), not a watch opened again at once forever.
    #[tokio::test]
    async fn a_watch_the_member_ends_at_once_is_a_failure() {
        let client = ending_member().await;
        for streaming in [true, false] {
            let settings = Settings {
                config: watcher::Config::default(),
                streaming,
                silence: DEFAULT_SILENCE,
            };
            let mut stream = list_watch(Api::<ConfigMap>::all(client.clone()), settings);
            let fault = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match stream.next().await {
                        Some(Err(fault)) => break fault,
                        Some(Ok(_)) => {}
                        None => panic!("the list-watch ended"),
                    }
                }
            })
            .await
            .expect("a failure within the bound");
            match fault {
                Fault::Watch(watcher::Error::WatchError(status)) => {
                    assert_eq!(status.reason, "WatchEnded", "streaming {streaming}");
                }
                other => panic!("streaming {streaming}: {other:?}"),
            }
        }
    }
}
