//! One live query's state (`hub changes ──▶ [live query] ──▶ rows, enter,
//! leave, move, patch, total, groups`): every document the caller may see
//! that matches the filter, in sort order (then by topic), the window of
//! them the client holds, and the counts per group. Each change of a
//! document becomes the few operations that turn the client's window into
//! the new one, in order: leaves, moves, enters, then the patch of a row
//! that stayed, then `total` and `groups` when they changed. Pure: the
//! transports feed it and send what it makes.
//!
//! Cost: a change that matches neither before nor after costs one filter
//! evaluation; one outside a full window (after its last row) updates the
//! ordered set and the counts only; the rest recompute the window
//! (`offset + limit` rows at most) and diff it with the client's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use serde_json::Value;

use super::order::SortValue;
use super::spec::{Limits, MAX_GROUP_BYTES, OTHER_GROUP, QuerySpec, encode_after};
use crate::protocol::Topic;
use crate::protocol::options::Fields;

/// A row as the client holds it: the topic's (projected) document.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The document's topic.
    pub topic: Topic,
    /// Its revision.
    pub rev: u64,
    /// The document, projected onto the query's `fields`.
    pub doc: Arc<Value>,
}

/// What a live query sends, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryOut {
    /// The row at `index` left the window.
    #[allow(missing_docs)]
    Leave { topic: Topic, index: usize },
    /// The row at `from` is now at `to` (taken out, then put in at `to`).
    #[allow(missing_docs)]
    Move {
        topic: Topic,
        from: usize,
        to: usize,
    },
    /// A row entered the window at `index`.
    #[allow(missing_docs)]
    Enter {
        topic: Topic,
        index: usize,
        rev: u64,
        doc: Arc<Value>,
    },
    /// A row of the window changed: the merge patch from revision `base`.
    #[allow(missing_docs)]
    Patch {
        topic: Topic,
        rev: u64,
        base: u64,
        patch: Value,
    },
    /// How many documents match now.
    #[allow(missing_docs)]
    Total { total: usize },
    /// Matching documents per value of `groupBy`.
    #[allow(missing_docs)]
    Groups { groups: BTreeMap<String, usize> },
}

/// The first message: the window, the count, the groups.
#[derive(Debug, Clone, PartialEq)]
pub struct Initial {
    /// The window's rows, in order.
    pub rows: Vec<Row>,
    /// How many documents match.
    pub total: usize,
    /// Matching documents per value of `groupBy` (None: no `groupBy`).
    pub groups: Option<BTreeMap<String, usize>>,
    /// The `after` token of the window's last row, when rows follow it.
    pub next: Option<String>,
}

/// A matching document's place in the order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct RowKey {
    key: Box<[SortValue]>,
    topic: Topic,
}

/// A matching document.
#[derive(Debug)]
struct Held {
    rev: u64,
    doc: Arc<Value>,
}

/// One live query.
#[derive(Debug)]
pub struct LiveQuery {
    spec: QuerySpec,
    fields: Option<Fields>,
    max_groups: usize,
    order: BTreeSet<RowKey>,
    held: HashMap<Topic, Held>,
    /// The client's window, in order.
    window: Vec<Topic>,
    /// What the client holds of each row of the window.
    sent: HashMap<Topic, (u64, Arc<Value>)>,
    groups: BTreeMap<String, usize>,
    total_sent: usize,
    groups_sent: bool,
}

impl LiveQuery {
    /// A query over `docs` (what the caller may see of its patterns now);
    /// its first message.
    pub fn new(
        spec: QuerySpec,
        fields: Option<Fields>,
        limits: &Limits,
        docs: impl IntoIterator<Item = (Topic, u64, Arc<Value>)>,
    ) -> (Self, Initial) {
        let mut query = Self {
            spec,
            fields,
            max_groups: limits.max_groups,
            order: BTreeSet::new(),
            held: HashMap::new(),
            window: Vec::new(),
            sent: HashMap::new(),
            groups: BTreeMap::new(),
            total_sent: 0,
            groups_sent: false,
        };
        for (topic, rev, doc) in docs {
            if query.passes(&doc) {
                query.hold(topic, rev, doc);
            }
        }
        let window = query.compute_window();
        let rows = window.iter().map(|t| query.enter_row(t)).collect();
        let next = query.next_after(&window);
        query.window = window;
        query.total_sent = query.order.len();
        query.groups_sent = query.spec.group_by.is_some();
        let initial = Initial {
            rows,
            total: query.total_sent,
            groups: query.spec.group_by.as_ref().map(|_| query.groups.clone()),
            next,
        };
        (query, initial)
    }

