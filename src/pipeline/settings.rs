//! What the pipeline runs with (`config file, flags ──▶ [PipelineConfig] ──▶
//! sources, engine, hub`), and how the `--config` file's keys become it.

use crate::config::FileConfig;
use crate::engine;
use crate::hub::HubConfig;
use crate::sources::{SourceConfig, SyncRegistry};
use crate::status::cluster::Thresholds;

/// Settings of the pipeline.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Probe interval and timeout, app label and list page size of every source.
    pub source: SourceConfig,
    /// Consecutive probe results before a member counts as up or down.
    pub thresholds: Thresholds,
    /// How many changes the hub keeps for resume and queues per subscription.
    pub hub: HubConfig,
    /// Resources to sync besides the built-ins.
    pub registries: Vec<SyncRegistry>,
    /// How long an app stays `Stopped (NoWorkloads)` or `NotExisted` before
    /// its topic is removed. Default 10 minutes: long enough for people and
    /// clients to see that the app went away, and for a redeploy or a
    /// namespace re-created by CI to continue the same document; short
    /// enough that deleted apps do not pile up in memory and snapshots.
    pub app_retention: std::time::Duration,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            source: SourceConfig::default(),
            thresholds: Thresholds::default(),
            hub: HubConfig::default(),
            registries: Vec::new(),
            app_retention: engine::DEFAULT_APP_RETENTION,
        }
    }
}

impl PipelineConfig {
    /// The pipeline settings the `--config` file describes (validated by
    /// [`crate::config::load_file`]).
    pub fn from_file(file: &FileConfig) -> Self {
        let mut source = SourceConfig {
            probe_interval: std::time::Duration::from_secs(file.probe.interval_seconds),
            probe_timeout: std::time::Duration::from_secs(file.probe.timeout_seconds),
            ..Default::default()
        };
        if let Some(label) = &file.app_label {
            source.app_label = label.clone();
        }
        source.pod_watch = file.pod_watch.clone();
        source.initial_lists = file.initial_lists;
        if let Some(seconds) = file.watch_silence_seconds {
            source.watch_silence = std::time::Duration::from_secs(seconds);
        }
        source.rules = std::sync::Arc::clone(&file.rules);
        if let Some(rate) = file.member_start_rate {
            source.pacer = std::sync::Arc::new(crate::sources::Pacer::new(rate));
        }
        Self {
            source,
            thresholds: Thresholds {
                success: file.probe.success_threshold,
                failure: file.probe.failure_threshold,
            },
            registries: file.sync_registries.clone(),
            hub: HubConfig {
                log_bytes: file
                    .replay_log_bytes
                    .unwrap_or(crate::hub::DEFAULT_LOG_BYTES),
                log_age: file
                    .replay_log_age_seconds
                    .map_or(crate::hub::DEFAULT_LOG_AGE, std::time::Duration::from_secs),
                ..Default::default()
            },
            app_retention: file.app_retention_seconds.map_or(
                engine::DEFAULT_APP_RETENTION,
                std::time::Duration::from_secs,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_documented_example_gives_these_settings() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config.example.yaml");
        let file = crate::config::load_file(&path).unwrap();
        let pipeline = PipelineConfig::from_file(&file);
        assert_eq!(pipeline.source.probe_interval, Duration::from_secs(5));
        assert_eq!(pipeline.thresholds.failure, 2);
        assert_eq!(pipeline.hub.log_bytes, 64 << 20);
        assert_eq!(pipeline.app_retention, Duration::from_secs(600));
        assert_eq!(
            crate::sources::resources_for("prod-eu", &pipeline.registries).len(),
            2
        );
        assert_eq!(
            crate::sources::resources_for("lab", &pipeline.registries).len(),
            1
        );
    }
}
