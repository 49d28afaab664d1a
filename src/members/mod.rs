//! Which member clusters run, and changing them live
//! (`member source ──desired members──▶ [diff] ──add/remove/update──▶ pipeline`).
//! A [`MemberSource`] (the `--config` file or a kubeconfig) and Karpor's
//! `Cluster` objects (src/karpor/) each say which members there should be;
//! [`union`] merges them; [`diff`]
//! compares that with the running ones; the pipeline starts, stops and
//! restarts sources to match; [`reload`] re-reads the source on SIGHUP and
//! when its file changes. Tasks read the members' clients from
//! [`MemberClients`], which always holds the running ones.

mod clients;
mod diff;
pub mod reload;
mod source;
pub mod union;

pub use clients::{MemberClient, MemberClients};
pub use diff::{Fingerprint, MemberDiff, diff, fingerprint};
pub use source::{DesiredMembers, MemberSource};
