//! The member diff: running members against desired ones → which to add,
//! remove and restart (pure; `members ──▶ [diff] ──▶ pipeline`). A member
//! restarts when its connection settings changed, which its
//! [`fingerprint`] tells without keeping a second copy of its credentials.

use std::collections::BTreeMap;

/// A digest of what a member's client connects with: URL, CA, TLS options,
/// proxy and credentials (SHA-256 of them; the secrets are not kept).
pub type Fingerprint = [u8; 32];

/// What must change to go from the running members to the desired ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberDiff {
    /// Desired, not running: start them.
    pub added: Vec<String>,
    /// Running, not desired: stop them and remove their topics.
    pub removed: Vec<String>,
    /// Running and desired with other connection settings: restart their sources.
    pub changed: Vec<String>,
    /// Newly held, or held for another reason: shown, not started.
    pub held: Vec<String>,
}

impl MemberDiff {
    /// True when nothing is to change.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.held.is_empty()
    }
}

/// Compares running members with desired ones (name → fingerprint); each
/// list comes out in name order.
pub fn diff<F: PartialEq>(
    running: &BTreeMap<String, F>,
    desired: &BTreeMap<String, F>,
) -> MemberDiff {
    let mut out = MemberDiff::default();
    for (name, wanted) in desired {
        match running.get(name) {
            None => out.added.push(name.clone()),
            Some(now) if now != wanted => out.changed.push(name.clone()),
            Some(_) => {}
        }
    }
    out.removed = running
        .keys()
        .filter(|name| !desired.contains_key(*name))
        .cloned()
        .collect();
    out
}

/// The fingerprint of a member's client configuration: every setting that
/// decides where it connects and as whom. Certificate and key data read
/// from files count (a renewed CA file restarts the member); a `tokenFile`
/// counts by its path, since kube-rs re-reads the file itself.
pub fn fingerprint(config: &kube::Config) -> Fingerprint {
    let headers: Vec<(String, Vec<u8>)> = config
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    let material = serde_json::json!({
        "url": config.cluster_url.to_string(),
        "rootCert": config.root_cert,
        "rootCertFile": config.root_cert_file,
        "insecure": config.accept_invalid_certs,
        "tlsServerName": config.tls_server_name,
        "proxy": config.proxy_url.as_ref().map(ToString::to_string),
        "auth": serde_json::to_value(&config.auth_info).unwrap_or_default(),
        "headers": headers,
    });
    let bytes = serde_json::to_vec(&material).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter()
            .map(|(n, f)| (n.to_string(), f.to_string()))
            .collect()
    }

    #[test]
    fn the_diff_adds_removes_and_restarts_by_name_and_fingerprint() {
        // (running, desired, added, removed, changed)
        type Case<'a> = (
            &'a [(&'a str, &'a str)],
            &'a [(&'a str, &'a str)],
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
        );
        let cases: &[Case] = &[
            (&[], &[], &[], &[], &[]),
            (&[], &[("a", "1")], &["a"], &[], &[]),
            (&[("a", "1")], &[], &[], &["a"], &[]),
            (&[("a", "1")], &[("a", "1")], &[], &[], &[]),
            (&[("a", "1")], &[("a", "2")], &[], &[], &["a"]),
            (
                &[("a", "1"), ("b", "1"), ("c", "1")],
                &[("a", "1"), ("b", "2"), ("d", "1")],
                &["d"],
                &["c"],
                &["b"],
            ),
            // A rename is a removal and an addition, even with equal settings.
            (&[("old", "1")], &[("new", "1")], &["new"], &["old"], &[]),
            (
                &[("b", "1"), ("a", "1")],
                &[("z", "1"), ("y", "1")],
                &["y", "z"],
                &["a", "b"],
                &[],
            ),
        ];
        for (i, (running, desired, added, removed, changed)) in cases.iter().enumerate() {
            let got = diff(&members(running), &members(desired));
            let want = MemberDiff {
                added: added.iter().map(|s| s.to_string()).collect(),
                removed: removed.iter().map(|s| s.to_string()).collect(),
                changed: changed.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            };
            assert_eq!(got, want, "case {i}");
            assert_eq!(got.is_empty(), want == MemberDiff::default(), "case {i}");
        }
    }

    #[test]
    fn fingerprints_follow_connection_settings_only() {
        let base = || {
            let mut c = kube::Config::new("https://10.0.0.1:6443".parse().unwrap());
            c.auth_info.token = Some("t1".to_string().into());
            c
        };
        let same = base();
        let mut namespace = base();
        namespace.default_namespace = "other".into();
        namespace.read_timeout = Some(std::time::Duration::from_secs(1));
        assert_eq!(fingerprint(&base()), fingerprint(&same));
        assert_eq!(fingerprint(&base()), fingerprint(&namespace));
        type Change = Box<dyn Fn(&mut kube::Config)>;
        let changes: Vec<(&str, Change)> = vec![
            (
                "token",
                Box::new(|c| c.auth_info.token = Some("t2".to_string().into())),
            ),
            (
                "url",
                Box::new(|c| c.cluster_url = "https://10.0.0.2:6443".parse().unwrap()),
            ),
            ("ca", Box::new(|c| c.root_cert = Some(vec![vec![1, 2, 3]]))),
            ("insecure", Box::new(|c| c.accept_invalid_certs = true)),
            (
                "token file",
                Box::new(|c| c.auth_info.token_file = Some("/t".into())),
            ),
            (
                "client key",
                Box::new(|c| c.auth_info.client_key_data = Some("k".to_string().into())),
            ),
        ];
        for (what, change) in changes {
            let mut changed = base();
            change(&mut changed);
            assert_ne!(fingerprint(&base()), fingerprint(&changed), "{what}");
        }
    }
}
