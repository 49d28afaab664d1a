//! The hub's settings (`gateway settings → [HubConfig] → hub`): the sizes
//! of its bounded structures.

/// Sizes of the hub's bounded structures.
#[derive(Debug, Clone, Copy)]
pub struct HubConfig {
    /// Changes kept for resume.
    pub log_size: usize,
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
            log_bytes: DEFAULT_LOG_BYTES,
            subscriber_queue: 1024,
        }
    }
}

/// The replay log's default byte budget: 64 MiB, room for the default
/// 10 000 changes at up to ~6.5 KiB each (a demo app document's whole message
/// is 3–7 KiB), so the count binds first for ordinary traffic and the bytes
/// only when documents are unusually large (docs/RELIABILITY.md).
pub const DEFAULT_LOG_BYTES: usize = 64 << 20;
