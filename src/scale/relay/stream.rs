//! The JetStream stream of the relay (`settings ──▶ [stream] ◀── consumer,
//! guard`): its configuration, and keeping it there. A stream that is
//! missing (deleted) is made again, and one whose configuration was changed
//! is set back, by whichever replica notices first; every replica then
//! publishes its members' current documents again (src/scale/relay/).

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use tokio_util::sync::CancellationToken;

use super::publish::Shared;
use super::settings::{NatsSettings, replicas_hint};
use crate::scale::subject;

/// How often each replica looks at the stream's configuration.
const GUARD_EVERY: Duration = Duration::from_secs(5);

/// How long a stream found missing must stay missing before it is made
/// again. nats-server (2.9 at least) removes a deleted file stream's
/// directory after answering the deletion: a stream of the same name made
/// within those milliseconds gets its files removed under it, exists, and
/// refuses every message (`open …/msgs/1.blk: no such file or directory`,
/// error code 10077) until it is deleted again.
const SETTLE: Duration = Duration::from_secs(2);

/// The stream's configuration: every topic's subject, file storage, the
/// last `history` messages of each.
pub(super) fn config(settings: &NatsSettings) -> stream::Config {
    stream::Config {
        name: settings.stream.clone(),
        description: Some("kube-pulse: the last documents of every topic".into()),
        subjects: vec![format!("{}.>", subject::PREFIX)],
        max_messages_per_subject: settings.history,
        storage: stream::StorageType::File,
        discard: stream::DiscardPolicy::Old,
        num_replicas: settings.replicas,
        // No message of it is deleted or purged through the API (an
        // agent's acknowledgement sent there is refused).
        deny_delete: true,
        deny_purge: true,
        ..Default::default()
    }
}

/// A limit as the server keeps it: 0 (what a configuration leaves unset)
/// and every negative number are both "no limit", which it reports as -1.
fn unlimited(limit: i64) -> i64 {
    if limit <= 0 { -1 } else { limit }
}

/// Whether `held` is still the stream `want` describes, in what the relay
/// relies on.
fn intact(held: &stream::Config, want: &stream::Config) -> bool {
    held.subjects == want.subjects
        && held.max_messages_per_subject == want.max_messages_per_subject
        && held.storage == want.storage
        && held.discard == want.discard
        && held.num_replicas == want.num_replicas
        && unlimited(held.max_messages) == unlimited(want.max_messages)
        && unlimited(held.max_bytes) == unlimited(want.max_bytes)
        && held.max_age == want.max_age
        && held.deny_delete >= want.deny_delete
        && held.deny_purge >= want.deny_purge
        && unlimited(i64::from(held.max_message_size))
            == unlimited(i64::from(want.max_message_size))
        && !held.sealed
}

