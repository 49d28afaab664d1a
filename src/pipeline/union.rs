//! Members from several sources at once (`file ─┐ ├─▶ [union] ──reconcile──▶
//! pipeline`, `Karpor ─┘`): each source replaces its own part, and the
//! pipeline always gets the union of all parts. On a name in both the
//! configuration file and Karpor, the file wins (an operator's explicit
//! setting beats a discovered one) and a warning names the cluster. Sync
//! registries are the parts' registries together. With Lease ownership
//! (src/scale/), only the members this replica owns reach the pipeline:
//! [`MemberUnion::set_owned`] filters the union by name, and
//! [`MemberUnion::desired`] tells the ownership loop every name there is.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::{Mutex, watch};

use super::Pipeline;
use super::diff::MemberDiff;
use super::member::{HeldMember, Member};
use crate::sources::SyncRegistry;

/// Where a part of the members comes from; earlier origins win a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// The `--config` file or the `--kubeconfig`.
    File,
    /// Karpor's `Cluster` and `SyncRegistry` objects.
    Karpor,
}

/// What one source says should run.
#[derive(Debug, Clone, Default)]
pub struct Part {
    /// Members to run.
    pub members: Vec<Member>,
    /// Members to show without running them.
    pub held: Vec<HeldMember>,
    /// Its sync registries; None keeps the part's previous ones.
    pub registries: Option<Vec<SyncRegistry>>,
}

/// The parts, merged into the pipeline's members on every change.
pub struct MemberUnion {
    pipeline: Arc<Pipeline>,
    /// Held across a whole change, so parts apply one at a time, in order.
    parts: Mutex<Parts>,
    /// Every name of the union (running and held), owned or not.
    desired: watch::Sender<BTreeSet<String>>,
    /// The names of the file's members (running and held): a member of
    /// such a name is the file's, whatever Karpor says (Karpor's status
    /// writer leaves a Cluster of that name alone).
    file_names: watch::Sender<BTreeSet<String>>,
}

/// Every member name of `part`, running or held.
fn part_names(part: &Part) -> BTreeSet<String> {
    let running = part.members.iter().map(|m| m.name.clone());
    running
        .chain(part.held.iter().map(|h| h.name.clone()))
        .collect()
}

#[derive(Default)]
struct Parts {
    by_origin: BTreeMap<Origin, Part>,
    /// Names a later origin gave that an earlier one already had (warned once).
    shadowed: BTreeSet<String>,
    /// With ownership: the only names that reach the pipeline.
    owned: Option<BTreeSet<String>>,
}

impl std::fmt::Debug for MemberUnion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberUnion").finish_non_exhaustive()
    }
}

/// The merged members, held members, registries, and the names dropped
/// from later origins because an earlier one has them.
type Merged = (
    Vec<Member>,
    Vec<HeldMember>,
    Vec<SyncRegistry>,
    BTreeSet<String>,
);

fn merge(parts: &BTreeMap<Origin, Part>) -> Merged {
    let mut seen = BTreeSet::new();
    let mut shadowed = BTreeSet::new();
    let (mut members, mut held, mut registries) = (Vec::new(), Vec::new(), Vec::new());
    for part in parts.values() {
        let mut names = BTreeSet::new();
        for m in &part.members {
            if seen.contains(&m.name) {
                shadowed.insert(m.name.clone());
            } else {
                names.insert(m.name.clone());
                members.push(m.clone());
            }
        }
        for h in &part.held {
            if seen.contains(&h.name) {
                shadowed.insert(h.name.clone());
            } else {
                names.insert(h.name.clone());
                held.push(h.clone());
            }
        }
        seen.extend(names);
        registries.extend(part.registries.iter().flatten().cloned());
    }
    (members, held, registries, shadowed)
}

/// Every member name of `merged`, running or held.
fn names_of(merged: &Merged) -> BTreeSet<String> {
    let (members, held, _, _) = merged;
    let running = members.iter().map(|m| m.name.clone());
    running.chain(held.iter().map(|h| h.name.clone())).collect()
}

/// `merged` with only the members and held members `owned` names (all without).
fn only_owned(merged: Merged, owned: Option<&BTreeSet<String>>) -> Merged {
    let Some(owned) = owned else {
        return merged;
    };
    let (mut members, mut held, registries, shadowed) = merged;
    members.retain(|m| owned.contains(&m.name));
    held.retain(|h| owned.contains(&h.name));
    (members, held, registries, shadowed)
}

impl MemberUnion {
    /// A union over `pipeline`, which runs `file` now.
    pub fn new(pipeline: Arc<Pipeline>, file: Part) -> Arc<Self> {
        Self::with_owned(pipeline, file, None)
    }

