//! Karpor as a source of members and sync registries, and as the place
//! kube-pulse's status is shown.
//!
//! ```text
//! Karpor apiserver ──watch Cluster, SyncRegistry──▶ reader ──coalesce──▶
//!     clusters (→ members, held members) + registries (→ sync registries)
//!     ──▶ pipeline::union (∪ the config file's) ──▶ Pipeline::reconcile
//! engine documents ──▶ writer ──PATCH …/status (merge)──▶ Karpor apiserver
//! ```
//!
//! [`types`] holds Karpor's objects as JSON, [`api`] reaches Karpor's
//! apiserver and discovers where it serves both kinds, [`clusters`] and
//! [`registries`] convert the objects (with [`selector`]), and [`reader`]
//! follows them live; [`writer`] writes status back (what `report` and
//! `conditions` compute, merged into what the objects hold).

pub mod api;
pub mod clusters;
mod conditions;
pub mod endpoints;
pub mod reader;
pub mod registries;
mod report;
pub mod selector;
pub mod settings;
pub mod types;
pub mod writer;

pub use endpoints::EndpointPolicy;
pub use reader::{KarporCheck, KarporHealth};
pub use settings::{KarporSettings, Sharing, WriterSettings, default_replica};
