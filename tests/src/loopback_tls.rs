//! TLS for a test's own endpoint on loopback: a fresh self-signed certificate for 127.0.0.1.

use std::sync::Arc;

/// A TLS acceptor with a fresh self-signed certificate for `127.0.0.1`, and that certificate in PEM: what a client
/// must trust to reach it.
pub fn self_signed_acceptor() -> (tokio_rustls::TlsAcceptor, String) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("certificate");
    let ca_pem = certified.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("server config");
    (tokio_rustls::TlsAcceptor::from(Arc::new(tls)), ca_pem)
}
