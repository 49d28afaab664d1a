//! Settings values of the HTTP surface that the `--config` file and the
//! flags name, and their validation (`flags, config file ──▶ [settings] ──▶
//! src/http/`). A leaf: the file format (src/config.rs) names these without
//! depending on the HTTP surface above it.

use std::net::IpAddr;
use std::str::FromStr;

/// An address block such as `10.0.0.0/8`, `fd00::/8` or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let bad =
            || format!("{raw:?} is not an address block such as 10.0.0.0/8, fd00::/8 or 192.0.2.7");
        let (addr, prefix) = match raw.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (raw.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Self { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Cidr {
    /// Whether `ip` is inside the block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Which forwarding header a trusted proxy's client address is read from.
/// Only one: a proxy that sets one of them passes the other through from
/// the client untouched, so reading both would let a client pick its address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (ingress-nginx, Envoy, Go's `httputil.ReverseProxy`, Karpor's server).
    #[default]
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// `Forwarded: for=…` (RFC 7239).
    #[serde(rename = "forwarded")]
    Forwarded,
}

/// Checks a `--allowed-host` / `allowedHosts` entry: `*`, a DNS name, or
/// `*.` followed by one (no scheme, port or path).
pub fn validate_allowed_host(raw: &str) -> Result<(), String> {
    let name = raw.strip_prefix("*.").unwrap_or(raw);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if raw == "*" || (name.len() <= 253 && name.split('.').all(label_ok)) {
        Ok(())
    } else {
        Err(format!(
            "allowed host {raw:?} must be a host name (e.g. pulse.example.com), `*.` and a name, or `*`; no scheme, port or path"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_blocks_parse_and_match() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
        let one: Cidr = "2001:db8::1".parse().unwrap();
        assert!(one.contains("2001:db8::1".parse().unwrap()));
        assert!(!one.contains("2001:db8::2".parse().unwrap()));
        for bad in [
            "10.0.0.0/33",
            "fd00::/129",
            "nope",
            "10.0.0/8",
            "",
            "10.0.0.0/x",
        ] {
            let err = bad.parse::<Cidr>().unwrap_err();
            assert!(err.contains("not an address block"), "{bad}: {err}");
        }
    }

    #[test]
    fn allowed_host_entries_are_checked() {
        for ok in [
            "*",
            "pulse.example.com",
            "*.svc.cluster.local",
            "kube-pulse",
        ] {
            assert!(validate_allowed_host(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "http://pulse.example.com",
            "pulse.example.com:443",
            "pulse.example.com/x",
            "a..b",
            "*example.com",
            "-a.example",
        ] {
            assert!(validate_allowed_host(bad).is_err(), "{bad}");
        }
    }
}
