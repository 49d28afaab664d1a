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
//! A host that is a name is resolved when the object is read, every
//! address it resolves to is checked, and the member is pinned to the
//! lowest of them ([`pin`]): it connects to that address, with the name in
//! the `Host` header and as the TLS server name, so a name that later
//! resolves elsewhere (DNS rebinding) still reaches only the checked
//! address. A name that does not resolve holds the member
//! (`EndpointNotResolved`) until the objects are converted again, at the
//! latest 30 s later; the member then resolves it anew, as it does on
//! every conversion (a member whose address moved restarts on it).

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
    ("100.100.100.200/32", "a cloud metadata address"),
    ("168.63.129.16/32", "a cloud platform's host address"),
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

    /// Why `ip` is refused, or None if it may be reached. An IPv6 address
    /// that carries an IPv4 one (IPv4-compatible `::a.b.c.d`, NAT64
    /// `64:ff9b::/96`, 6to4 `2002::/16`; IPv4-mapped ones are compared as
    /// IPv4) is judged as that address too: a gateway with such a route
    /// would reach it.
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        if let Some(what) = embedded_v4(ip).and_then(|v4| self.refusal_of(IpAddr::V4(v4))) {
            return Some(what);
        }
        self.refusal_of(ip)
    }

    fn refusal_of(&self, ip: IpAddr) -> Option<&'static str> {
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
    /// host resolves to now. `Ok(Some(ip))` when the host is a name: the
    /// address to [`pin`] the member to; `Ok(None)` when it is an address.
    pub async fn check(&self, endpoint: &str) -> Result<Option<IpAddr>, Refused> {
        let Ok(uri) = endpoint.parse::<http::Uri>() else {
            return Ok(None);
        };
        let Some(host) = uri.host() else {
            return Ok(None);
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("http") {
                80
            } else {
                443
            });
        let (mut addresses, named): (Vec<IpAddr>, bool) = match host.parse::<IpAddr>() {
            Ok(ip) => (vec![ip], false),
            Err(_) => match tokio::net::lookup_host((host, port)).await {
                Ok(found) => (found.map(|a| a.ip()).collect(), true),
                Err(e) => (Vec::new(), {
                    tracing::debug!(host, cause = %e, "no address");
                    true
                }),
            },
        };
        if addresses.is_empty() {
            return Err(Refused {
                reason: ENDPOINT_NOT_RESOLVED,
                message: format!(
                    "spec.access.endpoint {endpoint:?}: {host:?} does not resolve; tried again within 30 s"
                ),
            });
        }
        addresses.sort();
        for &ip in &addresses {
            if let Some(what) = self.refusal(ip) {
                return Err(Refused {
                    reason: ENDPOINT_NOT_ALLOWED,
                    message: format!(
                        "spec.access.endpoint {endpoint:?} reaches {ip}, {what}; kube-pulse connects there only when --karpor-allow-endpoint allows it"
                    ),
                });
            }
        }
        Ok(named.then_some(addresses[0]))
    }
}

/// Held reason: the endpoint reaches an address the endpoint policy refuses.
pub const ENDPOINT_NOT_ALLOWED: &str = "EndpointNotAllowed";
/// Held reason: the endpoint's host is a name that resolves to no address.
pub const ENDPOINT_NOT_RESOLVED: &str = "EndpointNotResolved";

/// Why an endpoint is not used: a held reason and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The held reason: [`ENDPOINT_NOT_ALLOWED`] or [`ENDPOINT_NOT_RESOLVED`].
    pub reason: &'static str,
    /// What the endpoint reaches, or why it reaches nothing.
    pub message: String,
}

