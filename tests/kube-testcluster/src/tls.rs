//! The cluster's own CA, its serving certificate, client credentials, and
//! the kubeconfig that holds them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::Error;

/// A certificate and its key, in PEM.
#[derive(Clone)]
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// The private key.
    pub key: String,
}

/// Everything the cluster's TLS needs.
pub struct Credentials {
    /// The CA every cluster certificate is signed by.
    pub ca: Pem,
    /// The server's certificate, for 127.0.0.1 and localhost.
    pub server: Pem,
    /// A client certificate the server accepts.
    pub client: Pem,
    /// A client certificate from a CA the server does not trust.
    pub stranger: Pem,
    /// The tenant's client certificate: a user with no group, allowed only
    /// what its Role grants (see [`crate::rbac`]).
    pub tenant: Pem,
    /// The bearer token of token mode.
    pub token: String,
}

fn fail(e: impl std::fmt::Display) -> Error {
    Error::Tls(e.to_string())
}

fn ca(name: &str) -> Result<(Pem, Issuer<'static, KeyPair>), Error> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    let key = KeyPair::generate().map_err(fail)?;
    let cert = params.self_signed(&key).map_err(fail)?;
    let pem = Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    };
    Ok((pem, Issuer::new(params, key)))
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    organization: Option<&str>,
    sans: Vec<SanType>,
    usage: ExtendedKeyUsagePurpose,
) -> Result<Pem, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
    params.subject_alt_names = sans;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(org) = organization {
        dn.push(DnType::OrganizationName, org);
    }
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().map_err(fail)?;
    let cert = params.signed_by(&key, issuer).map_err(fail)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

impl Credentials {
    /// A fresh CA, server and client certificates, and a random token.
    pub fn generate() -> Result<Self, Error> {
        let (ca_pem, issuer) = ca("knotless-test-cluster-ca")?;
        let server = leaf(
            &issuer,
            "kube-apiserver",
            None,
            vec![
                SanType::IpAddress(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
                SanType::DnsName("localhost".try_into().map_err(fail)?),
            ],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let client = leaf(
            &issuer,
            "knotless-test-admin",
            Some("system:masters"),
            vec![],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let tenant = leaf(
            &issuer,
            crate::rbac::TENANT,
            None,
            vec![],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let (_, stranger_ca) = ca("somebody-else-ca")?;
        let stranger = leaf(
            &stranger_ca,
            "intruder",
            Some("system:masters"),
            vec![],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let token = format!("knotless-test-{:016x}", random_u64());
        Ok(Credentials {
            ca: ca_pem,
            server,
            client,
            stranger,
            tenant,
            token,
        })
    }

    /// A rustls server config that verifies client certificates against the
    /// CA when one is presented; requests without one are answered 401 by
    /// the server (in client-certificate mode) so they get a Status body.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs(&self.ca.cert)? {
            roots.add(cert).map_err(fail)?;
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(fail)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(fail)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs(&self.server.cert)?, key(&self.server.key)?)
            .map_err(fail)?;
        // HTTP/1.1 only: WebSocket upgrades for exec need it, and every
        // client falls back to it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The DER of the first certificate in `pem`.
pub(crate) fn der_of(pem: &str) -> Result<Vec<u8>, Error> {
    certs(pem)?
        .into_iter()
        .next()
        .map(|c| c.to_vec())
        .ok_or_else(|| fail("no certificate in the PEM"))
}

fn certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)
}

fn key(pem: &str) -> Result<PrivateKeyDer<'static>, Error> {
    use rustls::pki_types::pem::PemObject;
    PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
        .map(PrivateKeyDer::Pkcs8)
        .map_err(fail)
}

/// How a kubeconfig authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KubeconfigAuth {
    /// The cluster's client certificate.
    ClientCert,
    /// The bearer token.
    Token,
    /// A certificate signed by a CA the cluster does not trust.
    StrangerCert,
    /// No credentials at all (kubectl then asks for a user name).
    Anonymous,
    /// A bearer token the cluster never issued.
    BadToken,
    /// The tenant's certificate: only what [`crate::TestCluster::grant_tenant`] allows.
    Tenant,
}

/// Writes a kubeconfig for `server` into `dir` and returns its path; the
/// certificates are embedded as base64 data, as cloud providers write them.
pub fn write_kubeconfig(
    dir: &Path,
    file: &str,
    server: &str,
    creds: &Credentials,
    auth: KubeconfigAuth,
    namespace: &str,
) -> Result<PathBuf, Error> {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let user = match auth {
        KubeconfigAuth::ClientCert => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&creds.client.cert),
            b64(&creds.client.key)
        ),
        KubeconfigAuth::StrangerCert => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&creds.stranger.cert),
            b64(&creds.stranger.key)
        ),
        KubeconfigAuth::Tenant => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&creds.tenant.cert),
            b64(&creds.tenant.key)
        ),
        KubeconfigAuth::Token => format!("    token: {}\n", creds.token),
        KubeconfigAuth::BadToken => "    token: not-a-token-of-this-cluster\n".to_string(),
        KubeconfigAuth::Anonymous => "    {}\n".to_string(),
    };
    let user = if auth == KubeconfigAuth::Anonymous {
        "  user: {}\n".to_string()
    } else {
        format!("  user:\n{user}")
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: knotless-test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: knotless-test\n  context:\n    cluster: knotless-test\n    user: knotless-test\n    namespace: {namespace}\ncurrent-context: knotless-test\nusers:\n- name: knotless-test\n{user}",
        ca = b64(&creds.ca.cert),
    );
    let path = dir.join(file);
    std::fs::write(&path, text).map_err(|e| Error::Io(path.display().to_string(), e))?;
    Ok(path)
}

pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}
