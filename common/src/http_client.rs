//! Outbound HTTP for the services' own calls (the alert webhook, the reconciler's provider APIs, the consumer's
//! `http` handler): one client for `http://` and `https://` URLs. It trusts the Mozilla root certificates
//! compiled into the binary (the same roots on every image and host) and, optionally, the certificates of a PEM
//! file, for an endpoint behind a private CA; it can present a client certificate (mutual TLS) and speak HTTP/2
//! where the server offers it through ALPN. Connections are pooled per client: build one client per endpoint
//! and keep it.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

pub type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read the CA file {path}")]
    CaFile {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the CA file {0} holds no certificate")]
    EmptyCaFile(PathBuf),
    #[error("cannot read the client certificate file {path}")]
    CertificateFile {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the client certificate file {0} holds no certificate")]
    EmptyCertificateFile(PathBuf),
    /// The key's own text is never part of the message.
    #[error("the client key `{0}` is not a PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    ClientKey(String),
    #[error("invalid certificate or TLS setting")]
    Tls(#[from] rustls::Error),
}

/// A client certificate chain and its private key, for mutual TLS.
pub struct ClientIdentity {
    pub certificates: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity").field("certificates", &self.certificates.len()).finish_non_exhaustive()
    }
}

impl ClientIdentity {
    /// The certificate chain of a PEM file and a PEM private key read from a secret (`key_id` names the secret
    /// in errors; the key's bytes never appear in one).
    pub fn from_pem(certificate_file: &Path, key_id: &str, key_pem: &[u8]) -> Result<Self, ClientError> {
        let file_error = |source| ClientError::CertificateFile { path: certificate_file.to_path_buf(), source };
        let certificates = CertificateDer::pem_file_iter(certificate_file)
            .map_err(file_error)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(file_error)?;
        if certificates.is_empty() {
            return Err(ClientError::EmptyCertificateFile(certificate_file.to_path_buf()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| ClientError::ClientKey(key_id.to_owned()))?;
        Ok(Self { certificates, key })
    }
}

/// What a client built by [`client_with`] trusts, presents and speaks.
#[derive(Debug, Default)]
pub struct ClientOptions<'a> {
    /// A PEM file of CA certificates trusted besides the Mozilla roots.
    pub extra_roots: Option<&'a Path>,
    /// Presented when a server asks for a client certificate.
    pub identity: Option<ClientIdentity>,
    /// Offer HTTP/2 through ALPN (`h2`, then `http/1.1`); a server that does not choose it gets HTTP/1.1.
    /// Plain `http://` is always HTTP/1.1.
    pub offer_http2: bool,
    /// Bound on establishing a TCP connection (the TLS handshake is bounded by the caller's request timeout).
    pub connect_timeout: Option<Duration>,
}

/// A client for `http://` and `https://` URLs; `extra_roots` is a PEM file of further trusted CA certificates.
pub fn client(extra_roots: Option<&Path>) -> Result<HttpsClient, ClientError> {
    client_with(ClientOptions { extra_roots, ..ClientOptions::default() })
}

/// A client for `http://` and `https://` URLs as `options` say. Its connections are pooled and reused (HTTP/1.1
/// keep-alive, or one multiplexed HTTP/2 connection).
pub fn client_with(options: ClientOptions<'_>) -> Result<HttpsClient, ClientError> {
    let ClientOptions { extra_roots, identity, offer_http2, connect_timeout } = options;
    let tls = tls_client_config(extra_roots, identity)?;
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(connect_timeout);
    tcp.set_nodelay(true);
    let protocols = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1();
    let connector =
        if offer_http2 { protocols.enable_http2().wrap_connector(tcp) } else { protocols.wrap_connector(tcp) };
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The TLS settings of every outbound client (HTTP, the `postgres` handler): the Mozilla roots compiled in, plus
/// the certificates of `extra_roots` (a PEM file), presenting `identity` when a server asks for a client
/// certificate; ring as the provider, TLS 1.2 and 1.3.
pub fn tls_client_config(
    extra_roots: Option<&Path>,
    identity: Option<ClientIdentity>,
) -> Result<rustls::ClientConfig, ClientError> {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(path) = extra_roots {
        let ca_error = |source| ClientError::CaFile { path: path.to_path_buf(), source };
        let mut added = 0_usize;
        for certificate in CertificateDer::pem_file_iter(path).map_err(ca_error)? {
            roots.add(certificate.map_err(ca_error)?)?;
            added += 1;
        }
        if added == 0 {
            return Err(ClientError::EmptyCaFile(path.to_path_buf()));
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    Ok(match identity {
        Some(identity) => tls.with_client_auth_cert(identity.certificates, identity.key)?,
        None => tls.with_no_client_auth(),
    })
}

/// Why a configured outbound URL is refused: said after the key that holds it (`handler url `...` names no host`).
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("not a URL ({0})")]
    NotAUrl(#[source] http::uri::InvalidUri),
    #[error("must start with http:// or https://")]
    Scheme,
    #[error("names no host")]
    NoHost,
}

/// Checks a configured outbound URL: it parses, is `http://` or `https://`, and names a host.
pub fn check_url(url: &str) -> Result<http::Uri, UrlError> {
    let uri: http::Uri = url.parse().map_err(UrlError::NotAUrl)?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(UrlError::Scheme),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost);
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_http_or_https_with_a_host() {
        assert!(check_url("https://hooks.slack.com/services/T/B/x").is_ok());
        assert!(check_url("http://127.0.0.1:9000/alert").is_ok());
        for bad in ["hooks.slack.com/services", "ftp://example.com/", "https://", "not a url", ""] {
            assert!(check_url(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let path = std::env::temp_dir().join(format!("hookline-empty-ca-{}.pem", std::process::id()));
        std::fs::write(&path, "not a certificate\n").expect("write");
        let built = client(Some(&path));
        let _ = std::fs::remove_file(&path);
        assert!(matches!(built, Err(ClientError::EmptyCaFile(_))), "{built:?}");
    }
}
