//! Karpor as a source of members and sync registries, and as the place
//! kube-pulse's status is shown.
//!
//! ```text
//! Karpor apiserver ──watch Cluster, SyncRegistry──▶ source ──convert──▶
//!     members + sync registries (∪ the config file's) ──▶ Pipeline::reconcile
//! engine documents ──▶ writer ──PUT …/status──▶ Karpor apiserver
//! ```
//!
//! [`types`] holds Karpor's objects as JSON, [`api`] reaches Karpor's
//! apiserver and discovers where it serves both kinds.

pub mod api;
pub mod types;
