//! HTTPS for a simulated cluster (`SimConfig::tls`, `kube-pulse sim --tls`):
//! a certificate made at start for the addresses a client on this machine
//! dials (`localhost`, `127.0.0.1`, `::1` and the listen address), signed
//! by a CA made with it, whose PEM the kubeconfig carries. kubectl
//! sends a bearer token only over TLS (never to an `http://` server), so a
//! simulator with `--token` needs this for kubectl.

use std::net::IpAddr;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// A certificate, its CA, and what serves it.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) acceptor: TlsAcceptor,
    /// The CA's certificate (PEM): what a client trusts.
    pub(crate) ca_pem: String,
    /// The same, DER, for kube-rs's `root_cert`.
    pub(crate) ca_der: Vec<u8>,
}

impl Tls {
    /// A certificate for `localhost`, the loopback addresses and `ip`.
    pub(crate) fn new(ip: IpAddr) -> Result<Self, String> {
        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
            names.push(ip.to_string());
        }
        let fail = |what: &'static str| move |e: rcgen::Error| format!("TLS {what}: {e}");
        // A CA of its own (what the kubeconfig trusts) and the server's
        // certificate signed by it: rustls does not take a CA's certificate
        // as a server's.
        let ca_key = rcgen::KeyPair::generate().map_err(fail("CA key"))?;
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(fail("CA"))?;
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "kube-pulse-sim CA");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(fail("CA"))?;
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().map_err(fail("key"))?;
        let mut params = rcgen::CertificateParams::new(names).map_err(fail("names"))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-pulse-sim");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(fail("certificate"))?;
        let der = cert.der().to_vec();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_no_client_auth()
            .with_single_cert(
                vec![der.clone().into()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(|e| format!("TLS certificate: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().to_vec(),
        })
    }
}
