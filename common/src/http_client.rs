//! Outbound HTTP for the services' own calls (the alert webhook): one client for `http://` and `https://`
//! URLs. It trusts the Mozilla root certificates compiled into the binary (the images carry no CA bundle) and,
//! optionally, the certificates of a PEM file, for an endpoint behind a private CA.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use rustls::pki_types::{CertificateDer, pem::PemObject};

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
    #[error("invalid certificate or TLS setting")]
    Tls(#[from] rustls::Error),
}

/// A client for `http://` and `https://` URLs; `extra_roots` is a PEM file of further trusted CA certificates.
pub fn client(extra_roots: Option<&Path>) -> Result<HttpsClient, ClientError> {
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
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// Checks a configured outbound URL: it parses, is `http://` or `https://`, and names a host.
pub fn check_url(url: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = url.parse().map_err(|error| format!("not a URL ({error})"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err("must start with http:// or https://".to_owned()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("names no host".to_owned());
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