/// When the stream `name` was made (nanoseconds since the epoch: a stream
/// made again has another); Ok(None) when JetStream says it does not
/// exist, Err when it cannot be asked.
pub(crate) async fn stream_created(
    js: &jetstream::Context,
    name: &str,
) -> Result<Option<i128>, String> {
    match js.get_stream(name).await {
        Ok(stream) => Ok(Some(stream.cached_info().created.unix_timestamp_nanos())),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether the stream `name`, found missing, is still missing [`SETTLE`]
/// later: only then may it be made again (see [`SETTLE`]). Err when it
/// cannot be asked.
pub(crate) async fn still_missing(js: &jetstream::Context, name: &str) -> Result<bool, String> {
    tokio::time::sleep(SETTLE).await;
    stream_created(js, name)
        .await
        .map(|created| created.is_none())
}

/// Whether JetStream answered that the stream does not exist.
pub(crate) fn not_found(e: &jetstream::context::GetStreamError) -> bool {
    matches!(
        e.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(ref j)
            if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// What [`ensure_stream`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// The stream as configured.
    Intact,
    /// No stream: made again.
    Made,
    /// Another configuration: set back.
    Repaired,
}

/// Creates or updates the stream (at start).
pub(super) async fn create(js: &jetstream::Context, settings: &NatsSettings) -> Result<(), String> {
    js.create_or_update_stream(config(settings))
        .await
        .map(drop)
        .map_err(|e| {
            format!(
                "nats: cannot create or update the stream {}: {e}{}",
                settings.stream,
                replicas_hint(settings.replicas)
            )
        })
}

/// The stream, made again when missing and set back when its
/// configuration was changed.
pub(super) async fn ensure_stream(
    js: &jetstream::Context,
    settings: &NatsSettings,
) -> Result<stream::Stream, String> {
    check(js, settings).await.map(|(stream, _)| stream)
}

async fn check(
    js: &jetstream::Context,
    settings: &NatsSettings,
) -> Result<(stream::Stream, Found), String> {
    let want = config(settings);
    let name = &settings.stream;
    let found = match js.get_stream(name).await {
        Ok(stream) if intact(&stream.cached_info().config, &want) => {
            return Ok((stream, Found::Intact));
        }
        Ok(_) => Found::Repaired,
        Err(e) => {
            if !not_found(&e) {
                return Err(format!("stream {name}: {e}"));
            }
            if !still_missing(js, name).await? {
                // Made again meanwhile, by another replica.
                let stream = js
                    .get_stream(name)
                    .await
                    .map_err(|e| format!("stream {name}: {e}"))?;
                return Ok((stream, Found::Intact));
            }
            Found::Made
        }
    };
    js.create_or_update_stream(want).await.map_err(|e| {
        format!(
            "stream {name}: cannot make it again: {e}{}",
            replicas_hint(settings.replicas)
        )
    })?;
    match found {
        Found::Made => {
            tracing::warn!(stream = %name, "the stream of changes was missing (deleted?): made again");
        }
        _ => {
            tracing::warn!(stream = %name, "the stream of changes had another configuration: set back");
        }
    }
    let stream = js
        .get_stream(name)
        .await
        .map_err(|e| format!("stream {name}: {e}"))?;
    Ok((stream, found))
}

/// Looks at the stream every [`GUARD_EVERY`]: one deleted is made again,
/// one whose configuration changed is set back. This replica publishes its
/// documents again whenever the stream it finds is another than the one it
/// found last (made again, by whichever replica noticed first) or was set
/// back (messages may have been lost) — besides its consumer, which
/// notices a new stream when it reads again, so that a consumer that has
/// not failed yet delays nothing.
pub(super) async fn guard(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(GUARD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen: Option<i128> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match check(&shared.js, &shared.settings).await {
            Ok((stream, found)) => {
                let created = stream.cached_info().created.unix_timestamp_nanos();
                let another = seen.is_some_and(|seen| seen != created);
                if another || matches!(found, Found::Repaired) {
                    shared.republish.notify_one();
                }
                seen = Some(created);
            }
            Err(error) => tracing::debug!(%error, "the stream of changes could not be checked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_configuration_is_not_intact() {
        let settings = NatsSettings::new("nats://h:1");
        let want = config(&settings);
        assert!(intact(&want.clone(), &want));
        // As the server reports it back: its unset limits are -1, not 0.
        let reported = stream::Config {
            max_messages: -1,
            max_bytes: -1,
            max_message_size: -1,
            ..want.clone()
        };
        assert!(intact(&reported, &want), "the server's -1 is the unset 0");
        let changes: [fn(&mut stream::Config); 6] = [
            |c| c.subjects = vec!["other.>".into()],
            |c| c.max_messages_per_subject = 1,
            |c| c.storage = stream::StorageType::Memory,
            |c| c.max_age = Duration::from_secs(1),
            |c| c.sealed = true,
            |c| c.max_bytes = 1 << 20,
        ];
        for change in changes {
            let mut held = want.clone();
            change(&mut held);
            assert!(!intact(&held, &want), "{held:?}");
        }
    }
}