    /// A union over `pipeline` that passes only the `owned` names of `file`
    /// (all when None); the pipeline runs those now.
    pub fn with_owned(
        pipeline: Arc<Pipeline>,
        file: Part,
        owned: Option<BTreeSet<String>>,
    ) -> Arc<Self> {
        let mut parts = Parts {
            owned,
            ..Parts::default()
        };
        let (file_names, _) = watch::channel(part_names(&file));
        parts.by_origin.insert(Origin::File, file);
        let (desired, _) = watch::channel(names_of(&merge(&parts.by_origin)));
        Arc::new(Self {
            pipeline,
            parts: Mutex::new(parts),
            desired,
            file_names,
        })
    }

    /// The names of the file's members, as the file changes: under such a
    /// name the file's member runs, not another source's.
    pub fn file_names(&self) -> watch::Receiver<BTreeSet<String>> {
        self.file_names.subscribe()
    }

    /// Every member name of every source (owned or not), as it changes.
    pub fn desired(&self) -> watch::Receiver<BTreeSet<String>> {
        self.desired.subscribe()
    }

    /// Passes only the `owned` names on to the pipeline from now on (its
    /// members stop and start to match before this returns).
    pub async fn set_owned(&self, owned: BTreeSet<String>) -> crate::Result<MemberDiff> {
        let mut parts = self.parts.lock().await;
        let (members, held, registries, _) = only_owned(merge(&parts.by_origin), Some(&owned));
        let diff = self
            .pipeline
            .reconcile_with_held(members, held, Some(registries))
            .await?;
        parts.owned = Some(owned);
        Ok(diff)
    }

    /// The pipeline the union feeds.
    pub fn pipeline(&self) -> &Arc<Pipeline> {
        &self.pipeline
    }

    /// Replaces `origin`'s part and reconciles the pipeline with the union.
    /// Refused as a whole (the previous part stays) when the pipeline refuses it.
    pub async fn set(&self, origin: Origin, mut part: Part) -> crate::Result<MemberDiff> {
        let mut parts = self.parts.lock().await;
        if part.registries.is_none() {
            part.registries = parts
                .by_origin
                .get(&origin)
                .and_then(|p| p.registries.clone());
        }
        let mut next = parts.by_origin.clone();
        next.insert(origin, part);
        let merged = merge(&next);
        let names = names_of(&merged);
        let (members, held, registries, shadowed) = only_owned(merged, parts.owned.as_ref());
        let diff = self
            .pipeline
            .reconcile_with_held(members, held, Some(registries))
            .await?;
        for name in shadowed.difference(&parts.shadowed) {
            tracing::warn!(cluster = %name, "a member of this name is in the configuration file and in Karpor; the file's settings are used");
        }
        if origin == Origin::File {
            let file = part_names(&next[&Origin::File]);
            self.file_names.send_if_modified(|old| {
                let changed = *old != file;
                *old = file;
                changed
            });
        }
        parts.by_origin = next;
        parts.shadowed = shadowed;
        self.desired.send_if_modified(|old| {
            let changed = *old != names;
            *old = names;
            changed
        });
        Ok(diff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, server: &str) -> Member {
        Member {
            name: name.into(),
            config: kube::Config::new(server.parse().unwrap()),
        }
    }

    fn held(name: &str) -> HeldMember {
        HeldMember {
            name: name.into(),
            server: "https://x".into(),
            reason: "CredentialsUnsupported".into(),
            message: "OIDC".into(),
            agent: None,
        }
    }

    #[test]
    fn the_file_wins_a_name_and_registries_add_up() {
        let registry = |name: &str| SyncRegistry {
            name: Some(name.into()),
            clusters: vec!["*".into()],
            resources: vec![],
        };
        let mut parts = BTreeMap::new();
        parts.insert(
            Origin::Karpor,
            Part {
                members: vec![member("a", "http://karpor-a"), member("b", "http://b")],
                held: vec![held("c"), held("d")],
                registries: Some(vec![registry("karpor")]),
            },
        );
        parts.insert(
            Origin::File,
            Part {
                members: vec![member("a", "http://file-a")],
                held: vec![],
                registries: Some(vec![registry("file")]),
            },
        );
        parts
            .get_mut(&Origin::File)
            .unwrap()
            .members
            .push(member("d", "http://file-d"));
        let (members, held, registries, shadowed) = merge(&parts);
        let urls: Vec<String> = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.config.cluster_url))
            .collect();
        assert_eq!(
            urls,
            ["a=http://file-a/", "d=http://file-d/", "b=http://b/"]
        );
        let held: Vec<&str> = held.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(held, ["c"]);
        let names: Vec<_> = registries.iter().map(|r| r.name.clone().unwrap()).collect();
        assert_eq!(names, ["file", "karpor"]);
        assert_eq!(shadowed.into_iter().collect::<Vec<_>>(), ["a", "d"]);
    }
}
