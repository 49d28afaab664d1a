//! Member sources: where the desired members come from
//! (`[file | kubeconfig] ──DesiredMembers──▶ reload ──▶ pipeline`). Each can
//! be read again at any time; reading resolves every member's client
//! settings (files read, URLs checked) and fails as a whole, so a reload
//! applies a complete, valid set or nothing. Karpor's `Cluster` objects
//! (src/karpor/reader.rs) are a second, live source beside this one.

use std::path::{Path, PathBuf};

use super::member::{HeldMember, Member};
use crate::error::{Error, Result};
use crate::sources::SyncRegistry;

/// Where the members come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberSource {
    /// The `serve --config` file: its `clusters` and `syncRegistries`.
    File {
        /// The file.
        path: PathBuf,
        /// Karpor's Clusters are members too (`--karpor-kubeconfig`): the
        /// file may list none.
        beside_karpor: bool,
    },
    /// A kubeconfig: one member per context (every context when none is named).
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// The contexts to use; empty for all.
        contexts: Vec<String>,
    },
}

/// What a member source says should run.
#[derive(Debug)]
pub struct DesiredMembers {
    /// Every member, its client settings resolved.
    pub members: Vec<Member>,
    /// The push members (the file's `mode: push`), followed through their agents.
    pub pushed: Vec<HeldMember>,
    /// The sync registries; None when the source says nothing of them (a kubeconfig).
    pub registries: Option<Vec<SyncRegistry>>,
    /// The file's other settings, which apply only at a restart (to warn
    /// when they changed): the YAML without `clusters` and `syncRegistries`.
    pub restart_only: Option<serde_yaml_ng::Value>,
}

impl MemberSource {
    /// The file whose content decides the members (polled for changes).
    pub fn file(&self) -> &Path {
        match self {
            MemberSource::File { path, .. } | MemberSource::Kubeconfig { path, .. } => path,
        }
    }

    /// Reads and validates the source and resolves every member, or says
    /// what is wrong (nothing is half-read).
    pub async fn read(&self) -> Result<DesiredMembers> {
        match self {
            MemberSource::File {
                path,
                beside_karpor,
            } => {
                let file = crate::config::load_file_beside(path, *beside_karpor)?;
                let members = super::clients::members(&file.clusters).await?;
                Ok(DesiredMembers {
                    members,
                    pushed: super::clients::pushed(&file.clusters),
                    registries: Some(file.sync_registries),
                    restart_only: Some(restart_only(path)?),
                })
            }
            MemberSource::Kubeconfig { path, contexts } => {
                let clusters = crate::config::from_kubeconfig(path, contexts)?;
                Ok(DesiredMembers {
                    members: super::clients::members(&clusters).await?,
                    pushed: Vec::new(),
                    registries: None,
                    restart_only: None,
                })
            }
        }
    }
}

/// The settings of a config file that a reload does not apply.
fn restart_only(path: &Path) -> Result<serde_yaml_ng::Value> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| Error::Config {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if let Some(map) = value.as_mapping_mut() {
        map.remove("clusters");
        map.remove("syncRegistries");
    }
    Ok(value)
}

/// The top-level keys whose values differ between two `restart_only` values.
pub(crate) fn changed_keys(
    before: &serde_yaml_ng::Value,
    after: &serde_yaml_ng::Value,
) -> Vec<String> {
    let empty = serde_yaml_ng::Mapping::new();
    let before = before.as_mapping().unwrap_or(&empty);
    let after = after.as_mapping().unwrap_or(&empty);
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .filter_map(|k| k.as_str().map(str::to_string))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_a_reload_cannot_apply_are_named() {
        let yaml = |s: &str| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(s).unwrap();
        // (before, after, keys named)
        let cases: &[(&str, &str, &[&str])] = &[
            ("listen: 1.2.3.4:80\n", "listen: 1.2.3.4:80\n", &[]),
            ("listen: 1.2.3.4:80\n", "listen: 1.2.3.4:81\n", &["listen"]),
            ("{}", "probe: {intervalSeconds: 2}\n", &["probe"]),
            (
                "appLabel: app\nprobe: {intervalSeconds: 2}\n",
                "probe: {intervalSeconds: 3}\n",
                &["appLabel", "probe"],
            ),
        ];
        for (i, (before, after, want)) in cases.iter().enumerate() {
            assert_eq!(changed_keys(&yaml(before), &yaml(after)), *want, "case {i}");
        }
    }

    #[tokio::test]
    async fn a_file_source_reads_members_registries_and_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "clusters:\n- {name: a, server: 'http://127.0.0.1:1'}\n- {name: b, server: 'http://127.0.0.1:2', token: t}\nsyncRegistries:\n- {clusters: [b], resources: [{group: '', version: v1, resource: configmaps}]}\nprobe: {intervalSeconds: 2}\n",
        )
        .unwrap();
        let source = MemberSource::File {
            path: path.clone(),
            beside_karpor: false,
        };
        let desired = source.read().await.unwrap();
        let names: Vec<&str> = desired.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(desired.registries.unwrap().len(), 1);
        let rest = desired.restart_only.unwrap();
        assert!(rest.get("probe").is_some() && rest.get("clusters").is_none());
        std::fs::write(&path, "clusters:\n- {name: a, server: 'ftp://x'}\n").unwrap();
        let err = source.read().await.unwrap_err().to_string();
        assert!(err.contains("http(s) URL"), "{err}");
    }
}
