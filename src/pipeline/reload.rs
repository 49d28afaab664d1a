//! Applying a changed member source while the gateway runs
//! (`SIGHUP | file changed ──▶ [reload] ──read──▶ source ──reconcile──▶ pipeline`).
//! SIGHUP always re-reads; besides, the source's file is checked every
//! `interval` (SHA-256 of its bytes, so a Kubernetes ConfigMap's symlink
//! swap counts as a change and a rewrite with the same bytes does not). A
//! valid file applies its member diff and sync registries; an invalid one is
//! refused with an error log line and `kube_pulse_config_reloads_total{result="refused"}`,
//! and the running configuration stays.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::diff::MemberDiff;
use super::member_source::{MemberSource, changed_keys};
use super::union::{MemberUnion, Origin, Part};
use crate::error::Result;

/// How often the source's file is checked by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// Re-reads a member source and applies it to a pipeline.
pub struct Reloader {
    source: MemberSource,
    /// The file's part of the members; other sources (Karpor) keep theirs.
    union: Arc<MemberUnion>,
    /// The settings that apply only at a restart, as the process started with them.
    started_with: Option<serde_yaml_ng::Value>,
    /// Digest of the file's bytes last read (applied or refused).
    seen: Option<[u8; 32]>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// SHA-256 of a file's bytes; None when it cannot be read.
fn digest(path: &std::path::Path) -> Option<[u8; 32]> {
    let bytes = std::fs::read(path).ok()?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    Some(out)
}

impl Reloader {
    /// A reloader of `source` (as the pipeline was started from it) into
    /// the file's part of `union`.
    pub async fn new(source: MemberSource, union: Arc<MemberUnion>) -> Self {
        let seen = digest(source.file());
        let started_with = source.read().await.ok().and_then(|d| d.restart_only);
        Self {
            source,
            union,
            started_with,
            seen,
        }
    }

    /// Reads the source and applies it: the member diff and the sync
    /// registries. An invalid source changes nothing and is the error.
    pub async fn reload(&mut self, trigger: &str) -> Result<MemberDiff> {
        let path = self.source.file().display().to_string();
        self.seen = digest(self.source.file());
        let applied = match self.source.read().await {
            Ok(desired) => {
                if let (Some(before), Some(after)) = (&self.started_with, &desired.restart_only) {
                    let keys = changed_keys(before, after);
                    if !keys.is_empty() {
                        tracing::warn!(path = %path, keys = %keys.join(", "), "configuration reload: these settings apply only at the next restart");
                    }
                }
                let part = Part {
                    members: desired.members,
                    held: desired.pushed,
                    registries: desired.registries,
                };
                self.union.set(Origin::File, part).await
            }
            Err(e) => Err(e),
        };
        self.union
            .pipeline()
            .metrics()
            .reloads
            .record(applied.is_ok());
        match &applied {
            Ok(diff) => tracing::info!(
                path = %path,
                trigger,
                added = ?diff.added,
                removed = ?diff.removed,
                restarted = ?diff.changed,
                "configuration reloaded"
            ),
            Err(e) => tracing::error!(
                path = %path,
                trigger,
                cause = %e,
                "configuration reload refused; the running configuration stays"
            ),
        }
        applied
    }

    /// Reloads on SIGHUP and, with `interval`, when the file's bytes
    /// change, until `shutdown`. The SIGHUP handler is in place when this
    /// returns (before it, SIGHUP would end the process).
    pub fn spawn(
        mut self,
        interval: Option<Duration>,
        shutdown: CancellationToken,
    ) -> Result<JoinHandle<()>> {
        let mut hangups = Hangups::new()?;
        Ok(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    Some(()) = hangups.next() => {
                        let _ = self.reload("SIGHUP").await;
                    }
                    _ = tokio::time::sleep(interval.unwrap_or_default()), if interval.is_some() => {
                        if digest(self.source.file()) != self.seen {
                            let _ = self.reload("file changed").await;
                        }
                    }
                }
            }
        }))
    }
}

/// SIGHUPs received (none where there are no signals).
struct Hangups {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Hangups {
    fn new() -> Result<Self> {
        Ok(Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .map_err(|e| crate::Error::Settings(format!("cannot listen for SIGHUP: {e}")))?,
        })
    }

    async fn next(&mut self) -> Option<()> {
        #[cfg(unix)]
        return self.signal.recv().await;
        #[cfg(not(unix))]
        std::future::pending().await
    }
}
