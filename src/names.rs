//! Names: what a member cluster, a namespace or an app may be called, and
//! the compact key an object's namespace and name are held under. Below
//! everything else in the data flow: configuration (cluster names), tasks
//! (the apps they act on), the topics they all address, the watches'
//! census and the engine's pods use these, and this module uses none of
//! them.

/// A DNS-1123 label: what Kubernetes accepts as a namespace or Deployment name.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// One segment of a topic (`apps/{cluster}/{namespace}/{app}`): not empty,
/// no `/` or `*`, no blanks or control characters.
pub(crate) fn valid_segment(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 253
        && !value.contains(['/', '*'])
        && !value.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Turns a kubeconfig context name into a cluster name (a DNS label).
pub(crate) fn cluster_name_for_context(context: &str) -> String {
    let mut name: String = context
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name = name.trim_matches('-').to_string();
    name.truncate(63);
    if name.is_empty() {
        "cluster".into()
    } else {
        name
    }
}

/// A public nkey of `kind`, checked: `wrong` says what is expected when
/// the key is of another kind.
pub(crate) fn public_key(
    key: &str,
    kind: nkeys::KeyPairType,
    wrong: &str,
) -> Result<nkeys::KeyPair, String> {
    let pair = nkeys::KeyPair::from_public_key(key)
        .map_err(|e| format!("{key:?} is not an nkey public key: {e}"))?;
    if pair.key_pair_type() != kind {
        return Err(format!("{key:?} is not {wrong}"));
    }
    Ok(pair)
}

/// The public nkey (`U…`) of a push member's agent: the key of the NATS
/// user it logs in as, which also signs what it publishes (docs/AGENT.md).
pub fn agent_public_key(key: &str) -> Result<nkeys::KeyPair, String> {
    public_key(
        key,
        nkeys::KeyPairType::User,
        "a user's public key (U…): an agent logs in and signs as a NATS user",
    )
}

/// One object's identity among its kind: a keyed 128-bit hash of its
/// namespace and name (two SipHash-1-3 hashes under random keys drawn once
/// per process), 16 bytes inline where its name would take an allocation.
/// Two objects collide with odds of about n² / 2¹²⁹ among n; the keys are
/// random per process, so no chosen pair of names collides everywhere.
pub(crate) type ObjectKey = u128;

/// The key of the object `namespace/name` (no namespace for cluster-scoped
/// objects, told apart from the empty one).
pub(crate) fn object_key(namespace: Option<&str>, name: &str) -> ObjectKey {
    use std::hash::{BuildHasher, RandomState};
    static SEEDS: std::sync::OnceLock<(RandomState, RandomState)> = std::sync::OnceLock::new();
    let (high, low) = SEEDS.get_or_init(|| (RandomState::new(), RandomState::new()));
    // `Option` and `str` hash with their variant and a terminator, so
    // ("a/b", "c") and ("a", "b/c") hash apart.
    let half = |seed: &RandomState| seed.hash_one((namespace, name));
    (u128::from(half(high)) << 64) | u128::from(half(low))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        let long = "a".repeat(63);
        let too_long = "a".repeat(64);
        let cases: [(&str, bool); 14] = [
            ("shop", true),
            ("prod-eu", true),
            ("a", true),
            ("0day", true),
            ("web-2", true),
            (&long, true),
            ("", false),
            (&too_long, false),
            ("Shop", false),
            ("-shop", false),
            ("shop-", false),
            ("shop_1", false),
            ("shop.eu", false),
            ("shöp", false),
        ];
        for (name, want) in cases {
            assert_eq!(valid_name(name), want, "{name:?}");
        }
    }

    #[test]
    fn topic_segments() {
        let cases: [(&str, bool); 9] = [
            ("prod-eu", true),
            ("Shop_1.eu", true),
            ("ß", true),
            ("", false),
            ("a/b", false),
            ("*", false),
            ("a b", false),
            ("a\tb", false),
            ("a\u{7}b", false),
        ];
        for (value, want) in cases {
            assert_eq!(valid_segment(value), want, "{value:?}");
        }
        assert!(valid_segment(&"x".repeat(253)));
        assert!(!valid_segment(&"x".repeat(254)));
    }

    #[test]
    fn context_names_become_cluster_names() {
        let cases = [
            ("Prod_EU", "prod-eu"),
            ("dev", "dev"),
            (
                "arn:aws:eks:eu-west-1:123:cluster/shop",
                "arn-aws-eks-eu-west-1-123-cluster-shop",
            ),
            ("--kind-lab--", "kind-lab"),
            ("___", "cluster"),
            ("", "cluster"),
        ];
        for (context, want) in cases {
            let name = cluster_name_for_context(context);
            assert_eq!(name, want, "{context:?}");
            assert!(valid_name(&name), "{name:?} is a DNS label");
        }
        let long = cluster_name_for_context(&"x".repeat(100));
        assert_eq!(long.len(), 63);
        assert!(valid_name(&long));
    }
}
