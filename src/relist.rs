//! When a watch has to start again from a list (`apiserver ──Status──▶
//! [relist] ──▶ sources' list-watch, Karpor's reader and writer`): besides
//! 410 Gone, which every watcher relists on, an apiserver whose store is
//! younger than the resourceVersion a watch resumes from (restored from a
//! backup, re-installed, a fresh etcd) answers "Too large resource
//! version" (504, reason `Timeout`, cause `ResourceVersionTooLarge`) for
//! as long as that version is ahead of it: resuming again waits for ever,
//! and only a new list catches up (client-go's reflector relists on it
//! too). A leaf: it knows kube-rs only.

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Api;
use kube::Resource;
use kube::core::Status;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

/// The cause type an apiserver gives a resourceVersion ahead of its store.
const TOO_LARGE_CAUSE: &str = "ResourceVersionTooLarge";

/// Whether `status` says the resourceVersion asked for is ahead of the
/// apiserver's store.
pub(crate) fn is_too_large(status: &Status) -> bool {
    let by_cause = status
        .details
        .as_ref()
        .is_some_and(|d| d.causes.iter().any(|c| c.reason == TOO_LARGE_CAUSE));
    by_cause || status.message.starts_with("Too large resource version")
}

/// Whether a watcher's error asks for a new list (see [`is_too_large`]).
pub(crate) fn needs_relist(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => is_too_large(status),
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::InitialListFailed(kube::Error::Api(status)) => is_too_large(status),
        _ => false,
    }
}

/// kube-runtime's `watcher` with its default backoff, started afresh (a new
/// list) after an error that [`needs_relist`]; the error is still yielded
/// first.
pub(crate) fn watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<K>>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let start = move || {
        watcher::watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed()
    };
    futures::stream::unfold(None, move |inner: Option<BoxStream<'static, _>>| {
        let mut inner = inner.unwrap_or_else(&start);
        async move {
            let item = inner.next().await?;
            let again = match &item {
                Err(e) if needs_relist(e) => {
                    tracing::info!(error = %e, "the resourceVersion is ahead of the apiserver's store: listing again");
                    true
                }
                _ => false,
            };
            Some((item, (!again).then_some(inner)))
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::response::{StatusCause, StatusDetails};

    #[test]
    fn a_version_ahead_of_the_store_asks_for_a_list() {
        let plain =
            Status::failure("Too large resource version: 14, current: 9", "Timeout").with_code(504);
        let by_cause = Status::failure("Timeout: something else", "Timeout")
            .with_code(504)
            .with_details(StatusDetails {
                causes: vec![StatusCause {
                    reason: TOO_LARGE_CAUSE.into(),
                    message: "Too large resource version".into(),
                    field: String::new(),
                }],
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                retry_after_seconds: 1,
            });
        let gone = Status::failure("too old resource version: 1 (9)", "Expired").with_code(410);
        let other = Status::failure("the server is busy", "Timeout").with_code(504);
        assert!(is_too_large(&plain));
        assert!(is_too_large(&by_cause));
        assert!(!is_too_large(&gone));
        assert!(!is_too_large(&other));
        assert!(needs_relist(&watcher::Error::WatchError(
            plain.clone().boxed()
        )));
        assert!(needs_relist(&watcher::Error::WatchStartFailed(
            kube::Error::Api(plain.boxed())
        )));
        assert!(!needs_relist(&watcher::Error::WatchStartFailed(
            kube::Error::Api(other.boxed())
        )));
        assert!(!needs_relist(&watcher::Error::NoResourceVersion));
    }
}
