//! Which live replica should own a member: rendezvous (highest random
//! weight) hashing of `(replica, member)`. Every replica computes the same
//! answer from the same set of live replicas, and a replica joining or
//! leaving moves only the members whose top choice it is (about 1/N).
//! The hash is SHA-256, so replicas of different builds agree.

use ring::digest::{SHA256, digest};

/// The weight of `member` on `replica`.
fn weight(replica: &str, member: &str) -> u64 {
    let mut input = Vec::with_capacity(replica.len() + member.len() + 1);
    input.extend_from_slice(replica.as_bytes());
    input.push(0);
    input.extend_from_slice(member.as_bytes());
    let hash = digest(&SHA256, &input);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.as_ref()[..8]);
    u64::from_be_bytes(first)
}

/// The replica of `replicas` that should own `member`: the highest weight,
/// ties to the smaller name; None without replicas.
pub(crate) fn preferred<'a>(
    member: &str,
    replicas: impl IntoIterator<Item = &'a String>,
) -> Option<&'a String> {
    replicas
        .into_iter()
        .max_by(|a, b| weight(a, member).cmp(&weight(b, member)).then(b.cmp(a)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_choice_is_one_of_the_replicas_and_none_without_any() {
        // (member, replicas, the choice is among them)
        let cases: &[(&str, &[&str])] = &[("a", &["r1"]), ("a", &["r1", "r2", "r3"]), ("b", &[])];
        for (member, replicas) in cases {
            let replicas = names(replicas);
            let chosen = preferred(member, &replicas);
            assert_eq!(
                chosen.is_some(),
                !replicas.is_empty(),
                "{member} {replicas:?}"
            );
            if let Some(chosen) = chosen {
                assert!(replicas.contains(chosen));
            }
        }
    }

    #[test]
    fn the_order_of_replicas_does_not_matter() {
        let forward = names(&["r1", "r2", "r3"]);
        let backward = names(&["r3", "r2", "r1"]);
        for m in 0..50 {
            let member = format!("cluster-{m}");
            assert_eq!(preferred(&member, &forward), preferred(&member, &backward));
        }
    }

    #[test]
    fn a_replica_leaving_moves_only_its_members_and_members_spread() {
        let three = names(&["r1", "r2", "r3"]);
        let two = names(&["r1", "r3"]);
        let mut per_replica: BTreeMap<&String, usize> = BTreeMap::new();
        for m in 0..300 {
            let member = format!("cluster-{m}");
            let before = preferred(&member, &three).unwrap();
            *per_replica.entry(before).or_default() += 1;
            let after = preferred(&member, &two).unwrap();
            if before != "r2" {
                assert_eq!(before, after, "{member} moved though its owner stayed");
            }
        }
        // 300 members over 3 replicas: each gets a fair share.
        for (replica, n) in per_replica {
            assert!((60..=140).contains(&n), "{replica} got {n} of 300");
        }
    }

    #[test]
    fn weights_are_pinned_so_builds_agree() {
        // A rolling upgrade must not reshuffle every member: these values
        // are SHA-256 of "replica\0member" (first 8 bytes, big-endian).
        assert_eq!(weight("r1", "a"), 2_546_180_851_067_210_094);
        let replicas = names(&["kube-pulse-0", "kube-pulse-1", "kube-pulse-2"]);
        let chosen: Vec<&str> = ["alpha", "beta", "gamma", "delta"]
            .iter()
            .map(|m| preferred(m, &replicas).unwrap().as_str())
            .collect();
        assert_eq!(
            chosen,
            [
                "kube-pulse-2",
                "kube-pulse-0",
                "kube-pulse-2",
                "kube-pulse-2"
            ]
        );
    }
}
