//! The replay log (`hub publish → [log] → resume`): the last changes, in
//! their slim logged form, bounded in count and bytes, which a client
//! resuming from a cursor is replayed from.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::change::{Change, ChangeKind};
use super::settings::HubConfig;
use super::state::{Hub, Inner};

impl Hub {
    /// Changes after `seq` still in the log, or None when some are gone.
    /// Each is the log's copy: its message in `encoded.json` (to be sent as
    /// is), no `patch`, and a `doc` only for task topics.
    pub fn changes_since(&self, seq: u64) -> Option<Vec<Arc<Change>>> {
        let inner = self.inner.lock();
        let oldest = inner
            .log
            .front()
            .map(|(c, _)| c.seq)
            .unwrap_or(inner.seq + 1);
        if seq > inner.seq || seq + 1 < oldest {
            return None;
        }
        Some(
            inner
                .log
                .iter()
                .filter(|(c, _)| c.seq > seq)
                .map(|(c, _)| c.clone())
                .collect(),
        )
    }
}

impl Inner {
    /// Logs `logged` (a published change's slim copy), then lets go of the
    /// oldest changes while the log is over its bytes, or over its count
    /// with the oldest published longer than `log_age` before this one (the
    /// changes' own publication times: no clock is read here).
    pub(super) fn log_change(&mut self, logged: Change, config: &HubConfig) {
        let bytes = logged_bytes(&logged);
        let window = chrono::TimeDelta::from_std(config.log_age).unwrap_or(chrono::TimeDelta::MAX);
        let keep_from = logged.at.checked_sub_signed(window);
        self.log.push_back((Arc::new(logged), bytes));
        self.log_bytes += bytes;
        let aged = |oldest: &Change| keep_from.is_none_or(|from| oldest.at < from);
        while self.log_bytes > config.log_bytes
            || (self.log.len() > config.log_size && self.log.front().is_some_and(|(c, _)| aged(c)))
        {
            let Some((gone, bytes)) = self.log.pop_front() else {
                break;
            };
            self.log_bytes -= bytes;
            if let Some(mark) = self.stream.as_mut() {
                mark.forget(&gone.topic, gone.streamed_at.load(Ordering::Acquire));
            }
            if gone.kind == ChangeKind::Removed
                && self
                    .removed
                    .get(&gone.topic)
                    .is_some_and(|r| r.1 == gone.seq)
            {
                self.removed.remove(&gone.topic);
            }
        }
    }

    /// The replay log's copy of the change at `seq`, if still there.
    pub(super) fn logged(&self, seq: u64) -> Option<&Change> {
        let first = self.log.front()?.0.seq;
        let (change, _) = self
            .log
            .get(usize::try_from(seq.checked_sub(first)?).ok()?)?;
        Some(change)
    }
}

/// What a logged change costs, estimated once when it is logged: its JSON
/// message, its cursor, the struct itself, and a kept document as serialized
/// (in memory a `Value` takes several times that; only task documents are kept).
fn logged_bytes(change: &Change) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut doc = Counter(0);
    if let Some(d) = &change.doc {
        let _ = serde_json::to_writer(&mut doc, &**d);
    }
    let json = change.encoded.json.get().map_or(0, Bytes::len);
    std::mem::size_of::<Change>() + change.cursor.len() + json + doc.0
}
