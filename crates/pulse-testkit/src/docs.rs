//! Documents a client rebuilds from protocol messages (snapshots, patches,
//! removals), whichever transport carried them.

/// Applies protocol messages to a local copy of documents, as a client does.
#[derive(Debug, Default)]
pub struct Replica {
    /// `(rev, doc)` by topic.
    pub docs: std::collections::BTreeMap<String, (u64, serde_json::Value)>,
}

impl Replica {
    /// Applies one message: a snapshot, a patch in revision order, a removal.
    pub fn apply(&mut self, message: &serde_json::Value) {
        let topic = message["topic"].as_str().unwrap_or("").to_string();
        let rev = message["rev"].as_u64().unwrap_or(0);
        match message["type"].as_str().unwrap() {
            "snapshot" => {
                self.docs.insert(topic, (rev, message["doc"].clone()));
            }
            "patch" => {
                let (have, doc) = self
                    .docs
                    .get_mut(&topic)
                    .expect("a patch follows a snapshot");
                if rev <= *have {
                    return;
                }
                // A shaped subscription's patch names its base revision.
                let base = message["base"].as_u64().unwrap_or(rev - 1);
                assert_eq!(base, *have, "patches arrive in revision order for {topic}");
                json_patch::merge(doc, &message["patch"]);
                *have = rev;
            }
            "removed" => {
                self.docs.remove(&topic);
            }
            _ => {}
        }
    }
}