/// Makes `config` connect to `ip`, the checked address of its server's
/// name: the URL's host becomes the address; the name stays what the
/// server sees, in the `Host` header and as the TLS server name (unless
/// the configuration names one already).
pub fn pin(config: &mut kube::Config, ip: IpAddr) -> Result<(), String> {
    let url = config.cluster_url.clone();
    let (Some(host), Some(authority)) = (url.host(), url.authority()) else {
        return Err(format!("{url} has no host"));
    };
    let host = host.to_string();
    let authority = authority.to_string();
    let scheme = url.scheme_str().unwrap_or("https");
    let port = url
        .port_u16()
        .unwrap_or(if scheme == "http" { 80 } else { 443 });
    let path = url.path_and_query().map_or("/", |p| p.as_str());
    let address = std::net::SocketAddr::new(ip, port);
    let pinned = format!("{scheme}://{address}{path}");
    config.cluster_url = pinned
        .parse()
        .map_err(|e| format!("cannot pin {url} to {address}: {e}"))?;
    config.tls_server_name.get_or_insert(host);
    let value = http::HeaderValue::from_str(&authority)
        .map_err(|e| format!("cannot pin {url} to {address}: {e}"))?;
    config.headers.push((http::header::HOST, value));
    Ok(())
}

/// The IPv4 address an IPv6 one carries, where it carries one a route
/// could deliver to: IPv4-compatible (`::a.b.c.d`, not `::` or `::1`),
/// NAT64 (`64:ff9b::/96`) or 6to4 (`2002:AABB:CCDD::/48`).
fn embedded_v4(ip: IpAddr) -> Option<std::net::Ipv4Addr> {
    let IpAddr::V6(v6) = ip else {
        return None;
    };
    let s = v6.segments();
    let low = std::net::Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0, hi, _] if hi != 0 => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, a, b, ..] => Some(std::net::Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
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
            ("100.100.100.200", true),
            ("168.63.129.16", true),
            // IPv6 forms that carry a denied IPv4 address.
            ("::169.254.169.254", true),
            ("::127.0.0.1", true),
            ("64:ff9b::a9fe:a9fe", true),
            ("2002:a9fe:a9fe::1", true),
            ("2002:7f00:1::1", true),
            ("64:ff9b::a00:7", false),
            ("2002:cb00:7109::1", false),
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
            assert_eq!(err.reason, ENDPOINT_NOT_ALLOWED, "{refused}");
            assert!(
                err.message.contains("--karpor-allow-endpoint"),
                "{refused}: {err:?}"
            );
        }
        assert_eq!(policy.check("https://10.0.0.7:6443").await, Ok(None));
        let loopback = EndpointPolicy::allowing_loopback();
        assert_eq!(
            loopback.check("https://localhost:6443").await,
            Ok(Some("127.0.0.1".parse().unwrap())),
            "a name is pinned to the lowest address it resolves to"
        );
        let unresolved = policy.check("https://no-such-host.invalid:6443").await;
        assert_eq!(
            unresolved.map_err(|e| e.reason),
            Err(ENDPOINT_NOT_RESOLVED),
            "a name that resolves to nothing is held, not let through"
        );
    }

    #[test]
    fn a_pinned_member_connects_to_the_address_and_names_its_host() {
        let cases = [
            (
                "https://api.example.test:6443/prefix",
                "10.0.0.7",
                "https://10.0.0.7:6443/prefix",
                "api.example.test:6443",
            ),
            (
                "http://api.example.test/",
                "2001:db8::1",
                "http://[2001:db8::1]:80/",
                "api.example.test",
            ),
            (
                "https://api.example.test",
                "10.0.0.7",
                "https://10.0.0.7:443/",
                "api.example.test",
            ),
        ];
        for (server, ip, url, authority) in cases {
            let mut config = kube::Config::new(server.parse().unwrap());
            pin(&mut config, ip.parse().unwrap()).unwrap();
            assert_eq!(config.cluster_url.to_string(), url, "{server}");
            assert_eq!(
                config.tls_server_name.as_deref(),
                Some("api.example.test"),
                "{server}"
            );
            assert_eq!(
                config.headers,
                vec![(http::header::HOST, authority.parse().unwrap())],
                "{server}"
            );
        }
    }
}
