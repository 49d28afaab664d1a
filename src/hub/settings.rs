//! The hub's settings (`gateway settings → [HubConfig] → hub`): the sizes
//! of its bounded structures.

use std::time::Duration;

/// Sizes of the hub's bounded structures.
#[derive(Debug, Clone, Copy)]
pub struct HubConfig {
    /// Changes kept for resume at least (more while they are younger than
    /// `log_age`).
    pub log_size: usize,
    /// Every change published within this long of the newest one stays
    /// for resume, however many there are, as long as `log_bytes` holds
    /// them: how long a client may be away (docs/PROTOCOL.md, Cursors).
    pub log_age: Duration,
    /// Bytes the changes kept for resume may take (see
    /// [`HubStats::log_bytes`](super::HubStats::log_bytes)).
    pub log_bytes: usize,
    /// Changes queued per subscription before it falls back to snapshots.
    pub subscriber_queue: usize,
}

impl Default for HubConfig {
    fn default() -> Self {
        Self {
            log_size: 10_000,
            log_age: DEFAULT_LOG_AGE,
            log_bytes: DEFAULT_LOG_BYTES,
            subscriber_queue: 1024,
        }
    }
}

/// The replay log's default byte budget: 64 MiB, room for 24 000 changes
/// (120 s at 200 changes/s) of up to ~2.7 KiB, or the default 10 000 at up
/// to ~6.5 KiB each (a demo app document's whole message is 3–7 KiB; a pod
/// change's 1–2 KiB): the bytes bind only when documents are unusually
/// large or changes unusually many (docs/RELIABILITY.md).
pub const DEFAULT_LOG_BYTES: usize = 64 << 20;

/// The replay log's default time window: a client away for up to two
/// minutes (a network change, a laptop's lid, a replica's failover) resumes
/// with the changes it missed, at any rate the byte budget holds.
pub const DEFAULT_LOG_AGE: Duration = Duration::from_secs(120);
