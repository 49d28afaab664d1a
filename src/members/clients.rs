//! The running members' kube-rs clients, shared by the pipeline (which
//! changes them as members come and go) and tasks (which act through them):
//! `pipeline ──writes──▶ [MemberClients] ◀──reads── tasks`.

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;

/// One running member's client, and the token cancelled when the member
/// is removed (tasks on it then fail).
#[derive(Clone)]
pub struct MemberClient {
    /// The client its watches use (client-side retries off).
    pub client: kube::Client,
    /// Cancelled when the member is taken out; not when it restarts with new settings.
    pub removed: CancellationToken,
}

// By hand: the client carries the member's credentials.
impl std::fmt::Debug for MemberClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberClient")
            .field("removed", &self.removed.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// Member name → client, as the members are now. Reads never wait for a
/// member change (a short lock, no await inside).
#[derive(Default)]
pub struct MemberClients {
    inner: parking_lot::RwLock<BTreeMap<String, MemberClient>>,
}

impl std::fmt::Debug for MemberClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberClients")
            .field("members", &self.names())
            .finish()
    }
}

impl MemberClients {
    /// The member's client, if it runs.
    pub fn get(&self, name: &str) -> Option<MemberClient> {
        self.inner.read().get(name).cloned()
    }

    /// Whether the member runs.
    pub fn contains(&self, name: &str) -> bool {
        self.inner.read().contains_key(name)
    }

    /// The running members' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.inner.read().keys().cloned().collect()
    }

    /// How many members run.
    pub fn len(&self) -> usize {
        self.inner.read().len()
    }

    /// True when no member runs.
    pub fn is_empty(&self) -> bool {
        self.inner.read().is_empty()
    }

    /// Every running member's client.
    pub fn snapshot(&self) -> BTreeMap<String, kube::Client> {
        self.inner
            .read()
            .iter()
            .map(|(name, m)| (name.clone(), m.client.clone()))
            .collect()
    }

    /// Sets a member's client; a new member gets a fresh removal token, a
    /// restarted one keeps its own (its tasks go on with the new client's
    /// member, they are not failed).
    pub(crate) fn set(&self, name: &str, client: kube::Client) {
        let mut inner = self.inner.write();
        let removed = inner
            .get(name)
            .map(|m| m.removed.clone())
            .unwrap_or_default();
        inner.insert(name.to_string(), MemberClient { client, removed });
    }

    /// Takes a member out and cancels its removal token.
    pub(crate) fn remove(&self, name: &str) {
        if let Some(member) = self.inner.write().remove(name) {
            member.removed.cancel();
        }
    }
}
