//! kube-rs watchers against a simulated cluster, run in a task of their own
//! so they keep polling while the test does other things.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio_stream::wrappers::ReceiverStream;

/// What [`spawn_watcher`] yields.
pub type Events<K> = ReceiverStream<Result<Event<K>, watcher::Error>>;

/// Runs a watcher of `api` in its own task (so it opens its watch while the
/// test does other things); its events arrive on the returned stream.
pub fn spawn_watcher<K>(api: Api<K>, config: watcher::Config) -> Events<K>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// The next item of `stream`, failing the test after `within` or when it ends.
pub async fn next_within<S, T>(stream: &mut S, within: Duration) -> T
where
    S: futures::Stream<Item = T> + Unpin,
{
    tokio::time::timeout(within, stream.next())
        .await
        .expect("watcher event within the deadline")
        .expect("watcher stream does not end")
}
