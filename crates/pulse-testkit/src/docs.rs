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

/// A live query's window, count and groups as a client rebuilds them from
/// its messages (`rows`, `enter`, `leave`, `move`, `patch`, `total`,
/// `groups`; docs/PROTOCOL.md "Live queries"), checking each against what
/// it holds.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct QueryWindow {
    /// `(topic, rev, doc)` in window order.
    pub rows: Vec<(String, u64, serde_json::Value)>,
    /// Matching documents.
    pub total: u64,
    /// Counts per group, when the query groups.
    pub groups: Option<serde_json::Value>,
}

impl QueryWindow {
    /// Applies one message of the query; Err says what did not fit.
    pub fn apply(&mut self, message: &serde_json::Value) -> Result<(), String> {
        let topic = message["topic"].as_str().unwrap_or("").to_string();
        let index = |name: &str| message[name].as_u64().map(|i| i as usize);
        let at = |rows: &[(String, u64, serde_json::Value)], i: usize| -> Result<(), String> {
            match rows.get(i) {
                Some((held, _, _)) if *held == topic => Ok(()),
                other => Err(format!("{message}: the window holds {other:?} there")),
            }
        };
        match message["type"].as_str().unwrap_or("") {
            "rows" => {
                self.rows = message["rows"]
                    .as_array()
                    .ok_or("rows without rows")?
                    .iter()
                    .map(|r| {
                        (
                            r["topic"].as_str().unwrap_or("").to_string(),
                            r["rev"].as_u64().unwrap_or(0),
                            r["doc"].clone(),
                        )
                    })
                    .collect();
                self.total = message["total"].as_u64().ok_or("rows without total")?;
                self.groups = message.get("groups").cloned();
            }
            "enter" => {
                let i = index("index").ok_or("enter without index")?;
                if i > self.rows.len() {
                    return Err(format!("{message}: past the end of {}", self.rows.len()));
                }
                let rev = message["rev"].as_u64().unwrap_or(0);
                self.rows.insert(i, (topic, rev, message["doc"].clone()));
            }
            "leave" => {
                let i = index("index").ok_or("leave without index")?;
                at(&self.rows, i)?;
                self.rows.remove(i);
            }
            "move" => {
                let (from, to) = (index("from").ok_or("no from")?, index("to").ok_or("no to")?);
                at(&self.rows, from)?;
                let row = self.rows.remove(from);
                if to > self.rows.len() {
                    return Err(format!("{message}: past the end"));
                }
                self.rows.insert(to, row);
            }
            "patch" => {
                let row = self
                    .rows
                    .iter_mut()
                    .find(|(t, _, _)| *t == topic)
                    .ok_or_else(|| format!("{message}: a patch of a row not in the window"))?;
                let base = message["base"]
                    .as_u64()
                    .ok_or("a query's patch has a base")?;
                if row.1 != base {
                    return Err(format!("{message}: base {base}, held {}", row.1));
                }
                json_patch::merge(&mut row.2, &message["patch"]);
                row.1 = message["rev"].as_u64().unwrap_or(0);
            }
            "total" => self.total = message["total"].as_u64().ok_or("total without total")?,
            "groups" => self.groups = Some(message["groups"].clone()),
            _ => {}
        }
        Ok(())
    }

    /// The window's topics, in order.
    pub fn topics(&self) -> Vec<&str> {
        self.rows.iter().map(|(t, _, _)| t.as_str()).collect()
    }
}
