//! Which addresses a Karpor `Cluster`'s endpoint may point the gateway at
//! (`Cluster ──endpoint──▶ [endpoints] ──▶ member | held member`). Whoever
//! may edit a Cluster object chooses where the gateway sends requests with
//! that object's credentials; without a policy that is any address the
//! gateway reaches: its own loopback, the cloud's metadata service, other
//! internal services. By default an endpoint whose host is, or resolves
//! to, a loopback, link-local (the metadata addresses among them) or
//! unspecified address, or one in `--karpor-deny-endpoint`, is refused;
//! `--karpor-allow-endpoint` allows blocks again (the demo allows its
//! loopback members).
//!
//! The host is resolved when the object is read: a name that later
//! resolves elsewhere (DNS rebinding) is not caught here.

use std::net::IpAddr;

use crate::http_settings::Cidr;

/// Blocks refused unless allowed, with what they are.
const DENIED: &[(&str, &str)] = &[
    ("127.0.0.0/8", "a loopback address"),
    ("::1/128", "a loopback address"),
    (
        "169.254.0.0/16",
        "a link-local address (cloud metadata among them)",
    ),
    ("fe80::/10", "a link-local address"),
    ("fd00:ec2::254/128", "a cloud metadata address"),
    ("0.0.0.0/32", "the unspecified address"),
    ("::/128", "the unspecified address"),
];

/// The endpoint policy: the default blocks and `deny` refused, `allow`
/// allowed again (it wins over both).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointPolicy {
    /// `--karpor-allow-endpoint`: blocks allowed even if denied.
    pub allow: Vec<Cidr>,
    /// `--karpor-deny-endpoint`: blocks refused besides the defaults.
    pub deny: Vec<Cidr>,
}

impl EndpointPolicy {
    /// The default policy with loopback allowed: for members on this host,
    /// as the demo's simulated clusters are.
    pub fn allowing_loopback() -> Self {
        Self {
            allow: ["127.0.0.0/8", "::1/128"]
                .iter()
                .map(|b| b.parse().expect("a CIDR"))
                .collect(),
            deny: Vec::new(),
        }
    }

    /// Why `ip` is refused, or None if it may be reached.
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        if self.allow.iter().any(|c| c.contains(ip)) {
            return None;
        }
        let default = DENIED.iter().find(|(block, _)| {
            block
                .parse::<Cidr>()
                .is_ok_and(|block: Cidr| block.contains(ip))
        });
        match default {
            Some((_, what)) => Some(what),
            None if self.deny.iter().any(|c| c.contains(ip)) => {
                Some("in a block --karpor-deny-endpoint refuses")
            }
            None => None,
        }
    }

    /// Checks `endpoint` (an http(s) URL): its host, or every address the
    /// host resolves to now. A host that does not resolve is let through:
    /// it reaches nothing, and its member says so.
    pub async fn check(&self, endpoint: &str) -> Result<(), String> {
        let Ok(uri) = endpoint.parse::<http::Uri>() else {
            return Ok(());
        };
        let Some(host) = uri.host() else {
            return Ok(());
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("http") {
                80
            } else {
                443
            });
        let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => match tokio::net::lookup_host((host, port)).await {
                Ok(found) => found.map(|a| a.ip()).collect(),
                Err(_) => Vec::new(),
            },
        };
        for ip in addresses {
            if let Some(what) = self.refusal(ip) {
                return Err(format!(
                    "spec.access.endpoint {endpoint:?} reaches {ip}, {what}; kube-pulse connects there only when --karpor-allow-endpoint allows it"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidrs(blocks: &[&str]) -> Vec<Cidr> {
        blocks.iter().map(|b| b.parse().unwrap()).collect()
    }

    #[test]
    fn defaults_refuse_loopback_link_local_and_metadata() {
        let policy = EndpointPolicy::default();
        // (address, refused)
        let cases = [
            ("127.0.0.1", true),
            ("127.1.2.3", true),
            ("::1", true),
            ("::ffff:127.0.0.1", true),
            ("169.254.169.254", true),
            ("fe80::1", true),
            ("fd00:ec2::254", true),
            ("0.0.0.0", true),
            ("10.0.0.7", false),
            ("192.168.1.10", false),
            ("203.0.113.9", false),
            ("2001:db8::1", false),
        ];
        for (ip, refused) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(policy.refusal(ip).is_some(), refused, "{ip}");
        }
    }

    #[test]
    fn allow_wins_and_deny_adds() {
        let policy = EndpointPolicy {
            allow: cidrs(&["127.0.0.0/8"]),
            deny: cidrs(&["10.0.0.0/8", "127.0.0.1/32"]),
        };
        assert_eq!(policy.refusal("127.0.0.1".parse().unwrap()), None);
        assert!(policy.refusal("10.1.2.3".parse().unwrap()).is_some());
        assert!(policy.refusal("169.254.169.254".parse().unwrap()).is_some());
        assert_eq!(policy.refusal("192.168.0.1".parse().unwrap()), None);
    }

    #[tokio::test]
    async fn endpoints_are_checked_by_host_and_by_name() {
        let policy = EndpointPolicy::default();
        for refused in [
            "https://127.0.0.1:6443",
            "http://169.254.169.254/latest/meta-data",
            "https://[::1]:443",
            "https://localhost:6443",
        ] {
            let err = policy.check(refused).await.unwrap_err();
            assert!(err.contains("--karpor-allow-endpoint"), "{refused}: {err}");
        }
        assert_eq!(policy.check("https://10.0.0.7:6443").await, Ok(()));
        let loopback = EndpointPolicy::allowing_loopback();
        assert_eq!(loopback.check("https://localhost:6443").await, Ok(()));
    }
}
