//! Label and field selectors, parsed and matched the way the apiserver does.
//!
//! Used by list and watch (a watch turns a MODIFIED that leaves the selection
//! into DELETED, and one that enters it into ADDED).

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// A parsed `fieldSelector` over `metadata.name` / `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

fn valid_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    });
    name_ok && prefix_ok
}

fn valid_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unexpected ')'".into());
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed '('".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected '(' values ')', found {rest:?}"))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if let Some(bad) = values.iter().find(|v| !valid_label_value(v)) {
        return Err(format!("invalid label value: {bad:?}"));
    }
    Ok(values)
}

fn parse_requirement(raw: &str) -> Result<LabelReq, String> {
    let s = raw.trim();
    if s.is_empty() {
        return Err("found '', expected: identifier".into());
    }
    let key_ok = |k: &str| {
        if valid_label_key(k) {
            Ok(k.to_string())
        } else {
            Err(format!("invalid label key {k:?}"))
        }
    };
    if let Some(key) = s.strip_prefix('!') {
        return Ok(LabelReq::NotExists(key_ok(key.trim())?));
    }
    for (op, is_eq) in [("!=", false), ("==", true), ("=", true)] {
        if let Some((k, v)) = s.split_once(op) {
            let key = key_ok(k.trim())?;
            let value = v.trim().to_string();
            if !valid_label_value(&value) {
                return Err(format!("invalid label value: {value:?}"));
            }
            return Ok(if is_eq {
                LabelReq::In(key, vec![value])
            } else {
                LabelReq::NotIn(key, vec![value])
            });
        }
    }
    for (op, gt) in [(">", true), ("<", false)] {
        if let Some((k, v)) = s.split_once(op) {
            let key = key_ok(k.trim())?;
            let n: i64 = v.trim().parse().map_err(|_| {
                format!("for 'Gt', 'Lt' operators, the value must be an integer: {v:?}")
            })?;
            return Ok(if gt {
                LabelReq::Gt(key, n)
            } else {
                LabelReq::Lt(key, n)
            });
        }
    }
    let mut words = s.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    match words.next().map(str::trim_start) {
        None => Ok(LabelReq::Exists(key_ok(key)?)),
        Some(rest) => {
            if let Some(set) = rest.strip_prefix("notin") {
                Ok(LabelReq::NotIn(key_ok(key)?, parse_set(set)?))
            } else if let Some(set) = rest.strip_prefix("in") {
                Ok(LabelReq::In(key_ok(key)?, parse_set(set)?))
            } else {
                Err(format!(
                    "found {rest:?}, expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        }
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        split_top_level(s)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
            .map_err(|e| format!("unable to parse requirement: {e}"))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
            LabelReq::Gt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            LabelReq::Lt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }
}

/// Field labels the apiserver supports on Pods besides metadata.
const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// Field labels the apiserver supports on core/v1 Events besides metadata.
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter of a list or watch of
    /// `kind`: the metadata fields every resource supports, and the fields
    /// the apiserver adds for Pods and Events; others are refused as the
    /// apiserver refuses them.
    pub fn parse_for(kind: &str, s: &str) -> Result<Self, String> {
        if s.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut terms = Vec::new();
        for term in s.split(',') {
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{term}'"
                ));
            };
            let field = field.trim();
            let supported = matches!(field, "metadata.name" | "metadata.namespace")
                || (kind == "Pod" && POD_FIELDS.contains(&field))
                || (kind == "Event" && EVENT_FIELDS.contains(&field));
            if !supported {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// Parses a selector of metadata fields only (what most kinds support).
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::parse_for("", s)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, value)| {
            let actual = match field.as_str() {
                // `source` is the event's reporting component.
                "source" => obj.pointer("/source/component"),
                path => obj.pointer(&format!("/{}", path.replace('.', "/"))),
            };
            let actual = match actual {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::Bool(b)) => b.to_string(),
                _ => String::new(),
            };
            (actual == *value) == *eq
        })
    }
}

/// Both selectors of a list or watch request.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selection {
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "shop", "labels": labels}})
    }

    #[test]
    fn label_selector_table() {
        let o = obj(json!({"app": "web", "tier": "front", "rank": "3"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (web, db)", true),
            ("app in (db)", false),
            ("app notin (db,cache)", true),
            ("missing notin (x)", true),
            ("app=web,tier=front", true),
            ("app=web, tier=back", false),
            ("app in (web,db),tier", true),
            ("rank>2", true),
            ("rank<3", false),
            ("example.com/team", false),
            ("app=", false),
        ];
        for (sel, want) in cases {
            let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(parsed.matches(&o), want, "selector {sel:?}");
        }
    }

    #[test]
    fn label_selector_rejects_garbage() {
        for bad in [
            "app in web",
            "app in (web",
            "=web",
            "app foo bar",
            "a b",
            "app>x",
            "-app=x",
            ",",
        ] {
            assert!(
                LabelSelector::parse(bad).is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[test]
    fn kind_specific_field_selectors() {
        let event = json!({"metadata": {"name": "web.1", "namespace": "shop"},
            "involvedObject": {"kind": "Deployment", "name": "web", "uid": "u-1"},
            "reason": "ScalingReplicaSet", "type": "Normal", "source": {"component": "deployment-controller"}});
        let cases = [
            (
                "involvedObject.kind=Deployment,involvedObject.name=web",
                true,
            ),
            ("involvedObject.uid=u-2", false),
            ("type!=Warning", true),
            ("source=deployment-controller", true),
            ("reason=BackOff", false),
        ];
        for (sel, want) in cases {
            assert_eq!(
                FieldSelector::parse_for("Event", sel)
                    .unwrap()
                    .matches(&event),
                want,
                "{sel}"
            );
        }
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse_for("Pod", "spec.nodeName=n1,status.phase=Running")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse_for("Pod", "status.phase=Pending")
                .unwrap()
                .matches(&pod)
        );
        assert_eq!(
            FieldSelector::parse_for("ConfigMap", "spec.nodeName=n1").unwrap_err(),
            "field label not supported: spec.nodeName"
        );
        assert!(FieldSelector::parse_for("Event", "spec.nodeName=n1").is_err());
    }

    #[test]
    fn field_selector_table() {
        let o = obj(json!({}));
        let cases = [
            ("metadata.name=web", true),
            ("metadata.name==web", true),
            ("metadata.name!=web", false),
            ("metadata.namespace=shop,metadata.name=web", true),
            ("metadata.namespace=other", false),
        ];
        for (sel, want) in cases {
            assert_eq!(
                FieldSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert_eq!(
            FieldSelector::parse("spec.nodeName=x").unwrap_err(),
            "field label not supported: spec.nodeName"
        );
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