    fn passes(&self, doc: &Value) -> bool {
        self.spec.filter.as_ref().is_none_or(|f| f.matches(doc))
    }

    fn row_key(&self, topic: &Topic, doc: &Value) -> RowKey {
        RowKey {
            key: self.spec.key_of(doc),
            topic: topic.clone(),
        }
    }

    fn group_of(&self, doc: &Value) -> Option<String> {
        let pointer = self.spec.group_by.as_ref()?;
        let key = match doc.pointer(pointer) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            // A whole object or list is no group: its text could be a
            // document's size, resent with every count that changes.
            Some(Value::Array(_) | Value::Object(_)) => return Some(OTHER_GROUP.to_string()),
            Some(other) => other.to_string(),
        };
        Some(if key.len() > MAX_GROUP_BYTES {
            OTHER_GROUP.to_string()
        } else {
            key
        })
    }

    fn count(&mut self, doc: &Value, by: isize) {
        let Some(mut group) = self.group_of(doc) else {
            return;
        };
        if !self.groups.contains_key(&group) && self.groups.len() >= self.max_groups {
            group = OTHER_GROUP.to_string();
        }
        let n = self.groups.entry(group.clone()).or_default();
        *n = n.saturating_add_signed(by);
        if *n == 0 {
            self.groups.remove(&group);
        }
    }

    fn hold(&mut self, topic: Topic, rev: u64, doc: Arc<Value>) {
        self.order.insert(self.row_key(&topic, &doc));
        self.count(&doc, 1);
        self.held.insert(topic, Held { rev, doc });
    }

    fn release(&mut self, topic: &Topic) -> Option<RowKey> {
        let held = self.held.remove(topic)?;
        let key = self.row_key(topic, &held.doc);
        self.order.remove(&key);
        self.count(&held.doc, -1);
        Some(key)
    }

    /// The rows the window holds now.
    fn compute_window(&self) -> Vec<Topic> {
        if self.spec.limit == 0 {
            return Vec::new();
        }
        let rows: Box<dyn Iterator<Item = &RowKey>> = match self.spec.after_key() {
            Some((key, topic)) => Box::new(
                self.order
                    .range((Bound::Excluded(RowKey { key, topic }), Bound::Unbounded)),
            ),
            None => Box::new(self.order.iter()),
        };
        rows.skip(self.spec.offset)
            .take(self.spec.limit)
            .map(|k| k.topic.clone())
            .collect()
    }

    /// The `after` token of the window's last row, when rows follow it.
    fn next_after(&self, window: &[Topic]) -> Option<String> {
        let last = window.last()?;
        let held = self.held.get(last)?;
        let key = self.row_key(last, &held.doc);
        self.order
            .range((Bound::Excluded(&key), Bound::Unbounded))
            .next()
            .map(|_| encode_after(&key.key, last))
    }

    fn view(&self, doc: &Arc<Value>) -> Arc<Value> {
        match &self.fields {
            Some(fields) => Arc::new(fields.project(doc)),
            None => doc.clone(),
        }
    }

    /// A row entering the client's window: recorded as sent.
    fn enter_row(&mut self, topic: &Topic) -> Row {
        let held = &self.held[topic];
        let (rev, view) = (held.rev, self.view(&held.doc));
        self.sent.insert(topic.clone(), (rev, view.clone()));
        Row {
            topic: topic.clone(),
            rev,
            doc: view,
        }
    }

    /// Whether a row keyed `key` (absent: not matching) lies after the
    /// last row of a full window, where it changes nothing the client holds.
    fn past_full_window(&self, key: Option<&RowKey>) -> bool {
        let Some(key) = key else {
            return true;
        };
        if self.window.len() < self.spec.limit {
            return false;
        }
        let Some(last) = self
            .window
            .last()
            .and_then(|t| self.held.get(t).map(|h| (t, h)))
        else {
            return self.spec.limit == 0;
        };
        *key > self.row_key(last.0, &last.1.doc)
    }

    /// A document of the query's patterns changed: its revision and
    /// document, None when it is gone or the caller may no longer see it.
    pub fn update(&mut self, topic: &Topic, rev: u64, doc: Option<&Arc<Value>>) -> Vec<QueryOut> {
        let matching = doc.filter(|d| self.passes(d));
        let was = self.held.contains_key(topic);
        if !was && matching.is_none() {
            return Vec::new();
        }
        let in_window = self.sent.contains_key(topic);
        let old_group = self.held.get(topic).and_then(|h| self.group_of(&h.doc));
        let new_group = matching.and_then(|d| self.group_of(d));
        let old_key = if was { self.release(topic) } else { None };
        let new_key = matching.map(|doc| {
            self.hold(topic.clone(), rev, doc.clone());
            self.row_key(topic, doc)
        });
        let mut out = Vec::new();
        let unchanged = self.spec.limit == 0
            || (!in_window
                && self.past_full_window(old_key.as_ref())
                && self.past_full_window(new_key.as_ref()));
        if !unchanged {
            let window = self.compute_window();
            self.diff(window, topic, &mut out);
        }
        if self.order.len() != self.total_sent {
            self.total_sent = self.order.len();
            out.push(QueryOut::Total {
                total: self.total_sent,
            });
        }
        if self.groups_sent && old_group != new_group {
            out.push(QueryOut::Groups {
                groups: self.groups.clone(),
            });
        }
        out
    }

    /// The operations from the client's window to `want`, then the patch
    /// of `changed` if it stayed in it.
    fn diff(&mut self, want: Vec<Topic>, changed: &Topic, out: &mut Vec<QueryOut>) {
        let keep: std::collections::HashSet<&Topic> = want.iter().collect();
        let mut current = std::mem::take(&mut self.window);
        for index in (0..current.len()).rev() {
            if !keep.contains(&current[index]) {
                let topic = current.remove(index);
                self.sent.remove(&topic);
                out.push(QueryOut::Leave { topic, index });
            }
        }
        for (index, topic) in want.iter().enumerate() {
            if current.get(index) == Some(topic) {
                continue;
            }
            match current.iter().position(|t| t == topic) {
                Some(from) => {
                    let moved = current.remove(from);
                    current.insert(index, moved);
                    out.push(QueryOut::Move {
                        topic: topic.clone(),
                        from,
                        to: index,
                    });
                }
                None => {
                    let row = self.enter_row(topic);
                    current.insert(index, topic.clone());
                    out.push(QueryOut::Enter {
                        topic: row.topic,
                        index,
                        rev: row.rev,
                        doc: row.doc,
                    });
                }
            }
        }
        self.window = current;
        let Some((base, sent)) = self.sent.get(changed).cloned() else {
            return;
        };
        let held = &self.held[changed];
        if held.rev == base {
            return;
        }
        let (rev, view) = (held.rev, self.view(&held.doc));
        let patch = crate::protocol::patch::diff(&sent, &view);
        self.sent.insert(changed.clone(), (rev, view));
        let Some(patch) = patch else {
            // Nothing it shows changed: the client's revision stays, which
            // the next patch names as its base.
            self.sent.get_mut(changed).expect("just put").0 = base;
            return;
        };
        out.push(QueryOut::Patch {
            topic: changed.clone(),
            rev,
            base,
            patch,
        });
    }

    /// How many documents match now.
    pub fn total(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::QueryMembers;
    use proptest::prelude::*;
    use serde_json::json;

    /// RFC 7386, as a client applies it.
    fn merge_patch(target: &mut Value, patch: &Value) {
        let Value::Object(members) = patch else {
            *target = patch.clone();
            return;
        };
        if !target.is_object() {
            *target = json!({});
        }
        let object = target.as_object_mut().expect("an object");
        for (name, value) in members {
            if value.is_null() {
                object.remove(name);
            } else {
                merge_patch(object.entry(name.clone()).or_insert(Value::Null), value);
            }
        }
    }

    /// The client's copy, rebuilt from the messages alone.
    #[derive(Debug, Default)]
    struct Client {
        rows: Vec<Row>,
        total: usize,
        groups: Option<BTreeMap<String, usize>>,
    }

    impl Client {
        fn new(initial: Initial) -> Self {
            Self {
                rows: initial.rows,
                total: initial.total,
                groups: initial.groups,
            }
        }

        fn apply(&mut self, out: &QueryOut) -> Result<(), String> {
            match out {
                QueryOut::Leave { topic, index } => {
                    let row = self.rows.get(*index).ok_or("leave past the end")?;
                    if &row.topic != topic {
                        return Err(format!("leave {topic} at {index} holds {}", row.topic));
                    }
                    self.rows.remove(*index);
                }
                QueryOut::Move { topic, from, to } => {
                    let row = self.rows.get(*from).ok_or("move from past the end")?;
                    if &row.topic != topic {
                        return Err(format!("move {topic} from {from} holds {}", row.topic));
                    }
                    let row = self.rows.remove(*from);
                    if *to > self.rows.len() {
                        return Err("move to past the end".into());
                    }
                    self.rows.insert(*to, row);
                }
                QueryOut::Enter {
                    topic,
                    index,
                    rev,
                    doc,
                } => {
                    if *index > self.rows.len() {
                        return Err("enter past the end".into());
                    }
                    self.rows.insert(
                        *index,
                        Row {
                            topic: topic.clone(),
                            rev: *rev,
                            doc: doc.clone(),
                        },
                    );
                }
                QueryOut::Patch {
                    topic,
                    rev,
                    base,
                    patch,
                } => {
                    let row = self
                        .rows
                        .iter_mut()
                        .find(|r| &r.topic == topic)
                        .ok_or("patch of a row not held")?;
                    if row.rev != *base {
                        return Err(format!("patch on {base}, held {}", row.rev));
                    }
                    let mut doc = (*row.doc).clone();
                    merge_patch(&mut doc, patch);
                    row.doc = Arc::new(doc);
                    row.rev = *rev;
                }
                QueryOut::Total { total } => self.total = *total,
                QueryOut::Groups { groups } => self.groups = Some(groups.clone()),
            }
            Ok(())
        }
    }

    /// The query evaluated from scratch on `docs`.
    fn expected(
        spec: &QuerySpec,
        fields: Option<&Fields>,
        docs: &BTreeMap<String, (u64, Value)>,
    ) -> (Vec<(String, Value)>, usize, BTreeMap<String, usize>) {
        let mut matching: Vec<(&String, &Value)> = docs
            .iter()
            .filter(|(_, (_, d))| spec.filter.as_ref().is_none_or(|f| f.matches(d)))
            .map(|(t, (_, d))| (t, d))
            .collect();
        matching.sort_by(|a, b| spec.key_of(a.1).cmp(&spec.key_of(b.1)).then(a.0.cmp(b.0)));
        let total = matching.len();
        let mut groups = BTreeMap::new();
        if let Some(p) = &spec.group_by {
            for (_, d) in &matching {
                let g = match d.pointer(p) {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::Array(_) | Value::Object(_)) => OTHER_GROUP.to_string(),
                    Some(Value::String(s)) => s.clone(),
                    Some(o) => o.to_string(),
                };
                *groups.entry(g).or_default() += 1;
            }
        }
        let start = match spec.after_key() {
            Some((key, topic)) => matching
                .iter()
                .position(|(t, d)| (spec.key_of(d), t.as_str()) > (key.clone(), topic.as_str()))
                .unwrap_or(matching.len()),
            None => 0,
        };
        let rows = matching
            .iter()
            .skip(start + spec.offset)
            .take(spec.limit)
            .map(|(t, d)| {
                let view = fields.map_or_else(|| (*d).clone(), |f| f.project(d));
                ((*t).clone(), view)
            })
            .collect();
        (rows, total, groups)
    }

    fn doc_strategy() -> impl Strategy<Value = Option<Value>> {
        let phase = prop_oneof![
            Just(json!("Running")),
            Just(json!("Degraded")),
            Just(json!("Stopped")),
            // No phase at all: documents never hold `null` members.
            Just(Value::Null),
        ];
        let cluster = prop_oneof![Just("a"), Just("b"), Just("c")];
        prop_oneof![
            1 => Just(None),
            6 => (phase, cluster, 0i64..5, any::<bool>(), 0u8..3).prop_map(|(phase, cluster, ready, warn, note)| {
                let mut doc = json!({"phase": phase, "cluster": cluster, "ready": ready, "note": note});
                if doc["phase"].is_null() {
                    doc.as_object_mut().expect("an object").remove("phase");
                }
                if warn {
                    doc["lastWarning"] = json!({"reason": "BackOff"});
                }
                Some(doc)
            }),
        ]
    }

    fn spec_strategy() -> impl Strategy<Value = (QueryMembers, bool)> {
        let filter = prop_oneof![
            Just(None),
            Just(Some(json!({"eq": ["/cluster", "a"]}))),
            Just(Some(json!({"not": {"eq": ["/phase", "Running"]}}))),
            Just(Some(
                json!({"or": [{"gte": ["/ready", 3]}, {"exists": "/lastWarning"}]})
            )),
            Just(Some(
                json!({"and": [{"in": ["/cluster", ["a", "b"]]}, {"ne": ["/phase", "Stopped"]}]})
            )),
        ];
        let sort = prop_oneof![
            Just(None),
            Just(Some(json!(["/phase"]))),
            Just(Some(json!(["-/ready", "/phase"]))),
            Just(Some(json!(["/cluster", "-/phase"]))),
        ];
        let group = prop_oneof![
            Just(None),
            Just(Some(json!("/phase"))),
            Just(Some(json!("/cluster"))),
            // An object, or missing: counted under "(other)" and "".
            Just(Some(json!("/lastWarning")))
        ];
        (
            filter,
            sort,
            0u64..6,
            0u64..4,
            group,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(filter, sort, limit, offset, group_by, project, anchored)| {
                    let members = QueryMembers {
                        filter,
                        sort,
                        limit: Some(json!(limit)),
                        offset: Some(json!(offset)),
                        after: None,
                        group_by,
                    };
                    (members, project && anchored)
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// After every change, the window, total and groups rebuilt from
        /// the messages equal the query evaluated from scratch.
        #[test]
        fn the_window_rebuilt_from_the_messages_equals_the_query(
            (members, project) in spec_strategy(),
            seed in proptest::collection::vec((0usize..12, doc_strategy()), 0..12),
            changes in proptest::collection::vec((0usize..12, doc_strategy()), 1..60),
            anchor in proptest::option::of(0usize..12),
        ) {
            let limits = Limits::default();
            let topic = |i: usize| format!("apps/{}/shop/app{i:02}", ["a", "b", "c"][i % 3]);
            let mut docs: BTreeMap<String, (u64, Value)> = BTreeMap::new();
            let mut rev = 0;
            for (i, doc) in seed {
                rev += 1;
                if let Some(doc) = doc {
                    docs.insert(topic(i), (rev, doc));
                }
            }
            let mut members = members;
            // An `after` anchored on a seeded document, as a client would
            // take it from an earlier query's `next`.
            if let Some(a) = anchor {
                let plain = QuerySpec::parse(&members, &limits).unwrap();
                if let Some((_, d)) = docs.get(&topic(a)) {
                    let key = plain.key_of(d);
                    members.after = Some(json!(encode_after(&key, &Topic::new(&topic(a)))));
                }
            }
            let spec = QuerySpec::parse(&members, &limits).unwrap();
            let fields = project.then(|| Fields::parse(&["/phase".into(), "/ready".into()]).unwrap());
            let start = docs.iter().map(|(t, (r, d))| (Topic::new(t), *r, Arc::new(d.clone())));
            let (mut query, initial) = LiveQuery::new(spec.clone(), fields.clone(), &limits, start);
            let mut client = Client::new(initial);
            for (step, (i, doc)) in changes.into_iter().enumerate() {
                let t = topic(i);
                if docs.get(&t).map(|(_, d)| d) == doc.as_ref() {
                    continue; // the hub publishes only what changed
                }
                rev += 1;
                match &doc {
                    Some(d) => { docs.insert(t.clone(), (rev, d.clone())); }
                    None => { docs.remove(&t); }
                }
                let doc = doc.map(Arc::new);
                for out in query.update(&Topic::new(&t), rev, doc.as_ref()) {
                    client.apply(&out).map_err(|e| TestCaseError::fail(format!("step {step}: {e}: {out:?}")))?;
                }
                let (rows, total, groups) = expected(&spec, fields.as_ref(), &docs);
                let held: Vec<(String, Value)> = client.rows.iter().map(|r| (r.topic.to_string(), (*r.doc).clone())).collect();
                prop_assert_eq!(&held, &rows, "step {}: window", step);
                // A projected row keeps its revision through changes of
                // what it does not show.
                for row in client.rows.iter().filter(|_| fields.is_none()) {
                    prop_assert_eq!(row.rev, docs[row.topic.as_str()].0, "step {}: rev of {}", step, row.topic);
                }
                prop_assert_eq!(client.total, total, "step {}: total", step);
                if spec.group_by.is_some() {
                    prop_assert_eq!(client.groups.as_ref(), Some(&groups), "step {}: groups", step);
                }
            }
        }
    }

    #[test]
    fn values_that_are_no_group_count_under_other() {
        let members = QueryMembers {
            group_by: Some(json!("/v")),
            ..Default::default()
        };
        let spec = QuerySpec::parse(&members, &Limits::default()).unwrap();
        let long = "x".repeat(MAX_GROUP_BYTES + 1);
        let docs = [
            json!({"v": {"a": 1}}),
            json!({"v": [1, 2]}),
            json!({"v": long}),
            json!({"v": "x".repeat(MAX_GROUP_BYTES)}),
            json!({"v": 7}),
            json!({"w": 1}),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, d)| (Topic::new(&format!("apps/a/x/{i}")), 1, Arc::new(d)));
        let (_, initial) = LiveQuery::new(spec, None, &Limits::default(), docs);
        let groups = initial.groups.unwrap();
        assert_eq!(groups.get(OTHER_GROUP), Some(&3), "{groups:?}");
        assert_eq!(groups.get(&"x".repeat(MAX_GROUP_BYTES)), Some(&1));
        assert_eq!(groups.get("7"), Some(&1));
        assert_eq!(groups.get(""), Some(&1));
        assert_eq!(groups.len(), 4);
    }

    #[test]
    fn a_row_that_sorts_into_a_full_window_pushes_the_last_one_out() {
        let members = QueryMembers {
            sort: Some(json!(["-/ready"])),
            limit: Some(json!(2)),
            ..Default::default()
        };
        let spec = QuerySpec::parse(&members, &Limits::default()).unwrap();
        let doc = |ready: i64| Arc::new(json!({"ready": ready}));
        let docs = [
            ("apps/a/x/one", 3),
            ("apps/a/x/two", 2),
            ("apps/a/x/three", 1),
        ]
        .map(|(t, r)| (Topic::new(t), 1, doc(r)));
        let (mut query, initial) = LiveQuery::new(spec, None, &Limits::default(), docs);
        assert_eq!(initial.total, 3);
        assert!(initial.next.is_some(), "a third row follows the window");
        let names: Vec<&str> = initial.rows.iter().map(|r| r.topic.as_str()).collect();
        assert_eq!(names, ["apps/a/x/one", "apps/a/x/two"]);
        let out = query.update(&Topic::new("apps/a/x/three"), 2, Some(&doc(9)));
        assert_eq!(
            out,
            [
                QueryOut::Leave {
                    topic: Topic::new("apps/a/x/two"),
                    index: 1
                },
                QueryOut::Enter {
                    topic: Topic::new("apps/a/x/three"),
                    index: 0,
                    rev: 2,
                    doc: doc(9)
                },
            ]
        );
        // Below the window: nothing for the client but what counts.
        let out = query.update(&Topic::new("apps/a/x/four"), 1, Some(&doc(0)));
        assert_eq!(out, [QueryOut::Total { total: 4 }]);
    }
}
