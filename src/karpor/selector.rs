//! Karpor's selectors in kube-pulse's terms (pure; `types ──▶ [selector]
//! ──▶ convert`): a `metav1.LabelSelector` matched against a Cluster's
//! labels (`clusterLabelSelector`), and label and field selectors written
//! as the query strings a member's watch takes.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Whether `labels` satisfy `selector`: every `matchLabels` pair and every
/// `matchExpressions` requirement (an empty selector matches everything,
/// as in Kubernetes). An unknown operator is an error, never a silent match.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let pairs = selector.match_labels.iter().flatten();
    if pairs.into_iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return Ok(false);
    }
    for req in selector.match_expressions.iter().flatten() {
        if !requirement_holds(req, labels)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn requirement_holds(
    req: &LabelSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let values = req.values.as_deref().unwrap_or_default();
    let value = labels.get(&req.key);
    match req.operator.as_str() {
        "In" => Ok(value.is_some_and(|v| values.contains(v))),
        "NotIn" => Ok(value.is_none_or(|v| !values.contains(v))),
        "Exists" => Ok(value.is_some()),
        "DoesNotExist" => Ok(value.is_none()),
        other => Err(format!(
            "label selector operator {other:?} on key {:?} is not one of In, NotIn, Exists, DoesNotExist",
            req.key
        )),
    }
}

/// The selector as a watch's `labelSelector` query (`tier=web,env in (a,b)`);
/// None when it selects everything.
pub fn label_query(selector: &LabelSelector) -> Result<Option<String>, String> {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default().join(",");
        parts.push(match req.operator.as_str() {
            "In" => format!("{} in ({values})", req.key),
            "NotIn" => format!("{} notin ({values})", req.key),
            "Exists" => req.key.clone(),
            "DoesNotExist" => format!("!{}", req.key),
            other => {
                return Err(format!(
                    "label selector operator {other:?} on key {:?} is not one of In, NotIn, Exists, DoesNotExist",
                    req.key
                ));
            }
        });
    }
    Ok((!parts.is_empty()).then(|| parts.join(",")))
}

/// `matchFields` as a watch's `fieldSelector` query (`metadata.name=web`,
/// pairs ANDed); None when empty.
pub fn field_query(match_fields: &BTreeMap<String, String>) -> Option<String> {
    let parts: Vec<String> = match_fields
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(yaml: &str) -> LabelSelector {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn cluster_labels_match_like_kubernetes() {
        let prod = labels(&[("env", "prod"), ("region", "eu")]);
        let bare = labels(&[]);
        // (selector, matches prod, matches bare)
        let cases = [
            ("{}", true, true),
            ("matchLabels: {env: prod}", true, false),
            ("matchLabels: {env: dev}", false, false),
            (
                "matchExpressions: [{key: env, operator: In, values: [prod, dev]}]",
                true,
                false,
            ),
            (
                "matchExpressions: [{key: env, operator: NotIn, values: [prod]}]",
                false,
                true,
            ),
            (
                "matchExpressions: [{key: region, operator: Exists}]",
                true,
                false,
            ),
            (
                "matchExpressions: [{key: region, operator: DoesNotExist}]",
                false,
                true,
            ),
            (
                "matchLabels: {env: prod}\nmatchExpressions: [{key: region, operator: In, values: [us]}]",
                false,
                false,
            ),
        ];
        for (yaml, want_prod, want_bare) in cases {
            let s = selector(yaml);
            assert_eq!(matches(&s, &prod), Ok(want_prod), "{yaml} on prod");
            assert_eq!(matches(&s, &bare), Ok(want_bare), "{yaml} on no labels");
        }
        let bad = selector("matchExpressions: [{key: env, operator: Gt, values: ['1']}]");
        assert!(matches(&bad, &prod).unwrap_err().contains("Gt"));
    }

    #[test]
    fn selectors_become_watch_queries() {
        let cases = [
            ("{}", None),
            (
                "matchLabels: {tier: web, app: shop}",
                Some("app=shop,tier=web"),
            ),
            (
                "matchLabels: {tier: web}\nmatchExpressions: [{key: env, operator: In, values: [a, b]}, {key: x, operator: NotIn, values: [c]}, {key: y, operator: Exists}, {key: z, operator: DoesNotExist}]",
                Some("tier=web,env in (a,b),x notin (c),y,!z"),
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(
                label_query(&selector(yaml)).unwrap().as_deref(),
                want,
                "{yaml}"
            );
        }
        let bad = selector("matchExpressions: [{key: env, operator: Lt}]");
        assert!(label_query(&bad).is_err());
        let fields = labels(&[("metadata.name", "web"), ("status.phase", "Running")]);
        assert_eq!(
            field_query(&fields).as_deref(),
            Some("metadata.name=web,status.phase=Running")
        );
        assert_eq!(field_query(&BTreeMap::new()), None);
    }
}
